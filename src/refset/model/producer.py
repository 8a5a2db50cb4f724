"""The one checked construction of a set (``ReferenceSet.from_arrays``): what readers, scanners and
combine hand over. Array metadata documents become :class:`~refset.model.metadata.ArrayMetadata`;
every check is one vectorised pass, and the first problem of each kind is reported with the array and
chunk index where it is."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from refset.errors import InvalidReferences
from refset.model.array import Array
from refset.model.keys import ChunkGrid, KeyRouter, array_key, split_metadata_key
from refset.model.metadata import V2_ARRAY, V2_ATTRS, V3_DOC, ArrayMetadata
from refset.model.table import INLINE, MAX_END, RANGE, WHOLE, ChunkTable, KeyTable, Row, sparse_grid

__all__ = ["assemble", "split_documents", "drop_documents", "array_metadata", "grid_paths", "check_bounds", "metadata_bytes",
           "json_text"]

_FIELDS = ("path_id", "offset", "length")


def _numpy_value(o: Any) -> Any:
    """numpy scalars and arrays as the Python values json writes (``default`` of json.dumps)."""
    if isinstance(o, np.generic | np.ndarray):
        return o.tolist()
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def json_text(value: Any, where: str, **dumps: Any) -> bytes:
    """``value`` serialised as JSON (numpy scalars and arrays as their Python values); anything else
    that json cannot write is InvalidReferences naming ``where``."""
    try:
        return json.dumps(value, default=_numpy_value, **dumps).encode("utf-8")
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidReferences(f"{where}: not JSON-serialisable ({type(e).__name__}: {e})") from None


def metadata_bytes(value: Any, where: str) -> bytes:
    """A metadata value as stored: dicts and lists as compact JSON (NaN/Infinity as Python writes
    them, as zarr v2 and fsspec read them), text as UTF-8, bytes as they are."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict | list):
        return json_text(value, where, separators=(",", ":"))
    raise InvalidReferences(f"{where}: must be a dict, JSON text or bytes, got {type(value).__name__}")


def _at(path: str, field: str, grid: ChunkGrid, flat: int) -> str:
    idx = np.unravel_index(flat, grid.grid_shape) if grid.shape else ()
    return f"arrays[{json.dumps(path)}][{json.dumps(field)}][{', '.join(str(int(i)) for i in idx)}]"


