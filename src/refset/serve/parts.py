"""Serving a variable made of parts (:mod:`refset.model.parts`) to xarray as one lazy array.

Each part is opened as xarray opens any zarr array and CF-decoded with its own attributes (packing,
fill values, time units), so its values are what ``xr.open_mfdataset`` gives for its files; the
variable is their concatenation along the concat dim, in the dtype xarray's concat promotes the
decoded dtypes to. A selection reads only the parts and chunks it touches (parts read concurrently);
``chunks={}`` gives Dask chunks that follow every part's chunk grid. Imports xarray and zarr.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np
from xarray.backends import BackendArray

from refset.errors import InvalidReferences
from refset.model.parts import Parts, find_parts
from refset.parallel import parallel_map

__all__ = ["PartsArray", "parts_variables"]


class PartsArray(BackendArray):
    """The concatenation along ``axis`` of decoded variables ``parts`` (part ``k`` rows
    ``bounds[k]:bounds[k + 1]``), read with outer indexing, cast to ``dtype``. Pickles as its parts."""

    __slots__ = ("axis", "bounds", "dtype", "parts", "paths", "shape", "store")

    def __init__(self, parts: tuple[Any, ...], bounds: tuple[int, ...], axis: int, dtype: np.dtype[Any],
                 store: Any = None, paths: tuple[str, ...] = ()) -> None:
        # store, paths: the refset ZarrStore and the parts' array paths, to fetch every part's chunks
        # of a selection in one plan
        self.parts, self.bounds, self.axis, self.dtype = parts, bounds, axis, dtype
        self.store, self.paths = store, paths
        shape = list(parts[0].shape)
        shape[axis] = bounds[-1]
        self.shape = tuple(shape)

    def __getitem__(self, key: Any) -> Any:
        from xarray.core import indexing

        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._outer)

    def _outer(self, key: tuple[Any, ...]) -> np.ndarray:
        ax = self.axis
        k = key[ax]
        n = self.shape[ax]
        scalar = isinstance(k, int | np.integer)
        rows = np.array([int(k) % n]) if scalar else np.arange(n)[k] if isinstance(k, slice) else (
            np.asarray(k, np.int64) % n if n else np.asarray(k, np.int64))
        bounds = np.asarray(self.bounds)
        which = np.searchsorted(bounds, rows, side="right") - 1
        jobs = []
        for p in np.unique(which).tolist():
            at = np.flatnonzero(which == p)
            local = rows[at] - bounds[p]
            sel = slice(int(local[0]), int(local[-1]) + 1) if (
                len(local) and (np.diff(local) == 1).all()) else local
            jobs.append((p, at, (*key[:ax], sel, *key[ax + 1:])))
        keys = self._prefetch(jobs) if len(jobs) > 1 else []
        try:
            got = parallel_map(lambda job: np.asarray(self.parts[job[0]][job[2]].values), jobs)
        finally:
            if keys:
                self.store.release(keys)
        shape = [len(rows) if a == ax else _size(key[a], self.shape[a])
                 for a in range(len(self.shape)) if a == ax or not isinstance(key[a], int | np.integer)]
        out_ax = sum(1 for a in range(ax) if not isinstance(key[a], int | np.integer))
        out = np.empty(shape, self.dtype)
        for (_, at, _), values in zip(jobs, got, strict=True):
            idx: list[Any] = [slice(None)] * len(shape)
            idx[out_ax] = at
            out[tuple(idx)] = values
        return out[(slice(None),) * out_ax + (0,)] if scalar else out

    def _prefetch(self, jobs: list[tuple[int, np.ndarray, tuple[Any, ...]]]) -> list[str]:
        """Fetch the chunks every part of ``jobs`` needs in one coalesced plan (the parts then decode
        from memory); the keys kept."""
        if self.store is None or not hasattr(self.store, "prefetch_many"):
            return []
        from zarr.core.sync import sync

        from refset.serve.decode import selected_chunks

        grids = self.store.refs.grids
        items = []
        for p, _, key in jobs:
            g = grids.get(self.paths[p])
            flat = None if g is None else selected_chunks(key, tuple(g.shape), tuple(g.chunks), least=1)
            if flat is not None:
                items.append((self.paths[p], flat))
        return list(sync(self.store.prefetch_many(items))) if len(items) > 1 else []

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartsArray, (self.parts, self.bounds, self.axis, self.dtype, self.store, self.paths))


def _size(k: Any, n: int) -> int:
    if isinstance(k, slice):
        return len(range(*k.indices(n)))
    return int(np.asarray(k).size)


def parts_variables(xstore: Any, open_group: Any, decode: Mapping[str, Any],
                    others: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The variables made of parts directly in ``xstore``'s group, each one lazy Variable decoded part
    by part with xarray's ``decode`` options; ``open_group(group)`` opens a datastore on a group.
    ``others``: the group's other variables, whose dims' sizes the parts' layouts must agree with."""
    sizes: dict[str, int] = {}
    for v in (others or {}).values():
        sizes.update(zip(v.dims, v.shape, strict=True))
    import xarray as xr
    from xarray.conventions import decode_cf_variable
    from xarray.core import indexing
    from xarray.core.dtypes import result_type

    store = xstore.zarr_group.store
    refs = getattr(store, "refs", None)
    if refs is None:
        return {}
    here = xstore.zarr_group.path.strip("/")
    out: dict[str, Any] = {}
    for path, layout in find_parts(refs).items():
        group, _, name = path.rpartition("/")
        if group != here or name in decode.get("drop_variables", ()):
            continue
        for d, n in zip(layout.dims, layout.shape, strict=True):
            if sizes.setdefault(d, n) != n:
                raise InvalidReferences(f"variable {path!r}: made of parts {n} long along {d!r}, where the "
                                        f"dataset's {d!r} is {sizes[d]} long")
        try:
            sub = open_group(path)
        except Exception as e:  # zarr's GroupNotFoundError and the like: the set is damaged
            raise InvalidReferences(f"variable {path!r}: made of parts, but its group does not open "
                                    f"({type(e).__name__}: {e})") from e
        parts = tuple(decode_cf_variable(f"{name}/{p}", sub.open_store_variable(p), **{
            k: v for k, v in decode.items() if k != "drop_variables"}) for p in layout.names)
        first = parts[0]
        dtype = _promoted(result_type, [p.dtype for p in parts])
        encoding = {k: v for k, v in first.encoding.items() if k not in ("chunks", "preferred_chunks")}
        encoding["preferred_chunks"] = _chunks(layout, parts)
        encoding["refset_parts"] = layout.paths()
        data = indexing.LazilyIndexedArray(PartsArray(parts, layout.bounds, layout.axis, dtype, store,
                                                      tuple(layout.paths())))
        out[name] = xr.Variable(first.dims, data, first.attrs, encoding)
    return out


