"""A zarr array's values for xarray (:class:`RefsetArray`): selections read through refset's engine in
one coalesced plan and decoded by refset where it can. Imports zarr when it reads."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
from xarray.backends import BackendArray

from refset.errors import InvalidFile, RefsetError, error_name

__all__ = ["RefsetArray"]


def _native(dtype: Any) -> Any:
    """A structured dtype with its fields in this machine's byte order (xarray's endianness decoding
    casts a structured array whose fields are not to raw bytes, and fails); others as they are."""
    if isinstance(dtype, np.dtype) and dtype.fields is not None and not all(
            dtype.fields[n][0].isnative for n in dtype.names or ()):
        return dtype.newbyteorder("=")
    return dtype


class RefsetArray(BackendArray):
    """A zarr array's values for xarray: a basic or outer selection reads the
    chunks it touches in one coalesced plan through refset's engine, decoded by refset where it can
    (:func:`~refset.serve.decode.fast_read`) and by zarr otherwise; anything else as xarray's own zarr
    wrapper reads it. A module-level class, so that Dask pickles it by reference."""

    __slots__ = ("_array", "_cast", "_inner", "dtype", "shape")

    def __init__(self, zarr_array: Any) -> None:
        from xarray.backends.zarr import ZarrArrayWrapper

        self._array = zarr_array
        # its dtype rules (vlen strings) and its reads
        self._inner = ZarrArrayWrapper(zarr_array)  # type: ignore[no-untyped-call]  # xarray: unannotated
        self.shape, self.dtype = self._inner.shape, _native(self._inner.dtype)
        self._cast = self.dtype is not self._inner.dtype  # reads are cast to it

    def get_array(self) -> Any:
        return self._array

    def __getitem__(self, key: Any) -> Any:
        from xarray.core import indexing

        if isinstance(key, indexing.BasicIndexer | indexing.OuterIndexer):
            got = indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER,
                                                     self._outer)
        else:
            got = self._inner[key]
        return got.astype(self.dtype) if self._cast else got

    async def async_getitem(self, key: Any) -> Any:
        got = await self._inner.async_getitem(key)  # type: ignore[no-untyped-call]  # xarray: unannotated
        return got.astype(self.dtype) if self._cast else got

    def _outer(self, key: tuple[Any, ...]) -> Any:
        """Values of an outer selection (slices, integers, 1-d integer arrays per axis)."""
        from zarr.core.sync import sync

        from refset.serve.decode import fast_ok, fast_read, files_of, selected_chunks

        arr = self._array
        store = arr.store_path.store
        if fast_ok(arr, key, store):
            got = fast_read(arr, key, store)
            if got is not None:
                return got
        flat = None
        try:
            flat = selected_chunks(key, tuple(arr.shape), tuple(arr.chunks))
        except (NotImplementedError, TypeError, ValueError):
            flat = None
        keys = sync(store.prefetch(arr.path, flat)) if flat is not None and hasattr(store, "prefetch") else []
        try:
            return arr.oindex[key] if any(isinstance(k, np.ndarray) for k in key) else arr[key]
        except (zlib.error, RuntimeError, ValueError) as e:  # a codec's own error, from zarr's pipeline
            if isinstance(e, RefsetError):
                raise
            raise InvalidFile(f"array {arr.path!r}{files_of(store, '', arr.path)}: a chunk's bytes do not "
                              f"decode with the array's codecs ({error_name(e)}: {e}): the file is corrupt "
                              "or changed since its scan") from e
        finally:
            if keys:
                store.release(keys)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RefsetArray, (self._array,))
