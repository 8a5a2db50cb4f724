"""The child process of :mod:`refset.scan.hdf5.isolated`: ``python -m refset.scan.hdf5.child`` walks
each local file asked for on its stdin with h5py and answers on its stdout (pickles with an 8-byte
length), until its stdin closes or its parent dies."""

from __future__ import annotations

import os
import pickle
import signal
import struct
import sys
from typing import Any

from refset.errors import RefsetError

__all__: list[str] = []


def _die_with_parent() -> None:
    """Linux: the kernel kills this child when its parent dies (a parent killed while libhdf5 loops
    here would leave it spinning: it never reads its stdin's end). Elsewhere the end of stdin does."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before the call
        os._exit(1)


def _serve() -> None:
    """The child: walk each file asked for, until stdin closes."""
    import warnings

    _die_with_parent()
    from refset.scan.hdf5.scanner import HDF5Scanner
    from refset.scan.writer import DropList

    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the replies
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        path, url, options = pickle.loads(inp.read(struct.unpack("<Q", head)[0]))
        try:
            scanner = HDF5Scanner(**{**options, "native": False, "h5py_timeout": None})
            drop = DropList(options.get("drop_variables", ()))
            with warnings.catch_warnings(record=True) as caught, open(path, "rb") as f:
                warnings.simplefilter("always")
                writer = scanner.walk(f, url, drop)
            reply: tuple[Any, ...] = ("ok", writer, drop.found, [(w.category, str(w.message)) for w in caught])
        except RefsetError as e:
            reply = ("error", e)
        except Exception as e:  # libhdf5's own errors: named by the caller
            reply = ("error", f"cannot be scanned: {type(e).__name__}: {e}")
        try:
            data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            data = pickle.dumps(("error", f"cannot be scanned: {type(e).__name__}: {e}"))
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()


if __name__ == "__main__":
    _serve()
