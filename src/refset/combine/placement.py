"""Placing every input's chunks into the combined grids: array arithmetic on the columns of all inputs
at once (:class:`~._inputs.Rows`), no Python per chunk and no numpy call per input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from refset.combine.coords import Coordinate
from refset.combine.decoding import (
    attrs_difference,
    bounds_parent,
    calendars_needing_dates,
    decoding_attrs,
    decoding_codecs,
    same_calendar_after_1582,
    time_encoding,
)
from refset.combine.inputs import Inputs, Rows, inline_rows
from refset.combine.values import fetched_zattrs, read_arrays, zarray, zattrs
from refset.errors import InvalidReferences, Unsupported
from refset.model.inline import positions_in
from refset.model.keys import ChunkGrid
from refset.model.producer import metadata_bytes
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, ChunkTable, KeyTable

__all__ = ["Combiner"]

#: Values of time variables read to see whether two calendars agree on them (at most).
_DATES_CHECKED = 1 << 22
_LAYOUT = ("chunks", "dtype", "compressor", "filters", "fill_value", "order", "dimension_separator")


class Combiner:
    def __init__(self, inputs: Inputs, coords: list[Coordinate], identical: set[str], check: bool,
                 so: Mapping[str, Any]) -> None:
        # so: fsspec options for the data files the references point into (identical dims' values)
        self.inputs, self.names, self.coords = inputs, inputs.names, coords
        self.identical, self.check, self.so = identical, check, so
        self.dim_names = {c.dim for c in coords}
        self.new = [c for c in coords if c.new]
        self.meta: dict[str, bytes] = {}
        self.tables: dict[str, ChunkTable] = {}
        self.maps: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}  # chunk maps per dim
        self.parents: dict[str, str] = {}  # variable -> the variable whose bounds it is ("": none)

    def build(self) -> ReferenceSet:
        first = self.inputs.meta[0]
        for key in self.inputs.group_keys(0):
            self.meta[key] = first[key]  # type: ignore[assignment]
        for path in self.inputs.paths():
            if path not in self.dim_names:
                self.variable(path)
        for c in self.coords:
            self.coordinate(c)
        other = KeyTable.from_items({k: (INLINE, 0, 0, 0, v) for k, v in self.meta.items()})
        return ReferenceSet.from_tables(self.inputs.urls, self.tables, other, {"format": "memory"})

    # -- one variable -------------------------------------------------------------------------------
    def variable(self, path: str) -> None:
        inp = self.inputs
        key = f"{path}/.zarray"
        have = [i for i in range(inp.n) if path in inp.grids[i] and key in inp.meta[i]]
        if not have:
            return
        i0 = have[0]
        meta = zarray(inp.meta[i0], path)
        attrs = zattrs(inp.meta[i0], path)
        dims = list(attrs.get("_ARRAY_DIMENSIONS") or [])
        axes = {d: dims.index(d) for d in self.dim_names if d in dims}
        leaf = path.rsplit("/", 1)[-1]
        gains = [c for c in self.new if leaf not in self.identical and dims != [leaf]]  # not a dim coordinate
        if not axes and not gains:
            return self.copy(path, i0, have, meta)
        raw0 = inp.meta[i0][key]
        for i in have[1:]:
            if inp.meta[i][key] != raw0:  # the same document: the same layout
                self.same_layout(path, i0, i, meta, axes)
        self.same_decoding(path, i0, have, dims)
        shape = [len(c.values) for c in gains] + [
            len(self.coord(d).values) if d in axes else s for d, s in zip(dims, meta["shape"])]
        chunks = [1] * len(gains) + list(meta["chunks"])
        grid0 = inp.grids[i0][path]
        grid = ChunkGrid(tuple(shape), tuple(chunks), grid0.separator, grid0.prefix, 2)
        rows = inp.rows(path)
        sel: slice | np.ndarray = slice(None)
        if len(have) < int(np.count_nonzero(np.diff(rows.bounds))):  # inputs with a grid but no .zarray
            sel = np.isin(rows.owner, have)
        owner, flat = rows.owner[sel], rows.flat[sel]
        dst = np.empty(len(flat), np.int64)
        by_shape: dict[tuple[int, ...], list[int]] = {}
        for i in have:
            by_shape.setdefault(inp.grids[i][path].grid_shape, []).append(i)
        for src, members in by_shape.items():
            part = slice(None) if len(by_shape) == 1 else np.isin(owner, members)
            own = owner[part]
            idx = [np.searchsorted(c.values, c.first)[own] for c in gains]
            idx += list(np.unravel_index(flat[part], src)) if src else []
            lead = len(gains)
            for a, d in enumerate(dims):
                if d in axes:
                    g = inp.grids[members[0]][path]
                    m = self.chunk_map(path, d, g.shape[a], g.chunks[a], members)
                    idx[lead + a] = m[own, idx[lead + a]]
            dst[part] = np.ravel_multi_index(tuple(idx), grid.grid_shape) if idx else 0
        cols = [dst, rows.kind[sel], rows.path_id[sel], rows.offset[sel], rows.length[sel]]
        inl = inline_rows(rows, sel)
        first = self.overlaps(path, grid, dst, owner, strict=len(axes) + len(gains) == len(self.coords))
        if first is not None:  # a variable off some concat dims: the first input holding a chunk gives it
            cols = [c[first] for c in cols]
            at = positions_in(first, inl.flat)  # the kept rows' new places
            kept = np.flatnonzero(at >= 0)
            inl = inl.take(kept).moved(at[kept])
        self.tables[path] = ChunkTable.from_entries(grid, *cols, inline=inl.moved(cols[0][inl.flat]))
        new_dims = [c.dim for c in gains]
        self.meta[f"{path}/.zarray"] = metadata_bytes({**meta, "shape": shape, "chunks": chunks},
                                                      f"{path}/.zarray")
        parent = self.parents.get(path)
        if parent in self.dim_names and "units" not in attrs and self.coord(parent).decoded:
            attrs = {**attrs, **self.coord(parent).decoded}  # bounds of times now held as datetime64
        self.meta[f"{path}/.zattrs"] = metadata_bytes({**attrs, "_ARRAY_DIMENSIONS": new_dims + dims},
                                                      f"{path}/.zattrs")

    def overlaps(self, path: str, grid: ChunkGrid, dst: np.ndarray, owners: np.ndarray,
                 strict: bool) -> np.ndarray | None:
        """Inputs placed on the same chunk: an error naming them when the variable has every concat
        dim (the inputs' coordinates are the same), else the rows to keep (the first of each)."""
        order = np.argsort(dst, kind="stable")
        same = np.flatnonzero(dst[order][1:] == dst[order][:-1])
        if not same.size:
            return None
        if not strict:
            return np.sort(order[np.concatenate(([True], dst[order][1:] != dst[order][:-1]))])
        a, b = order[same[0]], order[same[0] + 1]
        key = grid.chunk_key(np.unravel_index(int(dst[a]), grid.grid_shape))
        raise InvalidReferences(f"variable {path!r}: inputs {self.names[owners[a]]!r} and "
                                f"{self.names[owners[b]]!r} both hold chunk {key!r}: their "
                                "coordinates along the concat dims are the same")

    def coord(self, dim: str) -> Coordinate:
        return next(c for c in self.coords if c.dim == dim)

    def chunk_map(self, path: str, dim: str, n: int, chunk: int, members: Sequence[int]) -> np.ndarray:
        """``m[i, j]``: where input ``i``'s chunk ``j`` along ``dim`` (``n`` steps in chunks of
        ``chunk``) goes in the combined grid, for ``members``. Each chunk's values must fill one
        combined chunk (a short last chunk: the end of the combined coordinate)."""
        nin = self.inputs.n
        m, done = self.maps.get((dim, n, chunk)) or (np.zeros((nin, -(-n // chunk)), np.int64),
                                                      np.zeros(nin, bool))
        self.maps[(dim, n, chunk)] = m, done
        todo = np.asarray(members, np.int64)
        todo = todo[~done[todo]]
        if not todo.size:
            return m
        c = self.coord(dim)
        wrong = todo[c.sizes[todo] != n]
        if wrong.size:
            i = int(wrong[0])
            raise InvalidReferences(f"variable {path!r} of input {self.names[i]!r}: {n} steps along "
                                    f"{dim!r} but {int(c.sizes[i])} coordinate values")
        pos = np.searchsorted(c.values, c.flat[c.starts[todo][:, None] + np.arange(n)])
        if n > 1:
            dec = ~(np.diff(pos, axis=1) > 0).all(axis=1)
            if dec.any():
                raise InvalidReferences(f"concat dim {dim!r}: the values of input "
                                        f"{self.names[int(todo[np.argmax(dec)])]!r} are not increasing")
        starts = pos[:, ::chunk]
        want = np.repeat(starts, chunk, axis=1)[:, :n] + np.tile(np.arange(chunk), starts.shape[1])[:n]
        off = (pos != want) | np.repeat(starts % chunk != 0, chunk, axis=1)[:, :n]
        short = (starts[:, -1] + n % chunk != len(c.values)) if n % chunk else np.zeros(len(todo), bool)
        bad = off.any(axis=1) | short
        if bad.any():
            r = int(np.argmax(bad))
            step = n - 1 if short[r] else int(np.argmax(off[r]))
            raise Unsupported(
                f"variable {path!r}: input {self.names[int(todo[r])]!r} has {n} steps along {dim!r} in chunks "
                f"of {chunk}; its step {step} is step {int(pos[r, step])} of the combined {len(c.values)}: "
                "its chunks do not fall on the combined chunk grid")
        m[todo] = starts // chunk
        done[todo] = True
        return m

    def same_layout(self, path: str, i0: int, i: int, meta: Mapping[str, Any], axes: Mapping[str, int]) -> None:
        other = zarray(self.inputs.meta[i], path)
        for field in _LAYOUT:
            if other.get(field) != meta.get(field) and not (
                    field == "fill_value" and _same_nan(other.get(field), meta.get(field))):
                if field in ("compressor", "filters") and decoding_codecs(other) == decoding_codecs(meta):
                    continue  # e.g. zlib levels 2 and 6: one decoder
                raise Unsupported(f"variable {path!r}: {field} {other.get(field)!r} in input "
                                  f"{self.names[i]!r} differs from {meta.get(field)!r} in input "
                                  f"{self.names[i0]!r}")
        off = [a for a in range(len(meta["shape"])) if a not in axes.values()]
        if [other["shape"][a] for a in off] != [meta["shape"][a] for a in off] or len(
                other["shape"]) != len(meta["shape"]):
            raise Unsupported(f"variable {path!r}: shape {other['shape']} in input {self.names[i]!r} "
                              f"differs from {meta['shape']} in input {self.names[i0]!r} off the concat dims")

    def same_decoding(self, path: str, i0: int, have: list[int], dims: list[str]) -> None:
        """Every input's chunks of ``path`` are decoded with the first input's attributes: those that
        decoding reads (:mod:`._decoding`) must agree, and the dims; refused naming both inputs."""
        inp = self.inputs
        key = f"{path}/.zattrs"
        m0 = inp.meta[i0]
        parent = self.parent(path, i0)
        pkey = f"{parent}/.zattrs"
        raw0, praw0 = m0.get(key), m0.get(pkey) if parent else None
        want: dict[str, Any] | None = None
        dated: list[int] = []
        for i in have[1:]:
            m = inp.meta[i]
            if m.get(key) == raw0 and (not parent or m.get(pkey) == praw0):
                continue  # the same documents
            if want is None:
                want = decoding_attrs(self.attrs(i0, path), self.attrs(i0, parent) if parent else None)
            attrs = self.attrs(i, path)
            got_dims = list(attrs.get("_ARRAY_DIMENSIONS") or [])
            if got_dims != dims:
                raise Unsupported(f"variable {path!r}: dims {got_dims} in input {self.names[i]!r} differ from "
                                  f"{dims} in input {self.names[i0]!r}")
            got = decoding_attrs(attrs, self.attrs(i, parent) if parent else None)
            diff = attrs_difference(want, got)
            if diff is not None:
                name, a, b = diff
                raise Unsupported(
                    f"variable {path!r}: {name} {_shown(b)} in input {self.names[i]!r} differs from {_shown(a)} "
                    f"in input {self.names[i0]!r}" + (f" (inherited from {parent!r}, whose bounds it is)"
                                                       if name in ("units", "calendar") and parent else "")
                    + ": the combined variable is decoded with one set of attributes (refset does not "
                    "combine such inputs yet)")
            if calendars_needing_dates(want, got):
                dated.append(i)
        if dated:
            self.dates_after_1582(path, i0, dated, parent)

    def attrs(self, i: int, path: str) -> dict[str, Any]:
        """Input ``i``'s attributes of ``path`` (read from the file a reference names, if so)."""
        return fetched_zattrs(self.inputs.meta[i], path, self.so)

    def parent(self, path: str, i0: int) -> str:
        """The variable whose ``bounds`` names ``path`` in input ``i0`` ("" when none)."""
        got = self.parents.get(path)
        if got is None:
            m0 = self.inputs.meta[i0]
            got = self.parents[path] = bounds_parent(m0, path, lambda p: zattrs(m0, p)) or ""
        return got

    def dates_after_1582(self, path: str, i0: int, which: list[int], parent: str) -> None:
        """Inputs whose times are ``standard`` where the first's are ``proleptic_gregorian`` (or the
        reverse) combine when their dates lie on or after 1582-10-15, where the two agree: read and
        checked (bounds and other time variables are small)."""
        inp = self.inputs
        size = sum(int(np.prod(inp.grids[i][path].shape, dtype=np.int64)) for i in which)
        values = read_arrays(inp, path, which, self.so) if size <= _DATES_CHECKED else None
        for k, i in enumerate(which):
            units, cal = time_encoding(zattrs(inp.meta[i], path), zattrs(inp.meta[i], parent) if parent else None)
            if values is None or not same_calendar_after_1582(values[k], units, cal):
                raise Unsupported(
                    f"variable {path!r}: calendar {cal!r} in input {self.names[i]!r} differs from "
                    f"the calendar of input {self.names[i0]!r}, and its dates "
                    + ("are too many to check" if values is None else "reach before 1582-10-15")
                    + ", where the two calendars disagree")

    def copy(self, path: str, i0: int, have: list[int], meta: Mapping[str, Any]) -> None:
        """A variable without concat dims: the first input's, checked when it is an identical dim."""
        inp = self.inputs
        leaf = path.rsplit("/", 1)[-1]
        if self.check and (leaf in self.identical or path in self.identical) and len(have) > 1:
            for i in have[1:]:
                if zarray(inp.meta[i], path)["shape"] != meta["shape"]:
                    raise InvalidReferences(f"identical dim {path!r}: shape {zarray(inp.meta[i], path)['shape']} "
                                            f"in input {self.names[i]!r}, {meta['shape']} in {self.names[i0]!r}")
            values = read_arrays(inp, path, have, self.so)
            seen = {id(values[0])}  # inputs with the same references share one decoded array
            for i, v in zip(have[1:], values[1:]):
                if id(v) in seen:
                    continue
                seen.add(id(v))
                if not np.array_equal(v, values[0], equal_nan=v.dtype.kind in "fc"):
                    raise InvalidReferences(f"identical dim {path!r}: values in input {self.names[i]!r} "
                                            f"differ from input {self.names[i0]!r}")
        self.tables[path] = _table_of(inp.rows(path), i0, inp.grids[i0][path])
        for suffix in (".zarray", ".zattrs"):
            if f"{path}/{suffix}" in inp.meta[i0]:
                self.meta[f"{path}/{suffix}"] = inp.meta[i0][f"{path}/{suffix}"]  # type: ignore[assignment]

    def coordinate(self, c: Coordinate) -> None:
        """The concat dim's coordinate, written inline in one chunk."""
        values = c.values
        if values.dtype.kind == "O":
            raise Unsupported(f"concat dim {c.dim!r}: coordinate values of Python type "
                              f"{type(values[0]).__name__} have no zarr dtype; give coo_dtypes")
        base = {}
        for m in self.inputs.meta:
            if f"{c.dim}/.zarray" in m:
                base = zarray(m, c.dim)
                break
        n = len(values)
        from refset.scan.writer import dtype_json

        self.meta[f"{c.dim}/.zarray"] = metadata_bytes({
            "chunks": [n], "compressor": None, "dtype": dtype_json(values.dtype),
            "fill_value": base.get("fill_value") if base.get("dtype") == dtype_json(values.dtype) else None,
            "filters": None, "order": "C", "shape": [n], "zarr_format": 2,
        }, f"{c.dim}/.zarray")
        self.meta[f"{c.dim}/.zattrs"] = metadata_bytes({**c.attrs, "_ARRAY_DIMENSIONS": [c.dim]},
                                                       f"{c.dim}/.zattrs")
        grid = ChunkGrid((n,), (n,))
        one = np.zeros(1, np.int64)
        self.tables[c.dim] = ChunkTable.from_entries(
            grid, one, np.array([INLINE], np.uint8), one, one, one,
            inline={0: np.ascontiguousarray(values).tobytes()})


def _table_of(rows: Rows, i: int, grid: ChunkGrid) -> ChunkTable:
    """Input ``i``'s table of ``rows``' variable."""
    s = rows.of(i)
    flat = rows.flat[s]
    inline = inline_rows(rows, s)
    return ChunkTable.from_entries(grid, flat, rows.kind[s], rows.path_id[s], rows.offset[s], rows.length[s],
                                   inline=inline.moved(flat[inline.flat]))


def _shown(v: Any) -> str:
    return "absent" if v is None else repr(v)


def _same_nan(a: Any, b: Any) -> bool:
    return a == b or (a == "NaN" and b == "NaN")
