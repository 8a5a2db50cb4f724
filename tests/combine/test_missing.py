"""Rows an input does not hold (a variable missing from some files) read as ``xr.open_mfdataset`` reads
them: NaN, the dtype promoted as xarray's fill promotes it, in every stored form, after an append, and
through fsspec + zarr where refset's metadata is read by a foreign reader (issue 43, item 1).

The files are written by netCDF4 with its defaults (no ``_FillValue`` attribute unless a case gives
one), as the archive of the issue: day 1 lacks ``sm``/``cnt``, the next days hold them."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np
import pytest

import refset
from refset.model.parts import PartsWarning, find_parts

xr = pytest.importorskip("xarray")

NY = 3

#: name -> (dtype, createVariable keywords, attributes set after): the cases of the issue
VARIABLES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "sm": ("f4", {}, {}),  # float, no _FillValue: netCDF4's default fill is not masked by xarray
    "sm8": ("f8", {}, {}),
    "cnt": ("i2", {}, {}),  # integer, no _FillValue: no value of the type can mean missing
    "big": ("i4", {}, {}),  # promotes to float64
    "ffill": ("f4", {"fill_value": -999.0}, {}),  # float with _FillValue
    "ifill": ("i2", {"fill_value": -99}, {}),  # integer with _FillValue
    "imiss": ("i2", {}, {"missing_value": np.int16(-7)}),  # integer with missing_value only
    "packed": ("i2", {}, {"scale_factor": np.float32(0.5), "add_offset": np.float32(10)}),
}


def _write(path: Path, day: int, names: tuple[str, ...], *, chunk_days: int = 1, ndays: int = 1) -> Path:
    rng = np.random.default_rng(day)
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("y", NY)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = day + np.arange(ndays)
        a = ds.createVariable("a", "f4", ("time", "y"), chunksizes=(chunk_days, NY))
        a[:] = rng.random((ndays, NY))
        for name in names:
            dtype, kw, attrs = VARIABLES[name]
            v = ds.createVariable(name, dtype, ("time", "y"), chunksizes=(chunk_days, NY), **kw)
            for k, val in attrs.items():
                v.setncattr(k, val)
            v.set_auto_maskandscale(False)
            v[:] = (rng.random((ndays, NY)) * 100 + 1).astype(dtype)  # never a fill or missing value
    return path


def _mf(files: list[Path], concat_dim: str = "time", **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_mfdataset([str(f) for f in files], combine="nested", concat_dim=concat_dim, **kw).load()


def _open(rs: Any, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        return refset.open_dataset(rs, **kw).load()


def _same(got: Any, want: Any, names: list[str]) -> None:
    for name in names:
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
        assert got[name].dtype.kind == want[name].dtype.kind == "f", name
        assert np.isnan(got[name].values).any(), name


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Five days: the variables are missing on day 0 and day 3 (first, and in the middle)."""
    root = tmp_path_factory.mktemp("missing")
    names = tuple(VARIABLES)
    return [_write(root / f"d{d}.nc", d, () if d in (0, 3) else names) for d in range(5)]


def test_missing_rows_read_as_open_mfdataset(archive: list[Path]) -> None:
    rs = refset.combine(archive[::-1], concat_dims="time")
    want = _mf(archive)
    got = _open(rs)
    _same(got, want, list(VARIABLES))
    for name in VARIABLES:
        assert np.isnan(got[name].values[[0, 3]]).all() and not np.isnan(got[name].values[[1, 2, 4]]).any()
    for name in ("sm", "sm8", "cnt", "big"):  # the dtypes xarray's fill promotes to
        assert got[name].dtype == want[name].dtype, name
    lazy = refset.open_dataset(rs, chunks={})
    for name in VARIABLES:
        np.testing.assert_array_equal(lazy[name].values, want[name].values, err_msg=name)


