"""Combining along a dim the files do not have behaves like ``xr.open_mfdataset(..., combine="nested",
data_vars="different", coords="different")`` (issue 43, item 3): a variable every input holds alike (a
scalar ``spatial_ref``, a constant mask, a GRIB level) is kept as it is; one that differs (the data, a
per-file scalar) gains the new dim; the same on a process cluster, whose batches decide it once for all
inputs."""

from __future__ import annotations

import warnings
from pathlib import Path

import netCDF4
import numpy as np
import pytest

import refset
from refset.errors import InvalidReferences
from refset.model.parts import find_parts

xr = pytest.importorskip("xarray")


def _member(path: Path, m: int, *, level: float | None = None, big: bool = False) -> Path:
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("y", 40 if big else 2)
        ds.createDimension("x", 3)
        sr = ds.createVariable("spatial_ref", "i4", ())
        sr.crs_wkt = "GEOGCS[...]"
        sr[...] = 0
        lev = ds.createVariable("level", "f8", ())
        lev[...] = 500.0 + m if level is None else level
        t = ds.createVariable("t", "f4", ("y", "x"))
        t.grid_mapping = "spatial_ref"
        t.coordinates = "level"
        t[:] = np.full(t.shape, m, "f4") + np.arange(t.shape[1], dtype="f4")
        ds.createVariable("mask", "u1", ("y", "x"))[:] = 1
        ds.createVariable("y", "f4", ("y",))[:] = np.arange(ds.dimensions["y"].size)
        ds.createVariable("x", "f4", ("x",))[:] = [0, 1, 2]
    return path


def _mf(files: list[Path]) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_mfdataset([str(f) for f in files], combine="nested", concat_dim="member", data_vars="different",
                               coords="different", compat="equals") as ds:
            return ds.load()


def _check(got: xr.Dataset, want: xr.Dataset) -> None:
    for name in ("spatial_ref", "level", "t", "mask"):
        assert got[name].dims == want[name].dims, name
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)


def test_what_every_input_holds_alike_is_kept(tmp_path: Path) -> None:
    files = [_member(tmp_path / f"m{m}.nc", m) for m in range(3)]
    rs = refset.combine(files, concat_dims="member", coo_map={"member": [0, 1, 2]})
    got = refset.open_dataset(rs).load()
    _check(got, _mf(files))
    assert got.spatial_ref.dims == () and got.mask.dims == ("y", "x")  # kept
    assert got.level.dims == ("member",) and got.t.dims == ("member", "y", "x")  # they differ
    assert got.t.attrs["grid_mapping"] == "spatial_ref"
    same = [_member(tmp_path / f"s{m}.nc", m, level=850.0) for m in range(3)]  # a GRIB-like level
    assert refset.open_dataset(refset.combine(same, concat_dims="member", coo_map={"member": [0, 1, 2]})).level.dims == ()


def test_a_named_identical_dim_that_differs_is_refused(tmp_path: Path) -> None:
    files = [_member(tmp_path / f"m{m}.nc", m) for m in range(2)]
    with pytest.raises(InvalidReferences, match=r"identical dim 'level': values in input '.*m1\.nc' differ"):
        refset.combine(files, concat_dims="member", coo_map={"member": [0, 1]}, identical_dims=["level"])


def test_large_variables_are_compared_by_their_references(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable over a megabyte an input is not read to compare: equal references keep it, other
    files' references stack it (as data variables are in practice)."""
    import importlib

    values = importlib.import_module("refset.combine.values")
    files = [_member(tmp_path / f"m{m}.nc", m, big=True) for m in range(2)]
    monkeypatch.setattr(values, "COMPARED", 16)  # every variable "large" here: compared by references
    rs = refset.combine(files, concat_dims="member", coo_map={"member": [0, 1]},
                        scan_options={"inline_threshold": 0})
    got = refset.open_dataset(rs).load()
    assert got.mask.dims == ("member", "y", "x")  # ranges of two files: their references differ
    assert got.spatial_ref.dims == ()  # 4 bytes, under the bound: read and compared, equal


def test_on_a_process_cluster_the_batches_decide_alike(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    files = [_member(tmp_path / f"m{m}.nc", m) for m in range(5)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c, \
            distributed.Client(c) as client:
        on = refset.combine(files, concat_dims="member", coo_map={"member": [0, 1, 2, 3, 4]}, client=client,
                            batch_size=2)
    here = refset.combine(files, concat_dims="member", coo_map={"member": [0, 1, 2, 3, 4]})
    assert on.to_dict() == here.to_dict()
    _check(refset.open_dataset(on).load(), _mf(files))


def test_a_series_whose_compression_changes_along_the_new_dim(tmp_path: Path) -> None:
    """Daily GeoTIFFs whose producer switched from deflate to zstd (and its tiling) halfway: the
    data becomes parts along the new dim, each read with its own codec, the values tifffile reads."""
    tifffile = pytest.importorskip("tifffile")
    rng = np.random.default_rng(3)
    files, want = [], []
    for day in range(6):
        data = rng.integers(0, 4000, (48, 64), dtype="u2")
        path = tmp_path / f"d{day}.tif"
        tifffile.imwrite(path, data, tile=(16, 16) if day < 3 else (32, 32),
                         compression="zlib" if day < 3 else "zstd", metadata=None)
        files.append(path)
        want.append(tifffile.imread(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs = refset.combine(files, concat_dims="time", coo_map={"time": list(range(6))})
        got = refset.open_dataset(rs, mask_and_scale=False)
        name = next(n for n in got.data_vars if got[n].ndim == 3)
        assert [p.dim for p in find_parts(rs).values()] == ["time"]
        assert got[name].dims[0] == "time" and got[name].shape == (6, 48, 64)
        np.testing.assert_array_equal(got[name].values, np.stack(want))
        np.testing.assert_array_equal(refset.open_dataset(rs, chunks={}, mask_and_scale=False)[name][2:4].values,
                                      np.stack(want[2:4]))
