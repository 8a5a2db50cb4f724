"""xarray backend ``engine="refset"``: open any reference set :func:`refset.load` reads as a Dataset.

:class:`RefsetDataStore` is an xarray ``AbstractDataStore`` over refset's model: each variable's values
are a lazily indexed :class:`~refset.serve.array.RefsetArray` (refset's engine and decoder), a variable
made of parts one :class:`~refset.serve.parts.PartsArray` over its parts' readers. The names, dims,
attributes and encoding are those xarray's zarr backend reads over the same store, taken from zarr's
public Array API over :class:`refset.ZarrStore` (so the codec objects in ``encoding`` are zarr's own);
CF decoding is xarray's store entry point (``StoreBackendEntrypoint``), so values, dtypes, attributes
and encoding are those of ``engine="zarr"``, but for ``encoding["preferred_chunks"]``: Dask chunks made
of many stored chunks (:func:`refset.serve.variables.preferred_chunks`). Everything in a dataset pickles by what reopens it.
zarr is imported when a dataset is opened.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from xarray.backends import AbstractDataStore, BackendEntrypoint

from refset.serve.engine import EngineRef

__all__ = ["RefsetBackendEntrypoint", "RefsetDataStore", "open_dataset"]


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
        from xarray.backends import StoreBackendEntrypoint

        from refset.model.parts import find_parts
        from refset.serve.zarr import ZarrStore

        if isinstance(filename_or_obj, ZarrStore):
            source = filename_or_obj.source
        else:
            source = EngineRef.open(filename_or_obj, storage_options=storage_options,
                                    remote_protocol=remote_protocol, remote_options=remote_options, fs=fs,
                                    template_overrides=template_overrides, max_gap=max_gap, max_block=max_block,
                                    limits=limits, verify_sources=verify_sources)
        engine = source.engine()
        find_parts(engine.refs)  # a damaged layout of parts named before zarr parses its group
        if zarr_format is None:
            zarr_format = _zarr_format(engine.index)
        # use_zarr_fill_value_as_mask: as xarray's zarr backend, the group's zarr format decides (v2: True)
        decode = {"drop_variables": [drop_variables] if isinstance(drop_variables, str) else list(drop_variables or ()),
                  "mask_and_scale": mask_and_scale, "decode_times": decode_times,
                  "concat_characters": concat_characters, "use_cftime": use_cftime,
                  "decode_timedelta": decode_timedelta}
        store = RefsetDataStore(source, group, zarr_format, decode)
        return StoreBackendEntrypoint().open_dataset(
            store, drop_variables=drop_variables, mask_and_scale=mask_and_scale, decode_times=decode_times,
            concat_characters=concat_characters, decode_coords=decode_coords, use_cftime=use_cftime,
            decode_timedelta=decode_timedelta)


def _zarr_format(index: Any) -> int | None:
    """2 or 3 from the metadata keys present at the root, so zarr need not probe for both."""
    if index.ref("zarr.json") is not None:
        return 3
    if index.ref(".zgroup") is not None or index.ref(".zarray") is not None:
        return 2
    return None


def open_dataset(source: Any, **kwargs: Any) -> Any:
    """``xarray.open_dataset(source, engine="refset", **kwargs)``; ``source`` is anything
    :func:`refset.load` takes (also a ReferenceSet or a dict)."""
    import xarray as xr

    return xr.open_dataset(source, engine=RefsetBackendEntrypoint, **kwargs)


class RefsetDataStore(AbstractDataStore):
    """The variables and attributes of group ``group`` of the set ``source`` opens, as xarray's zarr
    backend reads them (``zarr_format``: of the group, None to let zarr find it), values read by refset;
    ``decode``: the CF decoding options (variables made of parts are decoded part by part with them).
    Pickles as those; the variables are made on first use."""

    __slots__ = ("_got", "decode", "group", "source", "zarr_format")

    def __init__(self, source: EngineRef, group: str | None, zarr_format: int | None,
                 decode: Mapping[str, Any]) -> None:
        self.source, self.group, self.zarr_format, self.decode = source, group, zarr_format, dict(decode)
        self._got: tuple[dict[str, Any], dict[str, Any]] | None = None

    def _load(self) -> tuple[dict[str, Any], dict[str, Any]]:
        if self._got is None:
            import zarr

            from refset.serve.parts import parts_variables
            from refset.serve.variables import open_variable
            from refset.serve.zarr import ZarrStore

            zstore = ZarrStore(self.source)
            group = zarr.open_group(zstore, mode="r", path=self.group or "", zarr_format=self.zarr_format,  # type: ignore[arg-type]
                                    use_consolidated=False)
            fmt = int(group.metadata.zarr_format)
            mask = fmt != 3  # xarray's zarr backend: zarr's fill value masks values in zarr v2
            variables = {name: open_variable(self.source, node, mask, fmt)
                         for name, node in group.members() if isinstance(node, zarr.Array)}
            attrs = {k: v for k, v in group.attrs.asdict().items() if not k.lower().startswith("_nc")}
            variables.update(parts_variables(self.source, zstore, group.path, self.decode, variables))
            self._got = (variables, attrs)
        return self._got

    def get_variables(self) -> dict[str, Any]:
        # docstring inherited
        return self._load()[0]

    def get_attrs(self) -> dict[str, Any]:
        # docstring inherited
        return self._load()[1]

    def get_dimensions(self) -> dict[str, int]:
        # docstring inherited
        out: dict[str, int] = {}
        for v in self.get_variables().values():
            for d, n in zip(v.dims, v.shape, strict=True):
                if out.setdefault(d, n) != n:
                    raise ValueError(f"found conflicting lengths for dimension {d} ({n} != {out[d]})")
        return out

    def close(self) -> None:
        # docstring inherited: nothing held open (the engine's files are read range by range)
        pass

    def __reduce__(self) -> tuple[Any, ...]:
        return (RefsetDataStore, (self.source, self.group, self.zarr_format, self.decode))
