"""The built-in scanners pass the scanners' conformance suite (refset.testing.ScannerTests), with
netCDF4-python and scipy as the oracles of the values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from refset.scan.hdf5.scanner import HDF5Scanner
from refset.scan.netcdf3.scanner import NetCDF3Scanner
from refset.testing import ScannerTests

nc4 = pytest.importorskip("netCDF4")


def _file(path: Path, fmt: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(len(fmt))
    with nc4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("t", None)
        ds.createDimension("x", 7)
        kw = {"zlib": True} if fmt.startswith("NETCDF4") else {}
        v = ds.createVariable("v", "f4", ("t", "x"), **kw)
        v[:] = rng.random((3, 7)).astype("f4")
        w = ds.createVariable("w", "i2", ("x",))
        w[:] = np.arange(7, dtype="i2")
    with nc4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)
        return {n: np.asarray(ds[n][:]) for n in ("v", "w")}


class TestHDF5(ScannerTests):
    scanner = HDF5Scanner

    def make_files(self, tmp_path: Path) -> dict[Path, dict[str, np.ndarray]]:
        out = {}
        for fmt in ("NETCDF4", "NETCDF4_CLASSIC"):
            p = tmp_path / f"{fmt}.nc"
            out[p] = _file(p, fmt)
        return out


class TestNetCDF3(ScannerTests):
    scanner = NetCDF3Scanner

    def make_files(self, tmp_path: Path) -> dict[Path, dict[str, np.ndarray]]:
        out = {}
        for fmt in ("NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET", "NETCDF3_64BIT_DATA"):
            p = tmp_path / f"{fmt}.nc"
            out[p] = _file(p, fmt)
        return out
