"""How a scan reads its file: a local file directly; a remote one with a single GET of its first
``head_bytes`` (the whole file when it is smaller), then 256 KiB blocks for metadata past them, every
read through the byte layer's checked reader (``Content-Range``, lengths, retries, timeouts).

HDF5 metadata is spread through a file (each variable's chunk index is written next to its data),
so a remote scan that reads blocks on demand pays a round trip for each: 30 of them for a 2 MB
NetCDF4 file. One GET of the first bytes answers every read of a small file at the cost of one round
trip, and gives the file's size without a HEAD request.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from refset.abc.bytestore import ByteStore
from refset.io.store import LocalStore

__all__ = ["ScanFile", "HEAD_BYTES"]

#: Bytes of a remote file read by the first GET (fsspec's HTTP files read ahead 5 MB the same way).
HEAD_BYTES = 4 * 2**20
_BLOCK = 256 * 1024


class ScanFile:
    """The scanned file: ``url`` (what its references name), ``file`` (seekable, for the format readers
    and h5py), ``size``, and ``read_ranges`` for the small chunks stored in the set. Its bytes come
    through the byte layer (``store``): a local file is opened directly."""

    def __init__(self, store: ByteStore, head_bytes: int = HEAD_BYTES, name: str | None = None) -> None:
        self.store = store
        self.url = store.url if name is None else name  # what the references name
        self.head = b""
        self._blocks: dict[int, bytes] = {}
        self.local = isinstance(store, LocalStore)
        if isinstance(store, LocalStore):  # self.local, spelled so that mypy narrows the store
            self.file: Any = open(store.root, "rb")
            self.size = self.file.seek(0, io.SEEK_END)
            self.file.seek(0)
            return
        size = None
        if head_bytes > 0:
            self.head, size = store.read_sized("", 0, head_bytes)  # HTTP tells the size in its answer
        self.size = store.size() if size is None else size
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
            got = self.store.read_ranges("", [start], [end])[0]
            self._blocks[i] = got
        return got

    def cached(self, offset: int, length: int) -> bytes | None:
        """The bytes at ``(offset, length)`` when a remote file's reads so far hold them (no request);
        None otherwise, and for a local file (its reads cost nothing to repeat)."""
        if self.local or offset < 0 or length < 0 or offset + length > self.size:
            return None
        if offset + length <= len(self.head):
            return self.head[offset:offset + length]
        first, last = offset // _BLOCK, (offset + length - 1) // _BLOCK if length else offset // _BLOCK
        parts = []
        for i in range(first, last + 1):
            block = self._blocks.get(i)
            if block is None:
                return None
            parts.append(block)
        data = b"".join(parts)
        return data[offset - first * _BLOCK:offset - first * _BLOCK + length]

    def read_ranges(self, offsets: Sequence[int], lengths: Sequence[int]) -> list[bytes]:
        """The bytes at each (offset, length): from the first GET where they lie in it, the rest in
        one concurrent round of checked requests; a short read raises ``OSError``."""
        out: list[Any] = [None] * len(offsets)
        far = []
        head = len(self.head)
        for i, (o, n) in enumerate(zip(offsets, lengths)):
            if o + n <= head:
                out[i] = self.head[o:o + n]
            elif self.local:
                self.file.seek(o)
                out[i] = self.file.read(n)
            else:
                far.append(i)
        if far:
            got = self.store.read_ranges("", [offsets[i] for i in far], [offsets[i] + lengths[i] for i in far])
            for i, d in zip(far, got):
                out[i] = d
        for o, n, d in zip(offsets, lengths, out):
            if len(d) != n:
                raise OSError(f"{self.url}: short read at byte {o} ({len(d)} of {n} bytes)")
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
