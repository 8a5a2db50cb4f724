"""HDF5 metadata read straight from the file's bytes (HDF5 File Format Specification v3).

A fast path for the scan: superblocks v0-v3, object headers v1/v2 with continuations, old-style
(symbol table) and compact new-style groups of hard links, compact attributes of fixed-point, IEEE
float, fixed and variable-length string types (and DIMENSION_LIST's variable-length object
references), layout v3 (contiguous, chunked with a v1 B-tree chunk index). Anything else, and any
checksum, bound or structure that does not hold, raises :class:`NotNative`: the caller then scans the
file through h5py, so this module never has to be right about what it does not fully understand.
"""

from __future__ import annotations

import bisect
import functools
import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

__all__ = ["NotNative", "H5File", "Header", "read_header", "checksum", "lookup3"]

UNDEF = 0xFFFFFFFFFFFFFFFF
_MAX_MESSAGES = 100_000
_MAX_NODES = 10_000_000


class NotNative(Exception):
    """The file uses something this reader does not support (or is not what it claims)."""


def _need(cond: bool, why: str) -> None:
    if not cond:
        raise NotNative(why)


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & 0xFFFFFFFF


def lookup3(data: bytes, init: int = 0) -> int:
    """Bob Jenkins' lookup3 ``hashlittle``, HDF5's metadata checksum."""
    n = len(data)
    m = 0xFFFFFFFF
    a = b = c = (0xDEADBEEF + n + init) & m
    i = 0
    unpack: Callable[[bytes, int], tuple[int, int, int]] = struct.Struct("<3I").unpack_from
    while n - i > 12:
        x, y, z = unpack(data, i)
        a = (a + x) & m
        b = (b + y) & m
        c = (c + z) & m
        a = (a - c) & m; a ^= _rot(c, 4); c = (c + b) & m  # noqa: E702
        b = (b - a) & m; b ^= _rot(a, 6); a = (a + c) & m  # noqa: E702
        c = (c - b) & m; c ^= _rot(b, 8); b = (b + a) & m  # noqa: E702
        a = (a - c) & m; a ^= _rot(c, 16); c = (c + b) & m  # noqa: E702
        b = (b - a) & m; b ^= _rot(a, 19); a = (a + c) & m  # noqa: E702
        c = (c - b) & m; c ^= _rot(b, 4); b = (b + a) & m  # noqa: E702
        i += 12
    if n - i == 0:
        return c
    x, y, z = unpack(bytes(data[i:]) + b"\0" * (12 - (n - i)), 0)
    a = (a + x) & m
    b = (b + y) & m
    c = (c + z) & m
    c ^= b; c = (c - _rot(b, 14)) & m  # noqa: E702
    a ^= c; a = (a - _rot(c, 11)) & m  # noqa: E702
    b ^= a; b = (b - _rot(a, 25)) & m  # noqa: E702
    c ^= b; c = (c - _rot(b, 16)) & m  # noqa: E702
    a ^= c; a = (a - _rot(c, 4)) & m  # noqa: E702
    b ^= a; b = (b - _rot(a, 14)) & m  # noqa: E702
    c ^= b; c = (c - _rot(b, 24)) & m  # noqa: E702
    return c


def _libhdf5_lookup3() -> Callable[[bytes], int] | None:
    """libhdf5's own ``H5_checksum_lookup3`` (300x the pure-Python one on a 4 KiB block), found
    through h5py's ``defs`` extension module, which links libhdf5: loaded as a library, without
    importing h5py (~20 ms in each Dask worker); None where it cannot be found."""
    try:
        import ctypes
        import importlib.machinery
        import importlib.util
        import os

        spec = importlib.util.find_spec("h5py")  # finds the package without importing it
        where = list(spec.submodule_search_locations or []) if spec is not None else []
        lib = next(os.path.join(d, "defs" + x) for d in where for x in importlib.machinery.EXTENSION_SUFFIXES
                   if os.path.exists(os.path.join(d, "defs" + x)))
        fn = ctypes.CDLL(lib).H5_checksum_lookup3
    except (ImportError, OSError, AttributeError, StopIteration, ValueError):
        return None
    fn.restype = ctypes.c_uint32
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32]
    return lambda data: fn(bytes(data), len(data), 0)


_checksum: Callable[[bytes], int] | None = None


