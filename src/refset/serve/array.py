"""A set's arrays as xarray ``BackendArray``s.

:class:`RefsetArray` reads from refset's own model: an outer selection becomes the chunks it touches
(:class:`~refset.serve.selection.Selection`), fetched in one plan and decoded by the one decoder
(:mod:`refset.model.decoder`) as their blocks arrive (:meth:`ReadEngine.read_values`), crossing into
async code through the one bridge (:mod:`refset.io.bridge`). :class:`ZarrValues` reads an array refset
cannot decode itself (a zarr v3 codec chain without a v2 form, an array outside the set's chunk grids)
through zarr's public Array API over :class:`refset.ZarrStore`, whose bytes come from the same engine.
Both are module-level classes that pickle by what reopens them (:class:`EngineRef`, a path, metadata).
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

import numpy as np
from xarray.backends import BackendArray

from refset.compat import xarray_indexing
from refset.errors import InvalidFile, RefsetError, error_name
from refset.io.bridge import run
from refset.model.decoder import decoder
from refset.model.metadata import ArrayMetadata
from refset.serve.engine import EngineRef, ValuesJob
from refset.serve.selection import Selection

__all__ = ["RefsetArray", "ZarrValues", "native"]


def native(dtype: Any) -> Any:
    """A structured dtype with its fields in this machine's byte order (xarray's endianness decoding
    casts a structured array whose fields are not to raw bytes, and fails); others as they are."""
    if isinstance(dtype, np.dtype) and dtype.fields is not None and not all(
            dtype.fields[n][0].isnative for n in dtype.names or ()):
        return dtype.newbyteorder("=")
    return dtype


class RefsetArray(BackendArray):
    """Array ``path`` of the set ``source`` opens, read with outer indexing: values in ``dtype``
    (what zarr reads the array as: xarray's zarr backend's dtype), absent chunks holding ``fill``."""

    __slots__ = ("dtype", "fill", "meta", "path", "shape", "source")

    def __init__(self, source: EngineRef, path: str, meta: ArrayMetadata, dtype: np.dtype[Any], fill: Any) -> None:
        self.source, self.path, self.meta, self.fill = source, path, meta, fill
        self.shape = tuple(meta.shape)
        self.dtype = dtype

    def __getitem__(self, key: Any) -> Any:
        ix = xarray_indexing()
        return ix.explicit_indexing_adapter(key, self.shape, ix.IndexingSupport.OUTER, self.outer)

    async def async_getitem(self, key: Any) -> Any:
        return await asyncio.to_thread(self.__getitem__, key)

    def outer(self, key: tuple[Any, ...]) -> np.ndarray:
        """The values of an outer selection (per axis an integer, a slice or a 1-d integer array)."""
        sel = Selection(key, self.shape, tuple(self.meta.chunks))
        return self.finish(run(self.read([sel]))[0], sel)

    async def read(self, sels: list[Selection]) -> list[np.ndarray]:
        """The stored values of several selections, read in one plan (shaped like each ``shape``)."""
        dec = decoder(self.meta)
        outs = [np.empty(s.shape, dec.dtype) for s in sels]
        await self.source.engine().read_values(
            [ValuesJob(self.path, s, dec, self.fill, o) for s, o in zip(sels, outs, strict=True) if s.nchunks])
        return outs

    def finish(self, out: np.ndarray, sel: Selection) -> np.ndarray:
        """``out`` (a selection's stored values) as xarray takes them: integer axes dropped, in ``dtype``."""
        out = out.reshape(sel.result_shape)
        return out if out.dtype == self.dtype else out.astype(self.dtype)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RefsetArray, (self.source, self.path, self.meta, self.dtype, self.fill))


class ZarrValues(BackendArray):
    """Array ``path`` read through zarr's public Array API over :class:`refset.ZarrStore` (outer
    selections by ``oindex``): what refset does not decode itself. A codec's error names the array
    and its files."""

    __slots__ = ("_array", "dtype", "path", "shape", "source", "zarr_format")

    def __init__(self, source: EngineRef, path: str, zarr_format: int, shape: tuple[int, ...],
                 dtype: np.dtype[Any]) -> None:
        self.source, self.path, self.zarr_format, self.shape, self.dtype = source, path, zarr_format, shape, dtype
        self._array: Any = None

    def _zarr(self) -> Any:
        if self._array is None:
            import zarr

            from refset.serve.zarr import ZarrStore

            self._array = zarr.open_array(store=ZarrStore(self.source), path=self.path, mode="r",
                                          zarr_format=self.zarr_format)  # type: ignore[arg-type]
        return self._array

    def __getitem__(self, key: Any) -> Any:
        ix = xarray_indexing()
        return ix.explicit_indexing_adapter(key, self.shape, ix.IndexingSupport.OUTER, self.outer)

    async def async_getitem(self, key: Any) -> Any:
        return await asyncio.to_thread(self.__getitem__, key)

    def outer(self, key: tuple[Any, ...]) -> np.ndarray:
        arr = self._zarr()
        try:
            got = np.asarray(arr.oindex[key] if any(isinstance(k, np.ndarray) for k in key) else arr[key])
        except (zlib.error, RuntimeError, ValueError) as e:  # a codec's own error, from zarr's pipeline
            if isinstance(e, RefsetError):
                raise
            raise InvalidFile(f"array {self.path!r}{files_of(self.source, self.path)}: a chunk's bytes do not "
                              f"decode with the array's codecs ({error_name(e)}: {e}): the file is corrupt or "
                              "changed since its scan") from e
        return got if got.dtype == self.dtype else got.astype(self.dtype)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ZarrValues, (self.source, self.path, self.zarr_format, self.shape, self.dtype))


def files_of(source: EngineRef, path: str) -> str:
    """`` in 'URL'``: the files array ``path``'s chunks are in (three named at most), for an error;
    "" when the set does not say."""
    rs = source.engine().refs
    try:
        ids = np.unique(rs.table(path).path_id)
        urls = [rs.urls[i] for i in ids.tolist() if 0 <= i < len(rs.urls)]
    except Exception:  # the error being reported is the one to raise
        return ""
    if not urls:
        return ""
    if len(urls) == 1:
        return f" in {urls[0]!r}"
    return f" in one of {len(urls)} files ({', '.join(map(repr, urls[:3]))}{', ...' if len(urls) > 3 else ''})"
