"""xarray backend ``engine="refset"``: open any reference set :func:`refset.load` reads as a Dataset.

The references are served by :class:`refset.ZarrStore`; xarray's zarr backend reads the metadata and
applies the CF conventions, lazy indexing and ``chunks=`` for Dask, so results match ``engine="zarr"``
over the same store. Each variable's values come through :class:`RefsetArray`, which reads a selection's
chunks in one coalesced plan and decodes them itself where it can (:mod:`refset.serve.decode`). zarr is
imported only when a dataset is opened. Datasets opened with ``chunks=`` compute on process-based Dask
clusters: every object in the graph pickles.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from xarray.backends import BackendEntrypoint
from xarray.backends import ZarrStore as XarrayZarrStore

__all__ = ["RefsetBackendEntrypoint", "open_dataset"]

class RefsetBackendEntrypoint(BackendEntrypoint):
    """Open kerchunk-style reference sets (JSON V0/V1, parquet, packed) with refset."""

    description = "Open kerchunk-style reference sets (JSON, parquet, packed) through refset"
    url = "https://github.com/refset/refset"
    open_dataset_parameters = (
        "filename_or_obj", "drop_variables", "mask_and_scale", "decode_times", "concat_characters",
        "decode_coords", "use_cftime", "decode_timedelta", "group", "storage_options",
        "remote_protocol", "remote_options", "fs", "template_overrides", "max_gap", "max_block",
        "zarr_format", "use_zarr_fill_value_as_mask", "limits", "verify_sources",
    )

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        if not isinstance(filename_or_obj, str | os.PathLike):
            return False
        from refset.formats.registry import looks_like_refs

        return looks_like_refs(os.fspath(filename_or_obj))

    def open_dataset(
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
        verify_sources: bool = True,
    ) -> Any:
        from xarray.backends.zarr import ZarrBackendEntrypoint

        from refset.model.parts import find_parts
        from refset.serve.zarr import ZarrStore

        store = filename_or_obj if isinstance(filename_or_obj, ZarrStore) else ZarrStore(
            filename_or_obj, storage_options=storage_options, remote_protocol=remote_protocol,
            remote_options=remote_options, fs=fs, template_overrides=template_overrides,
            max_gap=max_gap, max_block=max_block, limits=limits, verify_sources=verify_sources,
        )
        find_parts(store.refs)  # a damaged layout of parts named before zarr parses its group
        if zarr_format is None:
            zarr_format = _zarr_format(store)
        open_group = GroupOpener(store, zarr_format)
        xstore = open_group(group)
        # variables made of parts are decoded part by part, with the options xarray decodes the rest with
        xstore.refset_parts = (open_group, {
            "drop_variables": [drop_variables] if isinstance(drop_variables, str) else list(drop_variables or ()),
            "mask_and_scale": mask_and_scale, "decode_times": decode_times,
            "concat_characters": concat_characters, "use_cftime": use_cftime,
            "decode_timedelta": decode_timedelta})
        return ZarrBackendEntrypoint().open_dataset(
            store,  # type: ignore[arg-type]  # a zarr Store, which xarray takes though its annotation omits it
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


class RefsetDataStore(XarrayZarrStore):
    """xarray's zarr datastore, its variables' values read by :class:`~refset.serve.array.RefsetArray`,
    variables made of parts served whole (:mod:`refset.serve.parts`). A module-level class, so that
    datasets pickle (``client.submit(f, ds)``)."""

    refset_parts: Any = None  # (a GroupOpener, decoding options) when opened by the entry point
    refset_members: Any = None  # the members it serves, when given (the parts a variable needs)

    @property
    def members(self) -> Any:
        # docstring inherited: the arrays and groups of the group (those given, when given)
        if self.refset_members is not None:
            return self.refset_members
        return super().members

    def get_variables(self) -> Any:
        # docstring inherited: the arrays, and each variable made of parts as one
        from xarray.core.utils import FrozenDict

        from refset.serve.parts import parts_variables

        got = super().get_variables()  # type: ignore[no-untyped-call]  # xarray: unannotated
        if self.refset_parts is None:
            return got
        opener, decode = self.refset_parts
        return FrozenDict({**got, **parts_variables(self, opener, decode, others=got)})

    def open_store_variable(self, name: str) -> Any:
        # docstring inherited: dims, attributes and encoding as xarray reads them from zarr
        import xarray as xr
        from xarray.core import indexing

        from refset.serve.array import RefsetArray

        var = super().open_store_variable(name)  # type: ignore[no-untyped-call]  # xarray: unannotated
        data = indexing.LazilyIndexedArray(RefsetArray(self.members[name]))
        return xr.Variable(var.dims, data, var.attrs, var.encoding)


@dataclass(frozen=True)
class GroupOpener:
    """Opens a :class:`RefsetDataStore` on a group of ``store`` (picklable, unlike a closure)."""

    store: Any
    zarr_format: int | None

    def __call__(self, path: str | None, cache_members: bool = True) -> RefsetDataStore:
        got: RefsetDataStore = RefsetDataStore.open_group(
            self.store, group=path, mode="r", consolidated=False, consolidate_on_close=False,
            zarr_format=self.zarr_format, use_zarr_fill_value_as_mask=None, cache_members=cache_members,
        )
        return got


