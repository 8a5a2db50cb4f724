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
    parent = os.environ.get("REFSET_PARENT_PID")
    if parent is not None and str(os.getppid()) != parent:  # the parent died before the call
        os._exit(1)


def _serve() -> None:
    """The child: walk each file asked for, until stdin closes."""
    import warnings

    _die_with_parent()
    # the replies get a descriptor of their own; fd 1 becomes stderr, so that nothing a library
    # prints (C code included) lands among them
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    import h5py  # noqa: F401  (imported before "ready": the first file's deadline is its own)

    from refset.abc.scanner import DropList
    from refset.io.scanfile import ScanFile
    from refset.io.store import LocalStore
    from refset.model.setwriter import SetWriter
    from refset.scan.hdf5.scanner import HDF5Scanner

    _reply(out, "ready")
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        path, url, options = pickle.loads(inp.read(struct.unpack("<Q", head)[0]))
        try:
            scanner = HDF5Scanner(**{**options, "native": False, "h5py_timeout": None})
            drop = DropList(options.get("drop_variables", ()))
            writer = SetWriter(url, scanner.inline_threshold)
            with warnings.catch_warnings(record=True) as caught, ScanFile(LocalStore(path), name=url) as file:
                warnings.simplefilter("always")
                scanner.walk(file, writer, drop)
            reply: tuple[Any, ...] = ("ok", writer, drop.found, [(w.category, str(w.message)) for w in caught])
        except Exception as e:  # the file's fault (a Broken: libhdf5's errors, wrapped), a variable refused,
            reply = ("error", e)  # or a bug: the caller raises it as it is
        _reply(out, reply)


def _reply(out: Any, reply: Any) -> None:
    try:
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # an error that does not pickle: its words, as an error of refset's own
        why = f"{type(reply[-1]).__name__}: {reply[-1]}" if reply[0] == "error" else f"{type(e).__name__}: {e}"
        data = pickle.dumps(("error", RuntimeError(f"the h5py walk's answer could not be sent back ({why})")))
    out.write(struct.pack("<Q", len(data)) + data)
    out.flush()


if __name__ == "__main__":
    _serve()
