"""The bundled example reads back exactly what netCDF4 reads from the file it references."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import refset

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("fmt", ["json", "v1", "packed", "parquet"])
def test_tiny_example_matches_netcdf4(tmp_path: Path, fmt: str, monkeypatch: pytest.MonkeyPatch):
    import netCDF4

    monkeypatch.chdir(REPO)  # the example names its file relative to the repository root
    src = REPO / "examples" / "tiny.json"
    path = os.fspath(src)
    if fmt != "json":
        path = os.fspath(tmp_path / f"tiny.{'parq' if fmt == 'parquet' else fmt}")
        refset.save(refset.load(src), path, format=fmt)
    ds = refset.open_dataset(path)
    with netCDF4.Dataset(REPO / "examples" / "tiny.nc") as nc:
        for name in ("temp", "lat", "lon"):
            want = nc[name][:]
            got = ds[name].values
            np.testing.assert_array_equal(np.ma.filled(want.astype("f8"), np.nan), got.astype("f8"))
        assert np.isnan(ds.temp.values[3]).all()  # never written: fill value
