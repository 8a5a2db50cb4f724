"""Packed reference sets: one file, ~1.5 bytes per chunk reference, opened by reading a small head.

Layout (full specification in docs/packed-format.md)::

    header (64 bytes) | index (zstd JSON) | URL block | other block | array segment blocks ...

The header locates the index; the index gives every block's offset, size and CRC-32 and each array's
chunk grid, so opening reads the head (header + index + URL and other blocks, adjacent at the front)
and an array's blocks are fetched and decoded on first use, one segment for a single key.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from typing import Any

import numpy as np

from refset.errors import InvalidReferences, Unsupported
from refset.formats.packed.array import (
    Segment,
    SegmentPlanes,
    array_stats,
    decode_other,
    decode_segment,
    decode_strings,
    encode_other,
    encode_segment,
    encode_strings,
)
from refset.formats.packed.codec import BlockReader, BlockWriter
from refset.io.atomic import write_bytes
from refset.io.compression import decompress
from refset.io.magic import PACKED_MAGIC, ZSTD_MAGIC
from refset.io.store import LocalStore, open_store
from refset.model.fingerprints import Fingerprints
from refset.model.keys import ChunkGrid, checked_grid
from refset.model.producer import split_documents
from refset.model.refset import ReferenceSet
from refset.model.table import (
    ABSENT,
    INLINE,
    RANGE,
    ChunkTable,
    KeyTable,
    Ref,
    min_uint,
    resolve,
    sparse_grid,
)
from refset.options import DEFAULT_LIMITS, Limits

__all__ = ["MAGIC", "VERSION", "read_packed", "write_packed", "pack", "PackedSource"]

MAGIC = PACKED_MAGIC
VERSION = 1
HEADER = struct.Struct("<8sIIQIIQQ12sI")  # see docs/packed-format.md, "Header"
HEADER_SIZE = 64
HEAD_GUESS = 1 << 16  # first read when opening: usually the whole head
DEFAULT_SEGMENT = 1 << 18  # chunk-grid cells per segment
assert HEADER.size == HEADER_SIZE


# -- writing -------------------------------------------------------------------------------------------
def write_packed(
    rs: ReferenceSet,
    dest: str,
    *,
    storage_options: dict[str, Any] | None = None,
    level: int = 3,
    segment_chunks: int = DEFAULT_SEGMENT,
    **options: Any,
) -> None:
    """Write ``rs`` to ``dest`` in the packed format, atomically.

    ``level``: zstd level of every block (1..22). ``segment_chunks``: chunk-grid cells per segment,
    the unit a single-key lookup fetches and decodes.
    """
    if options:
        raise Unsupported(f"options {sorted(options)} are not used by format 'packed'")
    write_bytes(os.fspath(dest), pack(rs, level=level, segment_chunks=segment_chunks),
                dict(storage_options or {}))


def _segment_step(t: ChunkTable, segment_chunks: int) -> int:
    """Cells per segment: ``segment_chunks``, or more for a sparse grid, so that a segment holds about
    ``segment_chunks`` present chunks and their number stays proportional to what is present."""
    n = t.nchunks
    if not t.is_sparse:
        return segment_chunks
    nseg = max(1, -(-t.count() // segment_chunks))
    return max(segment_chunks, -(-n // nseg))


def pack(rs: ReferenceSet, *, level: int = 3, segment_chunks: int = DEFAULT_SEGMENT) -> bytes:
    """The packed encoding of ``rs`` (an in-memory set: see ``ReferenceSet.loaded``) as bytes."""
    import zstandard

    if isinstance(segment_chunks, bool) or not isinstance(segment_chunks, int) or segment_chunks < 1:
        raise Unsupported(f"segment_chunks: expected a positive integer, got {segment_chunks!r}")
    cctx = zstandard.ZstdCompressor(level=level, write_content_size=True)
    blocks: list[bytes] = []
    pos = 0

    def put(data: bytes) -> list[int]:
        nonlocal pos
        blocks.append(data)
        entry = [pos, len(data), zlib.crc32(data)]
        pos += len(data)
        return entry

    tables = {p: rs.table(p) for p in rs.grids}
    urls = list(rs.urls)  # after the tables: final
    w = BlockWriter(cctx)
    w.u64(len(urls))
    encode_strings(w, urls)
    url_entry = put(w.getvalue())
    w = BlockWriter(cctx)
    encode_other(w, rs.key_table())
    other_entry = put(w.getvalue())
    head_size = pos
    arrays = []
    total = len(rs.key_table())
    for path, t in tables.items():
        g = t.grid
        n = g.nchunks
        f, kind, pid, off, ln = t.entries()
        stats = array_stats(n, kind, pid, ln)
        loc = kind == RANGE
        stats["max_offset"] = int(off[loc].max(initial=0))
        stats["max_length"] = int(ln[loc].max(initial=0))
        step = _segment_step(t, segment_chunks)
        segs = []
        counts = {"runs": 0, "gaps": 0, "negative_gaps": 0}
        bounds = np.searchsorted(f, np.arange(0, n + step, step, dtype=np.int64)) if n else np.zeros(1, np.int64)
        for i, lo in enumerate(range(0, n, step)):
            a, b = int(bounds[i]), int(bounds[i + 1])
            w = BlockWriter(cctx)
            got = encode_segment(w, min(n, lo + step) - lo, f[a:b] - lo, kind[a:b], pid[a:b], off[a:b],
                                 ln[a:b], t.inline, lo)
            for k, v in got.items():
                counts[k] += v
            segs.append(put(w.getvalue()))
        nbytes = sum(s[1] for s in segs)
        present = len(f)
        total += present
        stats.update(counts)
        stats["bytes"] = nbytes
        stats["bytes_per_ref"] = round(nbytes / present, 3) if present else 0.0
        arrays.append({
            "path": path, "shape": list(g.shape), "chunks": list(g.chunks),
            "separator": g.separator, "prefix": g.prefix, "zarr_format": g.zarr_format,
            "present": present, "segment_chunks": step, "segments": segs, "stats": stats,
        })
    index = {
        "version": VERSION, "refs": total,
        "urls": {"count": len(urls), "block": url_entry},
        "other": {"count": len(rs.key_table()), "block": other_entry},
        "arrays": arrays,
    }
    if len(rs.fingerprints):
        index["fingerprints"] = rs.fingerprints.to_json()
    index_bytes = cctx.compress(json.dumps(index, separators=(",", ":")).encode())
    data_start = HEADER_SIZE + len(index_bytes)
    file_size = data_start + pos
    fields = (MAGIC, VERSION, 0, len(index_bytes), zlib.crc32(index_bytes), 0,
              data_start + head_size, file_size, bytes(12))
    head = HEADER.pack(*fields, 0)
    head = head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))
    return b"".join([head, index_bytes, *blocks])


# -- reading -------------------------------------------------------------------------------------------
class _Source:
    """The packed file's bytes through the byte layer, with its head kept once read (later reads inside
    it are free) and its size once known (from the first answer, or the header)."""

    def __init__(self, source: str, storage_options: dict[str, Any] | None) -> None:
        self.name = source
        self.store = open_store(source, storage_options)
        self.head = b""  # the first bytes of the file, once read: later reads inside it are free
        self.file_size = 1 << 63  # the header's, once read: no block lies past it
        self.known_size: int | None = None  # the file's size when an answer told it

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; fewer at the end of the file."""
        if end <= len(self.head):
            return self.head[start:end]
        return bytes(self.store.read("", start, end))

    def first(self, n: int) -> bytes:
        """The first ``n`` bytes (fewer in a shorter file), noting the file's size when told."""
        data, size = self.store.read_sized("", 0, n)
        if size is not None:
            self.known_size = size
        return bytes(data)

    def size(self) -> int | None:
        if self.known_size is None and isinstance(self.store, LocalStore):
            self.known_size = self.store.size()
        return self.known_size