def _promoted(result_type: Any, dtypes: list[np.dtype[Any]]) -> np.dtype[Any]:
    """The dtype xarray's concat gives the parts; for strings numpy's (xarray's ``result_type`` says
    ``S`` of no width for two ``S6``: the widest part's)."""
    got: np.dtype[Any] = result_type(*dtypes)
    if got.kind in "SUV" and got.itemsize == 0:
        got = np.result_type(*dtypes)
    return got


def _chunks(layout: Parts, parts: tuple[Any, ...]) -> dict[str, tuple[int, ...]]:
    """Dask chunks along every dim that never straddle a stored chunk of any part: along the concat
    dim each part's chunks in turn, along the others every part's chunk boundaries at once."""
    ax = layout.axis
    out: dict[str, tuple[int, ...]] = {}
    per = [p.encoding.get("preferred_chunks", {}) for p in parts]
    for a, dim in enumerate(layout.dims):
        if a == ax:
            sizes: list[int] = []
            for pref, lo, hi in zip(per, layout.bounds[:-1], layout.bounds[1:], strict=True):
                c = int(pref.get(dim, hi - lo)) or 1
                sizes += [c] * ((hi - lo) // c) + ([(hi - lo) % c] if (hi - lo) % c else [])
            out[dim] = tuple(sizes)
            continue
        n = layout.shape[a]
        edges = {0, n}
        for pref in per:
            c = int(pref.get(dim, n)) or 1
            edges.update(range(0, n, c))
        e = sorted(edges)
        out[dim] = tuple(int(b - a_) for a_, b in itertools.pairwise(e)) or (0,)
    return out