def _column(path: str, name: str, value: Any, grid: ChunkGrid) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise InvalidReferences(f"arrays[{json.dumps(path)}][{json.dumps(name)}]: must be an integer "
                                f"array, got dtype {a.dtype}")
    if a.shape != grid.grid_shape:
        raise InvalidReferences(f"arrays[{json.dumps(path)}][{json.dumps(name)}]: shape {a.shape} does "
                                f"not match the chunk grid {grid.grid_shape} of array {path!r}")
    return a.reshape(-1)


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def _table(path: str, spec: Mapping[str, Any], grid: ChunkGrid, nurls: int) -> ChunkTable:
    unknown = sorted(set(spec) - {*_FIELDS, "inline"})
    if unknown:
        raise InvalidReferences(f"arrays[{json.dumps(path)}]: unknown field {json.dumps(unknown[0])}, "
                                f"expected {', '.join(_FIELDS)} and optionally inline")
    missing = [f for f in _FIELDS if f not in spec]
    if missing:
        raise InvalidReferences(f"arrays[{json.dumps(path)}]: {json.dumps(missing[0])} is required")
    pid, off, ln = (_column(path, f, spec[f], grid) for f in _FIELDS)
    signed = pid.dtype.kind == "i"
    present = pid >= 0 if signed else np.ones(pid.shape, bool)
    bad = pid < -1 if signed else None
    if bad is not None and bad.any():
        i = _first(bad)
        raise InvalidReferences(f"{_at(path, 'path_id', grid, i)}: must be -1 (absent) or an index "
                                f"into urls, got {int(pid[i])}")
    if pid.size and nurls <= int(pid.max()):
        i = _first(pid >= nurls)
        raise InvalidReferences(f"{_at(path, 'path_id', grid, i)}: {int(pid[i])} is outside the URL "
                                f"table of {nurls}")
    top = np.uint64(MAX_END)
    for name, col in (("offset", off), ("length", ln)):
        if col.dtype.kind == "i":
            neg = present & (col < 0)
            if neg.any():
                i = _first(neg)
                raise InvalidReferences(f"{_at(path, name, grid, i)}: must be a non-negative integer, "
                                        f"got {int(col[i])}")
    o64 = off.astype(np.uint64)
    l64 = ln.astype(np.uint64)
    over = present & ((o64 >= top) | (l64 >= top) | (o64 + l64 >= top))
    if over.any():
        i = _first(over)
        raise InvalidReferences(f"{_at(path, 'offset', grid, i)}: offset {int(o64[i])} + length "
                                f"{int(l64[i])} must be below 2**63")
    kind = present.astype(np.uint8) * np.uint8(RANGE)
    inline: dict[int, bytes] = {}
    given = spec.get("inline") or {}
    if not isinstance(given, Mapping):
        raise InvalidReferences(f"arrays[{json.dumps(path)}][\"inline\"]: must be a mapping of chunk index "
                                f"to bytes, got {type(given).__name__}")
    nchunks = grid.nchunks
    for idx, data in given.items():
        try:
            flat = (int(np.ravel_multi_index(tuple(idx), grid.grid_shape)) if isinstance(idx, tuple)
                    else int(idx))
        except (ValueError, TypeError):
            flat = -1
        if not 0 <= flat < nchunks:
            raise InvalidReferences(f"arrays[{json.dumps(path)}][\"inline\"][{idx!r}]: not a chunk "
                                    f"index of the grid {grid.grid_shape}")
        if not isinstance(data, bytes):
            if not isinstance(data, bytearray | memoryview):
                raise InvalidReferences(f"arrays[{json.dumps(path)}][\"inline\"][{idx!r}]: inline data "
                                        f"must be bytes, got {type(data).__name__}")
            data = bytes(data)
        inline[flat] = data
    if inline:
        kind[np.fromiter(inline, np.int64, len(inline))] = INLINE
    return _finish(grid, kind, pid, off, ln, inline)


def _finish(grid: ChunkGrid, kind: np.ndarray, pid: np.ndarray, off: np.ndarray, ln: np.ndarray,
            inline: dict[int, bytes]) -> ChunkTable:
    """The table of checked columns."""
    n = int(np.count_nonzero(kind))
    if sparse_grid(grid.nchunks, n):
        f = np.flatnonzero(kind != 0)
        return ChunkTable.from_entries(grid, f, kind[f], pid[f].clip(0), off[f], ln[f], inline)
    zero = kind != RANGE  # absent and inline cells hold zeros
    pid = np.where(zero, 0, pid) if zero.any() else pid
    o = np.where(zero, 0, off) if zero.any() else off
    n_ = np.where(zero, 0, ln) if zero.any() else ln
    return ChunkTable(grid, kind, pid.astype(np.uint64, copy=False), o.astype(np.uint64, copy=False),
                n_.astype(np.uint64, copy=False), inline)


def _rows(metadata: Mapping[str, Any]) -> dict[str, Row]:
    if not isinstance(metadata, Mapping):
        raise InvalidReferences(f"metadata: must be a mapping, got {type(metadata).__name__}")
    rows: dict[str, Row] = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise InvalidReferences(f"metadata: key {key!r} must be a string")
        rows[key] = (INLINE, 0, 0, 0, metadata_bytes(value, f"metadata[{json.dumps(key)}]"))
    return rows


def _urls(urls: Sequence[str]) -> tuple[str, ...]:
    if isinstance(urls, str) or not isinstance(urls, Sequence | np.ndarray):
        raise InvalidReferences(f"urls: must be a sequence of strings, got {type(urls).__name__}")
    url_t = tuple(urls)
    for i, u in enumerate(url_t):
        if not isinstance(u, str):
            raise InvalidReferences(f"urls[{i}]: must be a string, got {type(u).__name__}")
    return url_t


def _inline_text(other: KeyTable, key: str) -> bytes | None:
    i = other.find(key)
    if i < 0 or other.kind[i] != INLINE:
        return None
    return other.data[i]  # type: ignore[no-any-return]


