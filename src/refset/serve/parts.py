"""Serving a variable made of parts (:mod:`refset.model.parts`) to xarray as one lazy array.

Each part is read by its own reader (a :class:`~refset.serve.array.RefsetArray` over its own metadata)
and CF-decoded with its own attributes (packing, fill values, time units), so its values are what
``xr.open_mfdataset`` gives for its files; the variable is their concatenation along the concat dim, in
the dtype xarray's concat promotes the decoded dtypes to. A selection reads the chunks of every part it
touches in one plan (:meth:`ReadEngine.read_values`), then decodes each part's rows; ``chunks={}`` gives
Dask chunks that never straddle a part's stored chunk, each many chunks (and parts) long.
Imports xarray and zarr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np
from xarray.backends import BackendArray

from refset.errors import InvalidReferences
from refset.io.bridge import run
from refset.model.metadata import ArrayMetadata
from refset.model.parts import Parts, find_parts
from refset.serve.engine import EngineRef, ValuesJob
from refset.serve.selection import Selection

__all__ = ["PartsArray", "parts_variables"]

_SHAPE = re.compile(rb'"shape":\s*\[[^\]]*\]')


class PartsArray(BackendArray):
    """The concatenation along ``axis`` of the parts ``paths`` (part ``k`` rows ``bounds[k]:bounds[k +
    1]``, metadata ``metas[k]``), read with outer indexing, cast to ``dtype``. Parts stored alike share
    one raw variable, ``reps[which[k]]`` (its dims, attributes, encoding and a reader of its own part),
    whose reader stands for theirs with their own metadata; each part's raw values are CF-decoded as
    ``name`` with ``decode``. Pickles as those few."""

    __slots__ = ("axis", "bounds", "decode", "dtype", "metas", "name", "paths", "reps", "shape", "source", "which")

    def __init__(self, name: str, source: EngineRef, reps: tuple[Any, ...], which: tuple[int, ...],
                 paths: tuple[str, ...], metas: tuple[ArrayMetadata, ...], bounds: tuple[int, ...], axis: int,
                 dtype: np.dtype[Any], decode: Mapping[str, Any], shape: tuple[int, ...]) -> None:
        # shape, axis: the whole's as decoded (characters joined); metas: the parts' as stored
        self.name, self.source, self.reps, self.which, self.paths, self.metas = name, source, reps, which, paths, metas
        self.bounds, self.axis, self.dtype, self.decode, self.shape = bounds, axis, dtype, dict(decode), shape

    def __getitem__(self, key: Any) -> Any:
        from refset.compat import xarray_indexing

        ix = xarray_indexing()
        return ix.explicit_indexing_adapter(key, self.shape, ix.IndexingSupport.OUTER, self._outer)

    async def async_getitem(self, key: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(self.__getitem__, key)

    def _reader(self, k: int) -> Any:
        """Part ``k``'s reader: its representative's, over its own array."""
        from refset.serve.array import RefsetArray

        rep = self.reps[self.which[k]].data
        if isinstance(rep, RefsetArray):
            return RefsetArray(self.source, self.paths[k], self.metas[k], rep.dtype, rep.fill)
        from refset.serve.array import ZarrValues

        return ZarrValues(self.source, self.paths[k], rep.zarr_format, tuple(self.metas[k].shape), rep.dtype)

    def _outer(self, key: tuple[Any, ...]) -> np.ndarray:
        from xarray.conventions import decode_cf_variable

        from refset.serve.array import RefsetArray

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
        picks = []
        for at in np.split(order, cuts) if len(order) else []:
            p = int(which[at[0]])
            local = rows[at] - bounds[p]
            sel = slice(int(local[0]), int(local[-1]) + 1) if (
                len(local) and (np.diff(local) == 1).all()) else local
            put = slice(int(at[0]), int(at[-1]) + 1) if (np.diff(at) == 1).all() else at
            picks.append((p, put, (*key[:ax], sel, *key[ax + 1:])))
        shape = [len(rows) if a == ax else _size(key[a], self.shape[a])
                 for a in range(len(self.shape)) if a == ax or not isinstance(key[a], int | np.integer)]
        out_ax = sum(1 for a in range(ax) if not isinstance(key[a], int | np.integer))
        out = np.empty(shape, self.dtype)
        head: tuple[Any, ...] = (slice(None),) * out_ax
        # every part's raw values: the chunks of all of them in one plan
        readers = [self._reader(p) for p, _, _ in picks]
        raws: list[Any] = [None] * len(picks)
        jobs, placed = [], []
        for i, ((p, _, sel), r) in enumerate(zip(picks, readers, strict=True)):
            rep = self.reps[self.which[p]]
            stored = (*sel, *(slice(None),) * (len(rep.dims) - len(sel)))  # a char dim joined when decoded
            if isinstance(r, RefsetArray):
                s = Selection(stored, tuple(self.metas[p].shape), tuple(self.metas[p].chunks))
                jobs.append((r, s))
                placed.append((i, r, s))
            else:
                raws[i] = (r.outer(stored), stored)
        if jobs:
            got = run(_read_all(jobs))
            for (i, r, s), o in zip(placed, got, strict=True):
                raws[i] = (r.finish(o, s), None)
        for (p, put, sel), (raw, _) in zip(picks, raws, strict=True):
            rep = self.reps[self.which[p]]
            stored = (*sel, *(slice(None),) * (len(rep.dims) - len(sel)))
            dims = [d for d, i in zip(rep.dims, stored, strict=True) if not isinstance(i, int | np.integer)]
            import xarray as xr

            var = decode_cf_variable(self.name, xr.Variable(dims, raw, rep.attrs, rep.encoding), **self.decode)
            out[(*head, put)] = np.asarray(var.values)  # each part its own rows of out
        if scalar:
            got1: np.ndarray = out[(*head, 0)]
            return got1
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (PartsArray, (self.name, self.source, self.reps, self.which, self.paths, self.metas, self.bounds,
                             self.axis, self.dtype, self.decode, self.shape))


async def _read_all(jobs: list[tuple[Any, Selection]]) -> list[np.ndarray]:
    """The stored values of every (reader, selection), all their chunks in one plan."""
    from refset.model.decoder import decoder

    outs, todo = [], []
    engine = jobs[0][0].source.engine()
    for r, s in jobs:
        dec = decoder(r.meta)
        o = np.empty(s.shape, dec.dtype)
        outs.append(o)
        if s.nchunks:
            todo.append(ValuesJob(r.path, s, dec, r.fill, o))
    await engine.read_values(todo)
    return outs


def _layout_key(m: ArrayMetadata) -> tuple[tuple[str, bytes], ...]:
    """What two parts share when one raw variable can stand for both: their documents but the shape."""
    return tuple(sorted((k, _SHAPE.sub(b"", v)) for k, v in m.documents().items()))


def _size(k: Any, n: int) -> int:
    if isinstance(k, slice):
        return len(range(*k.indices(n)))
    return int(np.asarray(k).size)


def parts_variables(source: EngineRef, zstore: Any, group: str, decode: Mapping[str, Any],
                    others: Mapping[str, Any]) -> dict[str, Any]:
    """The variables made of parts directly in ``group`` (of ``zstore``, refset's zarr store over
    ``source``), each one lazy Variable decoded part by part with xarray's ``decode`` options.
    ``others``: the group's other variables, whose dims' sizes the parts' layouts must agree with."""
    import xarray as xr
    import zarr
    from xarray.conventions import decode_cf_variable

    from refset.compat import xarray_indexing, xarray_result_type
    from refset.serve.variables import variable_of

    lazy = xarray_indexing().LazilyIndexedArray

    sizes: dict[str, int] = {}
    for v in others.values():
        sizes.update(zip(v.dims, v.shape, strict=True))
    refs = source.engine().refs
    here = group.strip("/")
    out: dict[str, Any] = {}
    for path, layout in find_parts(refs).items():
        head, _, name = path.rpartition("/")
        if head != here or name in decode.get("drop_variables", ()):
            continue
        for d, n in zip(layout.dims, layout.shape, strict=True):
            if sizes.setdefault(d, n) != n:
                raise InvalidReferences(f"variable {path!r}: made of parts {n} long along {d!r}, where the "
                                        f"dataset's {d!r} is {sizes[d]} long")
        opts = {k: v for k, v in decode.items() if k != "drop_variables"}
        paths = tuple(layout.paths())
        metas = tuple(refs.metadata[p] for p in paths)
        keys: dict[Any, int] = {}
        which = tuple(keys.setdefault(_layout_key(m), len(keys)) for m in metas)
        firsts = [which.index(r) for r in range(len(keys))]
        try:
            arrays = [zarr.open_array(store=zstore, path=paths[k], mode="r", zarr_format=metas[k].zarr_format)
                      for k in firsts]
        except Exception as e:  # zarr's errors for a damaged part: the set is damaged
            raise InvalidReferences(f"variable {path!r}: made of parts, but a part does not open "
                                    f"({type(e).__name__}: {e})") from e
        raw_reps = tuple(_Rep(*variable_of(source, a, int(a.metadata.zarr_format) != 3, int(a.metadata.zarr_format)))
                         for a in arrays)
        decoded = [decode_cf_variable(name, xr.Variable(r.dims, lazy(r.data), r.attrs, r.encoding), **opts)
                   for r in raw_reps]
        first = decoded[which[0]]
        dtype = _promoted(xarray_result_type, [d.dtype for d in decoded])
        encoding = {k: v for k, v in first.encoding.items() if k not in ("chunks", "preferred_chunks")}
        encoding["preferred_chunks"] = _chunks(layout, metas, int(np.dtype(dtype).itemsize))
        encoding["refset_parts"] = list(paths)
        axis = first.dims.index(layout.dim)
        shape = tuple(layout.bounds[-1] if a == axis else n for a, n in enumerate(first.shape))
        array = PartsArray(name, source, raw_reps, which, paths, metas, layout.bounds, axis, dtype, opts, shape)
        out[name] = xr.Variable(first.dims, lazy(array), first.attrs, encoding)
    return out


