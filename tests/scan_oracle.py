"""The oracle of scan tests: a scanned set read through refset + xarray equals the file read by
xarray's netCDF4 engine (values, dtype, dims, NaN positions, attributes)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import xarray as xr

import refset


def texts(a: np.ndarray) -> np.ndarray:
    return np.array([x.decode() if isinstance(x, bytes) else str(x) for x in np.asarray(a).reshape(-1)],
                    dtype=object).reshape(np.shape(a))


def _plain(v):
    """Compound values (numpy voids, tuples) as nested lists, as JSON holds them."""
    if isinstance(v, np.void | np.ndarray) and v.dtype.names:
        v = v.tolist()
    if isinstance(v, tuple | list):
        return [_plain(x) for x in v]
    return v


def _attrs_equal(a: dict, b: dict, where: str) -> None:
    for k, v in b.items():
        if k.startswith("_NC"):  # xarray's zarr backend hides _NC* attributes
            continue
        assert k in a, f"{where}: attribute {k!r} missing"
        if isinstance(v, np.void):
            assert _plain(a[k]) == _plain(v), f"{where}: attribute {k!r}"
            continue
        np.testing.assert_equal(np.array(a[k], dtype=np.asarray(v).dtype) if np.asarray(v).dtype.kind in "fiu"
                                else a[k], v, err_msg=f"{where}: attribute {k!r}")


def check_against_xarray(path: Path, rs: refset.ReferenceSet) -> bool:
    """``refset.open_dataset(scan)`` equals ``xr.open_dataset(file)`` (netCDF4 engine) in values,
    dtype, dims, NaN positions and attributes. Variables netCDF-C cannot show (opaque, complex...)
    may be extra on our side. Where scale_factor/add_offset are float32, xarray's float dtype choice
    follows the attribute's type, which JSON does not keep: values are compared in the file's dtype."""
    opts: dict = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = xr.open_dataset(path, engine="netcdf4").load()
            except ValueError as e:  # times xarray cannot decode from the file either
                if "decode time" not in str(e):
                    raise
                opts = {"decode_times": False}
                want = xr.open_dataset(path, engine="netcdf4", **opts).load()
    except Exception:
        return False  # netCDF-C cannot open this HDF5 file; the h5py check covers it
    got = refset.open_dataset(rs, **opts).load()
    _attrs_equal(got.attrs, want.attrs, f"{path.name} globals")
    for name, w in want.variables.items():
        assert name in got.variables, f"{path.name}: variable {name!r} missing"
        g = got[name].variable
        assert g.dims == w.dims, (path.name, name, g.dims, w.dims)
        gv, wv = g.values, w.values
        if gv.dtype != wv.dtype and {"scale_factor", "add_offset"} & set(w.encoding):
            gv = gv.astype(wv.dtype)
        if wv.dtype.kind in "UO":  # strings: numpy's StringDType from zarr, fixed or object from netCDF4
            gv, wv = texts(gv), texts(wv)
        elif wv.dtype.names:  # compounds: packed from zarr, aligned from netCDF4
            assert gv.dtype.names == wv.dtype.names and all(
                np.array_equal(gv[n], wv[n]) for n in wv.dtype.names), f"{path.name}: {name}"
            continue
        assert gv.dtype == wv.dtype, (path.name, name, gv.dtype, wv.dtype)
        if wv.dtype.kind in "fc" and {"scale_factor", "add_offset"} & set(w.encoding):
            # one float32 rounding of the largest term: xarray computes in float64 here, netCDF4 in float32
            tol = 3e-7 * float(np.nanmax(np.abs(wv))) if wv.size and np.isfinite(wv).any() else 0.0
            np.testing.assert_allclose(gv, wv, rtol=3e-7, atol=tol, err_msg=f"{path.name}: {name}")
        elif wv.dtype.kind in "fc":
            np.testing.assert_array_equal(gv, wv, err_msg=f"{path.name}: {name}")
        else:
            assert np.array_equal(gv, wv), f"{path.name}: {name}"
        _attrs_equal(g.attrs, w.attrs, f"{path.name}: {name}")
    return True
