"""Bytes in and out: fsspec URLs or local paths, gzip/zstd sniffed from content, atomic writes."""

from __future__ import annotations

import gzip
import os
import re
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from refset.errors import InvalidReferences
from refset.io.local import is_local, local_path
from refset.io.magic import GZIP_MAGIC, ZSTD_MAGIC
from refset.options import DEFAULT_LIMITS

__all__ = ["read_bytes", "write_bytes", "decompress", "compress", "file_mode", "is_local", "local_path",
           "remote_leftovers", "rm_tree", "reading_options"]


_OUT = 1 << 24  # gzip output per step
_IN = 1 << 20  # gzip input per step
_ZIN = 1 << 12  # zstd input per step: one 4-byte RLE block can hold 128 KiB, so <= 128 MiB out per step


def decompress(data: bytes, name: str = "", limit: int = DEFAULT_LIMITS.decompressed) -> bytes | bytearray:
    """Undo gzip or zstd compression, recognised by magic bytes (never by name alone). The output is
    bounded by ``limit`` bytes (``Limits.decompressed``): a bomb ends in
    InvalidReferences naming ``name`` and the limit before it takes the memory."""
    if data[:2] == GZIP_MAGIC:
        return _collect(_gunzip(data), name or "input", "gzip", limit)
    if data[:4] == ZSTD_MAGIC:
        return _collect(_unzstd(data), name or "input", "zstd", limit)
    return data


def _collect(chunks: Iterator[bytes], name: str, kind: str, limit: int) -> bytearray:
    import zstandard

    out = bytearray()
    try:
        for chunk in chunks:
            if len(out) + len(chunk) > limit:
                raise InvalidReferences(
                    f"{name}: {kind} data expands to more than {limit} bytes, the decompression limit "
                    "(limits=refset.Limits(decompressed=...) allows more)"
                )
            out += chunk
    except MemoryError:
        n = len(out)
        del out
        raise InvalidReferences(f"{name}: out of memory decompressing {kind} data after {n} bytes") from None
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
        raise InvalidReferences(f"{name}: corrupt {kind} data ({e})") from e
    return out


def _gunzip(data: bytes) -> Iterator[bytes]:
    """Every gzip member of ``data`` in chunks of at most ``_OUT`` bytes (trailing zeros allowed)."""
    mv = memoryview(data)
    pos, pending = 0, b""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    while True:
        if not pending:
            if pos >= len(mv):
                break
            pending = mv[pos : pos + _IN]
            pos += len(pending)
        out = d.decompress(pending, _OUT)
        pending = d.unconsumed_tail
        if out:
            yield out
        if d.eof:
            rest = d.unused_data
            if len(rest) < 2 and pos < len(mv):
                extra = bytes(mv[pos : pos + 2 - len(rest)])
                pos += len(extra)
                rest += extra
            if rest[:2] == GZIP_MAGIC:
                d, pending = zlib.decompressobj(16 + zlib.MAX_WBITS), rest
                continue
            if rest.strip(b"\0") or bytes(mv[pos:]).strip(b"\0"):
                raise OSError("trailing data after the last gzip member")
            return
    if not d.eof:
        raise EOFError("compressed data ended before the end-of-stream marker")


def _unzstd(data: bytes) -> Iterator[bytes]:
    """Every zstd frame of ``data`` (zstd's CLI and multi-threaded writers concatenate frames), with
    content checksums verified where the frames hold them; a truncated frame is an error."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    mv = memoryview(data)
    d, fed = dctx.decompressobj(), False
    for pos in range(0, len(mv), _ZIN):
        piece: bytes | memoryview = mv[pos : pos + _ZIN]
        while piece:
            out = d.decompress(piece)
            fed = True
            if out:
                yield out
            piece = b""
            if d.eof:
                piece = d.unused_data
                d, fed = dctx.decompressobj(), False
    if fed:
        raise EOFError("truncated zstd frame")


def compress(data: bytes, dest: str) -> bytes:
    """Compress by the destination's suffix (any case): ``.gz`` gzip, ``.zst``/``.zstd`` zstd."""
    dest = dest.lower()
    if dest.endswith(".gz"):
        return gzip.compress(data, compresslevel=6, mtime=0)
    if dest.endswith((".zst", ".zstd")):
        import zstandard

        return zstandard.ZstdCompressor(level=9, write_checksum=True).compress(data)
    return data


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


def reading_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """fsspec options to read a reference set at ``url``: over HTTP without the client's own
    decompression (``Content-Encoding: gzip`` bodies reach :func:`decompress`, which bounds them),
    unless the caller chose otherwise."""
    so = dict(storage_options or {})
    if url.startswith(("http://", "https://")):
        ck = dict(so.get("client_kwargs") or {})
        ck.setdefault("auto_decompress", False)
        so["client_kwargs"] = ck
    return so


def read_bytes(path: str, storage_options: dict[str, Any] | None = None) -> bytes:
    """The content at ``path``; a large local file is memory-mapped (no copy, read on demand)."""
    if is_local(path, storage_options):
        with open(local_path(os.fspath(path)), "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size >= 1 << 22:
                import mmap

                # MAP_POPULATE: map the whole file at once instead of one page fault per 4 KiB
                flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                return mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)  # type: ignore[return-value]
            return f.read()
    import fsspec

    with fsspec.open(path, "rb", **reading_options(path, storage_options)) as f:
        return f.read()


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
