"""A zarr array of a set as the xarray Variable xarray's zarr backend makes of it (its dims, attributes,
encoding and dtype rules, read through zarr's public Array API over :class:`refset.ZarrStore`), its
values a refset BackendArray (:mod:`refset.serve.array`); and the Dask chunks refset prefers."""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
from typing import Any

import numpy as np

from refset.serve.engine import EngineRef

__all__ = ["open_variable", "variable_of", "values_of", "dims_and_attrs", "fill_value_decode", "task_bytes",
           "preferred_chunks", "task_chunks", "TASK_BYTES", "SPAN"]

#: Bytes of values a Dask chunk holds at most when dask's ``array.chunk-size`` is not set (its default).
TASK_BYTES = 128 * 2**20


def open_variable(source: EngineRef, arr: Any, mask: bool, group_format: int) -> Any:
    """The xarray Variable of zarr array ``arr`` (opened over refset's store) as xarray's zarr backend
    makes it (``mask``: zarr's fill value is the ``_FillValue``), its values read by refset."""
    import xarray as xr

    from refset.compat import xarray_indexing

    dims, attrs, encoding, data = variable_of(source, arr, mask, group_format)
    return xr.Variable(dims, xarray_indexing().LazilyIndexedArray(data), attrs, encoding)


def variable_of(source: EngineRef, arr: Any, mask: bool, group_format: int
                ) -> tuple[tuple[str, ...], dict[str, Any], dict[str, Any], Any]:
    """(dims, attributes, encoding, BackendArray) of :func:`open_variable`."""
    from refset.serve.array import native

    dims, attrs = dims_and_attrs(source, arr)
    dtype = arr.dtype
    serializer = arr.serializer
    if dtype.kind != "T" and serializer is not None and serializer.to_dict()["name"] == "vlen-utf8":
        dtype = np.dtype("O", metadata={"element_type": str})  # as xarray's wrapper keeps vlen strings
    chunks = tuple(int(c) for c in arr.chunks)
    encoding: dict[str, Any] = {"chunks": chunks, "preferred_chunks": dict(zip(
        dims, preferred_chunks(tuple(arr.shape), chunks, np.dtype(dtype).itemsize), strict=True))}
    if dtype.kind == "T":
        encoding["dtype"] = dtype
    encoding.update({"compressors": arr.compressors, "filters": arr.filters, "shards": arr.shards})
    if group_format == 3:
        encoding["serializer"] = serializer
    if mask:
        if arr.fill_value is not None:
            attrs["_FillValue"] = arr.fill_value
    else:
        if group_format == 3:
            encoding["fill_value"] = arr.fill_value
        if "_FillValue" in attrs:
            attrs["_FillValue"] = fill_value_decode(attrs["_FillValue"], arr.dtype)
    return dims, attrs, encoding, values_of(source, arr, native(dtype))


def values_of(source: EngineRef, arr: Any, dtype: np.dtype[Any]) -> Any:
    """The BackendArray of zarr array ``arr``: refset's reader when refset decodes it, else zarr's."""
    from refset.errors import Unsupported
    from refset.model.decoder import decoder
    from refset.serve.array import RefsetArray, ZarrValues

    path = arr.path.strip("/")
    meta = source.engine().refs.metadata.get(path)
    fmt = int(arr.metadata.zarr_format)
    if meta is not None and tuple(meta.shape) == tuple(arr.shape):
        try:
            decoder(meta)
        except Unsupported:
            pass
        else:
            fill = arr.fill_value
            if fill is None:  # zarr reads a missing chunk of a v2 array without fill value as zeros
                fill = np.zeros((), decoder(meta).dtype)[()]
            return RefsetArray(source, path, meta, dtype, fill)
    return ZarrValues(source, path, fmt, tuple(arr.shape), dtype)


