"""Sets in zarr v3: with_zarr_format translates every array and group; refset, fsspec + zarr and combine
read them to the same values as the zarr v2 set they came from."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.model.transforms import with_zarr_format

nc4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")


def _day(path: Path, day: int) -> str:
    with nc4.Dataset(path, "w") as ds:
        ds.title = "v3 test"
        ds.createDimension("time", None)
        ds.createDimension("x", 5)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2024-01-01"
        t[:] = [day]
        v = ds.createVariable("v", "i2", ("time", "x"), zlib=True, shuffle=True, fill_value=-1)
        v.scale_factor, v.add_offset = 0.5, 10.0
        v.set_auto_maskandscale(False)
        v[:] = np.array([[0, 1, -1, 3, 4]], "i2") + day
        ds.createVariable("s", "S1", ("x",))[:] = np.array(list(b"abcde"), "S1")
    return str(path)


def test_v3_sets_read_and_combine_like_v2(tmp_path: Path) -> None:
    files = [_day(tmp_path / f"d{i}.nc", i) for i in range(3)]
    v2 = [refset.scan(f) for f in files]
    v3 = [with_zarr_format(rs, 3) for rs in v2]
    doc = json.loads(v3[0]["v/zarr.json"])
    assert doc["zarr_format"] == 3 and doc["dimension_names"] == ["time", "x"]
    assert "zarr.json" in v3[0] and ".zgroup" not in v3[0] and "v/.zarray" not in v3[0]
    assert json.loads(v3[0]["zarr.json"])["attributes"]["title"] == "v3 test"
    back = with_zarr_format(v3[0], 2)  # and back: zlib becomes the compressor (the same decoding)
    assert {k for k in back} == {k for k in v2[0]}
    assert json.loads(back["v/.zarray"])["compressor"] == {"id": "zlib", "level": 4}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = xr.open_dataset(files[0]).load()
        got = refset.open_dataset(v3[0]).load()
        xr.testing.assert_identical(refset.open_dataset(back).load(), refset.open_dataset(v2[0]).load())
        fsspec = pytest.importorskip("fsspec")
        peer = xr.open_dataset(fsspec.get_mapper("reference://", fo=v3[0].to_dict()), engine="zarr",
                               consolidated=False, zarr_format=3).load()
    for ds in (got, peer):
        np.testing.assert_array_equal(ds.v.values, want.v.values)  # packing and the -1 fill, decoded
        assert np.isnan(ds.v.values[0, 2])
    combined = refset.combine(v3, concat_dims="time")
    assert json.loads(combined["v/zarr.json"])["shape"] == [3, 5]
    assert "time/zarr.json" in combined and "v/.zarray" not in combined
    both = refset.combine(v2, concat_dims="time")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a, b = refset.open_dataset(combined).load(), refset.open_dataset(both).load()
    xr.testing.assert_equal(a, b)
    for fmt in ("json", "v1", "packed"):
        out = tmp_path / f"c.{fmt}"
        refset.save(combined, out, format=fmt)
        assert refset.load(out).to_dict() == combined.to_dict(), fmt
    with pytest.raises(refset.errors.Unsupported, match=r"zarr format 3 in input .* differs from 2"):
        refset.combine([v2[0], v3[1]], concat_dims="time")


def test_compound_without_fill_value_reads_in_zarr_v3(tmp_path: Path) -> None:
    """A compound variable with no fill value gets v3's zero fill as ``itemsize`` zero bytes in
    base64 (it was ``""``, which zarr-python cannot view as a record: the array did not open)."""
    zarr = pytest.importorskip("zarr")
    path = tmp_path / "c.nc"
    with nc4.Dataset(path, "w") as ds:
        ds.createDimension("x", 3)
        ct = ds.createCompoundType(np.dtype([("a", "<i2"), ("b", "<f8")]), "pair")
        v = ds.createVariable("p", ct, ("x",), fill_value=False)
        v[:] = np.array([(1, 0.5), (2, 1.5), (3, 2.5)], dtype=[("a", "<i2"), ("b", "<f8")])
    v3 = with_zarr_format(refset.scan(str(path)), 3)
    assert json.loads(v3["p/zarr.json"])["fill_value"] == "AAAAAAAAAAAAAA=="  # 10 zero bytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = zarr.open_group(refset.ZarrStore(v3), mode="r", zarr_format=3)["p"][...]
    assert got.tolist() == [(1, 0.5), (2, 1.5), (3, 2.5)]
