"""The one module that reaches into xarray or zarr below their public API (``tests/test_layers.py``
refuses such imports anywhere else), each with why it cannot be avoided. Everything else refset does
with xarray and zarr uses their documented names: ``xarray.backends`` (``AbstractDataStore``,
``BackendArray``, ``BackendEntrypoint``, ``StoreBackendEntrypoint``), ``xarray.conventions``,
``zarr.abc.store``, ``zarr.buffer``, ``zarr.storage`` and the ``zarr`` package's own functions.

Nothing here is imported at ``import refset``: each function imports what it gives on first call.
"""

from __future__ import annotations

from typing import Any

__all__ = ["xarray_indexing", "xarray_result_type"]


def xarray_indexing() -> Any:
    """xarray's ``indexing`` module: ``explicit_indexing_adapter``, ``IndexingSupport`` and
    ``LazilyIndexedArray``, which a backend array needs to take xarray's indexers and stay lazy.

    xarray's "How to add a new backend" guide tells backends to import them from ``xarray.core.indexing``
    (its h5netcdf, netCDF4 and zarr backends and cfgrib do); xarray exports them nowhere else."""
    from xarray.core import indexing

    return indexing


def xarray_result_type(*dtypes: Any) -> Any:
    """The dtype ``xr.concat`` gives variables of ``dtypes`` (a variable made of parts is typed as
    ``xr.open_mfdataset`` types the concatenation of its files).

    xarray's promotion rules (numbers and booleans to object, strings of different kinds, NaN-able
    types) differ from numpy's and live only in ``xarray.core.dtypes.result_type``; concatenating
    empty variables to learn the dtype would read the parts."""
    from xarray.core.dtypes import result_type

    return result_type(*dtypes)
