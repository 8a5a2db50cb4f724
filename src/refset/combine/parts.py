"""Combining a variable whose inputs differ in how their values are stored: parts.

Every input's rows of the variable are *pieces* (an input's array, or each part of an input that is
itself made of parts), placed along the concat dim by the input's coordinate values. In the order of
those rows, consecutive pieces that decode alike (the same layout and the same decoding attributes, see
:mod:`refset.model.decoding`) and fall on one chunk grid form one part: a regular array, placed by
array arithmetic on the pieces' columns as a regular combine places inputs. A piece starts a new part
where it decodes otherwise, where it starts off its run's chunk grid, or after a piece whose last chunk
is partial (HDF5 pads it: its padding must never be read as values). One part is a plain array;
several are stored as :mod:`refset.model.parts` describes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from refset.errors import InvalidReferences, Unsupported
from refset.model.array import Array
from refset.model.decoding import CF_DECODING, decoding_attrs, decoding_codecs, is_time_units, time_encoding
from refset.model.inline import concat_inline
from refset.model.metadata import ArrayMetadata
from refset.model.parts import Parts, bounds_of, group_documents, layouts, part_name
from refset.model.stack import SetStack, inline_rows
from refset.model.table import ChunkTable

if TYPE_CHECKING:
    from refset.combine.coords import Coordinate


class Combiner(Protocol):
    """What placing parts needs of :class:`refset.combine.placement.Combiner`."""

    inputs: SetStack
    names: list[str]
    arrays: dict[str, Array]
    meta: dict[str, Any]

    def coord(self, dim: str) -> Coordinate: ...

    def attrs(self, i: int, path: str) -> dict[str, Any]: ...

    def parent(self, path: str, i0: int) -> str: ...

__all__ = ["Piece", "input_parts", "place_parts"]


@dataclass(frozen=True)
class Piece:
    """Rows ``[start, start + n)`` of the combined variable, held by input ``owner`` as its array
    ``src`` (whose own rows begin at ``local`` of the input's)."""

    owner: int
    src: str
    local: int
    n: int
    start: int


def input_parts(inputs: SetStack) -> list[dict[str, Parts]]:
    """Per input, its variables made of parts (most inputs: none, told without parsing JSON)."""
    return [layouts(inputs.meta[i].items(), inputs.metadata[i]) for i in range(inputs.n)]


def place_parts(comb: Combiner, path: str, dim: str, mixed: list[dict[str, Parts]],
                refused: Unsupported | None) -> None:
    """Combine ``path`` along ``dim`` as parts into ``comb`` (its arrays and group keys). ``refused``:
    why the regular placement refused it (raised when the pieces form one part after all)."""
    inp = comb.inputs
    c = comb.coord(dim)
    pieces = _pieces(comb, path, dim, c, mixed)
    if not pieces:
        return
    first = pieces[0]
    meta0 = inp.metadata[first.owner][first.src]
    attrs0 = comb.attrs(first.owner, first.src)
    dims = list(attrs0.pop("_ARRAY_DIMENSIONS", None) or meta0.dimension_names or [])
    axis = dims.index(dim)
    runs = _runs(comb, path, pieces, dims, axis, len(c.values))
    if len(runs) == 1 and refused is not None:
        raise refused  # one part after all: what the regular placement refused stands
    arrays = [_part_array(comb, path, run, start, stop, dims, axis) for run, start, stop in runs]
    if len(arrays) == 1:
        comb.arrays[path] = arrays[0]
        return
    shape = list(arrays[0].metadata.shape)
    shape[axis] = len(c.values)
    layout = Parts(path, dim, tuple(dims), tuple(shape), tuple(part_name(k) for k in range(len(arrays))),
                   bounds_of([stop - start for _, start, stop in runs]))
    for name, arr in zip(layout.paths(), arrays, strict=True):
        comb.arrays[name] = arr
    comb.meta.update(group_documents(layout, _shown_attrs(attrs0), meta0.zarr_format))


def _pieces(comb: Combiner, path: str, dim: str, c: Coordinate, mixed: list[dict[str, Parts]]) -> list[Piece]:
    """Every input's pieces of ``path``, in the order of their rows; each input's values contiguous in
    the combined coordinate and as many as its rows."""
    inp = comb.inputs
    pos = np.searchsorted(c.values, c.flat)
    out: list[Piece] = []
    for i in range(inp.n):
        own: list[tuple[str, int, int]] = []
        if path in inp.metadata[i]:
            m = inp.metadata[i][path]
            names = list(m.dimension_names or ())
            if dim not in names:  # its attributes stored in a file of their own: read
                names = list(comb.attrs(i, path).get("_ARRAY_DIMENSIONS") or ())
            if dim not in names:
                raise Unsupported(f"variable {path!r}: no dim {dim!r} in input {comb.names[i]!r} (dims {names})")
            own.append((path, 0, int(m.shape[names.index(dim)])))
        elif path in mixed[i]:
            lay = mixed[i][path]
            if lay.dim != dim:
                raise Unsupported(f"variable {path!r}: made of parts along {lay.dim!r} in input "
                                  f"{comb.names[i]!r}: it combines along {lay.dim!r} only, not {dim!r}")
            own.extend((s, a, b - a) for s, a, b in zip(lay.paths(), lay.bounds[:-1], lay.bounds[1:], strict=True))
        if not own:
            continue
        n = sum(k for _, _, k in own)
        if int(c.sizes[i]) != n:
            raise InvalidReferences(f"variable {path!r} of input {comb.names[i]!r}: {n} steps along {dim!r} "
                                    f"but {int(c.sizes[i])} coordinate values")
        p = pos[c.starts[i]:c.starts[i] + n]
        if n and not (p == p[0] + np.arange(n)).all():
            raise Unsupported(f"variable {path!r}: the values of input {comb.names[i]!r} along {dim!r} are not "
                              "consecutive in the combined coordinate (they interleave with another input's)")
        out.extend(Piece(i, src, local, k, int(p[0]) + local) for src, local, k in own if k)
    out.sort(key=lambda q: q.start)
    return out


def _runs(comb: Combiner, path: str, pieces: list[Piece], dims: list[str], axis: int,
          total: int) -> list[tuple[list[Piece], int, int]]:
    """The parts: (pieces, first row, end row), covering ``0:total`` in order."""
    inp = comb.inputs
    out: list[tuple[list[Piece], int, int]] = []
    run: list[Piece] = []
    start = 0
    ch = 0
    end = 0  # rows held so far by the run
    partial = False
    key0: Any = None
    for q in pieces:
        m = inp.metadata[q.owner][q.src]
        chunk = int(m.chunks[axis])
        key = _decoding_key(comb, path, q, m, dims, axis, pieces[0])
        if run and key == key0 and chunk == ch and not partial and q.start == end:
            run.append(q)
        else:
            if run:
                out.append((run, start, end))
            if q.start > end:  # rows no input holds: missing values, as xarray fills them
                out.append(([], end, q.start))
            run, start, ch, key0 = [q], q.start, chunk, key
        end = q.start + q.n
        partial = q.n % ch != 0
    out.append((run, start, end))
    if end < total:
        out.append(([], end, total))
    # a part of missing values takes its neighbour's dims and chunks (and time units)
    return [(r or _neighbour(out, k), s, e) for k, (r, s, e) in enumerate(out)]


def _neighbour(out: list[tuple[list[Piece], int, int]], k: int) -> list[Piece]:
    near = [r for r, _, _ in out[k + 1:] + out[:k][::-1] if r]
    return [Piece(near[0][0].owner, near[0][0].src, 0, 0, -1)]  # its metadata only: no rows (start -1)


def _decoding_key(comb: Combiner, path: str, q: Piece, m: ArrayMetadata, dims: list[str], axis: int,
                  q0: Piece) -> Any:
    """What decoding ``q``'s chunks needs, comparable between pieces; the dims and the shape off the
    concat dim checked against the first piece's (a difference there cannot be concatenated)."""
    attrs = comb.attrs(q.owner, q.src)
    got_dims = list(attrs.pop("_ARRAY_DIMENSIONS", None) or m.dimension_names or [])
    m0 = comb.inputs.metadata[q0.owner][q0.src]
    if m.zarr_format != m0.zarr_format:  # one store serves one zarr format
        raise Unsupported(f"variable {path!r}: zarr format {m.zarr_format} in input {comb.names[q.owner]!r} "
                          f"differs from {m0.zarr_format} in input {comb.names[q0.owner]!r}")
    if got_dims != dims:
        raise Unsupported(f"variable {path!r}: dims {got_dims} in input {comb.names[q.owner]!r} differ from "
                          f"{dims} in input {comb.names[q0.owner]!r}")
    off = [a for a in range(len(dims)) if a != axis]
    if [m.shape[a] for a in off] != [m0.shape[a] for a in off]:
        raise Unsupported(f"variable {path!r}: shape {list(m.shape)} in input {comb.names[q.owner]!r} differs "
                          f"from {list(m0.shape)} in input {comb.names[q0.owner]!r} off the concat dim")
    parent = comb.parent(path, q0.owner)
    pattrs = comb.attrs(q.owner, parent) if parent and parent in comb.inputs.metadata[q.owner] else None
    fill = m.fill_value
    # decoding attributes normalised (numbers as floats, NaN equal to NaN); calendars compared as
    # written: each part decodes with its own
    return (m.zarr_format, tuple(m.chunks[a] for a in off), m.dtype_json, decoding_codecs(m),
            "NaN" if fill != fill else fill, m.order, decoding_attrs(attrs, pattrs))


def _part_array(comb: Combiner, path: str, run: list[Piece], start: int, stop: int, dims: list[str],
                axis: int) -> Array:
    """Part ``run`` (rows ``start:stop`` of the whole) as a regular array: the first piece's metadata
    and attributes (with an inherited time ``units``/``calendar`` made its own), its pieces' chunks."""
    inp = comb.inputs
    q0 = run[0]
    m0 = inp.metadata[q0.owner][q0.src]
    attrs = comb.attrs(q0.owner, q0.src)
    attrs.pop("_ARRAY_DIMENSIONS", None)
    parent = comb.parent(path, q0.owner)
    if parent and "units" not in attrs and parent in inp.metadata[q0.owner]:
        units, cal = time_encoding(attrs, comb.attrs(q0.owner, parent))
        if is_time_units(units):
            attrs = {**attrs, "units": units, "calendar": cal}
    shape = list(m0.shape)
    shape[axis] = stop - start
    if q0.start < 0:  # rows no input holds: NaN (NaT for times) where xr.open_mfdataset fills them so
        chunks = list(m0.chunks)
        chunks[axis] = stop - start
        # float32: with the other parts' dtypes it promotes as xarray's fill promotes them (float32
        # stays, int16 becomes float32, int32 and float64 float64)
        missing = ArrayMetadata.from_v2({
            "chunks": chunks, "compressor": None, "dtype": "<f4", "fill_value": "NaN", "filters": None,
            "order": "C", "shape": shape, "zarr_format": 2}, {**_shown_attrs(attrs, times=False),
                                                               "_ARRAY_DIMENSIONS": dims})
        meta = missing.to_v3() if m0.zarr_format == 3 else missing
        none = np.zeros(0, np.int64)
        return Array(meta, ChunkTable.from_entries(meta.grid, none, np.zeros(0, np.uint8), none, none, none))
    meta = m0.replace(shape=shape, attributes=attrs, dimension_names=dims)
    grid = meta.grid
    ch = int(meta.chunks[axis])
    cols: list[list[np.ndarray]] = [[], [], [], [], []]
    stores, flats = [], []
    by_src: dict[tuple[str, tuple[int, ...]], list[Piece]] = {}
    for q in run:
        if q.n:
            by_src.setdefault((q.src, inp.grids[q.owner][q.src].grid_shape), []).append(q)
    for (src, gshape), group in by_src.items():
        rows = inp.rows(src)
        shift = np.zeros(inp.n, np.int64)
        owners = np.array([q.owner for q in group], np.int64)
        shift[owners] = [(q.start - start) // ch for q in group]
        sel = np.isin(rows.owner, owners)
        idx = list(np.unravel_index(rows.flat[sel], gshape))
        idx[axis] = idx[axis] + shift[rows.owner[sel]]
        dst = np.ravel_multi_index(tuple(idx), grid.grid_shape) if idx else np.zeros(int(sel.sum()), np.int64)
        for j, col in enumerate((dst, rows.kind[sel], rows.path_id[sel], rows.offset[sel], rows.length[sel])):
            cols[j].append(col)
        inl = inline_rows(rows, sel)
        stores.append(inl)
        flats.append(dst[inl.flat])
    if cols[0]:
        flat_at, kind, pid, off, ln = (np.concatenate(c) for c in cols)
    else:
        flat_at = pid = off = ln = np.zeros(0, np.int64)
        kind = np.zeros(0, np.uint8)
    return Array(meta, ChunkTable.from_entries(grid, flat_at, kind, pid, off, ln,
                                               inline=concat_inline(stores, flats)))


def _shown_attrs(attrs: Mapping[str, Any], times: bool = True) -> dict[str, Any]:
    """The variable's attributes as a group shows them: without those its parts decode with (but
    the ``units``/``calendar`` of times when ``times`` is False: a part of missing times keeps them)."""
    time = times and is_time_units(attrs.get("units"))
    return {k: v for k, v in attrs.items()
            if k not in CF_DECODING and k != "_ARRAY_DIMENSIONS" and not (time and k in ("units", "calendar"))}
