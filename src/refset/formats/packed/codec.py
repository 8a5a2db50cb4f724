"""Column codecs of the packed format (see docs/packed-format.md, "Encodings").

A block is a sequence of sections read front to back:

- ``u8``/``u64``: little-endian scalars;
- *blob*: ``u8 codec`` (0 raw, 1 zstd frame), ``u64 stored size``, the stored bytes;
- *sparse ints*: ``u8 mode``, 0: ints; 1: ``u64 k``, ints(k) position deltas, ints(k) values (for
  columns that are mostly 0, where zstd's Huffman coder cannot go below one bit per byte);
- *ints* (a column of ``n`` unsigned 64-bit integers, ``n`` known from context): ``u8 w`` (0..8, the
  bytes per value), then ``w`` blobs of ``n`` bytes each: byte plane 0 (least significant byte of every
  value), plane 1, ... Planes above ``w`` are zero. Compressing planes separately lets zstd's entropy
  coder see each byte position's own distribution (a length's low byte is noise, its high byte is not).

Signed columns are zigzag-mapped. All arithmetic is modulo 2**64, so any uint64 round-trips.
"""

from __future__ import annotations

import struct
import threading
from typing import Any

import numpy as np

from refset.errors import InvalidReferences
from refset.options import DEFAULT_LIMITS

__all__ = ["BlockWriter", "BlockReader", "zigzag", "unzigzag", "decompressor", "RAW", "ZSTD"]

RAW, ZSTD = 0, 1
_U64 = struct.Struct("<Q")
_MIN_COMPRESS = 32  # blobs shorter than this are stored raw


def zigzag(v: np.ndarray) -> np.ndarray:
    """uint64 bit patterns of signed values -> zigzag code (small magnitudes -> small codes)."""
    s = np.asarray(v, np.uint64).view(np.int64)
    return ((s << 1) ^ (s >> 63)).view(np.uint64)


def unzigzag(z: np.ndarray) -> np.ndarray:
    """Inverse of :func:`zigzag`, returning uint64 bit patterns (``(z >> 1) ^ -(z & 1)``, in place in
    int64: unsigned shifts with a numpy scalar take a slow path)."""
    s = np.asarray(z, np.uint64).view(np.int64)
    out = np.right_shift(s, 1)
    np.bitwise_and(out, np.int64(0x7FFFFFFFFFFFFFFF), out=out)  # a logical shift
    low = np.bitwise_and(s, 1)
    np.negative(low, out=low)
    np.bitwise_xor(out, low, out=out)
    return out.view(np.uint64)


class BlockWriter:
    """Accumulates the sections of one block."""

    def __init__(self, cctx: object) -> None:
        self.parts: list[bytes] = []
        self.cctx = cctx

    def u8(self, v: int) -> None:
        self.parts.append(bytes((v,)))

    def u64(self, v: int) -> None:
        self.parts.append(_U64.pack(v))

    def blob(self, data: bytes) -> None:
        if len(data) >= _MIN_COMPRESS:
            c = self.cctx.compress(data)  # type: ignore[attr-defined]
            if len(c) < len(data):
                self.parts += [bytes((ZSTD,)), _U64.pack(len(c)), c]
                return
        self.parts += [bytes((RAW,)), _U64.pack(len(data)), data]

    def ints(self, a: np.ndarray) -> None:
        a = np.ascontiguousarray(a, dtype="<u8")
        top = int(a.max()) if a.size else 0
        w = (top.bit_length() + 7) // 8
        self.u8(w)
        if w:
            planes = a.view(np.uint8).reshape(-1, 8)
            for j in range(w):
                self.blob(planes[:, j].tobytes())

    def sparse_ints(self, a: np.ndarray) -> None:
        """``u8 mode``: 0 then ints(n) (dense), or 1 then ``u64 k``, ints(k) of position deltas (index
        of each non-zero value minus the previous one's, minus 1) and ints(k) of the non-zero values."""
        nz = np.flatnonzero(np.asarray(a) != 0)
        if 4 * len(nz) >= len(a):
            self.u8(0)
            self.ints(a)
            return
        self.u8(1)
        self.u64(len(nz))
        self.ints(np.diff(nz, prepend=-1).astype(np.uint64) - np.uint64(1))
        self.ints(np.asarray(a)[nz])

    def getvalue(self) -> bytes:
        return b"".join(self.parts)


_LOCAL = threading.local()
MAX_RATIO = 1 << 15  # zstd's best: a 4-byte RLE block of 128 KiB


def decompressor() -> Any:
    """This thread's zstd decompressor (one object must not decompress on two threads at once)."""
    d = getattr(_LOCAL, "dctx", None)
    if d is None:
        import zstandard

        d = _LOCAL.dctx = zstandard.ZstdDecompressor()
    return d


