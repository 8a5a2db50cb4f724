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

from ..errors import InvalidReferences, Unsupported
from ..keys import ChunkGrid
from ..model import RANGE, ChunkTable, Ref, ReferenceSet, min_uint
from ._packed_array import (
    Segment,
    array_stats,
    decode_other,
    decode_segment,
    decode_strings,
    encode_other,
    encode_segment,
    encode_strings,
    lookup_segment,
)
from ._packed_codec import BlockReader, BlockWriter

__all__ = ["MAGIC", "VERSION", "read_packed", "write_packed", "PackedReferenceSet"]

MAGIC = b"\x89RFSPK\r\n"
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
    from ._io import write_bytes

    write_bytes(os.fspath(dest), pack(rs, level=level, segment_chunks=segment_chunks),
                dict(storage_options or {}))


def pack(rs: ReferenceSet, *, level: int = 3, segment_chunks: int = DEFAULT_SEGMENT) -> bytes:
    """The packed encoding of ``rs`` as bytes."""
    import zstandard

    if segment_chunks < 1:
        raise ValueError(f"segment_chunks must be >= 1, got {segment_chunks}")
    cctx = zstandard.ZstdCompressor(level=level, write_content_size=True)
    blocks: list[bytes] = []
    pos = 0

    def put(data: bytes) -> list[int]:
        nonlocal pos
        blocks.append(data)
        entry = [pos, len(data), zlib.crc32(data)]
        pos += len(data)
        return entry

    urls = list(rs.urls)
    w = BlockWriter(cctx)
    w.u64(len(urls))
    encode_strings(w, urls)
    url_entry = put(w.getvalue())
    w = BlockWriter(cctx)
    encode_other(w, rs.other)
    other_entry = put(w.getvalue())
    head_size = pos
    arrays = []
    total = len(rs.other)
    for path, g in rs.grids.items():
        t = rs.table(path)
        n = g.nchunks
        stats = array_stats(t.kind, t.path_id, t.length)
        loc = (t.kind == RANGE)
        stats["max_offset"] = int(t.offset[loc].max(initial=0))
        stats["max_length"] = int(t.length[loc].max(initial=0))
        segs = []
        counts = {"runs": 0, "gaps": 0, "negative_gaps": 0}
        for lo in range(0, n, segment_chunks):
            hi = min(n, lo + segment_chunks)
            w = BlockWriter(cctx)
            got = encode_segment(w, t.kind[lo:hi], t.path_id[lo:hi], t.offset[lo:hi],
                                 t.length[lo:hi], t.inline, lo)
            for k, v in got.items():
                counts[k] += v
            segs.append(put(w.getvalue()))
        nbytes = sum(s[1] for s in segs)
        present = int(stats["present"])  # type: ignore[call-overload]
        total += present
        stats.update(counts)
        stats["bytes"] = nbytes
        stats["bytes_per_ref"] = round(nbytes / present, 3) if present else 0.0
        arrays.append({
            "path": path, "shape": list(g.shape), "chunks": list(g.chunks),
            "separator": g.separator, "prefix": g.prefix, "zarr_format": g.zarr_format,
            "present": present, "segment_chunks": segment_chunks, "segments": segs, "stats": stats,
        })
    index = {
        "version": VERSION, "refs": total,
        "urls": {"count": len(urls), "block": url_entry},
        "other": {"count": len(rs.other), "block": other_entry},
        "arrays": arrays,
    }
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
    """Byte-range reads from a local file or any fsspec filesystem (``cat_file(path, start, end)``)."""

    def __init__(self, source: str, storage_options: dict[str, Any] | None) -> None:
        self.name = source
        self.fs: Any = None
        self.path = source
        self.head = b""  # the first bytes of the file, once read: later reads inside it are free
        if source.startswith("file://") and not storage_options:
            self.path = source[len("file://") :]
        elif "://" in source or storage_options:
            import fsspec

            self.fs, self.path = fsspec.core.url_to_fs(source, **dict(storage_options or {}))

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; fewer at the end of the file."""
        if end <= len(self.head):
            return self.head[start:end]
        if self.fs is not None:
            return bytes(self.fs.cat_file(self.path, start=start, end=end))
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def size(self) -> int | None:
        return os.path.getsize(self.path) if self.fs is None else None


def _block(src: _Source, name: str, entry: list[int], base: int, data: bytes | None = None) -> bytes:
    """The bytes of one block, checked against its size and CRC-32 from the index."""
    off, size, crc = entry
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
        g = ChunkGrid(tuple(a["shape"]), tuple(a["chunks"]), a["separator"], a["prefix"],
                      a["zarr_format"])
        step = a["segment_chunks"]
        return (type(step) is int and step >= 1 and len(a["segments"]) == -(-g.nchunks // step)
                and all(entry(s) for s in a["segments"]) and type(a["present"]) is int
                and isinstance(a["path"], str) and isinstance(a["stats"], dict))

    try:
        ok = (entry(index["urls"]["block"]) and entry(index["other"]["block"])
              and type(index["refs"]) is int and all(array(a) for a in index["arrays"]))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise InvalidReferences(f"{src.name}: packed block index: malformed index document")


def read_packed(
    source: str, *, storage_options: dict[str, Any] | None = None, **options: Any
) -> PackedReferenceSet:
    """Open a packed reference set: reads the head only; arrays decode on first use."""
    if options:
        raise Unsupported(f"options {sorted(options)} are not used by format 'packed'")
    import zstandard

    src = _Source(os.fspath(source), storage_options)
    head = src.read(0, HEAD_GUESS)
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
    if len(head) < head_size:
        head += src.read(len(head), head_size)
    src.head = head
    data_start = HEADER_SIZE + index_size
    dctx = zstandard.ZstdDecompressor()
    raw_index = _block(src, "index", [HEADER_SIZE, index_size, index_crc], 0,
                       head[HEADER_SIZE:data_start])
    try:
        index = json.loads(dctx.decompress(raw_index))
    except (zstandard.ZstdError, ValueError) as e:
        raise InvalidReferences(f"{src.name}: packed block index: undecodable ({e})") from e
    _check_index(src, index)

    def head_block(name: str, entry: list[int]) -> bytes:
        s = data_start + entry[0]
        return _block(src, name, entry, data_start, head[s : s + entry[1]] if s < len(head) else None)

    r = BlockReader(head_block("urls", index["urls"]["block"]), f"urls of {src.name}", dctx)
    urls = decode_strings(r, r.count(1 << 40, "URL count"))
    r.end()
    r = BlockReader(head_block("other", index["other"]["block"]), f"other of {src.name}", dctx)
    other = decode_other(r, len(urls))
    return PackedReferenceSet(src, index, urls, other, data_start, dctx)


class PackedReferenceSet(ReferenceSet):
    """A :class:`ReferenceSet` read from a packed file; each array's segments are fetched and decoded
    on first use (one segment for a single-key lookup, all of them for :meth:`table`)."""

    def __init__(self, src: _Source, index: dict[str, Any], urls: list[str], other: Any,
                 data_start: int, dctx: Any) -> None:
        grids = {}
        self._entries: dict[str, dict[str, Any]] = {}
        for a in index["arrays"]:
            grids[a["path"]] = ChunkGrid(tuple(a["shape"]), tuple(a["chunks"]), a["separator"],
                                         a["prefix"], a["zarr_format"])
            self._entries[a["path"]] = a
        super().__init__(urls, {}, other, grids)
        self._src = src
        self._base = data_start
        self._dctx = dctx
        self._segments: dict[tuple[str, int], Segment] = {}  # decoded by single-key lookups
        self._raw: dict[tuple[str, int], bytes] = {}  # checked blocks of segments looked up once
        self._refs = int(index["refs"])
        self.stored = {"format": "packed", "version": VERSION, "refs": self._refs,
                       "packed_arrays": {p: e["stats"] for p, e in self._entries.items()}}

    def _decode(self, path: str, i: int, data: bytes | None = None, out: Segment | None = None) -> Segment:
        e = self._entries[path]
        name = f"array {path!r} segment {i}"
        raw = _block(self._src, name, e["segments"][i], self._base, data)
        lo = i * e["segment_chunks"]
        if out is None:
            n = min(e["segment_chunks"], self.grids[path].nchunks - lo)
            out = Segment(np.zeros(n, np.uint8), np.zeros(n, np.int64), np.zeros(n, np.uint64),
                          np.zeros(n, np.uint64), {})
        return decode_segment(BlockReader(raw, f"{name} of {self._src.name}", self._dctx), lo,
                              len(self.urls), out)

    def _load_table(self, path: str) -> ChunkTable:
        # docstring inherited
        e = self._entries[path]
        g = self.grids[path]
        segs = e["segments"]
        n = g.nchunks
        step = e["segment_chunks"]
        st = e["stats"]
        # the dtypes ChunkTable would compact to, known from the index: no second pass
        kind = np.zeros(n, np.uint8)
        pid = np.zeros(n, min_uint(max(len(self.urls) - 1, 0)))
        off = np.zeros(n, np.uint32 if st.get("max_offset", 1 << 64) >> 32 == 0 else np.uint64)
        ln = np.zeros(n, np.uint32 if st.get("max_length", 1 << 64) >> 32 == 0 else np.uint64)
        inline: dict[int, bytes] = {}
        if segs:
            first = segs[0][0]
            blob = self._src.read(self._base + first, self._base + segs[-1][0] + segs[-1][1])
        for i, (o, size, _) in enumerate(segs):
            sl = slice(i * step, min(n, (i + 1) * step))
            out = Segment(kind[sl], pid[sl], off[sl], ln[sl], inline)
            seg = self._segments.pop((path, i), None)
            self._raw.pop((path, i), None)
            if seg is None:
                self._decode(path, i, blob[o - first : o - first + size], out)
            else:
                for a, b in zip(out[:4], seg[:4], strict=True):
                    a[:] = b
                inline.update(seg.inline)
        return ChunkTable(g, kind, pid, off, ln, inline)

    def _chunk_ref(self, path: str, flat: int, key: str) -> Ref:
        # docstring inherited
        if path in self._tables:
            return super()._chunk_ref(path, flat, key)
        i, j = divmod(flat, self._entries[path]["segment_chunks"])
        seg = self._segments.get((path, i))
        if seg is None:
            raw = self._raw.pop((path, i), None)
            if raw is None:
                # first key of this segment: look it up without building the segment's columns
                name = f"array {path!r} segment {i}"
                raw = self._raw[(path, i)] = _block(self._src, name, self._entries[path]["segments"][i],
                                                    self._base)
                r = BlockReader(raw, f"{name} of {self._src.name}", self._dctx)
                lo = i * self._entries[path]["segment_chunks"]
                return self._resolve(*lookup_segment(r, lo, len(self.urls), j), key)
            # a second key in the same segment: decode it whole, once
            seg = self._segments[(path, i)] = self._decode(path, i, raw)
        return self._resolve(int(seg.kind[j]), int(seg.path_id[j]), int(seg.offset[j]),
                             int(seg.length[j]), seg.inline.get(flat), key)

    def __len__(self) -> int:
        return self._refs