def array_metadata(other: KeyTable, path: str) -> ArrayMetadata | None:
    """The metadata of the array at ``path`` from its inline documents in ``other`` (``.zarray`` and
    ``.zattrs``, else ``zarr.json``), or None when they describe no regular chunk grid. A path with a
    ``.zarray`` is a zarr v2 array whatever else it holds (as readers look it up first)."""
    if _inline_text(other, array_key(path, V2_ARRAY)) is None and other.find(array_key(path, V2_ARRAY)) >= 0:
        return None  # a .zarray stored in a file: its grid is not known
    return metadata_of(lambda name: _inline_text(other, array_key(path, name)))


def metadata_of(text: Callable[[str], bytes | None]) -> ArrayMetadata | None:
    """The metadata of an array whose stored documents are ``text(name)`` (``.zarray`` and ``.zattrs``,
    else ``zarr.json``; None: no such document), or None when they describe no regular chunk grid."""
    zarray = text(V2_ARRAY)
    if zarray is not None:
        return ArrayMetadata.parse(V2_ARRAY, zarray, text(V2_ATTRS))
    doc = text(V3_DOC)
    return None if doc is None else ArrayMetadata.parse(V3_DOC, doc)


def grid_paths(keys: Iterable[str] | np.ndarray) -> list[str]:
    """Paths of arrays whose metadata documents are among ``keys`` (candidates: checked by
    :func:`array_metadata`)."""
    out: dict[str, None] = {}
    for key in keys:
        meta = split_metadata_key(str(key))
        if meta is not None:
            out[meta[0]] = None
    return list(out)


def split_documents(other: KeyTable, paths: Sequence[str]) -> tuple[dict[str, ArrayMetadata], KeyTable]:
    """The metadata of the arrays at ``paths`` whose documents in ``other`` describe a grid, and
    ``other`` without those documents (they are derived from the metadata from then on)."""
    metadata: dict[str, ArrayMetadata] = {}
    drop: list[int] = []
    for path in paths:
        m = array_metadata(other, path)
        if m is None:
            continue
        metadata[path] = m
        for name in m.documents():
            drop.append(other.find(array_key(path, name)))
    return metadata, other.without_rows(np.asarray(drop, np.int64))


def drop_documents(table: KeyTable, metadata: Mapping[str, ArrayMetadata]) -> KeyTable:
    """``table`` without the documents of the arrays in ``metadata``."""
    rows = [table.find(array_key(path, name)) for path, m in metadata.items() for name in m.documents()]
    return table.without_rows(np.asarray(rows, np.int64))


