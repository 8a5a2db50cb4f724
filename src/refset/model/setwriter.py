"""What a scanner hands over, collected: zarr v2 metadata as kerchunk writes it and chunk columns per
array, built into one ``ReferenceSet.from_arrays`` call (:class:`SetWriter`).

Chunks below the inline threshold are read in one batched call at the end, so a remote scan costs
one round of requests for all of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from refset.errors import InvalidReferences
from refset.model.array import Array
from refset.model.dtypes import fill_json
from refset.model.inline import InlineBytes
from refset.model.keys import ChunkGrid
from refset.model.metadata import ArrayMetadata
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, RANGE, ChunkTable, KeyTable, sparse_grid

__all__ = ["SetWriter", "zarr_fill"]


def zarr_fill(value: Any, dtype: np.dtype) -> tuple[Any, Any]:
    """``(fill value for .zarray, _FillValue to keep in .zattrs or None)`` for a netCDF ``_FillValue``.

    An integer variable whose ``_FillValue`` is a float (NetCDF3 writers other than netCDF-C allow it)
    keeps its meaning for xarray: an integral value in range is the fill; NaN is none (xarray drops
    it: no integer equals it, so casting it would have made every stored 0 a fill); any other value
    (1e20, 0.5) masks nothing but makes xarray decode to floats, so it stays an attribute beside a
    null zarr fill value."""
    if value is None or dtype.kind not in "iu":
        return value, None
    v = np.asarray(value).reshape(-1)[0] if np.ndim(value) else value
    if isinstance(v, np.floating | float):
        f = float(v)
        if math.isnan(f):
            return None, None
        info = np.iinfo(dtype)
        if not (math.isfinite(f) and f.is_integer() and info.min <= f <= info.max):
            return None, f
        return int(f), None
    return value, None


#: Metadata texts kept per header memo: one object header's variable, in the versions its files
#: give (more means attribute values that change file by file: the store starts over).
_MEMO_ARRAYS = 8
_ZGROUP = b'{"zarr_format":2}'  # compact JSON, as every document refset writes


class SetWriter:
    """Collects a scan's groups and arrays, then builds the set: each array's chunk table is made
    from its columns directly (dense, one URL), only the metadata goes through the checked path."""

    def __init__(self, url: str, inline_threshold: int) -> None:
        self.url = url
        self.inline_threshold = inline_threshold
        self.metadata: dict[str, Any] = {".zgroup": _ZGROUP}  # group documents
        self.arrays_meta: dict[str, ArrayMetadata] = {}
        # per array: grid, kind, offset, length (flat, zero where not a range), inline flats and bytes
        # (a dense grid's columns; sparse: the flat indices of the chunks present, last)
        self.arrays: dict[str, tuple[ChunkGrid, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray],
                                     list[bytes], np.ndarray | None]] = {}
        self._small: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []
        # arrays given whole (a store's: a chunk a file), their path ids into self.files; documents
        # kept as they are (a store's groups), and what the set says it was read from
        self.whole: dict[str, Array] = {}
        self.files: list[str] = []
        self.verbatim: dict[str, bytes] = {}
        self.info: dict[str, object] | None = None

    def take(self, other: SetWriter) -> None:
        """What ``other`` collected, in place of what this writer holds: a walk done aside (a fast
        path's that succeeded, a child process's) becomes this one's."""
        self.metadata, self.arrays_meta, self.arrays = other.metadata, other.arrays_meta, other.arrays
        self._small = other._small
        self.whole, self.files, self.verbatim, self.info = other.whole, other.files, other.verbatim, other.info

    def file_ids(self, urls: list[str]) -> np.ndarray:
        """Ids of ``urls`` in the files that arrays given whole (:meth:`table`) reference."""
        base = len(self.files)
        self.files.extend(urls)
        return np.arange(base, base + len(urls), dtype=np.int64)

    def table(self, path: str, meta: ArrayMetadata, table: ChunkTable) -> None:
        """One array given whole: its metadata as it is and its chunk table, whose ``path_id`` are
        :meth:`file_ids` (a store's chunk files). Checked when the set is built."""
        if path in self.arrays_meta or path in self.whole:
            raise InvalidReferences(f"arrays[{json.dumps(path)}]: given twice")
        self.whole[path] = Array(meta, table)

    def documents(self, docs: Mapping[str, bytes]) -> None:
        """Metadata documents kept byte for byte (a store's groups) among the set's other keys; the
        writer then writes no group document of its own."""
        self.metadata.pop(".zgroup", None)
        self.verbatim.update(docs)

    def group(self, path: str, attrs: Mapping[str, Any]) -> None:
        pre = f"{path}/" if path else ""
        if path:
            self.metadata[f"{pre}.zgroup"] = _ZGROUP
        if attrs:
            self.metadata[f"{pre}.zattrs"] = dict(attrs)

    def array(
        self,
        path: str,
        *,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        dtype: np.dtype,
        fill_value: Any,
        filters: list[dict[str, Any]] | None,
        attrs: Mapping[str, Any],
        dims: list[str],
        offset: np.ndarray | None = None,
        length: np.ndarray | None = None,
        inline: Mapping[int, bytes] | None = None,
        memo: tuple[dict[Any, Any], Any] | None = None,
    ) -> None:
        """One array: ``offset``/``length`` shaped like the chunk grid (``length == 0``: absent) into
        the scanned file; ``inline``: flat chunk index -> the chunk's stored bytes. ``memo``:
        ``(store, variant)``: the metadata text is kept in ``store`` and reused for the same path,
        dims, shape, chunks, dtype, filters and fill value: the caller's promise is that ``attrs``
        are then the same too (``store`` is the memo of a header's bytes, ``variant`` what else
        the attributes were read from)."""
        if path in self.arrays_meta:  # a scanner naming two arrays alike would lose one silently
            raise InvalidReferences(f"arrays[{json.dumps(path)}]: given twice")
        fill_value, kept = zarr_fill(fill_value, dtype)
        if kept is not None:
            attrs = {**attrs, "_FillValue": kept}
        fill = fill_json(fill_value, dtype)
        key = None
        if memo is not None:
            store = memo[0].setdefault("zarr", {})
            key = (path, tuple(dims), memo[1], tuple(shape), tuple(chunks), dtype, repr(filters), repr(fill))
            got = store.get(key)
            if got is not None:
                self.arrays_meta[path] = got
                self._columns(path, got.grid, offset, length, inline)
                return
        try:
            meta = ArrayMetadata.build(shape=shape, chunks=chunks, dtype=dtype, fill_value=fill,
                                       filters=filters, attributes=attrs, dimension_names=dims)
        except InvalidReferences as e:
            raise InvalidReferences(f"arrays[{json.dumps(path)}]: {e}") from None
        if key is not None:
            if len(store) >= _MEMO_ARRAYS:
                store.clear()
            store[key] = meta
        self.arrays_meta[path] = meta
        self._columns(path, meta.grid, offset, length, inline)

    def _columns(self, path: str, grid: ChunkGrid, offset: np.ndarray | None, length: np.ndarray | None,
                 inline: Mapping[int, bytes] | None) -> None:
        n = grid.nchunks
        if offset is None or length is None:  # nothing in the file: only inline chunks, kept sparse
            got = dict(inline or {})
            flat = np.sort(np.fromiter(got, np.int64, len(got)))
            z = np.zeros(flat.size, np.int64)
            self.arrays[path] = (grid, np.full(flat.size, INLINE, np.uint8), z, z, [flat] if flat.size else [],
                                 [got[f] for f in flat.tolist()], flat)
            return
        else:
            off = np.asarray(offset, np.int64).reshape(-1)
            ln = np.asarray(length, np.int64).reshape(-1)
            if off.size != n or ln.size != n:
                raise InvalidReferences(f"arrays[{json.dumps(path)}]: {off.size} offsets and {ln.size} "
                                        f"lengths for the {n} chunks of grid {grid.grid_shape}")
        kind = (ln > 0).astype(np.uint8)
        kind *= np.uint8(RANGE)
        inl_flat = [np.fromiter(inline, np.int64, len(inline))] if inline else []
        inl_data = list(inline.values()) if inline else []
        if inline:
            kind[inl_flat[0]] = INLINE
        small = np.flatnonzero((kind == RANGE) & (ln < self.inline_threshold))
        if small.size:
            self._small.append((path, small, off[small], ln[small]))
            kind[small] = INLINE
        located = kind == RANGE
        if not located.all():
            off = np.where(located, off, 0)
            ln = np.where(located, ln, 0)
        self.arrays[path] = (grid, kind, off, ln, inl_flat, inl_data, None)

    @property
    def small_chunks(self) -> int:
        """How many chunks below the inline threshold :meth:`build` is to read."""
        return sum(int(s[1].size) for s in self._small)

    def ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, lengths) of every byte range the arrays reference in the file, small chunks to
        be read included."""
        offs = [off[kind == RANGE] for _g, kind, off, _ln, *_ in self.arrays.values()]
        lens = [ln[kind == RANGE] for _g, kind, _off, ln, *_ in self.arrays.values()]
        offs += [s[2] for s in self._small]
        lens += [s[3] for s in self._small]
        z = np.zeros(0, np.int64)
        return (np.concatenate(offs) if offs else z), (np.concatenate(lens) if lens else z)

    def build(self, read_ranges: Callable[[list[int], list[int]], list[bytes]]) -> ReferenceSet:
        """Read the small chunks (``read_ranges(offsets, lengths)``, one batch) and build the set."""
        if self._small:
            offs = np.concatenate([s[2] for s in self._small])
            lens = np.concatenate([s[3] for s in self._small])
            data = read_ranges(offs.tolist(), lens.tolist())
            at = 0
            for apath, flat, _, _ in self._small:
                entry = self.arrays[apath]
                entry[4].append(flat)
                entry[5].extend(data[at:at + flat.size])
                at += flat.size
        tables = {}
        for path, (grid, kind, off, ln, inl_flat, inl_data, present) in self.arrays.items():
            inline = (InlineBytes.from_values(np.concatenate(inl_flat), inl_data) if inl_flat
                      else InlineBytes.empty())
            count = int(np.count_nonzero(kind))
            if present is not None:  # sparse already: the flat indices of the chunks present
                tables[path] = ChunkTable.from_entries(grid, present, kind, np.zeros(present.size, np.uint16), off,
                                                       ln, inline)
            elif sparse_grid(grid.nchunks, count):
                f = np.flatnonzero(kind)
                tables[path] = ChunkTable.from_entries(grid, f, kind[f], np.zeros(f.size, np.uint16), off[f],
                                                       ln[f], inline)
            else:
                tables[path] = ChunkTable(grid, kind, np.zeros(grid.nchunks, np.uint16), off, ln, inline)
        arrays = {p: Array(self.arrays_meta[p], t) for p, t in tables.items()}
        if not self.whole and not self.verbatim:
            return ReferenceSet.from_arrays(self.metadata, arrays, [self.url], validate=False, info=self.info)
        urls = self.files
        whole = self.whole
        if arrays:  # the scanned file's own columns index its url, first
            urls = [self.url, *self.files]
            shift = np.arange(1, len(urls), dtype=np.int64)
            whole = {p: Array(a.metadata, a.table.remap_paths(shift)) for p, a in whole.items()}
        other = KeyTable.from_items({k: (INLINE, 0, 0, 0, v) for k, v in self.verbatim.items()})
        return ReferenceSet.from_arrays(self.metadata, {**arrays, **whole}, urls, other=other, info=self.info)
