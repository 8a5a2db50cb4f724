"""Column tables of references: :class:`ChunkTable` (one zarr array's chunks, dense or sparse) and
:class:`KeyTable` (keys outside any chunk grid), plus the vectorised operations producers need:
:func:`union_urls` and :func:`concat_tables`.

A reference is inline bytes, a whole file ``(url,)`` or a byte range ``(url, offset, length)``. In a
table it is a row ``(kind, path_id, offset, length)`` whose ``path_id`` indexes a URL table held by the
set; inline bytes sit in an :class:`~refset.model.inline.InlineBytes` (one buffer, by flat index). Tables are immutable: columns are read-only
and transforms return new tables.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from refset.errors import InvalidReferences, Unsupported
from refset.model.inline import InlineBytes, _frozen, concat_inline, positions_in
from refset.model.keys import ChunkGrid

__all__ = [
    "ABSENT",
    "RANGE",
    "WHOLE",
    "INLINE",
    "MAX_END",
    "Ref",
    "Row",
    "ChunkTable",
    "KeyTable",
    "GridView",
    "union_urls",
    "concat_tables",
    "resolve",
    "min_uint",
    "encode_inline",
    "v0_value",
    "sparse_grid",
]

# kind codes of the `kind` column
ABSENT, RANGE, WHOLE, INLINE = 0, 1, 2, 3
MAX_END = 1 << 63  # offset + length must stay below this (signed 64-bit file positions)

Ref = bytes | tuple[str] | tuple[str, int, int]
Row = tuple[int, int, int, int, bytes | None]  # kind, path_id, offset, length, inline data

# A grid is held densely (a row per cell) unless it is much larger than what it holds.
DENSE_MIN_CHUNKS = 1 << 20
DENSE_FACTOR = 16
# Largest sparse table turned into dense columns on request (``table.offset`` etc.).
MAX_DENSE_VIEW = 1 << 28


def sparse_grid(nchunks: int, entries: int) -> bool:
    """Whether a grid of ``nchunks`` cells holding ``entries`` references is stored sparsely (an
    empty grid always: metadata-only arrays reserve nothing)."""
    return nchunks > max(DENSE_MIN_CHUNKS, DENSE_FACTOR * entries) or (entries == 0 < nchunks)


def min_uint(maxval: int) -> np.dtype:
    """Smallest unsigned dtype (uint16/32/64) holding ``maxval``."""
    if maxval < 1 << 16:
        return np.dtype(np.uint16)
    if maxval < 1 << 32:
        return np.dtype(np.uint32)
    return np.dtype(np.uint64)


def _compact(a: np.ndarray, floor: type = np.uint32) -> np.ndarray:
    """``a`` (non-negative ints) in the smallest of ``floor``/uint32/uint64 that holds it."""
    return a.astype(_compact_dtype(a, floor), copy=False)


def _compact_dtype(a: np.ndarray, floor: type = np.uint32) -> np.dtype:
    """The dtype :func:`_compact` gives ``a``."""
    if a.dtype.itemsize <= np.dtype(floor).itemsize and a.dtype.kind == "u":
        return a.dtype
    top = int(a.max()) if a.size else 0
    for dt in (floor, np.uint32, np.uint64):
        if top < _UINT_END[np.dtype(dt).itemsize]:
            return np.dtype(dt)
    raise AssertionError("unreachable")


_UINT_END = {1: 1 << 8, 2: 1 << 16, 4: 1 << 32, 8: 1 << 64}


def encode_inline(data: bytes) -> str:
    """Version 0 spelling of inline data: the text when it is ASCII (and does not start with
    ``base64:``), else ``base64:...``."""
    if data.isascii() and not data.startswith(b"base64:"):
        return data.decode("ascii")
    return "base64:" + base64.b64encode(data).decode("ascii")


def v0_value(ref: Ref) -> str | list[object]:
    """A reference as a Version 0 JSON value: inline data as :func:`encode_inline` spells it, else
    ``[url]`` or ``[url, offset, length]``."""
    return encode_inline(ref) if isinstance(ref, bytes) else list(ref)


def resolve(row: Row, urls: Sequence[str], key: str) -> Ref:
    """The Mapping value of a table row; KeyError(key) when the row is absent."""
    kind = row[0]
    if kind == RANGE:
        return (urls[row[1]], row[2], row[3])
    if kind == WHOLE:
        return (urls[row[1]],)
    if kind == INLINE:
        assert row[4] is not None
        return row[4]
    raise KeyError(key)


class GridView(NamedTuple):
    """Columns of a chunk table shaped like its chunk grid (``path_id`` is -1 where no file is
    referenced: absent or inline chunks)."""

    kind: np.ndarray
    path_id: np.ndarray
    offset: np.ndarray
    length: np.ndarray


class ChunkTable:
    """References of one zarr array's chunks.

    Dense (``flat is None``): ``kind`` (uint8: ABSENT/RANGE/WHOLE/INLINE), ``path_id``, ``offset`` and
    ``length`` hold one row per grid cell in C order of chunk index. Sparse: ``flat`` holds the sorted
    flat indices of the present chunks and the columns one row each (memory proportional to what is
    present; chosen by :meth:`from_entries` for grids much larger than what they hold). ``inline`` maps
    flat index to bytes. Use :meth:`entries`, :meth:`take` and :meth:`row`, which work for both.
    """

    __slots__ = ("_kind", "_length", "_offset", "_path_id", "flat", "grid", "inline")

    def __init__(
        self,
        grid: ChunkGrid,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        inline: Mapping[int, bytes] | None = None,
        *,
        flat: np.ndarray | None = None,
    ) -> None:
        n = grid.nchunks if flat is None else len(flat)
        for name, col in (("kind", kind), ("path_id", path_id), ("offset", offset), ("length", length)):
            if col.ndim != 1 or col.shape[0] != n:
                raise InvalidReferences(f"ChunkTable.{name} must have shape ({n},), got {col.shape}")
        if kind.size and int(kind.max()) > INLINE:
            raise InvalidReferences(f"ChunkTable.kind: code {int(kind.max())} is not one of 0..3")
        if flat is not None:
            flat = np.asarray(flat, np.int64)
            if flat.size and (flat[0] < 0 or flat[-1] >= grid.nchunks or not bool((flat[1:] > flat[:-1]).all())
                              or not bool((kind != ABSENT).all())):
                raise InvalidReferences("ChunkTable.flat: the present chunks' flat indices must ascend, "
                                        f"without repeats, inside the grid of {grid.nchunks} chunks")
        inline = InlineBytes.of(inline)
        is_inline = kind == INLINE
        n_inline = int(np.count_nonzero(is_inline))
        rows = self._rows_of(inline.flat, flat, len(kind))
        if n_inline != len(inline) or not bool((rows >= 0).all()) or not bool(is_inline[rows].all()):
            raise InvalidReferences(f"ChunkTable.inline: {len(inline)} inline values for {n_inline} inline "
                                    "chunks; every inline chunk needs its bytes, and only those")
        self._set(grid, kind, path_id, offset, length, inline, flat)

    def _set(self, grid: ChunkGrid, kind: np.ndarray, path_id: np.ndarray, offset: np.ndarray,
             length: np.ndarray, inline: InlineBytes, flat: np.ndarray | None) -> None:
        self.grid = grid
        self.flat = None if flat is None else _frozen(flat)
        self._kind = _frozen(kind.astype(np.uint8, copy=False))
        self._path_id = _frozen(_compact(path_id, np.uint16))
        self._offset = _frozen(_compact(offset))
        self._length = _frozen(_compact(length))
        self.inline = inline

    @classmethod
    def _trusted(cls, grid: ChunkGrid, kind: np.ndarray, path_id: np.ndarray, offset: np.ndarray,
                 length: np.ndarray, inline: Mapping[int, bytes], flat: np.ndarray | None = None,
                 ) -> ChunkTable:
        """A table from columns that satisfy ``__init__``'s checks by construction."""
        t = cls.__new__(cls)
        t._set(grid, kind, path_id, offset, length, InlineBytes.of(inline), flat)
        return t

    @staticmethod
    def _rows_of(cells: np.ndarray, flat: np.ndarray | None, nrows: int) -> np.ndarray:
        """Rows of the columns holding flat indices ``cells``; -1 for a cell that has none."""
        if flat is None:
            return np.where((cells >= 0) & (cells < nrows), cells, -1)
        return positions_in(flat, cells)

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def from_entries(
        cls,
        grid: ChunkGrid,
        flat: np.ndarray,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        inline: Mapping[int, bytes] | None = None,
    ) -> ChunkTable:
        """A table from entries at flat chunk indices ``flat`` (any order; a later duplicate wins;
        ABSENT entries are dropped). Dense or sparse, whichever the grid's fill calls for."""
        n = grid.nchunks
        flat = np.asarray(flat, np.int64)
        kind = np.asarray(kind, np.uint8)
        if flat.size and (flat.min() < 0 or flat.max() >= n):
            raise InvalidReferences("chunk index outside the grid")
        if kind.size and int(kind.max()) > INLINE:
            raise InvalidReferences(f"ChunkTable.kind: code {int(kind.max())} is not one of 0..3")
        cols = [np.asarray(a) for a in (path_id, offset, length)]
        if len({flat.shape, kind.shape, *(c.shape for c in cols)}) != 1 or flat.ndim != 1:
            raise InvalidReferences("ChunkTable.from_entries: the columns must be 1-d and of one length")
        if flat.size > 1 and not bool((flat[1:] > flat[:-1]).all()):
            # sort, keeping the last occurrence of each index (a JSON object's repeated key)
            _, first = np.unique(flat[::-1], return_index=True)
            sel = flat.size - 1 - first
            flat, kind = flat[sel], kind[sel]
            cols = [c[sel] for c in cols]
        keep = kind != ABSENT
        if not keep.all():
            flat, kind = flat[keep], kind[keep]
            cols = [c[keep] for c in cols]
        path_id, offset, length = cols
        given = InlineBytes.of(inline)
        need = flat[kind == INLINE]
        pos = given.positions(need)
        if need.size and int(pos.min()) < 0:
            i = int(need[pos < 0][0])
            raise InvalidReferences(f"chunk {i} of grid {grid.grid_shape} is inline but has no data")
        live = given.take(pos)
        if sparse_grid(n, flat.size):
            return cls._trusted(grid, kind, path_id, offset, length, live, flat)
        k = np.zeros(n, np.uint8)
        p = np.zeros(n, _compact_dtype(path_id, np.uint16))
        o = np.zeros(n, _compact_dtype(offset))
        ln = np.zeros(n, _compact_dtype(length))
        k[flat] = kind
        p[flat] = path_id
        o[flat] = offset
        ln[flat] = length
        return cls._trusted(grid, k, p, o, ln, live)

    @classmethod
    def empty(cls, grid: ChunkGrid) -> ChunkTable:
        z = np.zeros(0, np.uint8)
        return cls.from_entries(grid, np.zeros(0, np.int64), z, z, z, z)

    # -- shape and counts --------------------------------------------------------------------------
    @property
    def nchunks(self) -> int:
        return self.grid.nchunks

    @property
    def is_sparse(self) -> bool:
        return self.flat is not None

    def count(self) -> int:
        """Number of chunks with a reference."""
        if self.flat is not None:
            return len(self.flat)
        return int(np.count_nonzero(self._kind))

    def max_path_id(self) -> int:
        """The largest path id in the table (0 when none): a bound, read without gathering rows."""
        return int(self._path_id.max(initial=0))

    def kind_counts(self) -> np.ndarray:
        """Chunks per kind code (index ABSENT, RANGE, WHOLE, INLINE)."""
        c = np.bincount(self._kind, minlength=4).astype(np.int64)
        if self.flat is not None:
            c[ABSENT] = self.nchunks - len(self.flat)
        return c

    def present(self) -> np.ndarray:
        """Flat indices of the chunks that have a reference, ascending."""
        if self.flat is not None:
            return self.flat
        return np.flatnonzero(self._kind != ABSENT)

    def entries(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(flat, kind, path_id, offset, length)`` of the present chunks, in C order."""
        if self.flat is not None:
            return self.flat, self._kind, self._path_id, self._offset, self._length
        f = np.flatnonzero(self._kind != ABSENT)
        return f, self._kind[f], self._path_id[f], self._offset[f], self._length[f]

    def take(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(kind, path_id, offset, length)`` at flat indices ``flat`` (kind ABSENT where none)."""
        flat = np.asarray(flat, np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= self.nchunks):
            raise InvalidReferences(f"chunk index outside the grid {self.grid.grid_shape} "
                                    f"({self.nchunks} chunks)")
        if self.flat is None:
            return self._kind[flat], self._path_id[flat], self._offset[flat], self._length[flat]
        pos = positions_in(self.flat, flat)
        hit = pos >= 0
        out = []
        for col in (self._kind, self._path_id, self._offset, self._length):
            v = np.zeros(flat.shape, col.dtype)
            v[hit] = col[pos[hit]]
            out.append(v)
        return out[0], out[1], out[2], out[3]

    def row(self, flat: int) -> Row:
        """``(kind, path_id, offset, length, inline data)`` of chunk ``flat``."""
        i = flat
        if not 0 <= flat < self.nchunks:
            return ABSENT, 0, 0, 0, None
        if self.flat is not None:
            i = int(np.searchsorted(self.flat, flat))
            if i >= len(self.flat) or self.flat[i] != flat:
                return ABSENT, 0, 0, 0, None
        kind = self._kind.item(i)
        if kind == INLINE:
            return INLINE, 0, 0, 0, self.inline[flat]
        return kind, self._path_id.item(i), self._offset.item(i), self._length.item(i), None

    # -- dense columns -----------------------------------------------------------------------------
    def _dense(self, col: np.ndarray) -> np.ndarray:
        if self.flat is None:
            return col
        if self.nchunks > MAX_DENSE_VIEW:
            raise Unsupported(
                f"chunk table of {self.nchunks} cells holding {len(self.flat)} chunks is sparse; "
                "use entries() or take() instead of dense columns"
            )
        out = np.zeros(self.nchunks, col.dtype)
        out[self.flat] = col
        return _frozen(out)

    @property
    def kind(self) -> np.ndarray:
        """Kind code of every cell, C order (a sparse table builds the column on each access)."""
        return self._dense(self._kind)

    @property
    def path_id(self) -> np.ndarray:
        return self._dense(self._path_id)

    @property
    def offset(self) -> np.ndarray:
        return self._dense(self._offset)

    @property
    def length(self) -> np.ndarray:
        return self._dense(self._length)

    def grid_view(self) -> GridView:
        """The columns shaped like the chunk grid (views of a dense table, no copy for kind, offset
        and length); ``path_id`` is int64 with -1 where no file is referenced."""
        gs = self.grid.grid_shape
        kind = self.kind
        pid = np.where((kind == RANGE) | (kind == WHOLE), self.path_id.astype(np.int64), -1)
        return GridView(kind.reshape(gs), pid.reshape(gs), self.offset.reshape(gs),
                        self.length.reshape(gs))

    # -- transforms --------------------------------------------------------------------------------
    def remap_paths(self, remap: np.ndarray) -> ChunkTable:
        """The same table with ``path_id`` replaced by ``remap[path_id]`` for located chunks."""
        remap = np.asarray(remap, np.int64)
        kind = self._kind
        loc = (kind == RANGE) | (kind == WHOLE)
        if not loc.any():
            return self
        top = int(self._path_id[loc].max())
        if top >= remap.size:
            raise InvalidReferences(f"remap_paths: path id {top} is outside the remap of {remap.size} ids")
        pid = np.where(loc, remap[np.where(loc, self._path_id, 0)], 0)
        return ChunkTable(self.grid, kind, pid, self._offset, self._length, self.inline, flat=self.flat)

    def with_grid(self, grid: ChunkGrid) -> ChunkTable:
        """The same cells (same flat indices) under another grid with as many cells, e.g. with a
        new leading dimension of length 1."""
        if grid.nchunks != self.nchunks:
            raise InvalidReferences(
                f"with_grid: grid {grid.grid_shape} has {grid.nchunks} cells, table has {self.nchunks}")
        return ChunkTable(grid, self._kind, self._path_id, self._offset, self._length, self.inline,
                          flat=self.flat)

    def __reduce__(self) -> tuple[object, ...]:
        return (_chunk_table, (self.grid, self._kind, self._path_id, self._offset, self._length,
                               self.inline, self.flat))

    def nbytes(self) -> int:
        cols = (self._kind, self._path_id, self._offset, self._length)
        extra = self.flat.nbytes if self.flat is not None else 0
        return sum(a.nbytes for a in cols) + extra + self.inline.nbytes

    def __repr__(self) -> str:
        form = "sparse" if self.flat is not None else "dense"
        return f"<ChunkTable {form} grid={self.grid.grid_shape} present={self.count()}>"


def _chunk_table(grid: ChunkGrid, kind: np.ndarray, path_id: np.ndarray, offset: np.ndarray,
                 length: np.ndarray, inline: InlineBytes, flat: np.ndarray | None) -> ChunkTable:
    return ChunkTable(grid, kind, path_id, offset, length, inline, flat=flat)


def concat_tables(
    tables: Sequence[ChunkTable],
    axis: int,
    *,
    path_maps: Sequence[np.ndarray | None] | None = None,
) -> ChunkTable:
    """Concatenate chunk tables along grid axis ``axis``.

    Every table must have the same chunk shape, the same array shape off ``axis`` and the same key
    spelling; along ``axis`` every table but the last must end on a chunk boundary. ``path_maps[i]``
    (optional) remaps table ``i``'s path ids into the result's URL table (see :func:`union_urls`).
    Raises :class:`~refset.errors.InvalidReferences` naming the first table that does not fit.
    """
    if not tables:
        raise InvalidReferences("concat_tables: no tables")
    for i, t in enumerate(tables):
        if not isinstance(t, ChunkTable):
            raise InvalidReferences(f"concat_tables: table {i} is a {type(t).__name__}, not a ChunkTable")
    g0 = tables[0].grid
    nd = g0.ndim
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not 0 <= axis < nd:
        raise InvalidReferences(f"concat_tables: axis {axis} outside the {nd} dimensions of the grid")
    for i, t in enumerate(tables):
        g = t.grid
        if g.ndim != nd or g.chunks != g0.chunks:
            raise InvalidReferences(f"concat_tables: table {i}: chunks {g.chunks} differ from table 0's "
                                    f"{g0.chunks}")
        other = [d for d in range(nd) if d != axis]
        if any(g.shape[d] != g0.shape[d] for d in other):
            raise InvalidReferences(f"concat_tables: table {i}: shape {g.shape} differs from table 0's "
                                    f"{g0.shape} off axis {axis}")
        if (g.separator, g.prefix, g.zarr_format) != (g0.separator, g0.prefix, g0.zarr_format):
            raise InvalidReferences(f"concat_tables: table {i}: chunk keys are spelled differently")
        if i < len(tables) - 1 and g.shape[axis] % g.chunks[axis]:
            raise InvalidReferences(
                f"concat_tables: table {i}: length {g.shape[axis]} along axis {axis} is not a multiple "
                f"of the chunk length {g.chunks[axis]}, so the tables after it would not start on a "
                "chunk boundary")
    if path_maps is not None:
        if len(path_maps) != len(tables):
            raise InvalidReferences(f"concat_tables: {len(path_maps)} path maps for {len(tables)} tables")
        tables = [t if m is None else t.remap_paths(m) for t, m in zip(tables, path_maps, strict=True)]
    shape = list(g0.shape)
    shape[axis] = sum(t.grid.shape[axis] for t in tables)
    out = ChunkGrid(tuple(shape), g0.chunks, g0.separator, g0.prefix, g0.zarr_format)
    steps = np.array([t.grid.grid_shape[axis] for t in tables], np.int64)
    starts = np.concatenate(([0], np.cumsum(steps)[:-1]))
    inline = concat_inline([t.inline for t in tables], [
        _move(t.inline.flat, t.grid.grid_shape, out.grid_shape, axis, s)
        for t, s in zip(tables, starts.tolist(), strict=True)])
    total = sum(t.count() for t in tables)
    if not any(t.is_sparse for t in tables) and not sparse_grid(out.nchunks, total):
        cols = []
        for j in range(4):
            grids = [(t._kind, t._path_id, t._offset, t._length)[j].reshape(t.grid.grid_shape)
                     for t in tables]
            dt = np.result_type(*grids) if j else np.uint8
            cols.append(np.concatenate(grids, axis=axis, dtype=dt).reshape(-1))
        return ChunkTable(out, cols[0], cols[1], cols[2], cols[3], inline)
    parts: list[tuple[np.ndarray, ...]] = []
    for t, s in zip(tables, starts.tolist(), strict=True):
        f, k, p, o, ln = t.entries()
        parts.append((_move(f, t.grid.grid_shape, out.grid_shape, axis, s), k, p.astype(np.uint64),
                      o.astype(np.uint64), ln.astype(np.uint64)))
    f, k, p, o, ln = (np.concatenate([part[j] for part in parts]) for j in range(5))
    return ChunkTable.from_entries(out, f, k, p, o, ln, inline=inline)


def _move(flat: np.ndarray, src: tuple[int, ...], dst: tuple[int, ...], axis: int, shift: int) -> np.ndarray:
    """Flat indices in grid ``src`` -> flat indices in grid ``dst``, shifted by ``shift`` along ``axis``."""
    if not flat.size:
        return flat.astype(np.int64)
    idx = list(np.unravel_index(flat, src))
    idx[axis] = idx[axis] + shift
    return np.ravel_multi_index(tuple(idx), dst).astype(np.int64)


def union_urls(url_tables: Iterable[Sequence[str]]) -> tuple[tuple[str, ...], list[np.ndarray]]:
    """One URL table for several: ``(urls, remaps)`` where ``remaps[i][j]`` is the index in ``urls``
    of ``url_tables[i][j]``. URLs keep the order in which they first appear."""
    ids: dict[str, int] = {}
    remaps = []
    for urls in url_tables:
        remaps.append(np.fromiter((ids.setdefault(u, len(ids)) for u in urls), np.int64, len(urls)))
    return tuple(ids), remaps


class KeyTable:
    """Keys outside any chunk grid: sorted keys with the same columns as a :class:`ChunkTable`
    (``data`` holds the inline bytes, None elsewhere). Immutable."""

    __slots__ = ("data", "keys", "kind", "length", "offset", "path_id")

    def __init__(
        self,
        keys: np.ndarray,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        data: np.ndarray,
    ) -> None:
        self.keys = _frozen(keys)
        self.kind = _frozen(kind.astype(np.uint8, copy=False))
        self.path_id = _frozen(_compact(np.asarray(path_id), np.uint16))
        self.offset = _frozen(_compact(np.asarray(offset)))
        self.length = _frozen(_compact(np.asarray(length)))
        self.data = _frozen(data)

    @classmethod
    def from_items(cls, items: Mapping[str, Row]) -> KeyTable:
        """From ``{key: (kind, path_id, offset, length, data)}``."""
        names = sorted(items)
        n = len(names)
        keys = np.empty(n, object)
        keys[:] = names
        if n:
            rows = [items[k] for k in names]
            kind, pid, off, ln = (np.fromiter((r[j] for r in rows), np.uint64, n) for j in range(4))
            data = np.empty(n, object)
            data[:] = [r[4] for r in rows]
        else:
            kind = pid = off = ln = np.zeros(0, np.uint64)
            data = np.empty(0, object)
        return cls(keys, kind, pid, off, ln, data)

    @classmethod
    def empty(cls) -> KeyTable:
        return cls.from_items({})

    @classmethod
    def merged(cls, first: KeyTable, batches: Sequence[tuple[np.ndarray, ...]]) -> KeyTable:
        """``first`` plus batches of (string keys, kind, path_id, offset, length); a key in a later
        batch replaces the same key earlier (and in ``first``)."""
        from numpy.dtypes import StringDType

        keys = np.concatenate([first.keys.astype(StringDType())]
                              + [np.asarray(b[0]).astype(StringDType()) for b in batches])
        cols = [np.concatenate([getattr(first, name).astype(np.uint64)]
                               + [np.asarray(b[j + 1]).astype(np.uint64) for b in batches])
                for j, name in enumerate(("kind", "path_id", "offset", "length"))]
        data = np.concatenate([first.data, np.full(len(keys) - len(first), None, object)])
        order = np.argsort(keys, kind="stable")
        sk = np.empty(len(keys), object)
        sk[:] = keys[order].tolist()
        last = np.ones(len(sk), bool)
        last[:-1] = sk[1:] != sk[:-1]  # equal keys keep input order: the last one wins
        order = order[last]
        kind, pid, off, ln = (c[order] for c in cols)
        return cls(sk[last], kind, pid, off, ln, data[order])

    @classmethod
    def merged_rows(cls, first: KeyTable, rows: Mapping[str, Row]) -> KeyTable:
        """``first`` plus ``rows`` (``{key: row}``); a key of ``rows`` replaces the same key of ``first``."""
        if not rows:
            return first
        keep = first.without_rows(np.array([i for i in map(first.find, rows) if i >= 0], np.int64))
        items = {k: keep.row(i) for i, k in enumerate(keep.keys.tolist())}
        items.update(rows)
        return cls.from_items(items)

    def without_rows(self, rows: np.ndarray) -> KeyTable:
        """This table without rows ``rows`` (itself when there are none)."""
        rows = np.asarray(rows, np.int64)
        rows = rows[rows >= 0]
        if not rows.size:
            return self
        keep = np.ones(len(self.keys), bool)
        keep[rows] = False
        return KeyTable(self.keys[keep], self.kind[keep], self.path_id[keep], self.offset[keep],
                        self.length[keep], self.data[keep])

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, key: str) -> int:
        """Row of ``key``, or -1."""
        i = int(np.searchsorted(self.keys, key))
        return i if i < len(self.keys) and self.keys[i] == key else -1

    def row(self, i: int) -> Row:
        return (self.kind.item(i), self.path_id.item(i), self.offset.item(i), self.length.item(i),
                self.data[i])

    def remap_paths(self, remap: np.ndarray) -> KeyTable:
        """The same keys with ``path_id`` replaced by ``remap[path_id]`` for file references."""
        loc = (self.kind == RANGE) | (self.kind == WHOLE)
        if not loc.any():
            return self
        remap = np.asarray(remap, np.int64)
        top = int(self.path_id[loc].max())
        if top >= remap.size:
            raise InvalidReferences(f"remap_paths: path id {top} is outside the remap of {remap.size} ids")
        pid = np.where(loc, remap[np.where(loc, self.path_id, 0)], 0)
        return KeyTable(self.keys, self.kind, pid, self.offset, self.length, self.data)

    def __reduce__(self) -> tuple[object, ...]:
        return (KeyTable, (self.keys, self.kind, self.path_id, self.offset, self.length, self.data))

    def nbytes(self) -> int:
        n = sum(a.nbytes for a in (self.kind, self.path_id, self.offset, self.length))
        return n + sum(len(k) for k in self.keys.tolist()) + sum(len(d) for d in self.data.tolist() if d)
