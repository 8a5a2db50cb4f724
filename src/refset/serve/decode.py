"""Reading a selection of a zarr array through refset's engine: the chunks it touches fetched in one
coalesced plan (zarr alone keeps only ``async.concurrency`` chunk reads in flight), and zarr v2 chunks of
fixed-size types decoded directly with their numcodecs codecs (zarr's pipeline costs about a millisecond
a chunk). Used by the xarray adapter; imports zarr."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from zarr.core.sync import sync

from refset.errors import InvalidFile, error_name
from refset.parallel import parallel_map

__all__ = ["selected_chunks", "fast_ok", "fast_read"]


def _chunk_ids(k: Any, size: int, chunk: int) -> Any:
    """Chunk indices along one dimension touched by an index ``k`` (slice, int or int/bool array)."""
    if isinstance(k, slice):
        start, stop, step = k.indices(size)
        if step == 1:
            return np.arange(start // chunk, (stop - 1) // chunk + 1) if stop > start else np.zeros(0, int)
        return np.unique(np.arange(start, stop, step) // chunk)
    if isinstance(k, (int, np.integer)):
        return np.array([(int(k) % size) // chunk])
    a = np.asarray(k)
    if a.dtype == bool:
        a = np.flatnonzero(a)
    return np.unique((a.astype(np.int64) % size) // chunk)


def selected_chunks(key: Any, shape: tuple[int, ...], chunks: tuple[int, ...], least: int = 2) -> Any:
    """Flat indices of the chunks an orthogonal selection ``key`` touches, or None (also when they
    are fewer than ``least``)."""
    if not isinstance(key, tuple) or len(key) != len(shape) or not shape:
        return None
    ids = [_chunk_ids(k, n, c) for k, n, c in zip(key, shape, chunks, strict=True)]
    total = 1
    for i in ids:
        total *= len(i)
    if total < least or total > 4_000_000:
        return None
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
    mesh = np.meshgrid(*ids, indexing="ij")
    return np.ravel_multi_index(tuple(m.ravel() for m in mesh), grid)


def fast_ok(arr: Any, key: Any, store: Any) -> bool:
    """A zarr v2 array of fixed-size values read with slices of step 1 and integers: refset decodes
    it directly with its numcodecs codecs (zarr's pipeline costs about a millisecond per chunk)."""
    from zarr.core.metadata import ArrayV2Metadata

    if not hasattr(store, "read_chunks") or not isinstance(arr.metadata, ArrayV2Metadata):
        return False
    if arr.dtype.kind in "OUSTV" or arr.path not in store.refs.grids or not isinstance(key, tuple):
        return False
    if len(key) != arr.ndim or not arr.ndim:
        return False
    for k in key:
        if isinstance(k, slice):
            if k.step not in (None, 1):
                return False
        elif not isinstance(k, (int, np.integer)):
            return False
    return True


def fast_read(arr: Any, key: tuple[Any, ...], store: Any) -> Any:
    """The values of ``key`` (see :func:`fast_ok`), or None when a chunk it needs is missing and the
    array has no fill value (zarr's reads decide then)."""
    from numcodecs.compat import ensure_ndarray_like

    meta = arr.metadata
    shape, chunks = tuple(arr.shape), tuple(meta.chunks)
    lo, hi, sel = [], [], []
    for k, n, c in zip(key, shape, chunks, strict=True):
        if isinstance(k, slice):
            a, b, _ = k.indices(n)
            b = max(a, b)
        else:
            a = int(k) % n
            b = a + 1
        lo.append(a // c)
        hi.append(max(a // c, (b - 1) // c + 1) if b > a else a // c)
        sel.append(k)
    counts = [h - low for h, low in zip(hi, lo, strict=True)]
    dtype = np.dtype(arr.dtype)
    box_start = [low * c for low, c in zip(lo, chunks, strict=True)]
    box_shape = [min(h * c, n) - s for h, c, n, s in zip(hi, chunks, shape, box_start, strict=True)]
    box = np.empty(box_shape, dtype)
    if 0 in counts:
        box = np.empty([0] * len(shape), dtype)
    else:
        grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
        ids = np.indices(counts).reshape(len(counts), -1) + np.array(lo)[:, None]
        flat = np.ravel_multi_index(tuple(ids), grid)
        data = store.take_prefetched(arr.path, flat) if hasattr(store, "take_prefetched") else None
        if data is None:
            data = sync(store.read_chunks(arr.path, flat))
        fill = arr.fill_value
        if meta.fill_value is None and any(d is None for d in data):
            return None  # zarr decides what a missing chunk of an array without fill value holds
        compressor, filters, order = meta.compressor, meta.filters or (), meta.order

        def place(j: int) -> None:
            idx = ids[:, j]
            dst = tuple(slice(int(i) * c - s, min((int(i) + 1) * c, n) - s)
                        for i, c, n, s in zip(idx, chunks, shape, box_start, strict=True))
            raw = data[j]
            if raw is None:
                box[dst] = fill
                return
            try:
                x: Any = compressor.decode(raw) if compressor is not None else raw
                for f in reversed(filters):
                    x = f.decode(x)
                a = ensure_ndarray_like(x).view(dtype).reshape(chunks, order=order)
            except Exception as e:  # the codec's own error (zlib.error, RuntimeError...): named
                key = f"{arr.path}/{'.'.join(str(int(i)) for i in idx)}"
                where = files_of(store, key) or files_of(store, key, arr.path)  # an inline chunk: its array's
                raise InvalidFile(f"chunk {key!r}{where}: its bytes do not decode with the "
                                  f"array's codecs ({error_name(e)}: {e}): the file is corrupt or changed "
                                  "since its scan") from e
            box[dst] = a[tuple(slice(0, d.stop - d.start) for d in dst)]

        def place_many(js: range) -> None:
            for j in js:
                place(j)

        n, parts = len(data), 4 * max(2, os.cpu_count() or 2)
        step = max(1, -(-n // parts))
        parallel_map(place_many, [range(i, min(i + step, n)) for i in range(0, n, step)])
    rel = []
    for k, s, n in zip(sel, box_start, shape, strict=True):
        if isinstance(k, slice):
            a, b, _ = k.indices(n)
            rel.append(slice(a - s, max(a, b) - s))
        else:
            rel.append(int(k) % n - s)
    return box[tuple(rel)] if box.size else np.empty(
        [len(range(*k.indices(n))) for k, n in zip(sel, shape, strict=True) if isinstance(k, slice)], dtype)




def files_of(store: Any, key: str, array: str | None = None) -> str:
    """`` in 'URL'``: the file chunk ``key`` references (``array``: the files of that array's
    chunks, up to three named), for an error; "" when the store does not say."""
    rs = getattr(store, "refs", None)
    if rs is None:
        return ""
    try:
        if array is None:
            ref = rs[key]
            return f" in {ref[0]!r}" if isinstance(ref, tuple | list) else ""
        ids = np.unique(rs.table(array).path_id)
        urls = [rs.urls[i] for i in ids.tolist() if 0 <= i < len(rs.urls)]
    except Exception:  # the error being reported is the one to raise
        return ""
    if not urls:
        return ""
    if len(urls) == 1:
        return f" in {urls[0]!r}"
    return f" in one of {len(urls)} files ({', '.join(map(repr, urls[:3]))}{', ...' if len(urls) > 3 else ''})"
