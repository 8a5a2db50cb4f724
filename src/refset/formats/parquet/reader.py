"""Parquet reference sets in fsspec's ``LazyReferenceMapper`` layout (reading; writing is in
:mod:`._parquet_write`).

Layout (see ``docs/parquet.md``)::

    refs.parq/.zmetadata                 {"metadata": {key: JSON document}, "record_size": R}
    refs.parq/<array>/refs.<n>.parq      rows of chunks n*R .. n*R+R-1 (C order of chunk index)

Each row has ``path`` (string or dictionary, nullable), ``offset``, ``size`` (integers) and ``raw``
(binary, nullable). ``raw`` set: inline data. ``path`` set: a byte range, or the whole file when
``size`` is 0. Both null (or the record file missing): the key is absent.

Opening reads ``.zmetadata`` only. A key lookup reads the one record file that holds it, decoded with
pyarrow (no pandas); the set keeps recent records (its block cache). A whole array is decoded only
when asked (``rs.table(path)``, iteration, ``to_dict``, saving).
"""

from __future__ import annotations

import functools
import json
import os
import zlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.abc.bytestore import ByteStore
from refset.errors import InvalidReferences, Unsupported
from refset.io.local import trimmed
from refset.io.store import FsspecStore, LocalStore, open_store
from refset.model.builder import check_ends
from refset.model.fingerprints import MEMBER, Fingerprints, split
from refset.model.keys import (
    ChunkGrid,
    array_key,
    grid_from_document,
    grid_from_metadata,
    grid_problem,
    path_problem,
    split_metadata_key,
)
from refset.model.metadata import ArrayMetadata
from refset.model.producer import metadata_bytes, metadata_of
from refset.model.table import INLINE, RANGE, WHOLE, ChunkTable, KeyTable, Ref, min_uint
from refset.options import Limits

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["read_parquet", "ParquetSource", "record_name", "decode_zmetadata"]

LIST_FIRST = 1000  # an array with more record files than this: list its directory before reading

# The bytes of a ``.zmetadata`` entry are what fsspec returns: it stores parsed JSON documents and
# serves them re-serialised (compact), so whitespace of the original documents is not kept. A
# document stored as text (the spec's ``dict[str, str]``) is returned unchanged.


# Integrity (refset's own fields; fsspec reads only "metadata" and "record_size"): CHECKSUMS maps each
# record file written to the CRC-32 of its bytes, and the text ends with SEAL, the CRC-32 of every byte
# of .zmetadata before it. Record files also carry parquet page checksums.
CHECKSUMS = "refset_checksums"
SEAL = b', "refset_crc32": '


def seal_zmetadata(text: bytes) -> bytes:
    """``text`` (a JSON object) with its CRC-32 as a last member."""
    body = text.rstrip()[:-1]
    return body + SEAL + str(zlib.crc32(body)).encode() + b"}"


def _unseal(raw: bytes, doc: dict[str, Any], where: str) -> None:
    """Check the CRC-32 :func:`seal_zmetadata` wrote (when the document says refset wrote it)."""
    i = raw.rfind(SEAL)
    if i < 0:
        if CHECKSUMS in doc:
            raise InvalidReferences(f"{where}: checksum missing (corrupt data)")
        return
    tail = raw[i + len(SEAL):].rstrip()
    if not (tail.endswith(b"}") and tail[:-1].isdigit() and int(tail[:-1]) == zlib.crc32(raw[:i])):
        raise InvalidReferences(f"{where}: checksum mismatch (corrupt data)")


def record_name(path: str, record: int) -> str:
    """Relative name of record file ``record`` of array ``path`` (``refs.<n>.parq`` inside it)."""
    return f"{path}/refs.{record}.parq" if path else f"refs.{record}.parq"


def decode_zmetadata(raw: bytes, where: str) -> Any:
    """``.zmetadata`` as JSON; ``NaN``/``Infinity`` accepted, as fsspec (and kerchunk) write them."""
    import json

    import msgspec

    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        first: Exception = e
    except RecursionError as e:
        first = e
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidReferences(f"{where}: not JSON ({first})") from None


