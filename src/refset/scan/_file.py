"""How a scan reads its file: a local file directly; a remote one with a single GET of its first
``head_bytes`` (the whole file when it is smaller), then 256 KiB blocks for metadata past them.

HDF5 metadata is spread through a file (each variable's chunk index is written next to its data),
so a remote scan that reads blocks on demand pays a round trip for each: 30 of them for a 2 MB
NetCDF4 file. One GET of the first bytes answers every read of a small file at the cost of one round
trip, and gives the file's size without a HEAD request.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

__all__ = ["ScanFile", "HEAD_BYTES", "is_local_fs"]

#: Bytes of a remote file read by the first GET (fsspec's HTTP files read ahead 5 MB the same way).
HEAD_BYTES = 4 * 2**20
_BLOCK = 256 * 1024


# fsspec filesystems whose open() takes the size we already know (else they ask with a HEAD request)
_TAKES_SIZE = frozenset({"http", "https", "s3", "s3a"})


def _protocols(fs: Any) -> set[str]:
    return {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)


def is_local_fs(fs: Any) -> bool:
    """Whether ``fs`` is the local filesystem (None: a local file opened without fsspec)."""
    return fs is None or fs.protocol in ("file", ("file", "local"))


class ScanFile:
    """The scanned file: ``file`` (seekable, for h5py and the NetCDF3 parser), ``size``, and
    ``read_ranges`` for the small chunks stored in the set."""

    def __init__(self, fs: Any, path: str, head_bytes: int = HEAD_BYTES) -> None:
        self.fs, self.path = fs, path
        self.head = b""
        self._tail_file: Any = None
        if is_local_fs(fs):
            self.file: Any = open(path, "rb")
            self.size = self.file.seek(0, io.SEEK_END)
            self.file.seek(0)
            return
        if head_bytes > 0:
            self.head = fs.cat_file(path, start=0, end=head_bytes)
        if head_bytes > 0 and len(self.head) != head_bytes:  # shorter: the whole file (longer: the
            self.size = len(self.head)  # server ignored Range and sent the whole file)
            self.file = io.BytesIO(self.head)
        else:
            self.size = fs.size(path)
            self.head = self.head[: self.size]
            self.file = _HeadFile(self.head, self.size, self._tail)

    def _tail(self) -> Any:
        if self._tail_file is None:
            self._tail_file = self.fs.open(self.path, "rb", cache_type="blockcache", block_size=_BLOCK,
                                           **({"size": self.size} if _TAKES_SIZE.intersection(
                                               _protocols(self.fs)) else {}))
        return self._tail_file

    def read_ranges(self, offsets: Sequence[int], lengths: Sequence[int]) -> list[bytes]:
        """The bytes at each (offset, length): from the first GET where they lie in it, the rest in
        one concurrent round of requests; a short read raises ``OSError``."""
        out: list[Any] = [None] * len(offsets)
        far = []
        local, head = is_local_fs(self.fs), len(self.head)
        for i, (o, n) in enumerate(zip(offsets, lengths)):
            if o + n <= head:
                out[i] = self.head[o:o + n]
            elif local:
                self.file.seek(o)
                out[i] = self.file.read(n)
            else:
                far.append(i)
        if far:
            got = self.fs.cat_ranges([self.path] * len(far), [offsets[i] for i in far],
                                     [offsets[i] + lengths[i] for i in far])
            for i, d in zip(far, got):
                if isinstance(d, BaseException):
                    raise d
                out[i] = d
        for o, n, d in zip(offsets, lengths, out):
            if len(d) != n:
                raise OSError(f"{self.path}: short read at byte {o} ({len(d)} of {n} bytes)")
        return out

    def close(self) -> None:
        self.file.close()
        if self._tail_file is not None:
            self._tail_file.close()

    def __enter__(self) -> ScanFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _HeadFile(io.RawIOBase):
    """A file whose first bytes are in memory and whose rest is read through ``tail()``."""

    def __init__(self, head: bytes, size: int, tail: Any) -> None:
        self._head, self._size, self._tail, self._pos = memoryview(head), size, tail, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, b: Any) -> int:
        want = min(len(b), max(0, self._size - self._pos))
        end = self._pos + want
        if end <= len(self._head):
            b[:want] = self._head[self._pos:end]
        else:
            f = self._tail()
            f.seek(self._pos)
            data = f.read(want)
            want = len(data)
            b[:want] = data
        self._pos += want
        return want
