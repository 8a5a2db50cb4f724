"""Parquet reference sets in fsspec's ``LazyReferenceMapper`` layout (reading; writing is in
:mod:`._parquet_write`).

Layout (see ``docs/parquet.md``)::

    refs.parq/.zmetadata                 {"metadata": {key: JSON document}, "record_size": R}
    refs.parq/<array>/refs.<n>.parq      rows of chunks n*R .. n*R+R-1 (C order of chunk index)

Each row has ``path`` (string or dictionary, nullable), ``offset``, ``size`` (integers) and ``raw``
(binary, nullable). ``raw`` set: inline data. ``path`` set: a byte range, or the whole file when
``size`` is 0. Both null (or the record file missing): the key is absent.

Opening reads ``.zmetadata`` only. A key lookup reads the one record file that holds it, decoded with
pyarrow (no pandas) and kept in a bounded LRU cache; a whole array is decoded only when asked
(``rs.table(path)``, iteration, ``to_dict``, saving).
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidReferences, Unsupported
from ..keys import ChunkGrid, grid_from_document, grid_from_metadata, split_metadata_key
from ..model import INLINE, RANGE, WHOLE, ChunkTable, KeyTable, Ref, ReferenceSet

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["read_parquet", "write_parquet", "ParquetReferenceSet", "record_name", "DEFAULT_CACHE_SIZE"]

DEFAULT_CACHE_SIZE = 128  # record files kept decoded, like fsspec's LazyReferenceMapper
_LOC_CACHE = 1 << 16  # parsed chunk keys remembered (cleared when full)


def record_name(path: str, record: int) -> str:
    """Relative name of record file ``record`` of array ``path`` (``refs.<n>.parq`` inside it)."""
    return f"{path}/refs.{record}.parq" if path else f"refs.{record}.parq"


def metadata_bytes(value: object) -> bytes:
    """The bytes of one ``.zmetadata`` entry, as fsspec returns them.

    fsspec stores parsed JSON documents and serves them re-serialised (``ujson.dumps``: compact); we
    serve compact JSON too, so whitespace of the original documents is not kept. The spec's wording
    (``dict[str, str]``) allows the document as text, which is returned unchanged (a zarr metadata
    document is never a JSON string, so the two cannot be confused).
    """
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


class _Store:
    """Read-only access to the files of a parquet reference directory (local fast path, else fsspec)."""

    def __init__(self, source: str, storage_options: Mapping[str, Any] | None) -> None:
        self.fs: Any = None
        if ("://" not in source or source.startswith("file://")) and not storage_options:
            self.root = source[len("file://"):] if source.startswith("file://") else source
            self.root = self.root.rstrip("/") or "/"
        else:
            import fsspec

            self.fs, root = fsspec.core.url_to_fs(source, **dict(storage_options or {}))
            self.root = root.rstrip("/")

    def cat(self, rel: str) -> bytes:
        """Bytes of ``rel`` under the root; FileNotFoundError when missing."""
        if self.fs is None:
            with open(os.path.join(self.root, rel), "rb") as f:
                return f.read()
        return bytes(self.fs.cat_file(f"{self.root}/{rel}"))


class _Record:
    """One decoded record file: columns in row order (row i is chunk ``record * R + i``)."""

    __slots__ = ("inline", "kind", "length", "nrows", "offset", "path_id")

    def __init__(self, kind: np.ndarray, path_id: np.ndarray, offset: np.ndarray, length: np.ndarray,
                 inline: dict[int, bytes], nrows: int) -> None:
        self.kind, self.path_id, self.offset, self.length = kind, path_id, offset, length
        self.inline, self.nrows = inline, nrows


_EMPTY_RECORD = _Record(*(np.zeros(0, np.uint8),) * 4, {}, 0)  # type: ignore[call-arg]


def _column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    col = table.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def _valid(arr: pa.Array) -> np.ndarray:
    """Boolean numpy mask of non-null entries (a BooleanArray's to_numpy would import pandas)."""
    import pyarrow as pa

    return arr.is_valid().cast(pa.uint8()).to_numpy().view(np.bool_)


def _int_column(table: pa.Table, name: str, n: int, where: str) -> np.ndarray:
    import pyarrow as pa

    col = _column(table, name)
    if col is None:
        return np.zeros(n, np.int64)
    if not pa.types.is_integer(col.type):
        raise InvalidReferences(f"{where}: column {name!r} must be integers, got {col.type}")
    if col.null_count:
        col = col.fill_null(0)
    a = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if a.size and a.min() < 0:
        raise InvalidReferences(f"{where}: column {name!r} has negative values")
    return a


def decode_record(data: bytes, where: str, url_id: Any) -> _Record:
    """Decode one record file. ``url_id(url) -> int`` maps a URL to its id in the set's URL table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise InvalidReferences(f"{where}: not a readable parquet file ({e})") from e
    n = table.num_rows
    kind = np.zeros(n, np.uint8)
    pid = np.zeros(n, np.int64)
    inline: dict[int, bytes] = {}
    offset = _int_column(table, "offset", n, where)
    size = _int_column(table, "size", n, where)

    path = _column(table, "path")
    if path is not None and path.null_count < n:
        if pa.types.is_dictionary(path.type):
            values, indices = path.dictionary, path.indices
        else:
            if not (pa.types.is_string(path.type) or pa.types.is_large_string(path.type)
                    or pa.types.is_binary(path.type) or pa.types.is_large_binary(path.type)):
                raise InvalidReferences(f"{where}: column 'path' must be strings, got {path.type}")
            enc = path.dictionary_encode()
            values, indices = enc.dictionary, enc.indices
        has = _valid(indices)
        urls = [u.decode() if isinstance(u, bytes) else u for u in values.to_pylist()]
        remap = np.array([url_id(u) for u in urls] or [0], np.int64)
        idx = indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        pid = np.where(has, remap[idx], 0)
        kind[has] = RANGE
        kind[has & (size == 0)] = WHOLE

    raw = _column(table, "raw")
    if raw is not None and raw.null_count < n:
        if pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type):
            raw = raw.cast(pa.binary())
        has_raw = _valid(raw)
        rows = np.flatnonzero(has_raw)
        inline = dict(zip(rows.tolist(), raw.take(pa.array(rows)).to_pylist(), strict=True))
        kind[has_raw] = INLINE  # raw wins over path, as in fsspec
        pid[has_raw] = 0
    live = kind == RANGE
    return _Record(kind, pid, np.where(live, offset, 0), np.where(live, size, 0), inline, n)


class ParquetReferenceSet(ReferenceSet):
    """A lazily read parquet reference directory. Opening reads ``.zmetadata`` only."""

    def __init__(self, store: _Store, metadata: Mapping[str, object], record_size: int,
                 cache_size: int = DEFAULT_CACHE_SIZE, source: str = "") -> None:
        # metadata documents are serialised when first asked for, except those that give a grid
        self._docs = dict(metadata)
        self._meta: dict[str, bytes] = {}
        grids: dict[str, ChunkGrid] = {}
        for key, value in self._docs.items():
            meta = split_metadata_key(key)
            if meta is not None:
                g = (grid_from_document(meta[1], value) if isinstance(value, dict)
                     else grid_from_metadata(meta[1], self._metadata(key)))
                if g is not None:
                    grids[meta[0]] = g
        self._other: KeyTable | None = None
        super().__init__([], {}, None, grids)  # type: ignore[arg-type]  # `other` is built lazily
        self.store = store
        self.source = source
        self.record_size = record_size
        self.stored.update(format="parquet", record_size=record_size)
        self.cache_size = max(1, int(cache_size))
        self._cache: OrderedDict[tuple[str, int], _Record] = OrderedDict()
        self._lock = threading.RLock()
        self._url_ids: dict[str, int] = {}
        self._locs: dict[str, tuple[str, int]] = {}  # parsed keys (like fsspec's key->record cache)
        self._strides = {p: _strides(g) for p, g in grids.items()}
        self._dotted = {p: (self._strides[p], g.grid_shape) for p, g in grids.items()
                        if p and not g.prefix and (g.separator == "." or not g.shape)}
        self._rows_stored: dict[str, int] = {}
        self._records_found: dict[str, int] = {}

    # -- metadata -----------------------------------------------------------------------------------
    def _metadata(self, key: str) -> bytes:
        data = self._meta.get(key)
        if data is None:
            data = self._meta[key] = metadata_bytes(self._docs[key])
        return data

    @property  # type: ignore[override]
    def other(self) -> KeyTable:
        """The ``.zmetadata`` documents (built on first use)."""
        if self._other is None:
            self._other = KeyTable.from_items(
                {k: (INLINE, 0, 0, 0, self._metadata(k)) for k in self._docs})
        return self._other

    @other.setter
    def other(self, value: KeyTable | None) -> None:
        self._other = value

    # -- records ------------------------------------------------------------------------------------
    def _url_id(self, url: str) -> int:
        i = self._url_ids.get(url)
        if i is None:
            i = self._url_ids[url] = len(self.urls)
            self.urls.append(url)
        return i

    def _read_record(self, path: str, record: int) -> _Record | None:
        name = record_name(path, record)
        try:
            data = self.store.cat(name)
        except FileNotFoundError:
            return None  # fsspec reads a missing record file as absent keys too
        with self._lock:
            return decode_record(data, f"{self.source}/{name}", self._url_id)

    def record(self, path: str, record: int) -> _Record:
        """Decoded record ``record`` of array ``path`` (cached, LRU-bounded)."""
        k = (path, record)
        rec = self._cache.get(k)
        if rec is not None:
            return rec
        rec = self._read_record(path, record) or _EMPTY_RECORD
        with self._lock:
            self._cache[k] = rec
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return rec

    # -- lookup -------------------------------------------------------------------------------------
    def _chunk_ref(self, path: str, flat: int, key: str) -> Ref:
        # docstring inherited
        t = self._tables.get(path)
        if t is not None:
            return super()._chunk_ref(path, flat, key)
        record, row = divmod(flat, self.record_size)
        k = (path, record)
        try:
            rec = self._cache[k]
            self._cache.move_to_end(k)
        except KeyError:  # not cached (or evicted by another thread meanwhile)
            rec = self.record(path, record)
        if row >= rec.nrows:
            raise KeyError(key)
        kind = rec.kind.item(row)
        return self._resolve(kind, rec.path_id.item(row), rec.offset.item(row), rec.length.item(row),
                             rec.inline[row] if kind == INLINE else None, key)

    def __getitem__(self, key: str) -> Ref:
        # docstring inherited
        if not isinstance(key, str):
            raise KeyError(key)
        loc = self._locs.get(key)
        if loc is not None:
            return self._chunk_ref(loc[0], loc[1], key)
        if key in self._docs:
            return self._metadata(key)
        # fast path for "."-separated (and scalar) arrays: "<path>/<i>.<j>..." -> flat index
        path, _, suffix = key.rpartition("/")
        spec = self._dotted.get(path)
        if spec is not None:
            strides, gshape = spec
            if not gshape:
                if suffix == "0":
                    return self._chunk_ref(path, 0, key)
            else:
                parts = suffix.split(".")
                if len(parts) == len(gshape):
                    flat = 0
                    try:
                        for p, n, s in zip(parts, gshape, strides, strict=True):
                            i = int(p)
                            if i < 0 or i >= n or str(i) != p:  # canonical decimal, in bounds
                                break
                            flat += i * s
                        else:
                            if len(self._locs) >= _LOC_CACHE:
                                self._locs.clear()
                            self._locs[key] = (path, flat)
                            return self._chunk_ref(path, flat, key)
                    except ValueError:
                        pass
        return super().__getitem__(key)

    # -- whole arrays -------------------------------------------------------------------------------
    def _load_table(self, path: str) -> ChunkTable:
        # docstring inherited
        g = self.grids[path]
        n, size = g.nchunks, self.record_size
        nrec = -(-n // size)
        kind = np.zeros(n, np.uint8)
        pid = np.zeros(n, np.int64)
        off = np.zeros(n, np.int64)
        ln = np.zeros(n, np.int64)
        inline: dict[int, bytes] = {}
        stored = found = 0
        for r in range(nrec):
            rec = self._cache.get((path, r)) or self._read_record(path, r)
            if rec is None:
                continue
            found += 1
            stored += rec.nrows
            lo = r * size
            m = min(rec.nrows, n - lo, size)
            if m <= 0:
                continue
            kind[lo:lo + m] = rec.kind[:m]
            pid[lo:lo + m] = rec.path_id[:m]
            off[lo:lo + m] = rec.offset[:m]
            ln[lo:lo + m] = rec.length[:m]
            inline.update({lo + i: b for i, b in rec.inline.items() if i < m})
        self._rows_stored[path] = stored
        self._records_found[path] = found
        return ChunkTable(g, kind, pid, off, ln, inline)

    def __len__(self) -> int:
        # docstring inherited
        return len(self.other) + sum(self.table(p).count() for p in self.grids)

    def format_info(self) -> dict[str, object]:
        # docstring inherited
        tables = {p: self.table(p) for p in self.grids}
        used = sum(t.count() for t in tables.values())
        for p in tables:
            if p not in self._rows_stored:  # table came from elsewhere: count the files' rows
                self._rows_stored[p], self._records_found[p] = self._count_rows(p)
        stored = sum(self._rows_stored.values())
        return {
            "format": "parquet",
            "record_size": self.record_size,
            "records": sum(self._records_found.values()),
            "records_expected": sum(-(-g.nchunks // self.record_size) for g in self.grids.values()),
            "rows_stored": stored,
            "rows_used": used,
            "rows_unused": stored - used,
            "rows_padding": stored - sum(min(g.nchunks, self._rows_stored[p])
                                         for p, g in self.grids.items()),
            "metadata_keys": len(self._docs),
        }

    def _count_rows(self, path: str) -> tuple[int, int]:
        stored = found = 0
        for r in range(-(-self.grids[path].nchunks // self.record_size)):
            rec = self._read_record(path, r)
            if rec is not None:
                stored += rec.nrows
                found += 1
        return stored, found


def _strides(g: ChunkGrid) -> tuple[int, ...]:
    out = []
    s = 1
    for n in reversed(g.grid_shape):
        out.append(s)
        s *= n
    return tuple(reversed(out))


def read_parquet(
    source: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    cache_size: int = DEFAULT_CACHE_SIZE,
    **options: Any,
) -> ParquetReferenceSet:
    """Open a parquet reference directory (local path or fsspec URL); reads ``.zmetadata`` only.

    ``cache_size``: how many decoded record files to keep (least recently used are dropped).
    """
    if options:
        raise Unsupported(f"options {sorted(options)} are not used when reading parquet references")
    store = _Store(os.fspath(source), storage_options)
    try:
        raw = store.cat(".zmetadata")
    except FileNotFoundError as e:
        raise InvalidReferences(f"{source}: no .zmetadata; not a parquet reference directory") from e
    import msgspec

    try:
        doc = msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise InvalidReferences(f"{source}/.zmetadata: not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise InvalidReferences(f"{source}/.zmetadata: expected a JSON object, got {type(doc).__name__}")
    meta = doc.get("metadata", {})
    size = doc.get("record_size")
    problems = []
    if not isinstance(meta, dict):
        problems.append(f"{source}/.zmetadata: 'metadata' must be an object, got {type(meta).__name__}")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        problems.append(f"{source}/.zmetadata: 'record_size' must be a positive integer, got {size!r}")
    if problems:
        raise InvalidReferences(problems)
    return ParquetReferenceSet(store, meta, size, cache_size, source=os.fspath(source).rstrip("/"))


def write_parquet(rs: ReferenceSet, dest: str, *, storage_options: Mapping[str, Any] | None = None,
                  **options: Any) -> None:
    """Write ``rs`` as a parquet reference directory; see :func:`._parquet_write.write_parquet`."""
    from ._parquet_write import write_parquet as _write

    _write(rs, dest, storage_options=storage_options, **options)