def test_floats_stay_one_array_that_foreign_readers_read_right(archive: list[Path], tmp_path: Path) -> None:
    """A float variable keeps being one zarr array (its fill value NaN: stored values decode as
    before); fsspec + xarray's zarr engine read it as refset does. An integer one without a value
    xarray masks becomes a variable made of parts, which a foreign reader does not see as a variable
    (never as zeros)."""
    rs = refset.combine(archive, concat_dims="time")
    parts = find_parts(rs)
    assert set(parts) == {"cnt", "big", "packed"}
    assert rs.metadata["sm"].fill_value == "NaN" and rs.metadata["ffill"].fill_value == -999.0
    assert rs.metadata["imiss"].fill_value == -7 and rs.metadata["ifill"].fill_value == -99
    out = tmp_path / "set.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        refset.save(rs, out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_dataset("reference://", engine="zarr", backend_kwargs={
            "consolidated": False, "storage_options": {"fo": str(out)}}).load()
    want = _mf(archive)
    _same(ds, want, ["sm", "sm8", "ffill", "ifill", "imiss"])
    assert not {"cnt", "big", "packed"} & set(ds.variables)


@pytest.mark.parametrize("fmt", ["json", "v1", "parquet", "packed"])
def test_every_stored_form_reads_missing_rows_as_missing(archive: list[Path], tmp_path: Path, fmt: str) -> None:
    rs = refset.combine(archive, concat_dims="time")
    out = tmp_path / {"json": "s.json", "v1": "s.v1.json", "parquet": "s.parq", "packed": "s.packed"}[fmt]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        refset.save(rs, out, format=fmt)
    _same(_open(str(out)), _mf(archive), list(VARIABLES))


def test_an_appended_day_without_the_variable(archive: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "set.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        refset.append(archive[1:3], out, concat_dim="time")
        refset.append([archive[3]], out, concat_dim="time")  # lacks them
        refset.append([archive[4]], out, concat_dim="time")
    _same(_open(str(out)), _mf(archive[1:]), list(VARIABLES))


def test_chunks_spanning_days_and_zarr_v3(tmp_path: Path) -> None:
    """Files of four days in chunks of two: the missing file's rows are whole chunks; zarr v3 inputs
    (a float's fill value becomes NaN, an integer's a part)."""
    files = [_write(tmp_path / f"f{k}.nc", 4 * k, () if k == 1 else ("sm", "cnt"), chunk_days=2, ndays=4)
             for k in range(3)]
    want = _mf(files)
    _same(_open(refset.combine(files, concat_dims="time")), want, ["sm", "cnt"])
    from refset.model.transforms import with_zarr_format

    v3 = [with_zarr_format(refset.scan(f), 3) for f in files]
    rs = refset.combine(v3, concat_dims="time")
    assert rs.metadata["sm"].zarr_format == 3
    _same(_open(rs), want, ["sm", "cnt"])


def test_along_a_new_dim(tmp_path: Path) -> None:
    """Combining along a dim the files do not have: a float variable missing from a file reads NaN
    there; an integer one without a fill value becomes parts along the new dim with a part of
    missing values, read as xr.open_mfdataset reads it (NaN, promoted to float), never as zeros."""
    files = [_write(tmp_path / f"m{k}.nc", 0, () if k == 1 else ("sm",)) for k in range(3)]
    rs = refset.combine(files, concat_dims="member", coo_map={"member": [0, 1, 2]})
    sm = _open(rs).sm.values
    assert sm.shape == (3, 1, NY) and np.isnan(sm[1]).all() and not np.isnan(sm[[0, 2]]).any()
    files = [_write(tmp_path / f"n{k}.nc", 0, () if k == 1 else ("cnt", "packed", "imiss")) for k in range(4)]
    rs = refset.combine(files, concat_dims="member", coo_map={"member": [0, 1, 2, 3]})
    assert find_parts(rs)
    want = _mf(files, concat_dim="member")
    got = _open(rs)
    assert got.cnt.dims == want.cnt.dims == ("member", "time", "y")
    _same(got, want, ["cnt", "packed", "imiss"])
    assert np.isnan(got.cnt.values[1]).all() and not np.isnan(got.cnt.values[[0, 2, 3]]).any()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        refset.save(rs, tmp_path / "n.packed", format="packed")
    _same(_open(str(tmp_path / "n.packed")), want, ["cnt", "packed", "imiss"])


def test_a_variable_in_every_input_keeps_its_metadata(archive: list[Path]) -> None:
    """No input lacks it: nothing changes (fill values stay as scanned, no parts)."""
    rs = refset.combine(archive[1:3], concat_dims="time")
    assert not find_parts(rs)
    assert rs.metadata["sm"].fill_value is None and rs.metadata["cnt"].fill_value is None