def _block(src: _Source, name: str, entry: list[int], base: int, data: bytes | None = None) -> bytes:
    """The bytes of one block, checked against its size and CRC-32 from the index."""
    off, size, crc = entry
    if base + off + size > src.file_size:
        raise InvalidReferences(
            f"{src.name}: packed block {name}: {size} bytes at offset {base + off} lie past the end of "
            f"the file ({src.file_size} bytes, from the header)"
        )
    if data is None:
        data = src.read(base + off, base + off + size)
    if len(data) != size:
        raise InvalidReferences(
            f"{src.name}: packed block {name}: truncated: expected {size} bytes at offset {base + off}, "
            f"got {len(data)}"
        )
    if zlib.crc32(data) != crc:
        raise InvalidReferences(f"{src.name}: packed block {name}: checksum mismatch (corrupt data)")
    return data


def _check_index(src: _Source, index: Any) -> None:
    """Shape of the index document (its CRC already matched, so this guards against writer bugs)."""
    def entry(e: Any) -> bool:
        return isinstance(e, list) and len(e) == 3 and all(type(v) is int and v >= 0 for v in e)

    def array(a: Any) -> bool:
        g = checked_grid(a["shape"], a["chunks"], a["separator"], a["prefix"], a["zarr_format"])
        step = a["segment_chunks"]
        return (g is not None and type(step) is int and step >= 1 and len(a["segments"]) == -(-g.nchunks // step)
                and all(entry(s) for s in a["segments"]) and type(a["present"]) is int
                and 0 <= a["present"] <= g.nchunks
                and isinstance(a["path"], str) and isinstance(a["stats"], dict))

    try:
        ok = (entry(index["urls"]["block"]) and entry(index["other"]["block"])
              and type(index["refs"]) is int and all(array(a) for a in index["arrays"]))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise InvalidReferences(f"{src.name}: packed block index: malformed index document")


def read_packed(
    source: str, *, storage_options: dict[str, Any] | None = None, lazy: bool = True,
    head: bytes | None = None, limits: Limits = DEFAULT_LIMITS, **options: Any
) -> PackedSource:
    """Open a packed reference set: reads the head only; arrays decode on first use (always lazy:
    ``lazy`` is accepted for symmetry with JSON). ``head``: the file's first bytes, when read."""
    if options:
        raise Unsupported(f"options {sorted(options)} are not used by format 'packed'")
    src = _Source(os.fspath(source), storage_options)
    if head is None:
        head = src.first(HEAD_GUESS)
    if len(head) < HEADER_SIZE:
        raise InvalidReferences(
            f"{src.name}: packed block header: truncated: {len(head)} bytes, expected {HEADER_SIZE}"
        )
    (magic, version, _flags, index_size, index_crc, _r, head_size, file_size, _res,
     header_crc) = HEADER.unpack_from(head)
    if magic != MAGIC:
        raise InvalidReferences(f"{src.name}: packed block header: bad magic {magic!r}, expected {MAGIC!r}")
    if zlib.crc32(head[: HEADER_SIZE - 4]) != header_crc:
        raise InvalidReferences(f"{src.name}: packed block header: checksum mismatch (corrupt data)")
    if version != VERSION:
        raise Unsupported(f"{src.name}: packed format version {version}, this refset reads {VERSION}")
    actual = src.size()
    if actual is not None and actual != file_size:
        raise InvalidReferences(
            f"{src.name}: packed block header: file is {actual} bytes, header says {file_size} "
            f"({'truncated' if actual < file_size else 'trailing data'})"
        )
    if head_size > file_size or HEADER_SIZE + index_size > head_size:
        raise InvalidReferences(
            f"{src.name}: packed block header: head of {head_size} bytes and index of {index_size} bytes "
            f"do not fit a file of {file_size} bytes"
        )
    src.file_size = file_size
    if len(head) < head_size:
        head += src.read(len(head), head_size)
    src.head = head
    data_start = HEADER_SIZE + index_size
    raw_index = _block(src, "index", [HEADER_SIZE, index_size, index_crc], 0,
                       head[HEADER_SIZE:data_start])
    if raw_index[:4] != ZSTD_MAGIC:
        raise InvalidReferences(f"{src.name}: packed block index: not a zstd frame")
    text = decompress(raw_index, f"{src.name}: packed block index", limits.decompressed)
    try:
        index = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise InvalidReferences(f"{src.name}: packed block index: undecodable ({e})") from e
    del text
    _check_index(src, index)

    def head_block(name: str, entry: list[int]) -> bytes:
        s = data_start + entry[0]
        return _block(src, name, entry, data_start, head[s : s + entry[1]] if s < len(head) else None)

    r = BlockReader(head_block("urls", index["urls"]["block"]), f"urls of {src.name}", limits.decompressed)
    urls = decode_strings(r, r.count(1 << 40, "URL count"))
    r.end()
    r = BlockReader(head_block("other", index["other"]["block"]), f"other of {src.name}", limits.decompressed)
    other = decode_other(r, len(urls))
    claimed = len(other) + sum(a["present"] for a in index["arrays"])
    if index["refs"] != claimed:
        raise InvalidReferences(f"{src.name}: packed block index: 'refs' is {index['refs']}, the other "
                                f"keys and the arrays' present chunks make {claimed}")
    fps = None
    if "fingerprints" in index:
        fps = Fingerprints.from_json(index["fingerprints"], f"{src.name}: packed block index: fingerprints")
    return PackedSource(src, index, tuple(urls), other, data_start, limits, fps)


class _SegmentBlock:
    """A checked segment block (a :class:`~refset.abc.source.Block`): its columns decompressed on the
    first lookup and kept narrow (:class:`~refset.formats.packed.array.SegmentPlanes`), each cell's
    reference computed when asked."""

    def __init__(self, raw: bytes, name: str, lo: int, cells: int, urls: tuple[str, ...], limit: int) -> None:
        self.raw, self.name, self.lo, self.cells, self.urls, self.limit = raw, name, lo, cells, urls, limit
        self.planes: SegmentPlanes | None = None

    @property
    def decoded(self) -> bool:
        return self.planes is not None

    @property
    def nbytes(self) -> int:
        # the segment's decompressed columns (the stored bytes are let go; the URL table is the file's,
        # shared by every block)
        planes = self.planes
        return len(self.raw) + 200 if planes is None else planes.nbytes

    def ref(self, j: int) -> Ref | None:
        try:
            planes = self.planes
            if planes is None:
                planes = self.planes = SegmentPlanes(BlockReader(self.raw, self.name, self.limit), self.lo,
                                                     len(self.urls), self.cells)
                self.raw = b""
            row = planes.row(j)
        except MemoryError:
            raise InvalidReferences(f"packed block {self.name}: out of memory decoding {self.cells} "
                                    "cells") from None
        except InvalidReferences as e:
            raise InvalidReferences(str(e).replace("packed block:", f"packed block {self.name}:")) from None
        if row[0] == ABSENT:
            return None
        if row[0] == INLINE:
            return row[4]
        return resolve(row, self.urls, "")


class PackedSource:
    """The :class:`~refset.abc.source.Source` of a packed file: URL table and other keys from the head;
    each array's segments fetched and decoded on first use (one segment is a block)."""

    def __init__(self, src: _Source, index: dict[str, Any], urls: tuple[str, ...], other: KeyTable,
                 data_start: int, limits: Limits = DEFAULT_LIMITS, fingerprints: Fingerprints | None = None) -> None:
        self._limit = limits.decompressed
        self._fingerprints = fingerprints if fingerprints is not None else Fingerprints.empty()
        self.grids: dict[str, ChunkGrid] = {}
        self._entries: dict[str, dict[str, Any]] = {}
        for a in index["arrays"]:
            grid = checked_grid(a["shape"], a["chunks"], a["separator"], a["prefix"], a["zarr_format"])
            assert grid is not None  # _check_index
            self.grids[a["path"]] = grid
            self._entries[a["path"]] = a
        self.metadata, self._other = split_documents(other, list(self.grids))
        for path, grid in self.grids.items():
            m = self.metadata.get(path)
            if m is None or m.grid != grid:
                raise InvalidReferences(f"{src.name}: packed block index: array {path!r}: "
                                        + ("no metadata document describes it" if m is None else
                                           f"its metadata describes shape {m.shape}, chunks {m.chunks}; the "
                                           f"index shape {grid.shape}, chunks {grid.chunks}"))
        self._src = src
        self._base = data_start
        self._urls = urls
        self._refs = int(index["refs"])

    def urls(self) -> tuple[str, ...]:
        return self._urls

    def fingerprints(self) -> Fingerprints:
        return self._fingerprints

    def other(self) -> KeyTable:
        return self._other

    def other_under(self, path: str) -> KeyTable | None:
        return self._other

    def lookup_other(self, key: str) -> Ref | None:
        i = self._other.find(key)
        return None if i < 0 else resolve(self._other.row(i), self._urls, key)

    def block_size(self, path: str) -> int:
        return int(self._entries[path]["segment_chunks"])

    def block(self, path: str, i: int) -> _SegmentBlock:
        e = self._entries[path]
        name = f"array {path!r} segment {i}"
        raw = _block(self._src, name, e["segments"][i], self._base)
        lo = i * e["segment_chunks"]
        cells = min(e["segment_chunks"], self.grids[path].nchunks - lo)
        return _SegmentBlock(raw, f"{name} of {self._src.name}", lo, cells, self._urls, self._limit)

    def count(self) -> int | None:
        return self._refs

    def info(self) -> dict[str, object]:
        return {"format": "packed", "version": VERSION, "refs": self._refs,
                "packed_arrays": {p: e["stats"] for p, e in self._entries.items()}}

    def table(self, path: str) -> ChunkTable:
        e = self._entries[path]
        try:
            t = self._table(path, e)
        except MemoryError:
            raise InvalidReferences(f"{self._src.name}: array {path!r}: out of memory decoding its "
                                    f"{self.grids[path].nchunks} cells") from None
        if t.count() != e["present"]:
            raise InvalidReferences(f"{self._src.name}: array {path!r}: {t.count()} chunks present, the "
                                    f"index says {e['present']}")
        return t

    def _table(self, path: str, e: dict[str, Any]) -> ChunkTable:
        g = self.grids[path]
        segs = e["segments"]
        n = g.nchunks
        step = e["segment_chunks"]
        st = e["stats"]
        blob = b""
        if segs:  # one read for every segment (written in order, adjacent; each checked below)
            first = min(o for o, _, _ in segs)
            end = max(o + size for o, size, _ in segs)
            if self._base + end > self._src.file_size:
                raise InvalidReferences(
                    f"{self._src.name}: packed block array {path!r}: segments end at offset "
                    f"{self._base + end}, past the end of the file ({self._src.file_size} bytes, from the header)"
                )
            blob = self._src.read(self._base + first, self._base + end)

        def decoded(i: int) -> Segment:
            o, size, _ = segs[i]
            name = f"array {path!r} segment {i}"
            raw = _block(self._src, name, segs[i], self._base, blob[o - first : o - first + size])
            return decode_segment(BlockReader(raw, f"{name} of {self._src.name}", self._limit), i * step,
                                  len(self._urls), min(step, n - i * step))

        inline: dict[int, bytes] = {}
        if sparse_grid(n, int(e["present"])):
            parts = []
            for i in range(len(segs)):
                seg = decoded(i)
                parts.append((seg.rel + i * step, seg.kind, seg.path_id, seg.offset, seg.length))
                inline.update(seg.inline)
            f, k, p, o, ln = (np.concatenate([part[j] for part in parts]) if parts else np.zeros(0, np.int64)
                              for j in range(5))
            return ChunkTable(g, k, p, o, ln, inline, flat=f)
        # the dtypes ChunkTable would compact to, known from the index: no second pass
        kind = np.zeros(n, np.uint8)
        pid = np.zeros(n, min_uint(max(len(self._urls) - 1, 0)))
        off = np.zeros(n, np.uint32 if st.get("max_offset", 1 << 64) >> 32 == 0 else np.uint64)
        ln = np.zeros(n, np.uint32 if st.get("max_length", 1 << 64) >> 32 == 0 else np.uint64)
        for i in range(len(segs)):
            seg = decoded(i)
            lo = i * step
            hi = min(n, lo + step)
            sl: Any = slice(None) if len(seg.rel) == hi - lo else seg.rel  # all present: no scatter
            kind[lo:hi][sl] = seg.kind
            pid[lo:hi][sl] = seg.path_id
            off[lo:hi][sl] = seg.offset
            ln[lo:hi][sl] = seg.length
            inline.update(seg.inline)
        return ChunkTable(g, kind, pid, off, ln, inline)
