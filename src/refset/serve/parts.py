"""Serving a variable made of parts (:mod:`refset.model.parts`) to xarray as one lazy array.

Each part is opened as xarray opens any zarr array and CF-decoded with its own attributes (packing,
fill values, time units), so its values are what ``xr.open_mfdataset`` gives for its files; the
variable is their concatenation along the concat dim, in the dtype xarray's concat promotes the
decoded dtypes to. A selection reads only the parts and chunks it touches (parts read concurrently);
``chunks={}`` gives Dask chunks that follow every part's chunk grid. Imports xarray and zarr.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np
from xarray.backends import BackendArray

from refset.errors import InvalidReferences
from refset.model.parts import Parts, find_parts
from refset.parallel import ahead, parallel_map

__all__ = ["PartsArray", "parts_variables"]

#: Batches a read across many parts is split into, each fetched while the one before decodes.
_BATCHES = 8

_SHAPE = re.compile(rb'"shape":\s*\[[^\]]*\]')


class PartsArray(BackendArray):
    """The concatenation along ``axis`` of the parts ``paths`` (part ``k`` rows ``bounds[k]:bounds[k +
    1]``, shape ``shapes[k]``), read with outer indexing, cast to ``dtype``. Parts stored alike share
    one opened array, ``reps[which[k]]`` (its xarray Variable and zarr array): the others are made
    from it on first read, with no I/O, and CF-decoded with ``decode``. Pickles as those few."""

    __slots__ = ("_made", "axis", "bounds", "decode", "dtype", "name", "paths", "reps", "shape", "shapes",
                 "store", "which")

    def __init__(self, name: str, reps: tuple[tuple[Any, Any], ...], which: tuple[int, ...],
                 paths: tuple[str, ...], shapes: tuple[tuple[int, ...], ...], bounds: tuple[int, ...], axis: int,
                 dtype: np.dtype[Any], store: Any, decode: Mapping[str, Any], shape: tuple[int, ...]) -> None:
        # shapes: the parts' stored shapes; shape, axis: the whole's as decoded (characters joined)
        self.name, self.reps, self.which, self.paths, self.shapes = name, reps, which, paths, shapes
        self.bounds, self.axis, self.dtype, self.store, self.decode = bounds, axis, dtype, store, dict(decode)
        self.shape = shape
        self._made: dict[int, Any] = {}

    def part(self, k: int) -> Any:
        """Part ``k`` as a decoded lazy Variable."""
        got = self._made.get(k)
        if got is None:
            import xarray as xr
            from xarray.conventions import decode_cf_variable
            from xarray.core import indexing

            from refset.serve.array import RefsetArray

            raw, za = self.reps[self.which[k]]
            if za.path != self.paths[k]:
                raw = xr.Variable(raw.dims, indexing.LazilyIndexedArray(RefsetArray(
                    _clone(za, self.paths[k], self.shapes[k]))), raw.attrs, raw.encoding)
            got = self._made[k] = decode_cf_variable(self.name, raw, **self.decode)
        return got

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
        order = np.argsort(which, kind="stable")
        cuts = np.flatnonzero(np.diff(which[order])) + 1
        jobs = []
        for at in np.split(order, cuts) if len(order) else []:
            p = int(which[at[0]])
            local = rows[at] - bounds[p]
            sel = slice(int(local[0]), int(local[-1]) + 1) if (
                len(local) and (np.diff(local) == 1).all()) else local
            put = slice(int(at[0]), int(at[-1]) + 1) if (np.diff(at) == 1).all() else at
            jobs.append((p, put, (*key[:ax], sel, *key[ax + 1:])))
        shape = [len(rows) if a == ax else _size(key[a], self.shape[a])
                 for a in range(len(self.shape)) if a == ax or not isinstance(key[a], int | np.integer)]
        out_ax = sum(1 for a in range(ax) if not isinstance(key[a], int | np.integer))
        out = np.empty(shape, self.dtype)
        head: tuple[Any, ...] = (slice(None),) * out_ax

        def read(job: tuple[int, Any, tuple[Any, ...]]) -> None:
            p, put, sel = job
            out[(*head, put)] = np.asarray(self.part(p)[sel].values)  # each job its own rows of out

        # batches of parts: the next batch's chunks are fetched (one plan) while this one decodes
        size = max(16, -(-len(jobs) // _BATCHES))
        batches = [jobs[i:i + size] for i in range(0, len(jobs), size)] if len(jobs) > 1 else [jobs]
        pending: Future[list[str]] | None = None
        try:
            for i, batch in enumerate(batches):
                if pending is not None:
                    keys = pending.result()
                else:  # the first batch: fetched here, nothing to overlap it with
                    keys = self._prefetch(batch) if len(jobs) > 1 else []
                pending = ahead().submit(self._prefetch, batches[i + 1]) if i + 1 < len(batches) else None
                try:
                    parallel_map(read, batch)
                finally:
                    if keys:
                        self.store.release(keys)
        finally:
            if pending is not None:  # an error above: what was fetched ahead is dropped, its own error too
                try:
                    self.store.release(pending.result())
                except Exception:  # the error being raised is the one to report
                    pass
        if scalar:
            got: np.ndarray = out[(*head, 0)]
            return got
        return out

    async def async_getitem(self, key: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(self.__getitem__, key)

    def _prefetch(self, jobs: list[tuple[int, Any, tuple[Any, ...]]]) -> list[str]:
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
        return list(sync(self.store.prefetch_many(items))) if items else []

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartsArray, (self.name, self.reps, self.which, self.paths, self.shapes, self.bounds, self.axis,
                             self.dtype, self.store, self.decode, self.shape))


def _clone(za: Any, path: str, shape: tuple[int, ...]) -> Any:
    """The zarr array at ``path`` whose metadata is ``za``'s but for its ``shape`` (read from no store)."""
    from zarr.core.array import Array, AsyncArray
    from zarr.storage import StorePath

    src = za.async_array
    return Array(AsyncArray(metadata=src.metadata.update_shape(shape), store_path=StorePath(src.store_path.store,
                                                                                                path),
                            config=src.config))