class _Rep:
    """What parts stored alike share: the raw variable's dims, attributes, encoding and reader."""

    __slots__ = ("attrs", "data", "dims", "encoding")

    def __init__(self, dims: tuple[str, ...], attrs: dict[str, Any], encoding: dict[str, Any], data: Any) -> None:
        self.dims, self.attrs, self.encoding, self.data = dims, attrs, encoding, data

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Rep, (self.dims, self.attrs, self.encoding, self.data))


def _promoted(result_type: Any, dtypes: list[np.dtype[Any]]) -> np.dtype[Any]:
    """The dtype xarray's concat gives the parts; for strings numpy's (xarray's ``result_type`` says
    ``S`` of no width for two ``S6``: the widest part's)."""
    got: np.dtype[Any] = result_type(*dtypes)
    if got.kind in "SUV" and got.itemsize == 0:
        got = np.result_type(*dtypes)
    return got


def _chunks(layout: Parts, metas: tuple[ArrayMetadata, ...], itemsize: int) -> dict[str, int | tuple[int, ...]]:
    """Dask chunks along every dim that never straddle a stored chunk of any part: of the boundaries
    every part's chunks allow (along the concat dim each part's in turn, along the others every part's
    at once), those :func:`~refset.serve.variables.task_chunks` keeps, the concat dim first."""
    from refset.serve.variables import task_chunks

    ax = layout.axis
    axes: list[tuple[int, int] | list[int]] = []
    for a in range(len(layout.dims)):
        n = layout.shape[a]
        sizes = {max(int(m.chunks[a]), 1) for m in metas}
        if a == ax:
            cuts = [0]
            for m, lo, hi in zip(metas, layout.bounds[:-1], layout.bounds[1:], strict=True):
                c = max(int(m.chunks[a]), 1)
                cuts += [*range(lo + c, hi, c), hi]
            axes.append(sorted(set(cuts)))
        elif len(sizes) == 1:
            axes.append((n, sizes.pop()))  # every part chunked alike: a regular grid
        else:
            stops = {0, n}
            for c in sizes:
                stops.update(range(0, n, c))
            axes.append(sorted(stops))
    return dict(zip(layout.dims, task_chunks(axes, itemsize, ax), strict=True))
