"""Links and attributes stored densely (HDF5 File Format Specification v3): the name index
version 2 B-tree (III.A.2; depth 0 or 1) gives the heap IDs, the fractal heap (III.G; managed objects in
direct blocks under at most one indirect block) the message bodies."""

from __future__ import annotations

import bisect
import struct

import numpy as np

from refset.scan.hdf5.base import UNDEF, intact, need
from refset.scan.hdf5.checksum import check, checksum
from refset.scan.hdf5.meta import H5File

__all__ = ["dense_messages", "btree2_records", "FractalHeap"]


def _enc_size(n: int) -> int:
    """Bytes HDF5 uses to encode a count up to ``n`` (H5VM_limit_enc_size)."""
    return (max(n, 1).bit_length() - 1) // 8 + 1


def dense_messages(h5: H5File, heap_addr: int, btree_addr: int, record_type: int) -> list[tuple[int, bytes]]:
    """(creation order, message body) of every link (``record_type`` 5) or attribute (8) stored
    densely: the name index v2 B-tree gives heap IDs, the fractal heap the messages."""
    heap = FractalHeap(h5, heap_addr)
    out = []
    for rec in btree2_records(h5, btree_addr, record_type):
        if record_type == 8:
            need(len(rec) == 17 and heap.id_len == 8, "attribute index record")
            hid, mflags, order = rec[:8], rec[8], struct.unpack_from("<I", rec, 9)[0]
            need(not mflags & 0x02, "shared attribute")
        else:
            need(len(rec) == 4 + heap.id_len, "link index record")
            hid, order = rec[4:], 0
        out.append((order, heap.get(hid)))
    return out


def btree2_records(h5: H5File, addr: int, record_type: int) -> list[bytes]:
    """The records of a version 2 B-tree of depth 0 or 1 (deeper trees are not native)."""
    h = h5.read(addr, 38)
    intact(h[:4] == b"BTHD" and h[4] == 0 and h[5] == record_type, "v2 B-tree header")
    check(h, "v2 B-tree header")
    node_size, rsize, depth = struct.unpack_from("<IHH", h, 6)
    root, root_n, _total = struct.unpack_from("<QHQ", h, 16)
    need(rsize > 0 and node_size > 10, "v2 B-tree sizes")
    if root == UNDEF:
        need(root_n == 0, "v2 B-tree root")
        return []
    need(depth <= 1, "v2 B-tree deeper than 1")

    def node(at: int, n: int, sig: bytes, tail: int) -> bytes:
        data = h5.read(at, 6 + n * rsize + tail + 4)
        intact(data[:4] == sig and data[4] == 0 and data[5] == record_type, "v2 B-tree node")
        check(data, "v2 B-tree node")
        return data

    def records(data: bytes, n: int) -> list[bytes]:
        return [data[6 + i * rsize:6 + (i + 1) * rsize] for i in range(n)]

    if depth == 0:
        return records(node(root, root_n, b"BTLF", 0), root_n)
    width = _enc_size((node_size - 10) // rsize)
    data = node(root, root_n, b"BTIN", (root_n + 1) * (8 + width))
    out = records(data, root_n)
    p = 6 + root_n * rsize
    for _ in range(root_n + 1):
        child = struct.unpack_from("<Q", data, p)[0]
        n = int.from_bytes(data[p + 8:p + 8 + width], "little")
        p += 8 + width
        out += records(node(child, n, b"BTLF", 0), n)
    return out


class FractalHeap:
    """The managed objects of a fractal heap whose root is a direct block or an indirect block of
    direct blocks (huge, tiny and filtered objects, nested indirect blocks: not native)."""

    def __init__(self, h5: H5File, addr: int) -> None:
        h = h5.read(addr, 146)
        intact(h[:4] == b"FRHP" and h[4] == 0, "fractal heap header")
        check(h, "fractal heap header")
        self.h5 = h5
        self.id_len, filters, flags, max_man = struct.unpack_from("<HHBI", h, 5)
        need(filters == 0, "filtered fractal heap")
        self.checksummed = bool(flags & 0x02)
        width, start, max_direct, max_bits, _start_rows, root, rows = struct.unpack_from("<HQQHHQH", h, 110)
        need(width > 0 and start > 0 and start & (start - 1) == 0 and max_direct & (max_direct - 1) == 0
              and start <= max_direct and 0 < max_bits <= 64, "fractal heap table")
        self.off_size = (max_bits + 7) // 8
        self.len_size = min((max_direct.bit_length() - 1 + 7) // 8, _enc_size(max_man))
        need(1 + self.off_size + self.len_size <= self.id_len, "fractal heap ID length")
        self.blocks: list[tuple[int, int, int]] = []  # (heap offset, size, file address), heap order
        self._starts: list[int] = []
        self._data: dict[int, bytes] = {}
        if root == UNDEF:
            return
        if rows == 0:
            self.blocks.append((0, start, root))
            self._starts.append(0)
            return
        dblock_rows = (max_direct.bit_length() - start.bit_length()) + 2
        need(rows <= dblock_rows, "nested fractal heap indirect blocks")
        head = 5 + 8 + self.off_size
        ib = h5.read(root, head + 8 * rows * width + 4)
        intact(ib[:4] == b"FHIB" and ib[4] == 0, "fractal heap indirect block")
        check(ib, "fractal heap indirect block")
        addrs = np.frombuffer(ib, "<u8", rows * width, head).reshape(rows, width)
        for r, c in zip(*np.nonzero(addrs != UNDEF)):
            size = start if r < 2 else start << (int(r) - 1)
            base = 0 if r == 0 else width * start << (int(r) - 1)
            self.blocks.append((base + int(c) * size, size, int(addrs[r, c])))
        self._starts = [b[0] for b in self.blocks]

    def get(self, hid: bytes) -> bytes:
        need(len(hid) == self.id_len and hid[0] == 0, "managed heap ID")
        off = int.from_bytes(hid[1:1 + self.off_size], "little")
        n = int.from_bytes(hid[1 + self.off_size:1 + self.off_size + self.len_size], "little")
        i = bisect.bisect_right(self._starts, off) - 1  # blocks are listed in heap order
        need(i >= 0, "heap object outside the heap's blocks")
        base, size, addr = self.blocks[i]
        need(off < base + size, "heap object outside the heap's blocks")
        need(n > 0 and off + n <= base + size, "heap object extent")
        data = self._block(base, size, addr)
        head = 5 + 8 + self.off_size + (4 if self.checksummed else 0)
        need(off - base >= head, "heap object inside the block header")
        return data[off - base:off - base + n]

    def _block(self, base: int, size: int, addr: int) -> bytes:
        data = self._data.get(addr)
        if data is None:
            data = self.h5.read(addr, size)
            intact(data[:4] == b"FHDB" and data[4] == 0, "fractal heap direct block")
            need(int.from_bytes(data[13:13 + self.off_size], "little") == base, "direct block offset")
            if self.checksummed:
                p = 13 + self.off_size
                blank = data[:p] + b"\0\0\0\0" + data[p + 4:]
                intact(checksum(blank) == int.from_bytes(data[p:p + 4], "little"), "direct block: bad checksum")
            self._data[addr] = data
        return data
