"""The walk's view of an HDF5 file read natively (:mod:`.meta`, :mod:`.messages`, :mod:`.dense`):
groups, datasets and attributes as :class:`~.walk.Walker` asks for them, with h5py's values and types.
Compact data is read from its header; whatever else would need data reads (variable-length string
data, re-encoding) or is not understood raises ``NotNative``."""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from refset.io.scanfile import ScanFile
from refset.scan.hdf5 import messages as message
from refset.scan.hdf5.base import UNDEF, NotNative, intact, need
from refset.scan.hdf5.chunkindex import index_start, read_index
from refset.scan.hdf5.dense import dense_messages
from refset.scan.hdf5.meta import H5File

__all__ = ["NotNative", "open_native"]


def open_native(file: ScanFile, start: int, group: str | None,
                templates: dict[Any, Any] | None = None) -> NativeNode:
    """The root (or ``group``) of ``file``, whose superblock is at ``start``; ``templates``: the object
    headers parsed in earlier files of the run (see :func:`~.meta.read_header`), added to as the file
    is read."""
    h5 = H5File(file, start, templates)
    node = NativeNode(h5, h5.root)
    for part in (group or "").strip("/").split("/"):
        if part:
            found = [c for n, _k, c, _t in node.links() if n == part]
            need(len(found) == 1 and found[0].is_group, "group option")
            node = found[0]
    need(node.is_group, "root is not a group")
    return node


#: Heap data (variable-length attribute records) above which a dataset's metadata is not kept.
_MEMO_HEAP_BYTES = 1024


