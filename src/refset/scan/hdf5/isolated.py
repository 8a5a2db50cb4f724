"""The h5py walk of a local file in a child process, under a deadline.

libhdf5 can loop forever on a crafted file (an attribute read that never returns) or crash the process
(a corrupt structure the native reader did not see). So the walk of a file the native reader declines
runs in a long-lived child process (``python -m refset.scan.hdf5.child``, started on first use, one
per process): the caller waits at most ``timeout`` seconds; a child that runs over is killed and the
file refused with :class:`~refset.errors.InvalidFile`, as is one that dies (a signal), and the next
file starts a new child. The caller's process stays usable either way. The child sends back the
:class:`~refset.scan.writer.SetWriter` of the walk (columns and metadata, no file handle) and the
names to drop it found; the caller builds the set (reading small chunks itself, without libhdf5).

A child, not a fork: a fork of a process with threads (fsspec's event loop, Dask's) may deadlock, and
Dask's worker processes, being daemons, may not start ``multiprocessing`` children. The messages are
pickles with an 8-byte length on the child's stdin and stdout.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import IO, TYPE_CHECKING, Any

from refset.io.scanfile import Broken

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = ["H5PY_TIMEOUT", "walk_in_child"]

#: Seconds the h5py walk of one file may take before the file is refused (``Scan(h5py_timeout=)``).
H5PY_TIMEOUT = 60.0

#: Seconds a new child may take to start (import refset and h5py) before the walk stays in process.
START_TIMEOUT = 120.0

_lock = threading.Lock()
_child: subprocess.Popen[bytes] | None = None
_spawner: ThreadPoolExecutor | None = None
_unusable = ""  # why no child can be started here (then walks stay in this process)


def _forget_after_fork() -> None:
    """A forked process has none of its parent's threads: it starts its own child and spawner."""
    global _lock, _child, _spawner
    _lock, _child, _spawner = threading.Lock(), None, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def usable() -> bool:
    """Whether walks can go to a child here (False once a child could not start: the caller then
    walks in its own process)."""
    return not _unusable


def walk_in_child(path: str, url: str, options: dict[str, Any], timeout: float) -> tuple[Any, set[str]] | None:
    """(SetWriter, drop names found) of the h5py walk of the local file ``path``, named ``url``,
    with the scanner's ``options``; :class:`Broken` when libhdf5 runs over ``timeout`` seconds or
    dies; the walk's own error as the child raised it; None when no child can start here (walk in
    this process)."""
    global _child, _unusable
    with _lock:
        child = _child if _child is not None and _child.poll() is None else None
        if child is None:
            try:
                child = _start()
            except _Gone as e:
                import warnings

                _unusable = str(e)
                warnings.warn(f"refset: h5py walks run in this process, without a deadline: {e}", RuntimeWarning,
                              stacklevel=4)
                return None
        _child = child
        try:
            _send(child.stdin, (path, url, options))
            reply = _receive(child, timeout)
        except _Gone as e:
            _child = None
            _stop(child)
            raise Broken(str(e), titled=False) from None
        except BaseException:  # interrupted (Ctrl-C...): its reply would answer the next file's request
            _child = None
            _stop(child)
            raise
    status, *rest = reply
    if status == "error":
        raise rest[0]
    writer, found, warned = rest
    import warnings

    for category, text in warned:
        warnings.warn(text, category, stacklevel=4)
    return writer, found


class _Gone(Exception):
    """The child ran over its time or died: why, in words."""


def _start() -> subprocess.Popen[bytes]:
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    # (the directory refset is imported from here: the child imports the same refset)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)}
    # started from a thread that lives as long as this process: the child dies with the thread that
    # started it (Linux's parent-death signal), which must not be a pool's thread that may end
    global _spawner
    if _spawner is None:
        import atexit
        from concurrent.futures import ThreadPoolExecutor

        _spawner = ThreadPoolExecutor(1, thread_name_prefix="refset-h5py-child")
        atexit.register(_close)
    try:
        # -P: the working directory is not on the child's path (a stray h5py.py there would answer)
        child = _spawner.submit(subprocess.Popen, [sys.executable, "-P", "-m", "refset.scan.hdf5.child"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env={**env, "REFSET_PARENT_PID": str(os.getpid())}).result()
    except OSError as e:
        raise _Gone(f"no child process could be started ({e})") from None
    try:
        ready = _receive(child, START_TIMEOUT)
    except _Gone as e:
        _stop(child)
        raise _Gone(f"its h5py child did not start ({e})") from None
    if ready != "ready":
        _stop(child)
        raise _Gone(f"its h5py child did not start (it said {ready!r})")
    return child


def _close() -> None:
    """At exit: the child ends when its stdin closes (killed if it does not within a second)."""
    child = _child
    if child is None or child.poll() is not None:
        return
    try:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=1)
    except (OSError, subprocess.TimeoutExpired):
        _stop(child)
    if child.stdout is not None:
        child.stdout.close()


def _stop(child: subprocess.Popen[bytes]) -> None:
    try:
        child.kill()
    except OSError:
        pass
    child.wait()
    for pipe in (child.stdin, child.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


def _send(out: IO[bytes] | None, obj: Any) -> None:
    assert out is not None
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()
    except (BrokenPipeError, OSError):
        raise _Gone("the h5py reader's process is gone") from None


def _receive(child: subprocess.Popen[bytes], timeout: float) -> Any:
    """The child's next message, waiting at most ``timeout`` seconds for all of it (its bytes go into
    one buffer of the announced size: no copying as they come)."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    end = time.monotonic() + timeout
    head = bytearray(8)
    _fill(child, fd, memoryview(head), end, timeout)
    body = bytearray(struct.unpack("<Q", head)[0])
    _fill(child, fd, memoryview(body), end, timeout)
    return pickle.loads(body)


def _fill(child: subprocess.Popen[bytes], fd: int, view: memoryview, end: float, timeout: float) -> None:
    got = 0
    while got < len(view):
        left = end - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(left, 0)) if left > 0 else ([], [], [])
        if not ready:
            raise _Gone(f"libhdf5 did not finish reading it within {timeout:g} s (h5py_timeout): the file "
                        "is refused")
        n = os.readv(fd, [view[got:]])
        if not n:
            code = child.wait()
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
            raise _Gone(f"libhdf5 crashed reading it ({how}): the file is refused")
        got += n
