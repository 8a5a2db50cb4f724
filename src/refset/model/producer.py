"""Checked construction from numpy arrays (``ReferenceSet.from_arrays``): what scanners and combine
hand over. Every check is one vectorised pass; the first problem of each kind is reported with the
array and chunk index where it is."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from refset.errors import InvalidReferences
from refset.model.keys import ChunkGrid, KeyRouter, grid_from_metadata, split_metadata_key
from refset.model.table import INLINE, MAX_END, RANGE, ChunkTable, KeyTable, Row, sparse_grid

__all__ = ["tables_from_arrays", "trusted_parts", "metadata_bytes", "json_text"]

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


def trusted_parts(metadata: Mapping[str, Any], tables: Mapping[str, ChunkTable], urls: Sequence[str],
                  ) -> tuple[tuple[str, ...], dict[str, ChunkTable], KeyTable]:
    """``(urls, tables, other)`` of tables refset's own scanners built, each on the grid its
    ``.zarray`` in ``metadata`` describes (their only metadata keys: ``.zarray``, ``.zattrs``,
    ``.zgroup``); the metadata values are checked and serialised."""
    rows: dict[str, Row] = {key: (INLINE, 0, 0, 0, metadata_bytes(value, f"metadata[{json.dumps(key)}]"))
                            for key, value in metadata.items()}
    return tuple(urls), dict(tables), KeyTable.from_items(rows)


def tables_from_arrays(
    metadata: Mapping[str, Any],
    arrays: Mapping[str, Mapping[str, Any]],
    urls: Sequence[str],
) -> tuple[tuple[str, ...], dict[str, ChunkTable], KeyTable]:
    """Check and convert the arguments of ``ReferenceSet.from_arrays``."""
    if not isinstance(metadata, Mapping):
        raise InvalidReferences(f"metadata: must be a mapping, got {type(metadata).__name__}")
    if not isinstance(arrays, Mapping):
        raise InvalidReferences(f"arrays: must be a mapping, got {type(arrays).__name__}")
    if isinstance(urls, str) or not isinstance(urls, Sequence | np.ndarray):
        raise InvalidReferences(f"urls: must be a sequence of strings, got {type(urls).__name__}")
    url_t = tuple(urls)
    for i, u in enumerate(url_t):
        if not isinstance(u, str):
            raise InvalidReferences(f"urls[{i}]: must be a string, got {type(u).__name__}")
    rows: dict[str, Row] = {}
    grids: dict[str, ChunkGrid] = {}
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise InvalidReferences(f"metadata: key {key!r} must be a string")
        data = metadata_bytes(value, f"metadata[{json.dumps(key)}]")
        rows[key] = (INLINE, 0, 0, 0, data)
        meta = split_metadata_key(key)
        if meta is not None:
            g = grid_from_metadata(meta[1], data)
            if g is not None:
                grids[meta[0]] = g
    router = KeyRouter(grids)
    for key in rows:
        hit = router.locate(key) if grids else None
        if hit is not None:
            raise InvalidReferences(f"metadata[{json.dumps(key)}]: a chunk key of array {hit[0]!r}; "
                                    f"give its chunks in arrays[{json.dumps(hit[0])}]")
    tables: dict[str, ChunkTable] = {}
    for path, spec in arrays.items():
        g = grids.get(path)
        if g is None:
            raise InvalidReferences(
                f"arrays[{json.dumps(path)}]: no chunk grid: metadata has no "
                f"{json.dumps(path + '/.zarray' if path else '.zarray')} (or zarr.json) describing a "
                "regular grid")
        if not isinstance(spec, Mapping):
            raise InvalidReferences(f"arrays[{json.dumps(path)}]: must be a mapping of numpy arrays, "
                                    f"got {type(spec).__name__}")
        tables[path] = _table(path, spec, g, len(url_t))
    for path, g in grids.items():
        if path not in tables:
            tables[path] = ChunkTable.empty(g)  # never written: every chunk is the fill value
    return url_t, tables, KeyTable.from_items(rows)