class BlockReader:
    """Reads the sections of one block; every inconsistency raises InvalidReferences naming it."""

    def __init__(self, data: bytes, name: str, limit: int = DEFAULT_LIMITS.decompressed) -> None:
        self.buf = memoryview(data)
        self.pos = 0
        self.name = name
        self.limit = limit  # bytes decoded items may take (Limits.decompressed)

    def fail(self, what: str) -> InvalidReferences:
        return InvalidReferences(f"packed block {self.name}: {what}")

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise self.fail(f"truncated: needs {n} bytes at byte {self.pos}, has {len(self.buf) - self.pos}")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u64(self) -> int:
        return int(_U64.unpack(self.take(8))[0])

    def count(self, limit: int, what: str) -> int:
        n = self.u64()
        if n > limit:
            raise self.fail(f"{what} is {n}, expected at most {limit}")
        return n

    def fits(self, n: int, what: str) -> None:
        """Refuse ``n`` bytes of decoded column data that the rest of the block cannot hold, before
        anything of that size is allocated (zstd turns 4 bytes into at most 128 KiB)."""
        room = (len(self.buf) - self.pos) * MAX_RATIO + 64
        if n > room:
            raise self.fail(f"{what} of {n} bytes cannot come from the {len(self.buf) - self.pos} bytes left")

    def within_limit(self, n: int, each: int, what: str) -> None:
        """Refuse ``n`` decoded items of ``each`` bytes beyond the decompression limit: columns of
        width 0 (and empty strings) take no stored bytes, so the block alone cannot bound them."""
        if n * each > self.limit:
            raise self.fail(f"{what} of {n} would take {n * each} bytes, more than the decompression "
                            "limit (limits=refset.Limits(decompressed=...) allows more)")

    def blob(self, expected: int | None = None) -> bytes:
        codec = self.u8()
        size = self.u64()
        stored = self.take(size)
        if codec == RAW:
            out = bytes(stored)
        elif codec == ZSTD:
            import zstandard

            try:
                declared = zstandard.frame_content_size(stored)
            except zstandard.ZstdError as e:
                raise self.fail(f"corrupt zstd data ({e})") from e
            if expected is not None and ((declared >= 0 and declared != expected)
                                         or expected > size * MAX_RATIO + 64):
                raise self.fail(f"blob of {size} stored bytes cannot hold the {expected} expected")
            try:
                out = decompressor().decompress(stored, max_output_size=expected if expected is not None else 0)
            except zstandard.ZstdError as e:
                raise self.fail(f"corrupt zstd data ({e})") from e
        else:
            raise self.fail(f"unknown blob codec {codec}, expected 0 (raw) or 1 (zstd)")
        if expected is not None and len(out) != expected:
            raise self.fail(f"blob holds {len(out)} bytes, expected {expected}")
        return out

    def ints(self, n: int) -> np.ndarray:
        w = self.u8()
        if w > 8:
            raise self.fail(f"integer column width {w}, expected 0..8")
        if w == 0 or n == 0:
            self.within_limit(n, 8, "an integer column")
            for _ in range(w):
                self.blob(0)
            return np.zeros(n, np.uint64)
        if w == 1:
            return np.frombuffer(self.blob(n), np.uint8).astype(np.uint64)
        self.fits(n * w, "an integer column")
        out = np.zeros((n, 8), np.uint8)
        for j in range(w):
            out[:, j] = np.frombuffer(self.blob(n), np.uint8)
        return out.view("<u8").reshape(n).astype(np.uint64, copy=False)

    def sparse_pairs(self, n: int) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
        """A column written by the sparse writer as it is stored: ``(positions, values)`` of its
        non-zero entries (sparse mode, positions ascending), or the dense column."""
        mode = self.u8()
        if mode == 0:
            return self.ints(n)
        if mode != 1:
            raise self.fail(f"unknown integer column mode {mode}, expected 0 (dense) or 1 (sparse)")
        k = self.count(n, "non-zero count")
        pos = (np.cumsum(self.ints(k) + np.uint64(1)) - np.uint64(1)).astype(np.int64)
        vals = self.ints(k)
        if k and int(pos[-1]) >= n:
            raise self.fail(f"sparse position {int(pos[-1])} outside the column of {n}")
        return pos, vals

    def sparse_ints(self, n: int) -> np.ndarray:
        mode = self.u8()
        if mode == 0:
            return self.ints(n)
        if mode != 1:
            raise self.fail(f"unknown integer column mode {mode}, expected 0 (dense) or 1 (sparse)")
        k = self.count(n, "non-zero count")
        pos = np.cumsum(self.ints(k) + np.uint64(1)) - np.uint64(1)
        vals = self.ints(k)
        if k and int(pos[-1]) >= n:
            raise self.fail(f"sparse position {int(pos[-1])} outside the column of {n}")
        out = np.zeros(n, np.uint64)
        out[pos.astype(np.int64)] = vals
        return out

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise self.fail(f"{len(self.buf) - self.pos} unexpected bytes after the last field")