class NativeNode:
    def __init__(self, h5: H5File, addr: int) -> None:
        self.h5, self.key = h5, addr
        self.hdr = h5.header(addr)
        self.variant: tuple[Any, ...] | None = None  # set by attrs()
        self.is_group = any(t in (0x02, 0x06, 0x11) for t, *_ in self.hdr.msgs)
        self.is_dataset = self.hdr.find(0x08) is not None
        need(self.is_group != self.is_dataset, "neither group nor dataset")
        if self.is_dataset:
            self._dataset()

    # -- groups -----------------------------------------------------------------------------------
    def links(self) -> list[tuple[str, str, Any, str]]:
        """(name, "hard", node, "") per link, in h5py's order: creation order where the group
        tracks it, else by name."""
        st = self.hdr.find(0x11)
        info = self.hdr.find(0x02)
        pairs: list[tuple[bytes, int, int | None]] | None  # (name, address, creation order)
        if st is not None:
            need(info is None and not self.hdr.all(0x06), "mixed group storage")
            btree, heap = np.frombuffer(st, "<u8", 2).tolist()
            pairs = [(name, addr, None) for name, addr in self.h5.symbol_table_links(btree, heap)]
        else:
            heap, index = message.dense_address(info, 8) if info is not None else (UNDEF, UNDEF)
            pairs = self.hdr.memo.get("links")
            if pairs is None:
                pairs = [message.link(b) for _o, b in self.hdr.all(0x06)]
                if heap == UNDEF:  # all in the header: kept with it
                    self.hdr.memo["links"] = pairs
            if heap != UNDEF:
                need(not pairs, "links both compact and dense")
                pairs = [message.link(b) for _o, b in dense_messages(self.h5, heap, index, 5)]
        names = [p[0] for p in pairs]
        need(len(set(names)) == len(names), "duplicate link names")
        if info is not None and info[1] & 0x01:  # creation order tracked
            orders = [p[2] for p in pairs]
            need(None not in orders and len(set(orders)) == len(orders), "link creation order")
            pairs = sorted(pairs, key=lambda p: cast(int, p[2]))  # no None: checked just above
        else:
            pairs = sorted(pairs)
        self.h5.prefetch_headers([addr for _name, addr, _order in pairs])  # a remote file: one round
        out = []
        for bname, addr, _order in pairs:
            try:
                name = bname.decode()
            except UnicodeDecodeError:
                raise NotNative("link name not UTF-8") from None
            out.append((name, "hard", NativeNode(self.h5, addr), ""))
        return out

    # -- attributes -------------------------------------------------------------------------------
    def attrs(self, skip: frozenset[str]) -> dict[str, Any]:
        memo = self.hdr.memo
        got = memo.get(("attrs", skip))
        if got is None:
            got = self._attr_items(skip)
            if not got[1]:  # nothing read outside the header: later files with its bytes reuse it
                memo[("attrs", skip)] = got
        items = got[0]
        out: dict[str, Any] = {}
        read: list[Any] = []
        size = 0
        for name, value, msg in items:
            if msg is not None:  # variable-length data, read from this file's global heap
                value = self._value(name, *msg)
                key = _hashable(value)
                read.append((name, key))
                size += len(repr(key)) if size <= _MEMO_HEAP_BYTES else 0
            elif isinstance(value, np.ndarray):
                value = value.copy()
            out[name] = value
        # what memo_key() offers: attributes read from the header alone, and a few heap values
        self.variant = None if got[1] or size > _MEMO_HEAP_BYTES else tuple(read)
        return out

    def memo_key(self) -> tuple[dict[Any, Any], Any] | None:
        """``(memo, variant)``: this header's memo, shared by the files that repeat its bytes, and
        what else the last :meth:`attrs` read (the values from the global heap); None before
        :meth:`attrs`, and when attributes were read from outside the header (dense storage) or
        their heap values are large (keeping them would cost more memory than it saves time)."""
        return None if self.variant is None else (self.hdr.memo, self.variant)

    def _attr_items(self, skip: frozenset[str]) -> tuple[list[tuple[str, Any, Any]], bool]:
        """((name, value, None) or (name, None, (type, space, data)) for a value in the global
        heap, in h5py's order; whether they depend on anything outside the header)."""
        info = self.hdr.find(0x15)
        messages = self.hdr.all(0x0C)
        heap, index = message.dense_address(info, 1) if info is not None else (UNDEF, UNDEF)
        outside = heap != UNDEF
        if outside:
            need(not messages, "attributes both compact and dense")
            messages = dense_messages(self.h5, heap, index, 8)
        items = []
        for order, body in messages:
            bname, dt, sp, data = message.attribute(body)
            items.append((order if self.hdr.track_attr_order else 0, bname, dt, sp, data))
        items.sort(key=lambda x: (x[0], x[1]))
        if self.hdr.track_attr_order:
            need(len({x[0] for x in items}) == len(items), "attribute creation order")
        out: list[tuple[str, Any, Any]] = []
        seen: set[str] = set()
        for _o, bname, dt, sp, data in items:
            try:
                name = bname.decode()
            except UnicodeDecodeError:
                raise NotNative("attribute name not UTF-8") from None
            need(name not in seen, "duplicate attribute")
            seen.add(name)
            if name in skip:
                continue
            if message.datatype(dt).kind in ("vstr", "vref"):
                out.append((name, None, (dt, sp, data)))
            else:
                out.append((name, self._value(name, dt, sp, data), None))
        return out, outside

    def _value(self, name: str, dtmsg: bytes, spmsg: bytes, data: bytes) -> Any:
        t = message.datatype(dtmsg)
        need(t.kind in ("num", "str", "vstr") or (t.kind == "vref" and name == "DIMENSION_LIST"),
              "attribute type")  # other references: h5py gives reference objects
        space = message.dataspace(spmsg)
        need(space is not None, "null dataspace attribute")
        assert space is not None  # for mypy: need raised otherwise
        shape = space[0]
        n = math.prod(shape)
        need(0 < n and n * t.size <= len(data), "attribute data")
        if t.kind == "num":
            arr = np.frombuffer(data, t.dtype, n).reshape(shape).copy()
            return arr[()] if not shape else arr
        if t.kind == "str":
            arr = np.frombuffer(data, t.dtype, n).reshape(shape).copy()
            for x in arr.reshape(-1).tolist():
                need(b"\0" not in x, "string with an embedded null")
            return arr[()] if not shape else arr
        recs = np.frombuffer(data, np.dtype([("n", "<u4"), ("addr", "<u8"), ("idx", "<u4")]), n)
        vals: list[Any] = []
        for count, addr, idx in recs.tolist():
            if t.kind == "vstr":
                need(count > 0, "empty or null vlen string")
                raw = self.h5.global_object(addr, idx)
                need(len(raw) >= count, "vlen string length")
                raw = raw[:count]
                need(b"\0" not in raw and (t.cset == 1 or raw.isascii()), "vlen string bytes")
                try:
                    vals.append(raw.decode())
                except UnicodeDecodeError:
                    raise NotNative("vlen string not UTF-8") from None
            else:
                if count == 0:
                    vals.append(np.zeros(0, np.uint64))
                    continue
                raw = self.h5.global_object(addr, idx)
                need(len(raw) >= 8 * count, "reference list length")
                vals.append(np.frombuffer(raw, "<u8", count).copy())
        if t.kind == "vstr":
            if not shape:
                return vals[0]
            out = np.empty(n, object)
            out[:] = vals
            return out.reshape(shape)
        need(len(shape) == 1, "DIMENSION_LIST shape")
        return vals

    # -- datasets ---------------------------------------------------------------------------------
    def _dataset(self) -> None:
        h = self.hdr
        got = h.memo.get("dataset")
        if got is None:
            got = h.memo["dataset"] = self._dataset_info()
        self.shape, self.maxshape, self.dtype, self.filters, self.fillvalue = got
        self.external = False
        body = h.find(0x08)
        assert body is not None  # for mypy: a dataset has its layout message (is_dataset)
        kind, info = message.layout(body)
        self.layout = kind
        self.chunks = None
        self.offset = None
        item = 16 if self.dtype.kind == "O" else self.dtype.itemsize  # a vlen string: (length, heap id)
        if kind == "compact":  # the data is in the header: read as h5py reads it
            need(not self.filters and len(info) == math.prod(self.shape) * item, "compact data size")
            self._compact = info
        elif kind == "contiguous":
            addr, size = info
            need(not self.filters, "filters on contiguous data")
            if addr != UNDEF:
                nbytes = math.prod(self.shape) * item
                intact(size == nbytes and self.h5.base + addr + size <= self.h5.size, "contiguous extent")
                self.offset = self.h5.base + addr
        else:
            self._index, chunks, elsize = info
            need(elsize == item and len(chunks) == len(self.shape) and all(chunks), "chunk shape")
            if self._index[0] == "btree1":
                need(math.prod(chunks) * elsize < 2**32, "chunk size of 4 GiB or more with a v1 B-tree index")
            self.chunks = chunks

    def _dataset_info(self) -> tuple[Any, ...]:
        """(shape, maxshape, dtype, filters, fill value): what the header gives besides the layout
        (kept with a header that later files repeat)."""
        h = self.hdr
        sp, dt = h.find(0x01), h.find(0x03)
        need(sp is not None and dt is not None, "dataset without space or type")
        space = message.dataspace(sp)
        need(space is not None, "null dataspace dataset")
        assert space is not None  # for mypy: need raised otherwise
        shape, maxshape = space
        t = message.datatype(dt)
        need(t.kind in ("num", "str", "vstr"), "dataset type")
        if t.kind == "vstr":  # h5py's string dtype, without importing h5py
            dtype = np.dtype("O", metadata={"vlen": str if t.cset == 1 else bytes})
            self._cset = t.cset
        else:
            need(t.dtype.itemsize == t.size, "dataset type size")
            dtype = t.dtype
        pipe = h.find(0x0B)
        filters = message.filters(pipe) if pipe is not None else []
        new_fill = h.find(0x05)
        need(new_fill is not None, "no fill value message")  # h5py may call the fill value undefined
        raw = message.fill_value(h.find(0x04), new_fill)
        need(raw is None or len(raw) == t.size, "fill value size")
        if t.kind == "vstr":
            return shape, maxshape, dtype, filters, None
        fill = (np.frombuffer(raw, t.dtype, 1) if raw is not None else np.zeros(1, t.dtype))[0]
        return shape, maxshape, dtype, filters, fill

    def prefetch_chunk_indexes(self, datasets: list[Any]) -> None:
        """Read the chunk indexes of ``datasets`` (nodes of this file) ahead, a level of all of them
        per round trip (a remote file; nothing for a local one)."""
        chunked = [d for d in datasets if isinstance(d, NativeNode) and d.is_dataset and d.chunks is not None]
        self.h5.prefetch_blocks([a for d in chunked if (a := index_start(d._index)) is not None])
        self.h5.prefetch_chunk_btrees([(d._index[1], len(d.shape)) for d in chunked if d._index[0] == "btree1"])

    def chunk_index(self, grid: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(flat indices in ``grid``, filter masks, offsets, sizes) of the chunks the index lists."""
        kind, addr = self._index[0], self._index[1]
        if kind != "btree1":
            return self._chunk_index_v4(grid)
        if addr == UNDEF:
            z = np.zeros(0, np.int64)
            return z, z, z, z
        pos, mask, off, size = self.h5.chunk_btree(addr, len(self.shape))
        chunks = np.array(self.chunks, np.int64)
        idx = pos // chunks
        # a key off the chunk grid, or twice in the tree: libhdf5 lists such chunks but its reads,
        # which look keys up, place them elsewhere or not at all (h5py's listing would mislead)
        intact(bool((pos % chunks == 0).all() and (idx >= 0).all() and (idx < np.array(grid, np.int64)).all()),
               "chunk position")
        flat = np.ravel_multi_index(tuple(idx.T), grid) if len(pos) else idx[:, 0]
        if flat.size > 1 and not bool((flat[1:] > flat[:-1]).all()):  # B-trees list them in order
            intact(len(np.unique(flat)) == len(flat), "chunk listed twice")
        return flat, mask, off, size

    def _chunk_index_v4(self, grid: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`chunk_index` of a version 4 layout's index, its linear indices (over the grid of the
        maximum extent) taken to ``grid``."""
        chunks = tuple(self.chunks or ())
        item = 16 if self.dtype.kind == "O" else self.dtype.itemsize
        maxgrid = tuple(None if m is None else -(-m // c) for m, c in zip(self.maxshape, chunks, strict=True))
        flat, mask, off, size = read_index(self.h5, self._index, math.prod(chunks) * item, maxgrid,
                                           bool(self.filters))
        if not flat.size:
            return flat, mask, off, size
        # an extensible array's index runs over its unlimited dimension first (libhdf5 swizzles it
        # there), then the others in order; its extent along that dimension bounds nothing
        order = sorted(range(len(maxgrid)), key=lambda j: maxgrid[j] is not None)
        dims = tuple(int(flat.max()) + 1 if (g := maxgrid[j]) is None else g for j in order)
        swizzled = np.unravel_index(flat, dims)
        idx = tuple(swizzled[order.index(j)] for j in range(len(maxgrid)))
        need(all(bool((i < g).all()) for i, g in zip(idx, grid, strict=True)), "chunk position")
        return np.ravel_multi_index(idx, grid).astype(np.int64), mask, off, size

    def deref(self, ref: Any) -> Any:
        return int(ref)

    def ref_name(self, ref: Any) -> str:
        raise NotNative("dimension scale outside the scanned group")

    def read(self, sel: Any) -> np.ndarray:
        if self.layout != "compact":
            raise NotNative("data read")
        out: np.ndarray = np.frombuffer(self._compact, self.dtype).reshape(self.shape)[sel]
        return out

    def read_strings(self) -> Any:
        """The values of a variable-length string dataset as h5py's ``asstr()[()]`` gives them: its
        (length, global heap id) elements read from the header, the file or its chunks (deflate,
        shuffle, fletcher32 undone), each string from its global heap collection."""
        need(self.dtype.kind == "O", "not a string dataset")
        recs = self._elements().view(np.dtype([("n", "<u4"), ("addr", "<u8"), ("idx", "<u4")]))
        out = np.empty(recs.size, object)
        heap = self.h5.global_object
        for k, (count, addr, idx) in enumerate(recs.tolist()):
            if count == 0:
                out[k] = ""  # an empty string, or one never written
                continue
            raw = heap(addr, idx)
            need(len(raw) >= count, "vlen string length")
            raw = raw[:count]
            need(self._cset == 1 or raw.isascii(), "vlen string bytes")
            try:
                out[k] = raw.decode()
            except UnicodeDecodeError:
                raise NotNative("vlen string not UTF-8") from None
        return out[0] if not self.shape else out.reshape(self.shape)

    def _elements(self) -> np.ndarray:
        """The dataset's stored elements (16 bytes each), C order, as one ``V16`` array."""
        n = math.prod(self.shape)
        el = np.dtype("V16")
        if self.layout == "compact":
            return np.frombuffer(self._compact, el, n)
        if self.layout == "contiguous":
            if self.offset is None:
                return np.zeros(n, el)
            return np.frombuffer(self.h5.read_data(self.offset - self.h5.base, 16 * n), el, n)
        grid = tuple(-(-s // c) for s, c in zip(self.shape, self.chunks or (), strict=True))
        flat, mask, off, size = self.chunk_index(grid)
        from refset.scan.hdf5.filters import hdf5_filters

        codecs, why = hdf5_filters(self.filters, np.dtype("V16"), "")
        if why is not None:
            raise NotNative(why)
        from numcodecs import get_codec

        decoders = [get_codec(c) for c in codecs]
        out = np.zeros(self.shape, el)
        chunks = tuple(self.chunks or ())
        for f, m, o, s in zip(flat.tolist(), mask.tolist(), off.tolist(), size.tolist(), strict=True):
            buf: Any = self.h5.read_data(o - self.h5.base, s)
            for k in reversed(range(len(decoders))):
                if not m >> k & 1:  # bit k: filter k was skipped for this chunk (an optional one failed)
                    buf = decoders[k].decode(buf)
            block = np.frombuffer(bytes(memoryview(buf).cast("B")), el)
            need(block.size == math.prod(chunks), "decoded chunk size")
            idx = np.unravel_index(f, grid)
            sel = tuple(slice(i * c, min((i + 1) * c, s_)) for i, c, s_ in zip(idx, chunks, self.shape, strict=True))
            out[sel] = block.reshape(chunks)[tuple(slice(0, x.stop - x.start) for x in sel)]
        return out.reshape(-1)


def _hashable(v: Any) -> Any:
    """A value read from the global heap (text, arrays of text or references) as a hashable key."""
    if isinstance(v, np.ndarray):
        return (v.shape, tuple(v.reshape(-1).tolist()))
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    return v