def dims_and_attrs(source: EngineRef, arr: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The dims and attributes of zarr array ``arr`` as xarray's zarr backend reads them: zarr v3's
    ``dimension_names``; zarr v2's ``_ARRAY_DIMENSIONS`` attribute, or NCZarr's ``dimrefs``."""
    meta = arr.metadata
    if int(meta.zarr_format) == 3:
        dims = tuple(meta.dimension_names or ())
        if len(arr.shape) != len(dims):
            raise KeyError("Zarr object is missing the `dimension_names` metadata which is required for xarray "
                           "to determine variable dimensions.")
        return dims, dict(arr.attrs)
    attrs = dict(arr.attrs)
    if "_ARRAY_DIMENSIONS" in attrs:
        dims = tuple(attrs["_ARRAY_DIMENSIONS"])
    else:
        key = f"{arr.path.strip('/')}/.zarray"
        raw = source.engine().refs.get(key)
        try:
            doc = json.loads(raw) if isinstance(raw, bytes) else {}
            dims = tuple(os.path.basename(d) for d in doc["_NCZARR_ARRAY"]["dimrefs"])
        except (KeyError, TypeError, ValueError) as e:
            raise KeyError("Zarr object is missing the attribute `_ARRAY_DIMENSIONS` and the NCZarr metadata, "
                           "which are required for xarray to determine variable dimensions.") from e
    hidden = {"_ARRAY_DIMENSIONS"} | {k for k in attrs if k.lower().startswith("_nc")}
    return dims, {k: v for k, v in attrs.items() if k not in hidden}


def fill_value_decode(value: Any, dtype: Any) -> Any:
    """A zarr v3 array's ``_FillValue`` attribute as xarray's zarr backend decodes it (its
    ``FillValueCoder.decode``)."""
    if dtype == "string":
        return str(value)
    if dtype == "bytes":
        if not isinstance(value, str | bytes):
            raise TypeError(f"Failed to decode fill_value: expected str or bytes for dtype {dtype}, "
                            f"got {type(value).__name__}")
        return base64.standard_b64decode(value)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        if not isinstance(value, str | bytes):
            raise TypeError(f"Failed to decode fill_value: expected str or bytes for dtype {dt}, "
                            f"got {type(value).__name__}")
        return struct.unpack("<d", base64.standard_b64decode(value))[0]
    if dt.kind == "c":
        if not (isinstance(value, list | tuple) and len(value) == 2):
            raise TypeError(f"Failed to decode fill_value: expected a 2-element list for dtype {dt}, "
                            f"got {type(value).__name__}")
        re_, im = (struct.unpack("<d", base64.standard_b64decode(x))[0] for x in value)
        return complex(re_, im)
    if dt.kind == "b":
        return bool(value)
    if dt.kind in "iu":
        if not isinstance(value, int | float | np.integer | np.floating):
            raise TypeError(f"Failed to decode fill_value: expected int or float for dtype {dt}, "
                            f"got {type(value).__name__}")
        return int(value)
    raise ValueError(f"Failed to decode fill_value. Unsupported dtype {dtype}")


def task_bytes() -> int:
    """Bytes of values a Dask chunk should hold: dask's ``array.chunk-size`` when dask is loaded (a
    user who set it has loaded it), else its default (:data:`TASK_BYTES`)."""
    if "dask" in sys.modules:
        try:
            from dask import config
            from dask.utils import parse_bytes

            got = config.get("array.chunk-size")
            return int(parse_bytes(got) if isinstance(got, str) else got)
        except Exception:  # a value dask itself would refuse: its default
            return TASK_BYTES
    return TASK_BYTES


#: Stored chunks a task spans along the concat dim (the outermost) before the other dims grow: a time
#: series at one point is a task per this many files even where a file's map fills the budget alone.
SPAN = 64


def preferred_chunks(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int,
                     target: int | None = None) -> tuple[int | tuple[int, ...], ...]:
    """Dask chunks for ``chunks={}`` of a regular array: :func:`task_chunks`, the outermost dim first."""
    return tuple(task_chunks([(int(n), int(c)) for n, c in zip(shape, chunks, strict=True)], itemsize, 0, target))


def task_chunks(axes: list[tuple[int, int] | list[int]], itemsize: int, first: int, target: int | None = None,
                ) -> list[int | tuple[int, ...]]:
    """Dask chunks made of whole stored chunks. ``axes``: per dim ``(size, chunk)`` (a regular grid,
    answered as an int, however many chunks) or the list of boundaries no stored chunk straddles
    (answered as a tuple of sizes). Along each dim stored chunks are joined so that a task holds about
    ``target`` bytes of values (:func:`task_bytes`): along dim ``first`` (the concat dim: across files)
    up to :data:`SPAN` stored chunks first, then the other dims, outer to inner, each whole while it
    fits (the rest keep their stored chunks once one does not), then ``first`` again with what is
    left. A task then reads many chunks in one plan (a day's map whole, a time series a task per many
    files) instead of one chunk (and one round trip) each."""
    import itertools

    target = task_bytes() if target is None else target
    if not axes:
        return []
    seg = [max(int(x[1]), 1) if isinstance(x, tuple) else max((b - a for a, b in itertools.pairwise(x)), default=1)
           for x in axes]
    ext = [int(x[0]) if isinstance(x, tuple) else int(x[-1]) for x in axes]
    cur = [min(s, n) if n else s for s, n in zip(seg, ext, strict=True)]  # a task's extent per dim
    out: list[int | tuple[int, ...]] = [x[1] if isinstance(x, tuple) else
                                        tuple(int(b - a) for a, b in itertools.pairwise(x)) or (0,) for x in axes]
    size = max(int(itemsize), 1) * int(np.prod([max(c, 1) for c in cur]))

    def grow(a: int, room: int) -> bool:
        """Join along dim ``a`` to at most ``room`` positions within the budget; whether it is whole."""
        nonlocal size
        per = size // max(cur[a], 1)  # bytes of a task per position along a
        room = max(min(room, target // max(per, 1)), seg[a])
        x = axes[a]
        if isinstance(x, tuple):
            n, c = ext[a], seg[a]
            cur[a] = (n if room >= n else room // c * c) if n else c
            out[a] = cur[a]
            whole = cur[a] >= n
        else:
            e = _join(x, room)
            cur[a] = max((b - y for y, b in itertools.pairwise(e)), default=1)
            out[a] = tuple(int(b - y) for y, b in itertools.pairwise(e)) or (0,)
            whole = len(e) <= 2
        size = per * max(cur[a], 1)
        return whole

    grow(first, SPAN * seg[first])
    whole = True
    for a in range(len(axes)):
        if a != first and whole:
            whole = grow(a, ext[a])
    if whole:
        grow(first, ext[first])
    return out


def _join(edges: list[int], room: int) -> list[int]:
    """Of the boundaries ``edges``, those left when consecutive segments are joined while the joined
    segment spans at most ``room`` positions (a longer segment stays alone)."""
    out = [edges[0]]
    last = edges[0]
    for x in edges[1:]:
        if x - out[-1] > room and last > out[-1]:
            out.append(last)
        last = x
    if out[-1] != edges[-1]:
        out.append(edges[-1])
    return out