class _Record:
    """One decoded record file (a :class:`~refset.abc.source.Block`): its present rows only (a record
    of a sparse array holds mostly nulls), in row order: ``rows`` (row i is chunk ``record * R + i``),
    ``kind``, ``path_id`` (into the record's own ``urls``), ``offset``, ``length``, each in the smallest
    integer type that holds it, so that a set's block cache holds many records."""

    __slots__ = ("inline", "kind", "length", "nbytes", "nrows", "offset", "path_id", "rows", "urls")
    rows: np.ndarray
    decoded = True

    def __init__(self, kind: np.ndarray, path_id: np.ndarray, offset: np.ndarray, length: np.ndarray,
                 inline: dict[int, bytes], nrows: int, urls: list[str]) -> None:
        rows = np.flatnonzero(kind)  # not ABSENT
        self.rows = rows.astype(np.uint16 if nrows <= 1 << 16 else np.uint32)
        self.kind = kind[rows]
        self.path_id = _smallest(path_id[rows])
        self.offset = _smallest(offset[rows])
        self.length = _smallest(length[rows])
        self.inline, self.nrows, self.urls = inline, nrows, urls
        #: the memory it holds (what the set's block cache counts)
        self.nbytes = (sum(a.nbytes for a in (self.rows, self.kind, self.path_id, self.offset, self.length))
                       + sum(len(v) + 50 for v in inline.values()) + sum(len(u) + 50 for u in urls) + 200)

    def ref(self, j: int) -> Ref | None:
        if j >= self.nrows:
            return None
        i = int(np.searchsorted(self.rows, j))
        if i >= len(self.rows) or self.rows.item(i) != j:
            return None
        kind = self.kind.item(i)
        if kind == RANGE:
            return (self.urls[self.path_id.item(i)], self.offset.item(i), self.length.item(i))
        if kind == WHOLE:
            return (self.urls[self.path_id.item(i)],)
        return self.inline[j]


def _smallest(a: np.ndarray) -> np.ndarray:
    return a.astype(min_uint(int(a.max()))) if a.size else a.astype(np.uint8)


_EMPTY_RECORD = _Record(*(np.zeros(0, np.uint8),) * 4, {}, 0, [])


def _column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    col = table.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def _numpy(arr: pa.Array) -> np.ndarray:
    """The values of a primitive arrow array without nulls, as numpy reads its buffer (pyarrow's own
    ``to_numpy`` imports pandas: a third of a second on a set's first lookup)."""
    dt = np.dtype(arr.type.to_pandas_dtype())
    buf = arr.buffers()[1]
    if buf is None or not len(arr):
        return np.zeros(len(arr), dt)
    return np.frombuffer(buf, dt, count=len(arr), offset=arr.offset * dt.itemsize)


def _valid(arr: pa.Array) -> np.ndarray:
    """Boolean numpy mask of non-null entries, from the array's validity bitmap."""
    bitmap = arr.buffers()[0]
    if bitmap is None or not arr.null_count:
        return np.ones(len(arr), bool)
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), count=arr.offset + len(arr), bitorder="little")
    out: np.ndarray = bits[arr.offset:].view(bool)
    return out


def _int_column(table: pa.Table, name: str, n: int, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, valid) of an integer column (all zeros and valid when it is not there); the values
    of null entries are 0."""
    import pyarrow as pa

    col = _column(table, name)
    if col is None:
        return np.zeros(n, np.int64), np.ones(n, bool)
    if not pa.types.is_integer(col.type):
        raise InvalidReferences(f"{where}: column {name!r} must be integers, got {col.type}")
    a = _numpy(col).astype(np.int64, copy=False)
    valid = _valid(col)
    if not valid.all():
        a = np.where(valid, a, 0)
    if a.size and a.min() < 0:
        raise InvalidReferences(f"{where}: column {name!r} has negative values")
    return a, valid


def decode_record(data: bytes, where: str) -> _Record:
    """Decode one record file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True).read(use_threads=False)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise InvalidReferences(f"{where}: not a readable parquet file ({e})") from e
    n = table.num_rows
    kind = np.zeros(n, np.uint8)
    pid = np.zeros(n, np.int64)
    inline: dict[int, bytes] = {}
    urls: list[str] = []
    offset, _ = _int_column(table, "offset", n, where)
    size, _ = _int_column(table, "size", n, where)

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
        try:
            urls = [u.decode() if isinstance(u, bytes) else u for u in values.to_pylist()]
        except UnicodeDecodeError as e:
            raise InvalidReferences(f"{where}: column 'path' holds a URL that is not UTF-8 ({e})") from None
        idx = _numpy(indices).astype(np.int64, copy=False)
        pid = np.where(has, idx, 0)
        if has.any() and (pid.min() < 0 or pid.max() >= len(urls)):
            raise InvalidReferences(f"{where}: column 'path': a dictionary index outside its {len(urls)} values")
        kind[has] = RANGE
        kind[has & (size == 0)] = WHOLE

    raw = _column(table, "raw")
    if raw is not None and raw.null_count < n:
        if pa.types.is_string(raw.type) or pa.types.is_large_string(raw.type):
            raw = raw.cast(pa.binary())
        elif not (pa.types.is_binary(raw.type) or pa.types.is_large_binary(raw.type)):
            raise InvalidReferences(f"{where}: column 'raw' must be bytes or strings, got {raw.type}")
        has_raw = _valid(raw)
        rows = np.flatnonzero(has_raw)
        inline = dict(zip(rows.tolist(), raw.take(pa.array(rows)).to_pylist(), strict=True))
        kind[has_raw] = INLINE  # raw wins over path, as in fsspec
        pid[has_raw] = 0
    live = kind == RANGE
    rec = _Record(kind, pid, np.where(live, offset, 0), np.where(live, size, 0), inline, n, urls)
    bad = check_ends(rec.kind, rec.offset, rec.length)  # the present rows only
    if bad >= 0:
        row = int(rec.rows[bad])
        raise InvalidReferences(f"{where}: row {row}: offset {int(offset[row])} + size {int(size[row])} "
                                "must be below 2**63")
    return rec


