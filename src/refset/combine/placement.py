"""Placing every input's chunks into the combined grids: array arithmetic on the columns of all inputs
at once (:class:`~._inputs.Rows`), no Python per chunk and no numpy call per input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from refset.combine.coords import Coordinate
from refset.combine.parts import input_parts, place_parts
from refset.combine.values import attributes_of, digests, read_arrays
from refset.errors import InvalidReferences, Unsupported
from refset.model.array import Array
from refset.model.decoding import (
    absent_reads_missing,
    attrs_difference,
    bounds_parent,
    calendars_needing_dates,
    decoding_attrs,
    decoding_codecs,
    missing_fill,
    same_calendar_after_1582,
    time_encoding,
)
from refset.model.dtypes import dtype_json
from refset.model.inline import positions_in
from refset.model.metadata import ArrayMetadata
from refset.model.parts import Parts
from refset.model.refset import ReferenceSet
from refset.model.stack import Rows, SetStack, inline_rows
from refset.model.table import INLINE, RANGE, WHOLE, ChunkTable, KeyTable

__all__ = ["Combiner"]

#: Values of time variables read to see whether two calendars agree on them (at most).
_DATES_CHECKED = 1 << 22
#: Places along a variable's concat dims checked one by one for rows no input holds (more: assumed).
_HOLES_CHECKED = 1 << 24


class Combiner:
    def __init__(self, inputs: SetStack, coords: list[Coordinate], identical: set[str], check: bool,
                 so: Mapping[str, Any], kept: set[str] | None = None) -> None:
        # so: fsspec options for the data files the references point into (identical dims' values)
        self.inputs, self.names, self.coords = inputs, inputs.names, coords
        self.fingerprints = inputs.all_fingerprints()  # first: inputs made from two versions of a file
        self.identical, self.check, self.so = identical, check, so
        #: variables without the new dims that every input holds alike, decided for all the inputs of a
        #: combine done in parts (None: decided here, from these inputs)
        self.kept = kept
        self.dim_names = {c.dim for c in coords}
        self.new = [c for c in coords if c.new]
        self.meta: dict[str, Any] = {}  # group-level keys (and array documents kept as references)
        self.arrays: dict[str, Array] = {}
        self.maps: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}  # chunk maps per dim
        self.parents: dict[str, str] = {}  # variable -> the variable whose bounds it is ("": none)
        self.mixed: list[dict[str, Parts]] = []
        self.done: set[str] = set()

    def build(self) -> ReferenceSet:
        first = self.inputs.meta[0]
        self.mixed = input_parts(self.inputs)  # per input, its variables made of parts
        mixed = {p for m in self.mixed for p in m}
        of_parts = {q for m in self.mixed for layout in m.values() for q in layout.paths()}
        for key in self.inputs.group_keys(0):
            if key.rpartition("/")[0] not in mixed:  # a layout of parts is made anew
                self.meta[key] = first[key]
        for path in [*self.inputs.paths(), *sorted(mixed)]:
            if path not in self.dim_names and path not in of_parts:
                self.variable(path)
        for c in self.coords:
            self.coordinate(c)
        urls = list(self.inputs.urls)
        ids = {u: i for i, u in enumerate(urls)}
        rows: dict[str, tuple[int, int, int, int, bytes | None]] = {}
        for k, v in self.meta.items():
            if isinstance(v, bytes):
                rows[k] = (INLINE, 0, 0, 0, v)
                continue
            pid = ids.setdefault(v[0], len(ids))  # a document stored in a file, kept as a reference
            if pid == len(urls):
                urls.append(v[0])
            rows[k] = (RANGE, pid, v[1], v[2], None) if len(v) == 3 else (WHOLE, pid, 0, 0, None)
        return ReferenceSet.from_arrays({}, self.arrays, urls, other=KeyTable.from_items(rows), validate=False,
                                        fingerprints=self.fingerprints)

    # -- one variable -------------------------------------------------------------------------------
    def variable(self, path: str) -> None:
        if path in self.done:
            return
        self.done.add(path)
        inp = self.inputs
        have = [i for i in range(inp.n) if path in inp.metadata[i]]
        if any(path in m for m in self.mixed):  # some input holds it as parts: so does the result
            return self.in_parts(path, None)
        if not have:
            return
        i0 = have[0]
        meta = inp.metadata[i0][path]
        attrs = self.attrs(i0, path)
        dims = list(attrs.pop("_ARRAY_DIMENSIONS", None) or [])
        axes = {d: dims.index(d) for d in self.dim_names if d in dims}
        leaf = path.rsplit("/", 1)[-1]
        gains = [c for c in self.new if leaf not in self.identical and dims != [leaf]]  # not a dim coordinate
        if gains and not axes and self.alike_everywhere(path, have):
            gains = []  # the same in every input (a scalar coordinate, a mask): kept as it is, as xarray does
        if not axes and not gains:
            return self.copy(path, i0, have, meta)
        if len(axes) == 1 and len(self.coords) == 1 and not gains:
            try:
                return self.regular(path, i0, have, meta, attrs, dims, axes, gains)
            except Unsupported as e:  # inputs that differ in layout or decoding: parts
                return self.in_parts(path, e)
        if not axes and len(self.coords) == 1 and gains:
            try:
                return self.regular(path, i0, have, meta, attrs, dims, axes, gains)
            except Unsupported as e:  # along a new dim too
                return self.lifted_parts(path, e)
        return self.regular(path, i0, have, meta, attrs, dims, axes, gains)

    def lifted_parts(self, path: str, refused: Unsupported | None) -> None:
        """``path`` combined along the one new dim as a variable made of parts: each input's array
        given the dim (length 1) first, then placed as along an existing dim (:meth:`in_parts`)."""
        c = self.coords[0]
        if any(path in m for m in self.mixed):
            raise refused or Unsupported(f"variable {path!r}: made of parts in an input; parts are combined "
                                         "along their own dim only")
        if any(isinstance(self.inputs.meta[i].get(f"{path}/.zattrs"), tuple) for i in range(self.inputs.n)):
            raise refused or Unsupported(f"variable {path!r}: its attributes are stored in a file")
        place_parts(_Lifted(self, self.inputs.lifted(path, c.dim)), path, c.dim, [{} for _ in self.mixed], refused)

    def in_parts(self, path: str, refused: Unsupported | None) -> None:
        """``path`` as a variable made of parts (:mod:`.parts`); ``refused``: why it is not regular."""
        c = self.coords[0]
        if len(self.coords) != 1 or c.new:
            raise refused or Unsupported(f"variable {path!r}: made of parts in an input; parts are combined "
                                         "along one existing concat dim only")
        place_parts(self, path, c.dim, self.mixed, refused)

    def regular(self, path: str, i0: int, have: list[int], meta: ArrayMetadata, attrs: dict[str, Any],
                dims: list[str], axes: dict[str, int], gains: list[Coordinate]) -> None:
        """``path`` as one regular array: every input's layout and decoding alike, on one chunk grid."""
        inp = self.inputs
        for i in have[1:]:
            if inp.metadata[i][path] != meta:  # the same documents: the same layout
                self.same_layout(path, i0, i, meta, axes)
        self.same_decoding(path, i0, have, dims)
        shape = [len(c.values) for c in gains] + [
            len(self.coord(d).values) if d in axes else s for d, s in zip(dims, meta.shape)]
        chunks = [1] * len(gains) + list(meta.chunks)
        new_dims = [c.dim for c in gains]
        parent = self.parents.get(path)
        if parent in self.dim_names and "units" not in attrs and self.coord(parent).decoded:
            attrs = {**attrs, **self.coord(parent).decoded}  # bounds of times now held as datetime64
        out = meta.replace(shape=shape, chunks=chunks, attributes=attrs, dimension_names=new_dims + dims)
        if len(have) < inp.n and self.holes(have, [d for d in dims if d in axes] + [c.dim for c in gains]) \
                and not absent_reads_missing(out, attrs):
            # rows no input holds read as the fill value: one that decodes as missing, as
            # xr.open_mfdataset fills them (NaN), or else a part of missing values
            fill = missing_fill(out, attrs)
            if fill is None or not self.complete(path, have):
                return self.missing_part(path, have, out, gains)
            out = out.replace(fill_value=fill)
        grid = out.grid
        rows = inp.rows(path)
        sel: slice | np.ndarray = slice(None)
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
        flat_at, kind, path_id, offset, length = cols
        self.arrays[path] = Array(out, ChunkTable.from_entries(grid, flat_at, kind, path_id, offset, length,
                                                               inline=inl.moved(cols[0][inl.flat])))

    def alike_everywhere(self, path: str, have: list[int]) -> bool:
        """Whether every input holds ``path`` alike (:func:`~refset.combine.values.digests`; a combine in
        parts on a cluster decides it once for all its inputs: ``kept``). Such a variable does not gain
        a new dim (xarray's ``data_vars="different"``: what differs is concatenated, what is equal
        kept)."""
        if self.kept is not None:
            return path in self.kept
        if len(have) != self.inputs.n:
            return False
        return len(set(digests(self.inputs, path, have, self.so))) == 1

    def holes(self, have: list[int], dims: list[str]) -> bool:
        """Whether the places along concat dims ``dims`` (one cell per combination of their values)
        are not all held by the inputs ``have``."""
        lacking = np.setdiff1d(np.arange(self.inputs.n), have)
        coords = [self.coord(d) for d in dims]
        if not lacking.size or not any(c.sizes[lacking].any() for c in coords):
            return False
        shape = [len(c.values) for c in coords]
        if int(np.prod(shape, dtype=np.int64)) > _HOLES_CHECKED:
            return True
        held = np.zeros(shape, bool)
        if len(coords) == 1:  # one numpy pass over every input's values
            c = coords[0]
            owner = np.repeat(np.arange(self.inputs.n), c.sizes)
            held[np.searchsorted(c.values, c.flat[np.isin(owner, have)])] = True
        else:
            for i in have:
                held[np.ix_(*(np.searchsorted(c.values, c.flat[c.starts[i]:c.starts[i] + c.sizes[i]])
                              for c in coords))] = True
        return not bool(held.all())

    def complete(self, path: str, have: list[int]) -> bool:
        """Whether every input in ``have`` holds a reference for each chunk of ``path`` (no chunk of
        theirs reads as the fill value)."""
        inp = self.inputs
        counts = np.diff(inp.rows(path).bounds)
        return all(int(counts[i]) == inp.grids[i][path].nchunks for i in have)

    def missing_part(self, path: str, have: list[int], out: ArrayMetadata, gains: list[Coordinate]) -> None:
        """``path``, which some inputs lack and whose fill value cannot read as missing without changing
        stored values (integers without ``_FillValue``), as a variable made of parts: the rows no input
        holds a part of missing values, as ``xr.open_mfdataset`` fills them."""
        if len(self.coords) == 1 and not gains:
            place_parts(self, path, self.coords[0].dim, self.mixed, None)
            return
        if len(self.coords) == 1:
            self.lifted_parts(path, None)
            return
        lacking = [self.names[i] for i in range(self.inputs.n) if i not in set(have)]
        raise Unsupported(
            f"variable {path!r}: missing from {len(lacking)} input(s) ({', '.join(map(repr, lacking[:3]))}"
            f"{', ...' if len(lacking) > 3 else ''}), and as {out.dtype} without a fill value xarray masks its rows "
            f"there would read {out.fill!r} where xr.open_mfdataset gives NaN; refset fills such rows with a part "
            "of missing values when combining along one dim only (drop the variable, or combine along one dim)")

    def overlaps(self, path: str, grid: Any, dst: np.ndarray, owners: np.ndarray,
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

    def same_layout(self, path: str, i0: int, i: int, meta: ArrayMetadata, axes: Mapping[str, int]) -> None:
        """Input ``i``'s layout of ``path`` is the first input's, as decoding reads it."""
        other = self.inputs.metadata[i][path]
        fields = {
            "zarr format": (other.zarr_format, meta.zarr_format),
            "chunks": (list(other.chunks), list(meta.chunks)),
            "dtype": (other.dtype_json, meta.dtype_json),
            "codecs": (decoding_codecs(other), decoding_codecs(meta)),
            "fill_value": (other.fill_value, meta.fill_value),
            "order": (other.order, meta.order),
        }  # not the chunk keys' separator: tables are by chunk index, the output spells keys as the first input
        for field, (got, want) in fields.items():
            if got != want and not (field == "fill_value" and _same_nan(got, want)):
                if field == "codecs":  # e.g. zlib levels 2 and 6 are one decoder: not a difference
                    got, want = _spelled(other), _spelled(meta)
                    field = "filters" if other.zarr_format == 2 and other.filters != meta.filters else (
                        "compressor" if other.zarr_format == 2 else "codecs")
                raise Unsupported(f"variable {path!r}: {field} {got!r} in input {self.names[i]!r} differs from "
                                  f"{want!r} in input {self.names[i0]!r}")
        off = [a for a in range(meta.ndim) if a not in axes.values()]
        if other.ndim != meta.ndim or [other.shape[a] for a in off] != [meta.shape[a] for a in off]:
            raise Unsupported(f"variable {path!r}: shape {list(other.shape)} in input {self.names[i]!r} "
                              f"differs from {list(meta.shape)} in input {self.names[i0]!r} off the concat dims")

    def same_decoding(self, path: str, i0: int, have: list[int], dims: list[str]) -> None:
        """Every input's chunks of ``path`` are decoded with the first input's attributes: those that
        decoding reads (:mod:`.decoding`) must agree, and the dims; refused naming both inputs."""
        parent = self.parent(path, i0)
        same0 = self.attrs_identity(i0, path), self.attrs_identity(i0, parent) if parent else None
        want: dict[str, Any] | None = None
        dated: list[int] = []
        for i in have[1:]:
            if (self.attrs_identity(i, path), self.attrs_identity(i, parent) if parent else None) == same0:
                continue  # the same documents
            if want is None:
                want = decoding_attrs(self.attrs(i0, path), self.attrs(i0, parent) if parent else None)
            attrs = self.attrs(i, path)
            got_dims = list(attrs.pop("_ARRAY_DIMENSIONS", None) or [])
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
        """Input ``i``'s attributes of ``path`` with its dims as ``_ARRAY_DIMENSIONS`` (read from the file
        a reference names, if so): a new dict."""
        return attributes_of(self.inputs, i, path, self.so)

    def attrs_identity(self, i: int, path: str) -> Any:
        """What input ``i``'s attributes of ``path`` are read from: equal for equal attributes."""
        m = self.inputs.metadata[i].get(path)
        key = f"{path}/.zattrs" if path else ".zattrs"
        return (m.documents().get(".zattrs", m.documents().get("zarr.json")) if m is not None else None,
                self.inputs.meta[i].get(key))

    def parent(self, path: str, i0: int) -> str:
        """The variable whose ``bounds`` names ``path`` in input ``i0`` ("" when none)."""
        got = self.parents.get(path)
        if got is None:
            got = self.parents[path] = bounds_parent(self.inputs.metadata[i0], path) or ""
        return got

    def dates_after_1582(self, path: str, i0: int, which: list[int], parent: str) -> None:
        """Inputs whose times are ``standard`` where the first's are ``proleptic_gregorian`` (or the
        reverse) combine when their dates lie on or after 1582-10-15, where the two agree: read and
        checked (bounds and other time variables are small)."""
        inp = self.inputs
        size = sum(int(np.prod(inp.grids[i][path].shape, dtype=np.int64)) for i in which)
        values = read_arrays(inp, path, which, self.so) if size <= _DATES_CHECKED else None
        for k, i in enumerate(which):
            units, cal = time_encoding(self.attrs(i, path), self.attrs(i, parent) if parent else None)
            if values is None or not same_calendar_after_1582(values[k], units, cal):
                raise Unsupported(
                    f"variable {path!r}: calendar {cal!r} in input {self.names[i]!r} differs from "
                    f"the calendar of input {self.names[i0]!r}, and its dates "
                    + ("are too many to check" if values is None else "reach before 1582-10-15")
                    + ", where the two calendars disagree")

    def copy(self, path: str, i0: int, have: list[int], meta: ArrayMetadata) -> None:
        """A variable without concat dims: the first input's, checked when it is an identical dim. One
        that has a concat dim in another input is refused (the others' values would be lost); a
        dimension coordinate whose values the inputs hold inline is compared (a variable along it
        would be labelled with the first input's values)."""
        inp = self.inputs
        leaf = path.rsplit("/", 1)[-1]
        for i in have[1:]:
            other = {d for d in inp.metadata[i][path].dimension_names or () if d is not None} & self.dim_names
            if other:
                raise Unsupported(f"variable {path!r}: has concat dim {sorted(other)[0]!r} in input "
                                  f"{self.names[i]!r} but not in input {self.names[i0]!r}: every input must "
                                  "hold it alike (a dim, or a scalar in each)")
        if self.check and list(meta.dimension_names or ()) == [leaf] and len(have) > 1 \
                and leaf not in self.identical and path not in self.identical:  # those are read and compared below
            rows = inp.rows(path)
            first = _inline_of(rows, i0)
            for i in have[1:] if first is not None else []:
                got = _inline_of(rows, i)
                if got is not None and got != first and inp.metadata[i][path] == meta:
                    raise InvalidReferences(f"coordinate {path!r}: values in input {self.names[i]!r} differ "
                                            f"from input {self.names[i0]!r}: the variables along it would be "
                                            "labelled with the first input's")
        if self.check and (leaf in self.identical or path in self.identical) and len(have) > 1:
            for i in have[1:]:
                if inp.metadata[i][path].shape != meta.shape:
                    raise InvalidReferences(f"identical dim {path!r}: shape {list(inp.metadata[i][path].shape)} "
                                            f"in input {self.names[i]!r}, {list(meta.shape)} in {self.names[i0]!r}")
            values = read_arrays(inp, path, have, self.so)
            seen = {id(values[0])}  # inputs with the same references share one decoded array
            for i, v in zip(have[1:], values[1:]):
                if id(v) in seen:
                    continue
                seen.add(id(v))
                if not np.array_equal(v, values[0], equal_nan=v.dtype.kind in "fc"):
                    raise InvalidReferences(f"identical dim {path!r}: values in input {self.names[i]!r} "
                                            f"differ from input {self.names[i0]!r}")
        self.arrays[path] = Array(meta, _table_of(inp.rows(path), i0, meta.grid))
        key = f"{path}/.zattrs" if path else ".zattrs"
        if key in inp.meta[i0]:  # its attributes stored in a file
            self.meta[key] = inp.meta[i0][key]

    def coordinate(self, c: Coordinate) -> None:
        """The concat dim's coordinate, written inline in one chunk."""
        values = c.values
        if values.dtype.kind == "O":
            raise Unsupported(f"concat dim {c.dim!r}: coordinate values of Python type "
                              f"{type(values[0]).__name__} have no zarr dtype; give coo_dtypes")
        base = next((m[c.dim] for m in self.inputs.metadata if c.dim in m), None)
        n = len(values)
        dtype = dtype_json(values.dtype)
        meta = ArrayMetadata.from_v2({
            "chunks": [n], "compressor": None, "dtype": dtype,
            "fill_value": base.to_v2().fill_value if base is not None and base.to_v2().dtype_json == dtype else None,
            "filters": None, "order": "C", "shape": [n], "zarr_format": 2,
        }, {**c.attrs, "_ARRAY_DIMENSIONS": [c.dim]})
        if base is not None and base.zarr_format == 3:
            meta = meta.to_v3()
        one = np.zeros(1, np.int64)
        self.arrays[c.dim] = Array(meta, ChunkTable.from_entries(
            meta.grid, one, np.array([INLINE], np.uint8), one, one, one,
            inline={0: np.ascontiguousarray(values).tobytes()}))


class _Lifted:
    """A combiner's view for one variable placed as parts along a new dim: the inputs lifted
    (:meth:`~refset.model.stack.SetStack.lifted`); what it places goes into the combiner's arrays and
    keys."""

    def __init__(self, comb: Combiner, inputs: SetStack) -> None:
        self.inputs, self.names, self.arrays, self.meta = inputs, comb.names, comb.arrays, comb.meta
        self._comb = comb

    def coord(self, dim: str) -> Coordinate:
        return self._comb.coord(dim)

    def attrs(self, i: int, path: str) -> dict[str, Any]:
        out = attributes_of(self.inputs, i, path, self._comb.so)
        m = self.inputs.metadata[i].get(path)
        if m is not None and m.dimension_names is not None:  # the stored .zattrs holds the dims unlifted
            out["_ARRAY_DIMENSIONS"] = list(m.dimension_names)
        return out

    def parent(self, path: str, i0: int) -> str:
        return self._comb.parent(path, i0)


def _inline_of(rows: Rows, i: int) -> tuple[tuple[int, bytes], ...] | None:
    """Input ``i``'s chunks of ``rows``' variable when every one is inline (their flat indices and
    bytes), else None."""
    s = rows.of(i)
    if s.stop == s.start or not bool((rows.kind[s] == INLINE).all()):
        return None
    return tuple((int(rows.flat[r]), bytes(rows.inline[r])) for r in range(s.start, s.stop))


def _table_of(rows: Rows, i: int, grid: Any) -> ChunkTable:
    """Input ``i``'s table of ``rows``' variable."""
    s = rows.of(i)
    flat = rows.flat[s]
    inline = inline_rows(rows, s)
    return ChunkTable.from_entries(grid, flat, rows.kind[s], rows.path_id[s], rows.offset[s], rows.length[s],
                                   inline=inline.moved(flat[inline.flat]))


def _spelled(m: ArrayMetadata) -> Any:
    """The codecs as the metadata spells them (for messages)."""
    if m.zarr_format == 2:
        return list(m.filters) if m.filters else m.compressor
    return list(m.codecs)


def _shown(v: Any) -> str:
    return "absent" if v is None else repr(v)


def _same_nan(a: Any, b: Any) -> bool:
    same: bool = a == b or (a == "NaN" and b == "NaN")
    return same
