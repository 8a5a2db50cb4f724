"""HDF5 metadata read straight from the file's bytes (HDF5 File Format Specification v3).

A fast path for the scan: superblocks v0-v3, object headers v1/v2 with continuations, old-style
(symbol table) and compact new-style groups of hard links, compact attributes of fixed-point, IEEE
float, fixed and variable-length string types (and DIMENSION_LIST's variable-length object
references), layout v3 (compact, contiguous, chunked with a v1 B-tree chunk index). Anything else, and any
checksum, bound or structure that does not hold, raises :class:`NotNative`: the caller then scans the
file through h5py, so this reader never has to be right about what it does not fully understand.

This module holds the file (:class:`H5File`: superblock, local and global heaps, version 1 B-trees of
groups and chunks; spec II and III.A.1, III.B-D) and its object headers (:class:`Header`,
:func:`read_header` with the templates that let files of one product reuse a parse; spec IV.A.1). The
message bodies are decoded in :mod:`.messages`, dense links and attributes (v2 B-trees, fractal
heaps) read in :mod:`.dense`, checksums computed in :mod:`.checksum`; :mod:`.base` holds
:class:`NotNative` and what else they all share.
"""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np

from refset.io.scanfile import ScanFile
from refset.scan.hdf5.base import UNDEF, NotNative, intact, need
from refset.scan.hdf5.checksum import check

__all__ = ["H5File", "Header", "read_header"]

_MAX_MESSAGES = 100_000
_MAX_NODES = 10_000_000
#: Bytes read for a B-tree node before its header says its size (a node of 64 chunk entries of a
#: 3-D array takes 24 + 65 * 40 bytes); a larger one is read again to its end.
_NODE_GUESS = 4096
_HEADER_GUESS = 4096  # bytes of an object header read ahead (a netCDF-4 variable's with its attributes)


