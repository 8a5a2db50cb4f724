"""How a scan reads its file: a local file directly; a remote one with a single GET of its first
``head_bytes`` (the whole file when it is smaller), then 256 KiB blocks for metadata past them, every
read through the read path's checked reader (``Content-Range``, lengths, retries, timeouts).

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


def is_local_fs(fs: Any) -> bool:
    """Whether ``fs`` is the local filesystem (None: a local file opened without fsspec)."""
    return fs is None or fs.protocol in ("file", ("file", "local"))


class _Remote:
    """Reads of one remote file through the read path's checked reader (:func:`refset.io.fetch.read_range`:
    an HTTP answer's ``Content-Range`` must hold exactly the bytes asked for, a longer answer is
    refused, transient failures are retried, each attempt has a timeout), from sync code."""

    def __init__(self, fs: Any, path: str) -> None:
        from refset.io.fetch import Targets

        self.path = path
        self.url = fs.unstrip_protocol(path)
        self.targets = Targets(fs=fs)

    def _run(self, coro: Any) -> Any:
        from fsspec.asyn import get_loop, sync

        from refset.errors import ReferenceNotReachable

        try:
            return sync(get_loop(), lambda: coro)
        except FileNotFoundError:
            raise
        except Exception as e:
            raise ReferenceNotReachable.wrap("", self.url, e) from e

    def read(self, start: int, end: int) -> tuple[bytes, int | None]:
        """Bytes ``[start, end)`` and the file's size when the answer tells it."""
        from refset.io.fetch import read_range_sized

        return self._run(read_range_sized(self.targets, self.path, start, end))  # type: ignore[no-any-return]

    def read_many(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes | BaseException]:
        import numpy as np

        from refset.io.fetch import RangeReader

        n = len(starts)
        reader = RangeReader(self.targets, max_gap=0)
        return self._run(reader.read([self.path], np.zeros(n, np.int64), np.asarray(starts, np.int64),  # type: ignore[no-any-return]
                                     np.asarray(ends, np.int64)))


class ScanFile:
    """The scanned file: ``url`` (what its references name), ``file`` (seekable, for the format readers
    and h5py), ``size``, and ``read_ranges`` for the small chunks stored in the set."""

    def __init__(self, fs: Any, path: str, head_bytes: int = HEAD_BYTES, name: str | None = None) -> None:
        self.fs, self.path = fs, path
        self.url = path if name is None else name  # what the references name
        self.head = b""
        self._blocks: dict[int, bytes] = {}
        if is_local_fs(fs):
            self.file: Any = open(path, "rb")
            self.size = self.file.seek(0, io.SEEK_END)
            self.file.seek(0)
            return
        self._remote = _Remote(fs, path)
        size = None
        if head_bytes > 0:
            self.head, size = self._remote.read(0, head_bytes)
            if size is None and len(self.head) < head_bytes:  # an object store's short answer: its end
                size = len(self.head)
        self.size = fs.size(path) if size is None else size  # HTTP tells the size in its answer
        if len(self.head) == self.size:
            self.file = io.BytesIO(self.head)
        else:
            self.file = _HeadFile(self.head, self.size, self._block)

    def _block(self, i: int) -> bytes:
        """Block ``i`` (``_BLOCK`` bytes) of a remote file past its first GET, checked, kept."""
        got = self._blocks.get(i)
        if got is None:
            start = i * _BLOCK
            end = min(start + _BLOCK, self.size)
            got = self._remote.read(start, end)[0]
            if len(got) != end - start:
                from refset.errors import ReferenceNotReachable

                raise ReferenceNotReachable("", self._remote.url, f"short read at byte {start} ({len(got)} of "
                                            f"{end - start} bytes)")
            self._blocks[i] = got
        return got

    def read_ranges(self, offsets: Sequence[int], lengths: Sequence[int]) -> list[bytes]:
        """The bytes at each (offset, length): from the first GET where they lie in it, the rest in
        one concurrent round of checked requests; a short read raises ``OSError``."""
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
            got = self._remote.read_many([offsets[i] for i in far], [offsets[i] + lengths[i] for i in far])
            for i, d in zip(far, got):
                if isinstance(d, BaseException):
                    from refset.errors import ReferenceNotReachable

                    raise ReferenceNotReachable.wrap("", self._remote.url, d) from d
                out[i] = d
        for o, n, d in zip(offsets, lengths, out):
            if len(d) != n:
                raise OSError(f"{self.path}: short read at byte {o} ({len(d)} of {n} bytes)")
        return out

    def close(self) -> None:
        self.file.close()
        self._blocks.clear()

    def __enter__(self) -> ScanFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _HeadFile(io.RawIOBase):
    """A file whose first bytes are in memory and whose rest is read a block at a time through
    ``block(i)`` (bytes ``i * _BLOCK`` to the next block or the end)."""

    def __init__(self, head: bytes, size: int, block: Any) -> None:
        self._head, self._size, self._block, self._pos = memoryview(head), size, block, 0

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
            done = 0
            while done < want:
                pos = self._pos + done
                block = self._block(pos // _BLOCK)
                piece = block[pos % _BLOCK: pos % _BLOCK + want - done]
                if not piece:
                    break
                b[done:done + len(piece)] = piece
                done += len(piece)
            want = done
        self._pos += want
        return want