def assemble(
    metadata: Mapping[str, Any],
    arrays: Mapping[str, Any],
    urls: Sequence[str],
    other: KeyTable | None,
    validate: bool,
) -> tuple[tuple[str, ...], dict[str, ArrayMetadata], dict[str, ChunkTable], KeyTable]:
    """The parts of ``ReferenceSet.from_arrays``: ``(urls, metadata, tables, other keys)``.

    ``metadata``: inline keys (array and group documents, or any other inline value); ``arrays``: per
    array path, grid-shaped columns (always checked) or a built :class:`ChunkTable`; ``other``: more
    keys (the documents may be there too). Every array with a regular grid document gets a table (an
    empty one when none is given). ``validate``: check built tables and ``other`` too (their grids,
    path ids, offset bounds, and that no other key is a chunk key of an array); False for columns the
    caller made itself.
    """
    if not isinstance(arrays, Mapping):
        raise InvalidReferences(f"arrays: must be a mapping, got {type(arrays).__name__}")
    url_t = _urls(urls) if validate else tuple(urls)
    rows = _rows(metadata) if metadata else {}
    if other is None:
        keys = KeyTable.from_items(rows)
    elif rows:
        keys = KeyTable.merged_rows(other, rows)
    else:
        keys = other
    given = {p: a.metadata for p, a in arrays.items() if isinstance(a, Array)}
    paths = [p for p in arrays if p not in given]
    candidates = grid_paths(rows) if rows else []
    if validate and other is not None:
        candidates += grid_paths(other.keys.tolist())
    seen = set(paths)
    paths += [p for p in candidates if p not in seen and not seen.add(p)]  # type: ignore[func-returns-value]
    meta, rest = split_documents(keys, paths)
    if given:  # arrays given whole: their documents are theirs (any stored ones are replaced)
        rest = drop_documents(rest, {p: m for p, m in given.items() if array_metadata(rest, p) is not None})
        meta.update(given)
    if rows and meta:
        router = KeyRouter({p: m.grid for p, m in meta.items()})
        for key in rows:
            hit = router.locate(key)
            if hit is not None:
                raise InvalidReferences(f"metadata[{json.dumps(key)}]: a chunk key of array {hit[0]!r}; "
                                        f"give its chunks in arrays[{json.dumps(hit[0])}]")
    tables: dict[str, ChunkTable] = {}
    for path, spec in arrays.items():
        m = meta.get(path)
        if m is None:
            raise InvalidReferences(
                f"arrays[{json.dumps(path)}]: no chunk grid: metadata has no "
                f"{json.dumps(array_key(path, V2_ARRAY))} (or zarr.json) describing a regular grid")
        if isinstance(spec, Array):
            spec = spec.table
        if isinstance(spec, ChunkTable):
            if validate:
                _check_table(path, spec, m.grid, len(url_t))
            tables[path] = spec
        elif isinstance(spec, Mapping):
            tables[path] = _table(path, spec, m.grid, len(url_t))
        else:
            raise InvalidReferences(f"arrays[{json.dumps(path)}]: must be a mapping of numpy arrays, "
                                    f"got {type(spec).__name__}")
    for path, m in meta.items():
        if path not in tables:
            tables[path] = ChunkTable.empty(m.grid)  # never written: every chunk is the fill value
    if validate:
        _check_other(rest, len(url_t), {p: m.grid for p, m in meta.items()})
    return url_t, meta, tables, rest


def _check_table(path: str, t: ChunkTable, grid: ChunkGrid, nurls: int) -> None:
    if t.grid != grid:
        raise InvalidReferences(
            f"array {path!r}: its table's grid (shape {t.grid.shape}, chunks {t.grid.chunks}) is not the "
            f"one its metadata describes (shape {grid.shape}, chunks {grid.chunks})")
    if int(t.kind_counts()[[RANGE, WHOLE]].sum()) and t.max_path_id() >= nurls:
        raise InvalidReferences(f"array {path!r}: path id {t.max_path_id()} outside the URL table of {nurls}")
    check_bounds({path: t}, KeyTable.empty())


def _check_other(other: KeyTable, nurls: int, grids: Mapping[str, ChunkGrid]) -> None:
    loc = (other.kind == RANGE) | (other.kind == WHOLE)
    if loc.any() and int(other.path_id[loc].max()) >= nurls:
        raise InvalidReferences(f"other keys: path id {int(other.path_id[loc].max())} outside the URL "
                                f"table of {nurls}")
    check_bounds({}, other)
    if grids and len(other):
        router = KeyRouter(grids)
        keys = other.keys
        for path in grids:
            cand = keys if not path else keys[np.searchsorted(keys, path + "/"):np.searchsorted(keys, path + "0")]
            for k in cand.tolist():
                hit = router.locate(k)
                if hit is not None:
                    raise InvalidReferences(f"other keys: {k!r} is a chunk key of array {hit[0]!r}; "
                                            "give it in that array's table")


def check_bounds(tables: Mapping[str, ChunkTable], other: KeyTable) -> None:
    """InvalidReferences naming the first range reference whose ``offset + length`` is not below
    2**63 (one vectorised pass per table)."""
    from refset.model.builder import check_ends

    for path, t in tables.items():
        flat, kind, _, off, ln = t.entries() if t.is_sparse else (None, t.kind, None, t.offset, t.length)
        bad = check_ends(kind, off, ln)
        if bad >= 0:
            i = bad if flat is None else int(flat[bad])
            raise InvalidReferences(f"array {path!r}, chunk {i} (flat index): offset {int(off[bad])} + "
                                    f"length {int(ln[bad])} must be below 2**63")
    bad = check_ends(other.kind, other.offset, other.length)
    if bad >= 0:
        raise InvalidReferences(f"refs[{other.keys[bad]!r}]: offset {int(other.offset[bad])} + length "
                                f"{int(other.length[bad])} must be below 2**63")