class ParquetSource:
    """The :class:`~refset.abc.source.Source` of a parquet reference directory. Opening reads
    ``.zmetadata`` only; a record file is a block (read and decoded on its own for single keys)."""

    def __init__(self, store: ByteStore, metadata: Mapping[str, object], record_size: int,
                 source: str = "", checksums: Mapping[str, int] | None = None,
                 fingerprints: Fingerprints | None = None) -> None:
        self._docs = dict(metadata)
        self._fingerprints = _own_fingerprints(self._docs, fingerprints, source)
        self._sums = checksums
        self._meta: dict[str, bytes] = {}  # documents serialised when first asked for
        grids: dict[str, ChunkGrid] = {}
        problems: list[str] = []
        self.source = source
        for key, value in self._docs.items():
            meta = split_metadata_key(key)
            if meta is not None:
                g = (grid_from_document(meta[1], value) if isinstance(value, dict)
                     else grid_from_metadata(meta[1], self._metadata(key)))
                where = f"{source}/.zmetadata: metadata[{key[:300]!r}]"
                if g is None and meta[1] == ".zarray":
                    # its chunks are found only through its grid: they would vanish silently
                    problems.append(f"{where}: {grid_problem(meta[1], self._metadata(key))}")
                elif g is not None and meta[0] and path_problem(meta[0]) is not None:
                    problems.append(f"{where}: array path {path_problem(meta[0])}: its record files "
                                    "would lie outside the reference directory")
                elif g is not None:
                    grids[meta[0]] = g
        if problems:
            raise InvalidReferences(problems)
        self.grids = grids
        self.metadata: dict[str, ArrayMetadata] = {}
        for path in grids:
            found = metadata_of(functools.partial(self._document, path))
            if found is None:  # unreachable: the grid was read from the same document
                raise InvalidReferences(f"{source}/.zmetadata: array {path!r}: no metadata")
            self.metadata[path] = found
        self._array_docs = {array_key(p, name) for p, m in self.metadata.items() for name in m.documents()}
        self.store = store
        self.record_size = record_size
        self._url_ids: dict[str, int] = {}
        self._url_t: tuple[str, ...] = ()
        self._stats: dict[str, tuple[int, int, int, int]] = {}  # per array read: see info()

    def _document(self, path: str, name: str) -> bytes | None:
        """The text of document ``name`` of the array at ``path``, None when there is none."""
        key = array_key(path, name)
        return self._metadata(key) if key in self._docs else None

    def _metadata(self, key: str) -> bytes:
        data = self._meta.get(key)
        if data is None:
            data = self._meta[key] = metadata_bytes(self._docs[key], f"{self.source}/.zmetadata")
        return data

    # -- Source ------------------------------------------------------------------------------------
    def fingerprints(self) -> Fingerprints:
        return self._fingerprints

    def urls(self) -> tuple[str, ...]:
        if len(self._url_t) != len(self._url_ids):
            self._url_t = tuple(self._url_ids)
        return self._url_t

    def other(self) -> KeyTable:
        return KeyTable.from_items({k: (INLINE, 0, 0, 0, self._metadata(k)) for k in self._docs
                                    if k not in self._array_docs})

    def other_under(self, path: str) -> KeyTable | None:
        return None

    def lookup_other(self, key: str) -> Ref | None:
        return self._metadata(key) if key in self._docs and key not in self._array_docs else None

    def block_size(self, path: str) -> int:
        return self.record_size

    def block(self, path: str, i: int) -> _Record:
        return self._read_record(path, i) or _EMPTY_RECORD

    def count(self) -> int | None:
        return None

    def info(self) -> dict[str, object]:
        out: dict[str, object] = {"format": "parquet", "record_size": self.record_size,
                                  "metadata_keys": len(self._docs)}
        if self._stats:  # figures of the arrays read so far (all of them once the set is loaded)
            cols = list(zip(*self._stats.values(), strict=True))
            out["records"] = sum(cols[0])
            out["records_expected"] = sum(-(-self.grids[p].nchunks // self.record_size) for p in self._stats)
            out["rows_stored"] = sum(cols[1])
            out["rows_used"] = sum(cols[2])
            out["rows_unused"] = sum(cols[1]) - sum(cols[2])
            out["rows_padding"] = sum(cols[3])
        return out

    # -- records -----------------------------------------------------------------------------------
    def _read_record(self, path: str, record: int) -> _Record | None:
        name = record_name(path, record)
        where = f"{self.source}/{name}"
        sums = self._sums
        if sums is not None and name not in sums:
            return None  # not written: its keys are absent (a stray file there is not read)
        try:
            data = self.store.read(name)
        except FileNotFoundError:
            if sums is not None:
                raise InvalidReferences(f"{where}: missing, but .zmetadata lists it") from None
            return None  # fsspec reads a missing record file as absent keys too
        if sums is not None and zlib.crc32(data) != sums[name]:
            raise InvalidReferences(f"{where}: checksum mismatch (corrupt data)")
        return decode_record(data, where)

    def _records(self, path: str) -> Iterator[tuple[int, _Record]]:
        """Every record file of array ``path`` that exists, in order."""
        n = -(-self.grids[path].nchunks // self.record_size)
        names = None
        if self._sums is not None:
            names = {k.rpartition("/")[2] for k in self._sums if k.rpartition("/")[0] == path}
        elif n > LIST_FIRST:
            names = self.store.list(path)
        for r in range(n):
            if names is not None and f"refs.{r}.parq" not in names:
                continue
            rec = self._read_record(path, r)
            if rec is not None:
                yield r, rec

    def table(self, path: str) -> ChunkTable:
        g = self.grids[path]
        n, size = g.nchunks, self.record_size
        recs = list(self._records(path))
        inline: dict[int, bytes] = {}
        remaps = [np.array([self._url_ids.setdefault(u, len(self._url_ids)) for u in rec.urls] or [0],
                           np.int64) for _, rec in recs]
        # each record's present rows within the grid (a padded last record's rows past it are not)
        kept = [np.asarray(rec.rows) < max(0, min(rec.nrows, n - r * size)) for r, rec in recs]
        present = sum(int(k.sum()) for k in kept)
        stored = sum(rec.nrows for _, rec in recs)
        padding = sum(max(0, rec.nrows - max(0, min(size, n - r * size))) for r, rec in recs)
        self._stats[path] = (len(recs), stored, present, padding)
        parts = []
        for (r, rec), remap, k in zip(recs, remaps, kept, strict=True):
            lo = r * size
            parts.append((rec.rows[k].astype(np.int64) + lo, rec.kind[k], remap[rec.path_id[k]], rec.offset[k],
                          rec.length[k]))
            inline.update({lo + i: b for i, b in rec.inline.items() if lo + i < n})
        cols = [np.concatenate([p[j] for p in parts]) if parts else np.zeros(0, np.int64) for j in range(5)]
        return ChunkTable.from_entries(g, cols[0], cols[1].astype(np.uint8), cols[2], cols[3].astype(np.uint64),
                                       cols[4].astype(np.uint64), inline=inline)


def _set_aside(store: ByteStore) -> tuple[ByteStore, bytes] | None:
    """A set that a killed write left beside the missing directory, read in its place (the next write
    puts it in place): locally the old set renamed aside (``<dir>.refset-old-*``), on an object store
    the new tree that was being copied into place (``<dir>.refset-*.tmp``)."""
    if isinstance(store, FsspecStore):
        from refset.io.atomic import remote_leftovers

        for t in remote_leftovers(store.fs, store.root):
            aside: ByteStore = FsspecStore(store.fs.unstrip_protocol(t), fs=store.fs)
            try:
                return aside, aside.read(".zmetadata")
            except FileNotFoundError:
                continue
        return None
    assert isinstance(store, LocalStore)
    if os.path.lexists(store.root):
        return None
    from refset.io.atomic import stale_leftovers

    for old in sorted(stale_leftovers(store.root), key=os.path.getmtime, reverse=True):
        if ".refset-old-" in os.path.basename(old):
            aside = LocalStore(old)
            try:
                return aside, aside.read(".zmetadata")
            except OSError:
                continue
    return None


def _zarr_store_problem(source: str, store: ByteStore) -> str | None:
    """What to say when ``source`` (not a parquet reference set) is a zarr store."""
    from refset.io.magic import zarr_store_problem

    def has(name: str) -> bool:
        try:
            store.read(name, 0, 1)
            return True
        except (FileNotFoundError, IsADirectoryError):
            return False
        except Exception:  # a server refusing the probe: say nothing rather than fail differently
            return False

    return zarr_store_problem(source, has)


def read_parquet(
    source: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    lazy: bool = True,
    head: bytes | None = None,
    limits: Limits | None = None,
    **options: Any,
) -> ParquetSource:
    """Open a parquet reference directory (local path or fsspec URL); reads ``.zmetadata`` only
    (always lazy: ``lazy`` is accepted for symmetry with JSON).

    Record files are found from ``record_size``, so a server that does not list directories (plain
    HTTP) serves the set too.
    """
    if options:
        raise Unsupported(f"options {sorted(options)} are not used when reading parquet references")
    source = trimmed(os.fspath(source))
    store = open_store(source, storage_options)
    try:
        raw = store.read(".zmetadata")
    except FileNotFoundError as e:
        aside = _set_aside(store)
        if aside is None:
            raise InvalidReferences(_zarr_store_problem(source, store)
                                    or f"{source}: no .zmetadata; not a parquet reference directory") from e
        store, raw = aside
    doc = decode_zmetadata(raw, f"{source}/.zmetadata")
    if not isinstance(doc, dict):
        raise InvalidReferences(f"{source}/.zmetadata: expected a JSON object, got {type(doc).__name__}")
    _unseal(raw, doc, f"{source}/.zmetadata")
    meta = doc.get("metadata", {})
    size = doc.get("record_size")
    sums = doc.get(CHECKSUMS)
    if size is None and "record_size" not in doc:  # consolidated metadata of a zarr store?
        found = _zarr_store_problem(source, store)
        if found:
            raise InvalidReferences(found)
    problems = []
    if sums is not None and not (isinstance(sums, dict) and all(type(v) is int for v in sums.values())):
        problems.append(f"{source}/.zmetadata: {CHECKSUMS!r} must map file names to integers")
    if not isinstance(meta, dict):
        problems.append(f"{source}/.zmetadata: 'metadata' must be an object, got {type(meta).__name__}")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
        problems.append(f"{source}/.zmetadata: 'record_size' must be a positive integer, got {size!r}")
    if problems:
        raise InvalidReferences(problems)
    stored = doc.get(MEMBER)
    fps = None
    if isinstance(stored, dict) and "fingerprints" in stored:
        fps = Fingerprints.from_json(stored["fingerprints"], f"{source}/.zmetadata: {MEMBER!r}")
    return ParquetSource(store, meta, int(size or 0), source=source, checksums=sums, fingerprints=fps)


def _own_fingerprints(docs: dict[str, object], given: Fingerprints | None, source: str) -> Fingerprints:
    """``given`` (refset's member of ``.zmetadata``) and any a Version 0 JSON set held in its root
    ``.zgroup`` (a set converted to parquet by another tool), taken out of ``docs``."""
    z = docs.get(".zgroup")
    if isinstance(z, dict) and MEMBER in z:
        rest, found = split(KeyTable.from_items({".zgroup": (INLINE, 0, 0, 0, json.dumps(z).encode())}),
                            f"{source}/.zmetadata")
        if len(found):
            docs[".zgroup"] = json.loads(rest.data[0])
            return Fingerprints.union([given, found]) if given is not None else found
    return given if given is not None else Fingerprints.empty()