def _layout_key(m: Any) -> tuple[tuple[str, bytes], ...]:
    """What two parts share when one opened array can stand for both: their documents but the shape."""
    return tuple(sorted((k, _SHAPE.sub(b"", v)) for k, v in m.documents().items()))


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
        opts = {k: v for k, v in decode.items() if k != "drop_variables"}
        paths = tuple(layout.paths())
        metas = [refs.metadata[p] for p in paths]
        keys: dict[Any, int] = {}
        which = tuple(keys.setdefault(_layout_key(m), len(keys)) for m in metas)
        firsts = [which.index(r) for r in range(len(keys))]
        try:
            sub = open_group(path, cache_members=False)
            sub.refset_members = {layout.names[k]: _zarr_array(store, paths[k], metas[k].zarr_format)
                                  for k in firsts}
        except Exception as e:  # zarr's GroupNotFoundError and the like: the set is damaged
            raise InvalidReferences(f"variable {path!r}: made of parts, but its group does not open "
                                    f"({type(e).__name__}: {e})") from e
        reps = tuple((sub.open_store_variable(layout.names[k]), sub.refset_members[layout.names[k]])
                     for k in firsts)
        decoded = [decode_cf_variable(name, raw, **opts) for raw, _ in reps]
        first = decoded[which[0]]
        dtype = _promoted(result_type, [d.dtype for d in decoded])
        encoding = {k: v for k, v in first.encoding.items() if k not in ("chunks", "preferred_chunks")}
        encoding["preferred_chunks"] = _chunks(layout, [dict(zip(layout.dims, m.chunks, strict=True))
                                                        for m in metas])
        encoding["refset_parts"] = list(paths)
        axis = first.dims.index(layout.dim)
        shape = tuple(layout.bounds[-1] if a == axis else n for a, n in enumerate(first.shape))
        array = PartsArray(name, reps, which, paths, tuple(tuple(m.shape) for m in metas), layout.bounds,
                           axis, dtype, store, opts, shape)
        for k, var in zip(firsts, decoded, strict=True):
            array._made[k] = var
        out[name] = xr.Variable(first.dims, indexing.LazilyIndexedArray(array), first.attrs, encoding)
    return out


def _zarr_array(store: Any, path: str, zarr_format: int) -> Any:
    import zarr

    return zarr.open_array(store=store, path=path, mode="r", zarr_format=3 if zarr_format == 3 else 2)


def _promoted(result_type: Any, dtypes: list[np.dtype[Any]]) -> np.dtype[Any]:
    """The dtype xarray's concat gives the parts; for strings numpy's (xarray's ``result_type`` says
    ``S`` of no width for two ``S6``: the widest part's)."""
    got: np.dtype[Any] = result_type(*dtypes)
    if got.kind in "SUV" and got.itemsize == 0:
        got = np.result_type(*dtypes)
    return got


def _chunks(layout: Parts, per: list[dict[str, int]]) -> dict[str, tuple[int, ...]]:
    """Dask chunks along every dim that never straddle a stored chunk of any part (``per``: each
    part's chunks by dim): along the concat dim each part's chunks in turn, along the others every
    part's chunk boundaries at once."""
    ax = layout.axis
    out: dict[str, tuple[int, ...]] = {}
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
