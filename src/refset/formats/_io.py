"""Bytes in and out: fsspec URLs or local paths, gzip/zstd sniffed from content, atomic writes."""

from __future__ import annotations

import gzip
import os
import tempfile
import zlib
from typing import Any

from ..errors import InvalidReferences
from .registry import GZIP_MAGIC, ZSTD_MAGIC

__all__ = ["read_bytes", "write_bytes", "decompress", "compress", "file_mode", "is_local", "local_path"]


def decompress(data: bytes, name: str = "") -> bytes:
    """Undo gzip or zstd compression, recognised by magic bytes (never by name alone)."""
    if data[:2] == GZIP_MAGIC:
        try:
            return gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise InvalidReferences(f"{name or 'input'}: corrupt gzip data ({e})") from e
    if data[:4] == ZSTD_MAGIC:
        import zstandard

        try:  # every frame: zstd's CLI and multi-threaded writers concatenate frames
            return zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(data)
        except zstandard.ZstdError as e:
            raise InvalidReferences(f"{name or 'input'}: corrupt zstd data ({e})") from e
    return data


def compress(data: bytes, dest: str) -> bytes:
    """Compress by the destination's suffix: ``.gz`` gzip, ``.zst``/``.zstd`` zstd."""
    if dest.endswith(".gz"):
        return gzip.compress(data, compresslevel=6, mtime=0)
    if dest.endswith((".zst", ".zstd")):
        import zstandard

        return zstandard.ZstdCompressor(level=9).compress(data)
    return data


def is_local(path: str, storage_options: object = None) -> bool:
    """Whether ``path`` is a plain local path (or ``file://`` URL) with no storage options."""
    return ("://" not in path or path.startswith("file://")) and not storage_options


def local_path(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


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

    with fsspec.open(path, "rb", **(storage_options or {})) as f:
        return f.read()


def write_bytes(path: str, data: bytes, storage_options: dict[str, Any] | None = None) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, then rename."""
    if is_local(path):
        path = local_path(os.fspath(path))
        d = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".refset-", suffix=".tmp", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, file_mode())  # mkstemp makes 0600; a new file gets the umask's mode
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return
    import fsspec

    # object stores publish a file only when its upload completes
    with fsspec.open(path, "wb", **(storage_options or {})) as f:
        f.write(data)