def checksum(data: bytes) -> int:
    """HDF5's metadata checksum of ``data`` (lookup3, initial value 0)."""
    global _checksum
    if _checksum is None:
        _checksum = _libhdf5_lookup3() or lookup3
    return _checksum(data)


def _check(buf: bytes, what: str) -> None:
    """The last 4 bytes of ``buf`` are the lookup3 checksum of the rest."""
    _need(len(buf) >= 4 and checksum(buf[:-4]) == int.from_bytes(buf[-4:], "little"), f"{what}: bad checksum")


class H5File:
    """The file's bytes (``f``: a seekable file object, ``size`` bytes) from the superblock at
    ``start`` on; addresses are relative to the base address."""

    def __init__(self, f: Any, size: int, start: int, templates: dict[Any, Any] | None = None) -> None:
        self.f, self.size = f, size
        self.templates: dict[Any, Any] = {} if templates is None else templates
        # Every structure is read once in a sound file, so reading more than this is a loop or an
        # amplification (overlapping nodes, repeated continuations) in a hostile one.
        self._budget = 2 * size + (1 << 20)
        self._headers: dict[int, Header] = {}
        self._heaps: dict[int, bytes] = {}
        self._gcols: dict[int, dict[int, bytes]] = {}
        sb = self._raw(start, 48)
        _need(sb[:8] == b"\x89HDF\r\n\x1a\n", "no HDF5 signature")
        version = sb[8]
        if version in (0, 1):
            _need(sb[13] == 8 and sb[14] == 8, "offsets/lengths are not 8 bytes")
            p = 24 + (4 if version == 1 else 0)
            head = self._raw(start, p + 32 + 40)
            base, _free, _eof, _drv = struct.unpack_from("<4Q", head, p)
            # root symbol table entry: link name offset, object header address, cache type...
            root = struct.unpack_from("<Q", head, p + 32 + 8)[0]
        elif version in (2, 3):
            head = self._raw(start, 48)
            _need(head[9] == 8 and head[10] == 8, "offsets/lengths are not 8 bytes")
            _check(head, "superblock")
            base, ext, _eof, root = struct.unpack_from("<4Q", head, 12)
            _need(ext == UNDEF, "superblock extension")
        else:
            raise NotNative(f"superblock version {version}")
        _need(base == start, "base address is not the superblock's")
        self.base = base
        self.root = root

    # -- bytes ------------------------------------------------------------------------------------
    def _raw(self, pos: int, n: int) -> bytes:
        _need(0 <= pos and n >= 0 and pos + n <= self.size, "read past the end of the file")
        self._budget -= n
        _need(self._budget >= 0, "metadata read more than twice over")
        self.f.seek(pos)
        data: bytes = self.f.read(n)
        _need(len(data) == n, "short read")
        return data

    def read(self, addr: int, n: int) -> bytes:
        _need(addr != UNDEF, "undefined address")
        return self._raw(self.base + addr, n)

    # -- object headers ---------------------------------------------------------------------------
    def header(self, addr: int) -> Header:
        h = self._headers.get(addr)
        if h is None:
            h = self._headers[addr] = read_header(self, addr)
        return h

    # -- heaps ------------------------------------------------------------------------------------
    def local_heap(self, addr: int) -> bytes:
        data = self._heaps.get(addr)
        if data is None:
            h = self.read(addr, 32)
            _need(h[:4] == b"HEAP" and h[4] == 0, "local heap")
            size, _free, daddr = struct.unpack_from("<3Q", h, 8)
            _need(size < 2**31, "local heap size")
            data = self._heaps[addr] = self.read(daddr, size)
        return data

    def global_object(self, addr: int, index: int) -> bytes:
        col = self._gcols.get(addr)
        if col is None:
            h = self.read(addr, 16)
            _need(h[:4] == b"GCOL" and h[4] == 1, "global heap collection")
            size = struct.unpack_from("<Q", h, 8)[0]
            _need(16 <= size < 2**31, "global heap size")
            data = self.read(addr, size)
            col = {}
            p = 16
            while p + 16 <= size:  # objects tile the collection; the free space (index 0) ends it
                idx, _ref, zero, n = struct.unpack_from("<HHIQ", data, p)
                if idx == 0:  # the free space's size counts its own header
                    _need(p + n <= size, "global heap free space")
                    break
                _need(zero == 0 and p + 16 + n <= size and idx not in col, "global heap object")
                col[idx] = data[p + 16:p + 16 + n]
                p += 16 + ((n + 7) & ~7)
            self._gcols[addr] = col
        obj = col.get(index)
        _need(obj is not None, "global heap object missing")
        assert obj is not None  # for mypy: _need raised otherwise
        return obj

    # -- version 1 B-trees (group members, chunks) ---------------------------------------------
    def _v1_btree_leaves(self, addr: int, node_type: int, key_size: int) -> Iterator[tuple[int, bytes]]:
        """(n, entries) of each leaf of a version 1 B-tree (``node_type`` 0: a group's, 1: a
        dataset's chunks), left to right: ``entries`` holds n (key of ``key_size`` bytes, child
        address) pairs."""
        entry = _entry_dtype(key_size)
        what = ("group", "chunk")[node_type]
        seen: set[int] = set()
        todo: list[tuple[int, int | None]] = [(addr, None)]
        while todo:
            node, level_above = todo.pop()
            _need(node not in seen and len(seen) < _MAX_NODES, "B-tree cycle")
            seen.add(node)
            h = self.read(node, 24)
            _need(h[:4] == b"TREE" and h[4] == node_type, f"{what} B-tree node")
            level, n = h[5], struct.unpack_from("<H", h, 6)[0]
            _need(level_above is None or level == level_above - 1, "B-tree levels")
            body = self.read(node + 24, entry.itemsize * n)
            if level:
                todo.extend((int(c), level) for c in np.frombuffer(body, entry, n)["child"][::-1])
            else:
                yield n, body

    def symbol_table_links(self, btree: int, heap: int) -> list[tuple[bytes, int]]:
        """(name, object header address) of an old-style group, from its v1 B-tree (type 0)."""
        names = self.local_heap(heap)
        out: list[tuple[bytes, int]] = []
        for n, body in self._v1_btree_leaves(btree, 0, 8):
            for c in np.frombuffer(body, "<u8", 2 * n)[1::2].tolist():
                s = self.read(c, 8)
                _need(s[:4] == b"SNOD" and s[4] == 1, "symbol table node")
                count = struct.unpack_from("<H", s, 6)[0]
                ents = self.read(c + 8, 40 * count)
                for i in range(count):
                    name_off, obj, cache = struct.unpack_from("<QQI", ents, 40 * i)
                    _need(cache in (0, 1), "symbolic link in an old-style group")
                    end = names.find(b"\0", name_off)
                    _need(name_off < len(names) and end > name_off, "link name")
                    out.append((names[name_off:end], obj))
        return out

    def chunk_btree(self, addr: int, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(positions n x rank, filter masks, offsets, sizes) of the chunks a v1 B-tree (type 1)
        indexes, in numpy columns (one frombuffer per node)."""
        rec = _chunk_record(rank)
        parts = [np.frombuffer(body, rec, n) for n, body in self._v1_btree_leaves(addr, 1, rec.itemsize - 8)]
        recs = np.concatenate(parts) if parts else np.zeros(0, rec)
        pos = recs["pos"][:, :rank].astype(np.int64)
        _need(bool((recs["pos"][:, rank] == 0).all()), "chunk key")
        off = recs["addr"].astype(np.int64)
        size = recs["size"].astype(np.int64)
        _need(bool(((recs["addr"] < self.size) & (off + size + self.base <= self.size)).all()),
              "chunk past the end of the file")
        return pos, recs["mask"].astype(np.int64), off + self.base, size


@functools.lru_cache(maxsize=64)
def _entry_dtype(key_size: int) -> np.dtype:
    """A v1 B-tree node entry: key, child address."""
    return np.dtype([("key", f"V{key_size}"), ("child", "<u8")])


@functools.lru_cache(maxsize=64)
def _chunk_record(rank: int) -> np.dtype:
    """A chunk B-tree leaf entry: its key (size, filter mask, position + 1 zero) and address."""
    return np.dtype([("size", "<u4"), ("mask", "<u4"), ("pos", "<u8", (rank + 1,)), ("addr", "<u8")])


class Header:
    """An object header's messages: ``msgs`` a list of (type, flags, creation order, body).

    Files of one product repeat their headers byte for byte, but for the addresses of their data:
    a parsed header is kept as a template (:func:`read_header`) for the next file whose header at the
    same address reads the same bytes outside those addresses (and checksums, which are checked).
    ``memo`` holds what readers derived from the template's messages alone.
    """

    def __init__(self, h5: H5File, addr: int, first: bytes) -> None:
        self.addr = addr
        self.msgs: list[tuple[int, int, int, bytes]] = []
        self.track_attr_order = False
        self.memo: dict[Any, Any] = {}
        # what a later file must read again to reuse this parse: (address, size, bytes) per block,
        # byte ranges per block that may differ (data addresses, checksums), blocks to checksum,
        # and the messages whose bodies hold such ranges
        self.blocks: list[tuple[int, int, bytes]] = [(addr, 16, first)]
        self.masks: list[list[tuple[int, int]]] = [[]]
        self.checked: list[int] = []
        self.varying: list[tuple[int, int, int, int]] = []  # (message, block, start, end)
        if first[:4] == b"OHDR":
            self._v2(h5, addr, first)
        else:
            self._v1(h5, addr, first)

    def _block(self, h5: H5File, addr: int, n: int, checked: bool = False) -> tuple[int, bytes]:
        data = h5.read(addr, n)
        self.blocks.append((addr, n, data))
        self.masks.append([(n - 4, n)] if checked else [])
        if checked:
            self.checked.append(len(self.blocks) - 1)
        return len(self.blocks) - 1, data

    def _v1(self, h5: H5File, addr: int, first: bytes) -> None:
        _need(first[0] == 1, "object header version")
        nmsgs, _refs, size = struct.unpack_from("<HII", first, 2)
        blocks = [(addr + 16, size)]
        seen: set[int] = set()
        while blocks:
            start, size = blocks.pop(0)
            _need(start not in seen and len(seen) < 10_000, "header continuation cycle")
            seen.add(start)
            bi, data = self._block(h5, start, size)
            p = 0
            while p + 8 <= size:
                mtype, msize, flags = struct.unpack_from("<HHB", data, p)
                _need(p + 8 + msize <= size, "message past its block")
                body = data[p + 8:p + 8 + msize]
                self._add(mtype, flags, 0, body, blocks, bi, p + 8)
                p += 8 + msize
        _need(len(self.msgs) <= nmsgs, "message count")

    def _v2(self, h5: H5File, addr: int, first: bytes) -> None:
        _need(first[4] == 2, "object header version")
        flags = first[5]
        _need(not flags & 0xC0, "object header flags")
        p = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        self.track_attr_order = bool(flags & 0x04)
        pre = first if p + width <= 16 else h5.read(addr, p + width)
        size = int.from_bytes(pre[p:p + width], "little")
        bi, chunk = self._block(h5, addr, p + width + size + 4, checked=True)
        _check(chunk, "object header")
        if flags & 0x20:  # access/modification/change/birth times: not read
            self.masks[bi].append((6, 22))
        blocks = [(bi, chunk, p + width, p + width + size)]
        seen = {addr}
        mhead = 6 if flags & 0x04 else 4
        while blocks:
            bi, data, p, end = blocks.pop(0)
            while p + mhead <= end:
                mtype, msize, mflags = struct.unpack_from("<BHB", data, p)
                order = struct.unpack_from("<H", data, p + 4)[0] if flags & 0x04 else 0
                _need(p + mhead + msize <= end, "message past its block")
                body = data[p + mhead:p + mhead + msize]
                more: list[tuple[int, int]] = []
                self._add(mtype, mflags, order, body, more, bi, p + mhead)
                p += mhead + msize
                for cont, n in more:
                    _need(cont not in seen and len(seen) < 10_000, "header continuation cycle")
                    seen.add(cont)
                    ci, block = self._block(h5, cont, n, checked=True)
                    _need(block[:4] == b"OCHK", "continuation block signature")
                    _check(block, "continuation block")
                    blocks.append((ci, block, 4, n - 4))

    def _add(self, mtype: int, flags: int, order: int, body: bytes, conts: list[tuple[int, int]],
             block: int, at: int) -> None:
        _need(len(self.msgs) < _MAX_MESSAGES, "too many messages")
        if mtype == 0x10:
            addr, n = struct.unpack_from("<QQ", body)
            conts.append((addr, n))
            return
        _need(not flags & 0x02, "shared message")
        if mtype in (0x00, 0x0A, 0x0D, 0x0E, 0x12, 0x13, 0x16):  # nil, group info, comment, times, K, refcount
            return
        _need(mtype in (0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x08, 0x0B, 0x0C, 0x11, 0x15),
              f"message type {mtype}")
        if mtype == 0x08 and len(body) >= 18:  # a layout: the data's address (and size) vary
            span = {1: (2, 18), 2: (3, 11)}.get(body[1])
            if span is not None:
                self.masks[block].append((at + span[0], at + span[1]))
                self.varying.append((len(self.msgs), block, at, at + len(body)))
        self.msgs.append((mtype, flags, order, body))

    def find(self, mtype: int) -> bytes | None:
        found = [m[3] for m in self.msgs if m[0] == mtype]
        _need(len(found) <= 1, f"message {mtype} repeated")
        return found[0] if found else None

    def all(self, mtype: int) -> list[tuple[int, bytes]]:
        return [(m[2], m[3]) for m in self.msgs if m[0] == mtype]


class _Reused(Header):
    """A header read as its template's messages, the varying bodies taken from this file."""

    def __init__(self, template: Header, blocks: list[bytes]) -> None:  # no parse
        self.addr = template.addr
        self.track_attr_order = template.track_attr_order
        self.memo = template.memo
        msgs = template.msgs
        if template.varying:
            msgs = list(msgs)
            for i, b, s, e in template.varying:
                t, f, o, _ = msgs[i]
                msgs[i] = (t, f, o, blocks[b][s:e])
        self.msgs = msgs


# Parsed headers kept by a run (``H5File.templates``, by address and first 16 bytes): bounded, replaced
# on a mismatch.
_MAX_TEMPLATES = 4096


def _same(new: bytes, old: bytes, masks: list[tuple[int, int]]) -> bool:
    """Whether ``new`` equals ``old`` outside the byte ranges ``masks``."""
    if not masks:
        return new == old
    if len(new) != len(old):
        return False
    p = 0
    for s, e in sorted(masks):
        if new[p:s] != old[p:s]:
            return False
        p = e
    return new[p:] == old[p:]


def read_header(h5: H5File, addr: int) -> Header:
    """The object header at ``addr``: its template's messages when this file repeats its bytes
    (outside data addresses and checksums), else parsed."""
    first = h5.read(addr, 16)
    key = (addr, first)
    templates = h5.templates
    t = templates.get(key)
    if t is not None:
        blocks = [first]
        for (a, n, old), masks in zip(t.blocks[1:], t.masks[1:]):
            new = h5.read(a, n)
            if not _same(new, old, masks):
                break
            blocks.append(new)
        else:
            for i in t.checked:
                _check(blocks[i], "object header")
            return _Reused(t, blocks)
    h = Header(h5, addr, first)
    if len(templates) >= _MAX_TEMPLATES:
        templates.clear()
    templates[key] = h
    return h


# -- message bodies ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1024)  # many attributes share a space; the result is not mutated
def dataspace(body: bytes) -> tuple[tuple[int, ...], tuple[int | None, ...]] | None:
    """(shape, maxshape with None for unlimited) of a dataspace message; None for a null space."""
    version, rank, flags = body[0], body[1], body[2]
    if version == 1:
        _need(not flags & 0x02, "dataspace permutation")
        p = 8
        kind = 1 if rank else 0
    else:
        _need(version == 2, "dataspace version")
        kind = body[3]
        p = 4
        _need(kind in (0, 1, 2), "dataspace type")
        if kind == 2:
            return None
    _need(rank <= 32 and len(body) >= p + 8 * rank * (2 if flags & 1 else 1), "dataspace")
    shape = struct.unpack_from(f"<{rank}Q", body, p)
    if flags & 1:
        mx = struct.unpack_from(f"<{rank}Q", body, p + 8 * rank)
        maxshape = tuple(None if m == UNDEF else int(m) for m in mx)
    else:
        maxshape = tuple(shape)
    if kind == 0:
        _need(rank == 0, "scalar dataspace with dimensions")
    return tuple(int(s) for s in shape), maxshape


class Datatype:
    """A decoded datatype: ``kind`` one of "num", "str" (fixed), "vstr", "vref" (vlen of object
    references); ``dtype`` the numpy dtype h5py gives; ``size`` bytes per element in the file."""

    def __init__(self, kind: str, dtype: np.dtype, size: int, cset: int = 0) -> None:
        self.kind, self.dtype, self.size, self.cset = kind, dtype, size, cset


_IEEE = {  # size: (sign bit, exponent at, exponent bits, mantissa at, mantissa bits, bias)
    2: (15, 10, 5, 0, 10, 15), 4: (31, 23, 8, 0, 23, 127), 8: (63, 52, 11, 0, 52, 1023),
}


@functools.lru_cache(maxsize=1024)  # and a type
def datatype(body: bytes) -> Datatype:
    _need(len(body) >= 8, "datatype")
    cls, version = body[0] & 0x0F, body[0] >> 4
    bits = body[1] | body[2] << 8 | body[3] << 16
    size = struct.unpack_from("<I", body, 4)[0]
    _need(version in (1, 2, 3), "datatype version")
    order = ">" if bits & 1 else "<"
    if cls == 0:  # fixed-point
        _need(not bits & ~0x09, "fixed-point padding")
        off, prec = struct.unpack_from("<HH", body, 8)
        _need(size in (1, 2, 4, 8) and off == 0 and prec == 8 * size, "fixed-point precision")
        return Datatype("num", np.dtype(f"{order}{'i' if bits & 8 else 'u'}{size}"), size)
    if cls == 1:  # floating point
        _need(size in _IEEE and not bits & 0x4E and (bits >> 4) & 3 == 2, "float layout")
        off, prec, epos, esize, mpos, msize, bias = struct.unpack_from("<HHBBBBI", body, 8)
        _need(off == 0 and prec == 8 * size and ((bits >> 8) & 0xFF, epos, esize, mpos, msize, bias)
              == _IEEE[size], "not an IEEE float")
        return Datatype("num", np.dtype(f"{order}f{size}"), size)
    if cls == 3:  # fixed-length string
        pad, cset = bits & 0x0F, (bits >> 4) & 0x0F
        _need(pad in (0, 1) and cset in (0, 1) and size > 0, "string padding/charset")
        return Datatype("str", np.dtype(f"S{size}"), size, cset)
    if cls == 9:  # variable-length
        vkind, cset = bits & 0x0F, (bits >> 8) & 0x0F
        _need(size == 16, "vlen size")
        base = datatype(body[8:]) if vkind == 0 else None
        if vkind == 1:
            _need(cset in (0, 1), "vlen string charset")
            return Datatype("vstr", np.dtype(object), 16, cset)
        _need(vkind == 0 and base is not None and base.kind == "oref", "vlen sequence")
        return Datatype("vref", np.dtype(object), 16)
    if cls == 7:  # reference: object references only (inside DIMENSION_LIST)
        _need(bits & 0x0F == 0 and size == 8, "reference type")
        return Datatype("oref", np.dtype("<u8"), 8)
    raise NotNative(f"datatype class {cls}")


def fill_value(old: bytes | None, new: bytes | None) -> bytes | None:
    """The raw fill value, None for the library default (zeros), from the fill value messages."""
    if new is not None:
        version = new[0]
        if version in (1, 2):
            _need(new[3] == 1, "fill value not defined")
            n = struct.unpack_from("<I", new, 4)[0]
            _need(len(new) >= 8 + n, "fill value")
            return new[8:8 + n] if n else None
        _need(version == 3, "fill value version")
        flags = new[1]
        _need(not flags & 0xC0, "fill value flags")
        _need(not flags & 0x10, "undefined fill value")
        if flags & 0x20:
            n = struct.unpack_from("<I", new, 2)[0]
            _need(len(new) >= 6 + n, "fill value")
            return new[6:6 + n] if n else None
        return None
    if old is not None:
        n = struct.unpack_from("<I", old)[0]
        _need(len(old) >= 4 + n, "old fill value")
        return old[4:4 + n] if n else None
    return None


def layout(body: bytes) -> tuple[str, Any]:
    """("contiguous", (address, size)) or ("chunked", (B-tree address, chunk shape))."""
    _need(body[0] == 3, "layout version")
    cls = body[1]
    if cls == 1:
        addr, size = struct.unpack_from("<QQ", body, 2)
        return "contiguous", (addr, size)
    if cls == 2:
        rank = body[2]
        _need(rank >= 1 and len(body) >= 11 + 4 * rank, "chunked layout")
        addr = struct.unpack_from("<Q", body, 3)[0]
        dims = struct.unpack_from(f"<{rank}I", body, 11)
        return "chunked", (addr, tuple(int(d) for d in dims[:-1]), int(dims[-1]))
    raise NotNative(f"layout class {cls}")


def filters(body: bytes) -> list[tuple[int, tuple[int, ...], str]]:
    """(filter id, client values, name) of a filter pipeline message, in order."""
    version, n = body[0], body[1]
    _need(version in (1, 2) and n <= 32, "filter pipeline")
    p = 8 if version == 1 else 2
    out = []
    for _ in range(n):
        fid = struct.unpack_from("<H", body, p)[0]
        if version == 1 or fid >= 256:
            namelen, _flags, nvals = struct.unpack_from("<HHH", body, p + 2)
            p += 8
        else:
            namelen = 0
            _flags, nvals = struct.unpack_from("<HH", body, p + 2)
            p += 6
        name = body[p:p + namelen].split(b"\0", 1)[0].decode("latin-1")
        p += ((namelen + 7) & ~7) if version == 1 else namelen
        _need(p + 4 * nvals <= len(body), "filter values")
        vals = struct.unpack_from(f"<{nvals}I", body, p)
        p += 4 * nvals + (4 if version == 1 and nvals % 2 else 0)
        out.append((fid, tuple(int(v) for v in vals), name))
    return out


def link(body: bytes) -> tuple[bytes, int, int | None]:
    """(name, object header address, creation order or None) of a hard link message; other
    links are not native."""
    _need(len(body) >= 4 and body[0] == 1, "link version")
    flags = body[1]
    p = 2
    if flags & 0x08:  # link type, then creation order, then charset
        _need(body[p] == 0, "soft or external link")
        p += 1
    order = None
    if flags & 0x04:
        _need(len(body) >= p + 8, "link creation order")
        order = struct.unpack_from("<q", body, p)[0]
        p += 8
    if flags & 0x10:
        p += 1
    w = 1 << (flags & 3)
    n = int.from_bytes(body[p:p + w], "little")
    p += w
    _need(0 < n and p + n + 8 <= len(body) and b"\0" not in body[p:p + n], "link name")
    return body[p:p + n], struct.unpack_from("<Q", body, p + n)[0], order


def attribute(body: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """(name, datatype, dataspace, data) of an attribute message."""
    version = body[0]
    _need(version in (1, 2, 3), "attribute version")
    if version > 1:
        _need(not body[1] & 0x03, "shared attribute type/space")
    nname, ntype, nspace = struct.unpack_from("<HHH", body, 2)
    p = 8 if version < 3 else 9
    pad: Callable[[int], int] = (lambda x: (x + 7) & ~7) if version == 1 else (lambda x: x)
    name = body[p:p + nname]
    _need(nname > 0 and name[-1:] == b"\0" and b"\0" not in name[:-1], "attribute name")
    p += pad(nname)
    dt = body[p:p + ntype]
    p += pad(ntype)
    sp = body[p:p + nspace]
    p += pad(nspace)
    _need(p <= len(body), "attribute message")
    return name[:-1], dt, sp, body[p:]


def dense_address(body: bytes, tracked_flag: int) -> tuple[int, int]:
    """(fractal heap, name index v2 B-tree) addresses of a link info or attribute info message
    (UNDEF: compact storage)."""
    _need(body[0] == 0, "info message version")
    p = 2 + ((8 if tracked_flag == 8 else 2) if body[1] & 1 else 0)
    _need(len(body) >= p + 16, "info message")
    return struct.unpack_from("<QQ", body, p)


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
            _need(len(rec) == 17 and heap.id_len == 8, "attribute index record")
            hid, mflags, order = rec[:8], rec[8], struct.unpack_from("<I", rec, 9)[0]
            _need(not mflags & 0x02, "shared attribute")
        else:
            _need(len(rec) == 4 + heap.id_len, "link index record")
            hid, order = rec[4:], 0
        out.append((order, heap.get(hid)))
    return out


def btree2_records(h5: H5File, addr: int, record_type: int) -> list[bytes]:
    """The records of a version 2 B-tree of depth 0 or 1 (deeper trees are not native)."""
    h = h5.read(addr, 38)
    _need(h[:4] == b"BTHD" and h[4] == 0 and h[5] == record_type, "v2 B-tree header")
    _check(h, "v2 B-tree header")
    node_size, rsize, depth = struct.unpack_from("<IHH", h, 6)
    root, root_n, _total = struct.unpack_from("<QHQ", h, 16)
    _need(rsize > 0 and node_size > 10, "v2 B-tree sizes")
    if root == UNDEF:
        _need(root_n == 0, "v2 B-tree root")
        return []
    _need(depth <= 1, "v2 B-tree deeper than 1")

    def node(at: int, n: int, sig: bytes, tail: int) -> bytes:
        data = h5.read(at, 6 + n * rsize + tail + 4)
        _need(data[:4] == sig and data[4] == 0 and data[5] == record_type, "v2 B-tree node")
        _check(data, "v2 B-tree node")
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
        _need(h[:4] == b"FRHP" and h[4] == 0, "fractal heap header")
        _check(h, "fractal heap header")
        self.h5 = h5
        self.id_len, filters, flags, max_man = struct.unpack_from("<HHBI", h, 5)
        _need(filters == 0, "filtered fractal heap")
        self.checksummed = bool(flags & 0x02)
        width, start, max_direct, max_bits, _start_rows, root, rows = struct.unpack_from("<HQQHHQH", h, 110)
        _need(width > 0 and start > 0 and start & (start - 1) == 0 and max_direct & (max_direct - 1) == 0
              and start <= max_direct and 0 < max_bits <= 64, "fractal heap table")
        self.off_size = (max_bits + 7) // 8
        self.len_size = min((max_direct.bit_length() - 1 + 7) // 8, _enc_size(max_man))
        _need(1 + self.off_size + self.len_size <= self.id_len, "fractal heap ID length")
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
        _need(rows <= dblock_rows, "nested fractal heap indirect blocks")
        head = 5 + 8 + self.off_size
        ib = h5.read(root, head + 8 * rows * width + 4)
        _need(ib[:4] == b"FHIB" and ib[4] == 0, "fractal heap indirect block")
        _check(ib, "fractal heap indirect block")
        addrs = np.frombuffer(ib, "<u8", rows * width, head).reshape(rows, width)
        for r, c in zip(*np.nonzero(addrs != UNDEF)):
            size = start if r < 2 else start << (int(r) - 1)
            base = 0 if r == 0 else width * start << (int(r) - 1)
            self.blocks.append((base + int(c) * size, size, int(addrs[r, c])))
        self._starts = [b[0] for b in self.blocks]

    def get(self, hid: bytes) -> bytes:
        _need(len(hid) == self.id_len and hid[0] == 0, "managed heap ID")
        off = int.from_bytes(hid[1:1 + self.off_size], "little")
        n = int.from_bytes(hid[1 + self.off_size:1 + self.off_size + self.len_size], "little")
        i = bisect.bisect_right(self._starts, off) - 1  # blocks are listed in heap order
        _need(i >= 0, "heap object outside the heap's blocks")
        base, size, addr = self.blocks[i]
        _need(off < base + size, "heap object outside the heap's blocks")
        _need(n > 0 and off + n <= base + size, "heap object extent")
        data = self._block(base, size, addr)
        head = 5 + 8 + self.off_size + (4 if self.checksummed else 0)
        _need(off - base >= head, "heap object inside the block header")
        return data[off - base:off - base + n]

    def _block(self, base: int, size: int, addr: int) -> bytes:
        data = self._data.get(addr)
        if data is None:
            data = self.h5.read(addr, size)
            _need(data[:4] == b"FHDB" and data[4] == 0, "fractal heap direct block")
            _need(int.from_bytes(data[13:13 + self.off_size], "little") == base, "direct block offset")
            if self.checksummed:
                p = 13 + self.off_size
                blank = data[:p] + b"\0\0\0\0" + data[p + 4:]
                _need(checksum(blank) == int.from_bytes(data[p:p + 4], "little"), "direct block: bad checksum")
            self._data[addr] = data
        return data
