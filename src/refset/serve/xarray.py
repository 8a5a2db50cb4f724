"""xarray backend ``engine="refset"``: open any reference set :func:`refset.load` reads as a Dataset.

The references are served by :class:`refset.ZarrStore`; xarray's zarr backend does the decoding (CF
conventions, lazy indexing, ``chunks=`` for Dask), so results match ``engine="zarr"`` over the same
store. zarr is imported only when a dataset is opened (:mod:`refset.serve.xarray_store`). Datasets opened
with ``chunks=`` compute on process-based Dask clusters: every object in the graph pickles.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from xarray.backends import BackendEntrypoint

__all__ = ["RefsetBackendEntrypoint", "open_dataset"]

class RefsetBackendEntrypoint(BackendEntrypoint):
    """Open kerchunk-style reference sets (JSON V0/V1, parquet, packed) with refset."""

    description = "Open kerchunk-style reference sets (JSON, parquet, packed) through refset"
    url = "https://github.com/refset/refset"
    open_dataset_parameters = (
        "filename_or_obj", "drop_variables", "mask_and_scale", "decode_times", "concat_characters",
        "decode_coords", "use_cftime", "decode_timedelta", "group", "storage_options",
        "remote_protocol", "remote_options", "fs", "template_overrides", "max_gap", "max_block",
        "zarr_format", "use_zarr_fill_value_as_mask", "limits",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, str | os.PathLike):
            return False
        from refset.formats.registry import looks_like_refs

        return looks_like_refs(os.fspath(filename_or_obj))

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
        limits: Any = None,
    ) -> Any:
        from xarray.backends.zarr import ZarrBackendEntrypoint

        from refset.serve.xarray_store import PrefetchingDataStore
        from refset.serve.zarr import ZarrStore

        store = filename_or_obj if isinstance(filename_or_obj, ZarrStore) else ZarrStore(
            filename_or_obj, storage_options=storage_options, remote_protocol=remote_protocol,
            remote_options=remote_options, fs=fs, template_overrides=template_overrides,
            max_gap=max_gap, max_block=max_block, limits=limits,
        )
        if zarr_format is None:
            zarr_format = _zarr_format(store)
        xstore = PrefetchingDataStore.open_group(
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


def _zarr_format(store: Any) -> int | None:
    """2 or 3 from the metadata keys present at the root, so zarr need not probe for both."""
    idx = store.index
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
