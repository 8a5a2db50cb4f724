"""Writes that never leave a half-written output: a temporary beside the destination, then a rename (an
object store publishes an upload only when it completes); what a killed write left is recovered or
removed by the next one. New files get the mode the umask gives."""

from __future__ import annotations

import os
import re
import tempfile
from typing import Any

from refset.io.local import is_local, local_path

__all__ = ["write_bytes", "file_mode", "temp_prefix", "hold", "stale_leftovers", "recover_local",
           "remote_leftovers", "rm_tree", "crash_point", "STALE_AFTER"]


def _umask() -> int:
    """The process umask, read without changing it where the system tells it (Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    m = os.umask(0o022)
    os.umask(m)
    return m


def file_mode(directory: bool = False) -> int:
    """The mode a new file (or directory) gets from open()/mkdir() under the current umask."""
    return (0o777 if directory else 0o666) & ~_umask()


def crash_point(name: str) -> None:
    """Die at once (SIGKILL, as a killed process) when ``REFSET_CRASH_AT`` names this point: the
    tests' way to kill a write between two of its steps."""
    if os.environ.get("REFSET_CRASH_AT") == name:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def temp_prefix(path: str) -> str:
    """Prefix of a temporary beside ``path``: hidden, named after it and this process."""
    return f".{os.path.basename(path)}.refset-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


#: A temporary whose lock is free but whose pid runs is taken as left behind after this long (its
#: pid was reused), and as a writer's own before it (the moment between creating and locking it).
STALE_AFTER = 60.0


def _lock(path: str) -> tuple[int | None, bool | None]:
    """``(descriptor holding path's lock, False)`` when taken; ``(None, True)`` when a live process
    holds it; ``(None, None)`` when locks cannot be had here (not POSIX, no file, no lock support)."""
    try:
        import fcntl

        fd = os.open(path, os.O_RDONLY)
    except (ImportError, OSError):
        return None, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        return None, (True if isinstance(e, BlockingIOError) else None)
    return fd, False


def hold(path: str) -> int | None:
    """Lock ``path`` (a temporary or a set being replaced) for as long as the returned descriptor
    stays open, telling other writers that a live process is using it; None where it cannot be."""
    return _lock(path)[0]


def _held(path: str) -> bool | None:
    """Whether a live process holds ``path``'s lock (see :func:`hold`); None when that cannot be told."""
    fd, held = _lock(path)
    if fd is not None:
        os.close(fd)  # releases the lock taken just now
    return held


def _left_behind(path: str, pid: int) -> bool:
    """A writer's leftover whose writer is gone: its lock is free and its pid is not running or it
    is older than :data:`STALE_AFTER` (a reused pid); a held lock means a live writer, whatever its
    pid says (another pid namespace)."""
    held = _held(path)
    if held is None:
        return not _alive(pid)
    if held:
        return False
    if not _alive(pid):
        return True
    import time

    try:
        return time.time() - os.lstat(path).st_mtime > STALE_AFTER
    except OSError:
        return False


def stale_leftovers(path: str) -> list[str]:
    """Temporaries (``.<name>.refset-<pid>-*.tmp``) and replaced sets (``<name>.refset-old-<pid>-*``)
    that writes to ``path`` left beside it, their writers gone."""
    d, base = os.path.split(os.path.abspath(path))
    pat = re.compile(rf"(?:\.{re.escape(base)}\.refset-(\d+)-.*\.tmp|{re.escape(base)}\.refset-old-(\d+)-.*)")
    try:
        names = os.listdir(d)
    except OSError:
        return []
    out = []
    for name in names:
        m = pat.fullmatch(name)
        if m and _left_behind(os.path.join(d, name), int(m.group(1) or m.group(2))):
            out.append(os.path.join(d, name))
    return sorted(out)


def recover_local(path: str) -> None:
    """Finish what a killed write to local ``path`` left: a replaced set whose replacement never
    arrived is put back (the old output), then every stale temporary and replaced set is removed."""
    import shutil

    left = stale_leftovers(path)
    old = [p for p in left if ".refset-old-" in os.path.basename(p)]
    if old and not os.path.lexists(path):
        newest = max(old, key=os.path.getmtime)
        os.rename(newest, path)
        left.remove(newest)
    for p in left:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def write_bytes(path: str, data: bytes, storage_options: dict[str, Any] | None = None) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, then rename (an object store
    publishes an upload only when it completes). A local write first removes what killed writes to
    ``path`` left."""
    if is_local(path):
        path = local_path(os.fspath(path))
        recover_local(path)
        d = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(d):  # said so here, not as the temporary file that could not be made
            raise FileNotFoundError(f"output directory {d} does not exist")
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=d)
        lock = hold(tmp)  # until it is renamed: other writers leave it alone
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, file_mode())  # mkstemp makes 0600; a new file gets the umask's mode
            crash_point("write-before-rename")
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        finally:
            if lock is not None:
                os.close(lock)
        return
    import fsspec

    # object stores publish a file only when its upload completes
    with fsspec.open(path, "wb", **(storage_options or {})) as f:
        f.write(data)


# -- trees on object stores (no directory rename): found by listing, never by glob patterns ---------
# fsspec expands *, ? and [...] in rm/copy/glob, so a path such as "run[1].parq" would name other sets.

def remote_leftovers(fs: Any, root: str) -> list[str]:
    """Trees that writes to ``root`` left beside it (``<root>.refset-*.tmp``), complete ones (with
    ``.zmetadata``) newest first, then the incomplete ones."""
    parent, _, name = root.rstrip("/").rpartition("/")
    try:
        listed = fs.ls(parent, detail=False)
    except (FileNotFoundError, NotImplementedError, ValueError, OSError):
        return []
    prefix = f"{name}.refset-"
    trees = [p.rstrip("/") for p in listed
             if p.rstrip("/").rpartition("/")[2].startswith(prefix) and p.rstrip("/").endswith(".tmp")]

    def written(tree: str) -> float:
        try:
            info = fs.info(f"{tree}/.zmetadata")
        except (FileNotFoundError, OSError):
            return -1.0
        t = info.get("LastModified") or info.get("mtime") or info.get("created") or 0
        return float(t.timestamp() if hasattr(t, "timestamp") else t)

    return sorted(trees, key=written, reverse=True)


def rm_tree(fs: Any, path: str) -> None:
    """Remove the tree at ``path`` (nothing when it is missing), the path taken literally."""
    if not any(c in path for c in "*?["):
        try:
            fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        return
    try:
        found = fs.find(path, withdirs=True, detail=True)
    except FileNotFoundError:
        return
    files = [p for p, e in found.items() if e.get("type") != "directory"]
    dirs = sorted((p for p, e in found.items() if e.get("type") == "directory"), key=len, reverse=True)
    for p in files:
        fs.rm_file(p)
    for d in [*dirs, path]:
        try:
            fs.rmdir(d)
        except (FileNotFoundError, OSError, NotImplementedError):
            pass
