"""xarray backend ``engine="refset"``: open any reference set :func:`refset.load` reads as a Dataset.

The references are served by :class:`refset.ZarrStore`; xarray's zarr backend does the decoding (CF
conventions, lazy indexing, ``chunks=`` for Dask), so results match ``engine="zarr"`` over the same
store. xarray and zarr are imported only when a dataset is opened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from xarray.backends import BackendEntrypoint

__all__ = ["RefsetBackendEntrypoint", "open_dataset"]

_SUFFIXES = (".json", ".json.gz", ".json.zst", ".json.zstd", ".parq", ".parquet", ".packed", ".refs",
             ".rfs")


def _packed_magic() -> bytes:
    try:
        from .formats._packed import MAGIC
    except ImportError:  # pragma: no cover - the packed format is optional here
        return b"RFSPACK\x00"
    return MAGIC


class RefsetBackendEntrypoint(BackendEntrypoint):
    """Open kerchunk-style reference sets (JSON V0/V1, parquet, packed) with refset."""

    description = "Open kerchunk-style reference sets (JSON, parquet, packed) through refset"
    url = "https://github.com/refset/refset"
    open_dataset_parameters = (
        "filename_or_obj", "drop_variables", "mask_and_scale", "decode_times", "concat_characters",
        "decode_coords", "use_cftime", "decode_timedelta", "group", "storage_options",
        "remote_protocol", "remote_options", "fs", "template_overrides", "max_gap", "max_block",
        "zarr_format", "use_zarr_fill_value_as_mask",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, (str, os.PathLike)):
            return False
        name = os.fspath(filename_or_obj)
        if name.rstrip("/").endswith(_SUFFIXES):
            return True
        if "://" not in name and os.path.isfile(name):
            try:
                with open(name, "rb") as f:
                    return f.read(8) == _packed_magic()
            except OSError:
                return False
        return False

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        mask_and_scale: bool = True,
        decode_times: bool = True,
        concat_characters: bool = True,
        decode_coords: bool = True,
        use_cftime: bool | None = None,
        decode_timedelta: bool | None = None,
        group: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        remote_protocol: str | None = None,
        remote_options: Mapping[str, Any] | None = None,
        fs: Any = None,
        template_overrides: Mapping[str, str] | None = None,
        max_gap: int | None = None,
        max_block: int | None = None,
        zarr_format: int | None = None,
        use_zarr_fill_value_as_mask: bool | None = None,
    ) -> Any:
        from xarray.backends.zarr import ZarrBackendEntrypoint

        from .zarr_store import ZarrStore

        store = filename_or_obj if isinstance(filename_or_obj, ZarrStore) else ZarrStore(
            filename_or_obj, storage_options=storage_options, remote_protocol=remote_protocol,
            remote_options=remote_options, fs=fs, template_overrides=template_overrides,
            max_gap=max_gap, max_block=max_block,
        )
        if zarr_format is None:
            zarr_format = _zarr_format(store)
        xstore = _prefetching_datastore().open_group(
            store, group=group, mode="r", consolidated=False, consolidate_on_close=False,
            zarr_format=zarr_format, use_zarr_fill_value_as_mask=None,
        )
        return ZarrBackendEntrypoint().open_dataset(
            store,
            store=xstore,
            drop_variables=drop_variables,
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
            use_cftime=use_cftime,
            decode_timedelta=decode_timedelta,
            group=group,
            consolidated=False,
            zarr_format=zarr_format,
            use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        )


def _chunk_ids(k: Any, size: int, chunk: int) -> Any:
    """Chunk indices along one dimension touched by an index ``k`` (slice, int or int/bool array)."""
    import numpy as np

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


def _selected_chunks(key: Any, shape: tuple[int, ...], chunks: tuple[int, ...]) -> Any:
    """Flat indices of the chunks an orthogonal selection ``key`` touches, or None."""
    import numpy as np

    if not isinstance(key, tuple) or len(key) != len(shape) or not shape:
        return None
    ids = [_chunk_ids(k, n, c) for k, n, c in zip(key, shape, chunks, strict=True)]
    total = 1
    for i in ids:
        total *= len(i)
    if total < 2 or total > 4_000_000:
        return None
    grid = tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))
    mesh = np.meshgrid(*ids, indexing="ij")
    return np.ravel_multi_index(tuple(m.ravel() for m in mesh), grid)


def _fast_ok(arr: Any, key: Any, store: Any) -> bool:
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


def _fast_read(arr: Any, key: tuple[Any, ...], store: Any, sync: Any) -> Any:
    import numpy as np
    from numcodecs.compat import ensure_ndarray_like

    from ._threads import parallel_map

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
        data = sync(store.read_chunks(arr.path, flat))
        fill = arr.fill_value
        compressor, filters, order = meta.compressor, meta.filters or (), meta.order

        def place(j: int) -> None:
            idx = ids[:, j]
            dst = tuple(slice(int(i) * c - s, min((int(i) + 1) * c, n) - s)
                        for i, c, n, s in zip(idx, chunks, shape, box_start, strict=True))
            raw = data[j]
            if raw is None:
                box[dst] = fill
                return
            x: Any = compressor.decode(raw) if compressor is not None else raw
            for f in reversed(filters):
                x = f.decode(x)
            a = ensure_ndarray_like(x).view(dtype).reshape(chunks, order=order)
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


def _prefetching_datastore() -> Any:
    """xarray's ZarrStore whose arrays fetch every chunk of a selection in one coalesced plan before
    zarr decodes them (zarr alone keeps only ``async.concurrency`` chunk reads in flight)."""
    from xarray.backends.zarr import ZarrArrayWrapper
    from xarray.backends.zarr import ZarrStore as XarrayZarrStore
    from zarr.core.sync import sync

    class PrefetchingArrayWrapper(ZarrArrayWrapper):
        __slots__ = ()

        def _read(self, key: Any, read: Any) -> Any:
            arr = self._array
            store = arr.store_path.store
            if _fast_ok(arr, key, store):
                return _fast_read(arr, key, store, sync)
            flat = None
            try:
                flat = _selected_chunks(key, tuple(arr.shape), tuple(arr.chunks))
            except (NotImplementedError, TypeError, ValueError):
                flat = None
            if flat is None or not hasattr(store, "prefetch"):
                return read(key)
            keys = sync(store.prefetch(arr.path, flat))
            try:
                return read(key)
            finally:
                store.release(keys)

        def _getitem(self, key: Any) -> Any:
            return self._read(key, super()._getitem)

        def _oindex(self, key: Any) -> Any:
            return self._read(key, super()._oindex)

    class PrefetchingDataStore(XarrayZarrStore):
        def open_store_variable(self, name: str) -> Any:
            from xarray.core import indexing

            var = super().open_store_variable(name)
            var._data = indexing.LazilyIndexedArray(PrefetchingArrayWrapper(self.members[name]))
            return var

    return PrefetchingDataStore


def _zarr_format(store: Any) -> int | None:
    """2 or 3 from the metadata keys present at the root, so zarr need not probe for both."""
    idx = store.fs.index
    if idx.ref("zarr.json") is not None:
        return 3
    if idx.ref(".zgroup") is not None or idx.ref(".zarray") is not None:
        return 2
    return None


def open_dataset(source: Any, **kwargs: Any) -> Any:
    """``xarray.open_dataset(source, engine="refset", **kwargs)``; ``source`` is anything
    :func:`refset.load` takes (also a ReferenceSet or a dict)."""
    import xarray as xr

    return xr.open_dataset(source, engine=RefsetBackendEntrypoint, **kwargs)