class H5File:
    """The bytes of ``file`` from the superblock at ``start`` on; addresses are relative to the base
    address. Structures are read with ``file.read_exact``: they are the file's metadata, which the
    scan's frame checks the data against."""

    def __init__(self, file: ScanFile, start: int, templates: dict[Any, Any] | None = None) -> None:
        self.file, self.size = file, file.size
        self.templates: dict[Any, Any] = {} if templates is None else templates
        # Every structure is read once in a sound file, so reading more than this is a loop or an
        # amplification (overlapping nodes, repeated continuations) in a hostile one.
        self._budget = 2 * self.size + (1 << 20)
        self._headers: dict[int, Header] = {}
        self._heaps: dict[int, bytes] = {}
        self._gcols: dict[int, dict[int, bytes]] = {}
        sb = self._raw(start, 48)
        need(sb[:8] == b"\x89HDF\r\n\x1a\n", "no HDF5 signature")
        version = sb[8]
        if version in (0, 1):
            need(sb[13] == 8 and sb[14] == 8, "offsets/lengths are not 8 bytes")
            p = 24 + (4 if version == 1 else 0)
            head = self._raw(start, p + 32 + 40)
            base, _free, _eof, _drv = struct.unpack_from("<4Q", head, p)
            # root symbol table entry: link name offset, object header address, cache type...
            root = struct.unpack_from("<Q", head, p + 32 + 8)[0]
        elif version in (2, 3):
            head = self._raw(start, 48)
            need(head[9] == 8 and head[10] == 8, "offsets/lengths are not 8 bytes")
            check(head, "superblock")
            base, ext, _eof, root = struct.unpack_from("<4Q", head, 12)
            need(ext == UNDEF, "superblock extension")
        else:
            raise NotNative(f"superblock version {version}")
        need(base == start, "base address is not the superblock's")
        self.base = base
        self.root = root

    # -- bytes ------------------------------------------------------------------------------------
    def _raw(self, pos: int, n: int, meta: bool = True) -> bytes:
        self._budget -= max(n, 0)
        intact(self._budget >= 0, "metadata read more than twice over")
        return self.file.read_exact(pos, n, metadata=meta)

    def read(self, addr: int, n: int) -> bytes:
        need(addr != UNDEF, "undefined address")
        return self._raw(self.base + addr, n)

    def read_data(self, addr: int, n: int) -> bytes:
        """Bytes of a dataset's data (not metadata: the frame does not check the data against them)."""
        need(addr != UNDEF, "undefined address")
        return self._raw(self.base + addr, n, meta=False)

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
            intact(h[:4] == b"HEAP" and h[4] == 0, "local heap")
            size, _free, daddr = struct.unpack_from("<3Q", h, 8)
            need(size < 2**31, "local heap size")
            data = self._heaps[addr] = self.read(daddr, size)
        return data

    def global_object(self, addr: int, index: int) -> bytes:
        col = self._gcols.get(addr)
        if col is None:
            h = self.read(addr, 16)
            intact(h[:4] == b"GCOL" and h[4] == 1, "global heap collection")
            size = struct.unpack_from("<Q", h, 8)[0]
            need(16 <= size < 2**31, "global heap size")
            data = self.read(addr, size)
            col = {}
            p = 16
            while p + 16 <= size:  # objects tile the collection; the free space (index 0) ends it
                idx, _ref, zero, n = struct.unpack_from("<HHIQ", data, p)
                if idx == 0:  # the free space's size counts its own header
                    need(p + n <= size, "global heap free space")
                    break
                need(zero == 0 and p + 16 + n <= size and idx not in col, "global heap object")
                col[idx] = data[p + 16:p + 16 + n]
                p += 16 + ((n + 7) & ~7)
            self._gcols[addr] = col
        obj = col.get(index)
        need(obj is not None, "global heap object missing")
        assert obj is not None  # for mypy: need raised otherwise
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
            intact(node not in seen, "B-tree cycle")
            need(len(seen) < _MAX_NODES, "B-tree of too many nodes")
            seen.add(node)
            h = self.read(node, 24)
            intact(h[:4] == b"TREE" and h[4] == node_type, f"{what} B-tree node")
            level, n = h[5], struct.unpack_from("<H", h, 6)[0]
            intact(level_above is None or level == level_above - 1, "B-tree levels")
            body = self.read(node + 24, entry.itemsize * n)
            if level:
                todo.extend((int(c), level) for c in np.frombuffer(body, entry, n)["child"][::-1])
            else:
                yield n, body

    def prefetch_headers(self, addrs: list[int]) -> None:
        """Have the object headers at ``addrs`` not parsed yet read ahead in one round (a group's
        members cost one round trip, not one each; a longer header reads on as it is parsed)."""
        self.prefetch_blocks([a for a in addrs if a not in self._headers], _HEADER_GUESS)

    def prefetch_blocks(self, addrs: list[int], n: int = _NODE_GUESS) -> None:
        """Have the first ``n`` bytes at each of ``addrs`` read in one round of the file's
        ``prefetch`` (a remote file's; nothing for a local one): object headers, the headers of
        version 4 layouts' chunk indexes with the blocks written next to them. A hint only."""
        todo = sorted({self.base + a for a in addrs if a != UNDEF and 0 <= self.base + a < self.size})
        if self.file.fetches and todo:
            self.file.prefetch([(p, min(p + n, self.size)) for p in todo])

    def prefetch_chunk_btrees(self, trees: list[tuple[int, int]]) -> None:
        """Have the nodes of the chunk B-trees (version 1, type 1) at ``(address, rank)`` read a level
        at a time: each level of all the trees in one round of the file's ``prefetch`` (a remote
        file's), so that walking them after costs no request. A hint only: anything odd is left to the
        walk, which checks everything it reads."""
        if not self.file.fetches:
            return
        prefetch, read_at = self.file.prefetch, self.file.read_at
        key: dict[int, int] = {}  # node -> its keys' size
        for addr, rank in trees:
            if addr != UNDEF and 0 <= self.base + addr < self.size:
                key[addr] = 8 + 8 * (rank + 1)  # chunk size, filter mask, position + 1
        level, seen = sorted(key), set(key)
        for _ in range(64):  # deeper than any tree of a file this size
            if not level:
                return
            prefetch([(self.base + a, self.base + a + _NODE_GUESS) for a in level])
            heads: list[tuple[int, int, int]] = []  # (node, level, entries)
            longer = []
            for a in level:
                pos = self.base + a
                h = read_at(pos, 24)
                if len(h) < 24 or h[:4] != b"TREE" or h[4] != 1:
                    continue
                n = struct.unpack_from("<H", h, 6)[0]
                heads.append((a, h[5], n))
                end = pos + 24 + n * (key[a] + 8) + key[a]
                if end > pos + _NODE_GUESS:
                    longer.append((pos, min(end, self.size)))
            if longer:
                prefetch(longer)
            nxt: list[int] = []
            for a, depth, n in heads:
                if not depth:
                    continue
                body = read_at(self.base + a + 24, n * (key[a] + 8))
                if len(body) != n * (key[a] + 8):
                    continue
                for c in np.frombuffer(body, _entry_dtype(key[a]), n)["child"].tolist():
                    if c not in seen and 0 <= self.base + c < self.size:
                        seen.add(c)
                        key[c] = key[a]
                        nxt.append(c)
            level = sorted(nxt)

    def symbol_table_links(self, btree: int, heap: int) -> list[tuple[bytes, int]]:
        """(name, object header address) of an old-style group, from its v1 B-tree (type 0)."""
        names = self.local_heap(heap)
        out: list[tuple[bytes, int]] = []
        for n, body in self._v1_btree_leaves(btree, 0, 8):
            for c in np.frombuffer(body, "<u8", 2 * n)[1::2].tolist():
                s = self.read(c, 8)
                intact(s[:4] == b"SNOD" and s[4] == 1, "symbol table node")
                count = struct.unpack_from("<H", s, 6)[0]
                ents = self.read(c + 8, 40 * count)
                for i in range(count):
                    name_off, obj, cache = struct.unpack_from("<QQI", ents, 40 * i)
                    need(cache in (0, 1), "symbolic link in an old-style group")
                    end = names.find(b"\0", name_off)
                    need(name_off < len(names) and end > name_off, "link name")
                    out.append((names[name_off:end], obj))
        # libhdf5 finds a member by a binary search on names: they are stored in increasing order
        # (a corrupt name out of order is a member it cannot open)
        need(all(a[0] < b[0] for a, b in itertools.pairwise(out)), "symbol table names out of order")
        return out

    def chunk_btree(self, addr: int, rank: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(positions n x rank, filter masks, offsets, sizes) of the chunks a v1 B-tree (type 1)
        indexes, in numpy columns (one frombuffer per node)."""
        rec = _chunk_record(rank)
        parts = [np.frombuffer(body, rec, n) for n, body in self._v1_btree_leaves(addr, 1, rec.itemsize - 8)]
        recs = np.concatenate(parts) if parts else np.zeros(0, rec)
        pos = recs["pos"][:, :rank].astype(np.int64)
        intact(bool((recs["pos"][:, rank] == 0).all()), "chunk key")  # libhdf5's lookups miss such chunks
        off = recs["addr"].astype(np.int64)
        size = recs["size"].astype(np.int64)
        need(bool(((recs["addr"] < self.size) & (off + size + self.base <= self.size)).all()),
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
        need(first[0] == 1, "object header version")
        nmsgs, _refs, size = struct.unpack_from("<HII", first, 2)
        blocks = [(addr + 16, size)]
        seen: set[int] = set()
        while blocks:
            start, size = blocks.pop(0)
            intact(start not in seen, "header continuation cycle")
            need(len(seen) < 10_000, "header of too many continuations")
            seen.add(start)
            bi, data = self._block(h5, start, size)
            p = 0
            while p + 8 <= size:
                mtype, msize, flags = struct.unpack_from("<HHB", data, p)
                need(p + 8 + msize <= size, "message past its block")
                body = data[p + 8:p + 8 + msize]
                self._add(mtype, flags, 0, body, blocks, bi, p + 8)
                p += 8 + msize
        need(len(self.msgs) <= nmsgs, "message count")

    def _v2(self, h5: H5File, addr: int, first: bytes) -> None:
        need(first[4] == 2, "object header version")
        flags = first[5]
        need(not flags & 0xC0, "object header flags")
        p = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        width = 1 << (flags & 3)
        self.track_attr_order = bool(flags & 0x04)
        pre = first if p + width <= 16 else h5.read(addr, p + width)
        size = int.from_bytes(pre[p:p + width], "little")
        bi, chunk = self._block(h5, addr, p + width + size + 4, checked=True)
        check(chunk, "object header")
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
                need(p + mhead + msize <= end, "message past its block")
                body = data[p + mhead:p + mhead + msize]
                more: list[tuple[int, int]] = []
                self._add(mtype, mflags, order, body, more, bi, p + mhead)
                p += mhead + msize
                for cont, n in more:
                    intact(cont not in seen, "header continuation cycle")
                    need(len(seen) < 10_000, "header of too many continuations")
                    seen.add(cont)
                    ci, block = self._block(h5, cont, n, checked=True)
                    intact(block[:4] == b"OCHK", "continuation block signature")
                    check(block, "continuation block")
                    blocks.append((ci, block, 4, n - 4))

    def _add(self, mtype: int, flags: int, order: int, body: bytes, conts: list[tuple[int, int]],
             block: int, at: int) -> None:
        need(len(self.msgs) < _MAX_MESSAGES, "too many messages")
        if mtype == 0x10:
            need(len(body) >= 16, "continuation message cut")
            addr, n = struct.unpack_from("<QQ", body)
            conts.append((addr, n))
            return
        need(not flags & 0x02, "shared message")
        if mtype in (0x00, 0x0A, 0x0D, 0x0E, 0x12, 0x13, 0x16):  # nil, group info, comment, times, K, refcount
            return
        need(mtype in (0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x08, 0x0B, 0x0C, 0x11, 0x15),
              f"message type {mtype}")
        if mtype == 0x08 and len(body) >= 18:  # a layout: the data's address (and size) vary
            span = {1: (2, 18), 2: (3, 11)}.get(body[1])
            if span is not None:
                self.masks[block].append((at + span[0], at + span[1]))
                self.varying.append((len(self.msgs), block, at, at + len(body)))
        self.msgs.append((mtype, flags, order, body))

    def find(self, mtype: int) -> bytes | None:
        found = [m[3] for m in self.msgs if m[0] == mtype]
        need(len(found) <= 1, f"message {mtype} repeated")
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
                check(blocks[i], "object header")
            return _Reused(t, blocks)
    h = Header(h5, addr, first)
    if len(templates) >= _MAX_TEMPLATES:
        templates.clear()
    templates[key] = h
    return h
