"""refset.combine: NetCDF files made here (and kerchunk's sets of them) combined along CF time, regex,
attribute and INDEX coordinates, new dims; read back through refset + xarray equal to xarray's
combination of the original files; every refusal names the variable and the input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.combine import combine
from refset.errors import InvalidReferences, Unsupported

nc4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")


def _day(path: Path, t0: int, *, steps: int = 2, units: str = "days since 2000-01-01",
         calendar: str = "standard", member: str = "a", extra: bool = True, lat=(1.0, 2.0, 3.0),
         vchunk: int = 1, shift: int = 0) -> Path:
    """A daily file: time (unlimited), lat, lon; v(time, lat, lon) compressed; w only if ``extra``;
    ``shift`` added to their values (an ensemble's members differ)."""
    scale = {"days": 1, "hours": 24}[units.split()[0]]
    with nc4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 3)
        ds.createDimension("lon", 4)
        ds.member = member
        t = ds.createVariable("time", "f8", ("time",))
        t.units, t.calendar = units, calendar
        t[:] = (np.arange(steps) + t0) * scale
        ds.createVariable("lat", "f4", ("lat",))[:] = lat
        ds.createVariable("lon", "f4", ("lon",))[:] = np.arange(4)
        v = ds.createVariable("v", "f4", ("time", "lat", "lon"), chunksizes=(vchunk, 3, 4), zlib=True,
                              fill_value=np.float32(-999))
        v.units = "K"
        v[:] = np.arange(steps * 12, dtype="f4").reshape(steps, 3, 4) + 100 * t0 + shift
        if extra:
            ds.createVariable("w", "i2", ("time", "lat"))[:] = np.full((steps, 3), t0 + shift, "i2")
        ds.createVariable("crs", "i4", ())[...] = 4326
    return path


def _lat2(path: Path, t0: int) -> Path:
    """A daily file whose ``v`` has 2 latitudes, not 3."""
    with nc4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 2)
        ds.createDimension("lon", 4)
        t = ds.createVariable("time", "f8", ("time",))
        t.units, t.calendar = "days since 2000-01-01", "standard"
        t[:] = [t0, t0 + 1]
        ds.createVariable("v", "f4", ("time", "lat", "lon"), chunksizes=(2, 2, 4))[:] = np.zeros((2, 2, 4))
    return path


def _days(tmp_path: Path, n: int = 4, **kw) -> list[Path]:
    return [_day(tmp_path / f"day{i:02d}.nc", 2 * i, **kw) for i in range(n)]


def _mf(files, **kw) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_mfdataset([str(f) for f in files], combine="nested", data_vars="minimal",
                                 coords="minimal", compat="override", **kw).load()


def test_cf_time_with_different_units_any_order(tmp_path: Path) -> None:
    files = _days(tmp_path)
    hourly = _day(tmp_path / "hours.nc", 8, units="hours since 2000-01-01")
    inputs = [files[2], hourly, files[0], files[3], files[1]]  # shuffled, mixed units
    rs = combine(inputs, concat_dims="time", identical_dims=["lat", "lon"])
    got = refset.open_dataset(rs).load()
    want = _mf([*files, hourly], concat_dim="time")
    xr.testing.assert_identical(got, want.assign_attrs(got.attrs))
    assert json.loads(rs["time/.zattrs"])["units"] == "days since 2000-01-01"  # the first input's
    assert np.isnan(got.v.where(got.v != -999).values).sum() == 0
    # the kerchunk reference set of each file combines the same way
    ker = _kerchunk(inputs)
    got2 = refset.open_dataset(combine(ker, concat_dims="time", identical_dims=["lat", "lon"])).load()
    xr.testing.assert_identical(got2, got)


def _kerchunk(files) -> list[dict]:
    from kerchunk.hdf import SingleHdf5ToZarr

    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for f in files:
            out.append(SingleHdf5ToZarr(str(f), str(f), inline_threshold=300).translate())
    return out


def test_reference_files_of_every_format_and_rename(tmp_path: Path) -> None:
    files = _days(tmp_path, 3)
    paths = []
    for f, fmt in zip(files, ["json", "parquet", "packed"]):
        suffix = {"json": ".json", "parquet": ".parq", "packed": ".packed"}[fmt]
        out = tmp_path / f"{f.stem}{suffix}"
        refset.save(refset.scan(f), str(out), format=fmt)
        paths.append(str(out))
    rs = combine(paths, concat_dims="time")
    want = _mf(files, concat_dim="time")
    xr.testing.assert_identical(refset.open_dataset(rs).load(), want.assign_attrs(
        refset.open_dataset(rs).attrs))
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in files:
        f.rename(moved / f.name)
    rs2 = refset.rename_urls(rs, {str(tmp_path) + "/": str(moved) + "/"})
    assert all(u.startswith(str(moved)) for u in rs2.urls)
    xr.testing.assert_identical(refset.open_dataset(rs2).load(), refset.open_dataset(rs2).load())
    np.testing.assert_array_equal(refset.open_dataset(rs2).v.values, want.v.values)


def test_new_dim_from_regex_and_two_concat_dims(tmp_path: Path) -> None:
    files = []
    for m in ("r1", "r2"):
        for d in range(3):
            files.append(_day(tmp_path / f"ens_{m}_day{d}.nc", 2 * d + (10 if m == "r2" else 0) * 0,
                              member=m))
    rs = combine(files[::-1], concat_dims=["member", "time"], identical_dims=["lat", "lon"],
                 coo_map={"member": re.compile(r"ens_(r\d)_")})
    got = refset.open_dataset(rs).load()
    assert got.v.dims == ("member", "time", "lat", "lon")
    # crs, the same scalar in every input, is kept as it is (xarray's data_vars="different")
    assert got.lat.dims == ("lat",) and got.crs.dims == () and int(got.crs) == 4326
    assert list(got.member.values) == ["r1", "r2"]
    by_member = [_mf([f for f in files if f"_{m}_" in f.name], concat_dim="time") for m in ("r1", "r2")]
    want = xr.concat(by_member, dim=xr.Variable("member", ["r1", "r2"]), data_vars="all", coords="minimal",
                     compat="override")
    np.testing.assert_array_equal(got.v.values, want.v.values)
    np.testing.assert_array_equal(got.time.values, want.time.values)
    np.testing.assert_array_equal(got.w.values, want.w.values)


@pytest.mark.parametrize("sel", ["attr:member", "INDEX", ["a", "b", "c"], "vattr:v:units_of"])
def test_one_value_selectors_for_a_new_dim(tmp_path: Path, sel) -> None:
    files = [_day(tmp_path / f"m{i}.nc", 0, member="abc"[i], shift=i) for i in range(3)]
    for i, f in enumerate(files):
        with nc4.Dataset(f, "a") as ds:
            ds["v"].units_of = 10 * i
    rs = combine(files, concat_dims="member", coo_map={"member": sel}, identical_dims=["lat", "lon", "time"])
    got = refset.open_dataset(rs).load()
    assert got.v.shape == (3, 2, 3, 4)
    for i, f in enumerate(files):
        with nc4.Dataset(f) as ds:
            np.testing.assert_array_equal(got.v.values[i], ds["v"][:].data)
    assert got.time.dims == ("time",)  # an identical dim does not gain the new dim


def test_callable_selector_and_coo_dtypes(tmp_path: Path) -> None:
    files = [_day(tmp_path / f"run{i}.nc", 0, shift=i) for i in (3, 1, 2)]
    rs = combine(files, concat_dims="run", identical_dims=["lat", "lon", "time"],
                 coo_map={"run": lambda i, s, name: name.rsplit("run", 1)[1][0]}, coo_dtypes={"run": "i2"})
    got = refset.open_dataset(rs).load()
    assert got.run.dtype == np.int16 and list(got.run.values) == [1, 2, 3]
    with nc4.Dataset(files[1]) as ds:  # run1 is the second input, first in the combined set
        np.testing.assert_array_equal(got.v.values[0], ds["v"][:].data)


def test_callable_selector_gets_each_reference_file_as_given(tmp_path: Path, monkeypatch) -> None:
    """A callable selector is handed each input's set: reference files named by a file:// URL or a
    ~ path open as load opens them (the batch reader reopens one alone)."""
    files = [_day(tmp_path / f"d{i}.nc", 0, member=m, shift=i) for i, m in enumerate("ab")]  # an ensemble
    for i, f in enumerate(files):
        refset.save(refset.scan(f), str(tmp_path / f"d{i}.json"))
    monkeypatch.setenv("HOME", str(tmp_path))
    seen = []

    def pick(i, rs, name):
        seen.append(sorted(rs.metadata))
        return 10 * i

    for given in ([f"file://{tmp_path}/d0.json", f"file://{tmp_path}/d1.json"], ["~/d0.json", "~/d1.json"]):
        seen.clear()
        rs = combine(given, concat_dims="member", identical_dims=["lat", "lon", "time"],
                     coo_map={"member": pick})
        assert len(seen) == 2 and all({"lat", "time", "v", "w"} <= set(s) for s in seen)
        got = refset.open_dataset(rs).load()
        assert list(got.member.values) == [0, 10]
        with nc4.Dataset(files[1]) as ds:
            np.testing.assert_array_equal(got.v.values[1], ds["v"][:].data)


def test_variable_missing_from_some_inputs_reads_fill(tmp_path: Path) -> None:
    files = [_day(tmp_path / "a.nc", 0), _day(tmp_path / "b.nc", 2, extra=False), _day(tmp_path / "c.nc", 4)]
    got = refset.open_dataset(combine(files, concat_dims="time")).load()
    assert got.w.shape == (6, 3)
    np.testing.assert_array_equal(got.w.values[[0, 1, 4, 5], 0], [0, 0, 4, 4])
    assert np.isnan(got.w.values[2:4]).all()  # as xr.open_mfdataset fills them (it once read zarr's 0)
    want = _mf(files, concat_dim="time").w
    assert got.w.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got.w.values, want.values)


def test_refusals_name_the_variable_and_the_input(tmp_path: Path) -> None:
    a = _day(tmp_path / "a.nc", 0)
    b = _day(tmp_path / "b.nc", 2, lat=(1.0, 2.0, 4.0))
    with pytest.raises(InvalidReferences, match=r"identical dim 'lat': values in input '.*b\.nc' differ"):
        combine([a, b], concat_dims="time", identical_dims=["lat"])
    combine([a, b], concat_dims="time", identical_dims=["lat"], check=False)
    c = _day(tmp_path / "c.nc", 2, vchunk=2)  # other chunks, and a padded last chunk mid-way: parts
    three = _day(tmp_path / "three.nc", 0, steps=3, vchunk=2)
    two = _day(tmp_path / "two.nc", 3, vchunk=2)
    for files in ([a, c], [three, two]):
        got = refset.open_dataset(combine(files, concat_dims="time")).load()
        xr.testing.assert_identical(got.v, _mf(files, concat_dim="time").v)
    with pytest.raises(Unsupported, match=r"variable 'v': shape \[2, 2, 4\] in input '.*lat2\.nc' differs from "
                                          r"\[2, 3, 4\] in input '.*a\.nc' off the concat dim"):
        combine([a, _lat2(tmp_path / "lat2.nc", 2)], concat_dims="time")
    d = _day(tmp_path / "d.nc", 1)  # overlaps a's second day
    with pytest.raises(InvalidReferences, match=r"concat dim 'time': inputs '.*a\.nc' and '.*d\.nc' both"):
        combine([a, d], concat_dims="time")
    e = _day(tmp_path / "e.nc", 4, units="days since 2000-01-01", calendar="noleap")
    with pytest.raises(Unsupported, match="calendar 'noleap'"):
        combine([a, _day(tmp_path / "f.nc", 2, units="hours since 2000-01-01"), e], concat_dims="time")
    with pytest.raises(InvalidReferences, match=r"no input has a variable 'member'.*coo_map"):
        combine([a, b], concat_dims="member")
    with pytest.raises(InvalidReferences, match=r"pattern 'zz\(.*\)' does not match the input"):
        combine([a, b], concat_dims="member", coo_map={"member": re.compile(r"zz(\d)")})
    twins = [_day(tmp_path / f"ens_r1_{k}.nc", 0) for k in "xy"]  # same member, same days
    with pytest.raises(InvalidReferences, match=r"variable 'v': inputs '.*ens_r1_x\.nc' and '.*ens_r1_y\.nc' "
                                                r"both hold chunk '0\.0\.0\.0'"):
        combine(twins, concat_dims=["member", "time"], coo_map={"member": re.compile(r"ens_(r\d)")})
    with pytest.raises(InvalidReferences, match="3 values for 2 inputs"):
        combine([a, b], concat_dims="member", coo_map={"member": [1, 2, 3]})


def test_inputs_spelling_chunk_keys_differently_combine(tmp_path: Path) -> None:
    """The chunk keys' separator is spelling, not layout: a set of '/' keys (an archive written back
    from zarr v3) combines with sets of '.' keys, the output spelled as its first input."""
    files = _days(tmp_path, 3)
    slash = {}
    for k, v in refset.scan(files[1]).to_dict().items():
        head, _, leaf = k.rpartition("/")
        if leaf == ".zarray":
            v = json.dumps({**json.loads(v), "dimension_separator": "/"})
        elif head and not leaf.startswith("."):
            leaf = leaf.replace(".", "/")
        slash[f"{head}/{leaf}" if head else leaf] = v
    rs = combine([files[0], refset.load(slash), files[2]], concat_dims="time")
    assert rs.grids["v"].separator == "."
    xr.testing.assert_identical(refset.open_dataset(rs).load(), refset.open_dataset(
        combine(files, concat_dims="time")).load())


def test_a_scalar_coordinate_is_a_new_dim(tmp_path: Path) -> None:
    """Files holding one time as a 0-d variable (GRIB's and many daily products' way) combine along
    it as a new dim that every variable gains, as kerchunk's MultiZarrToZarr does: each file's values
    kept (a 0-d time once made the dim look present, and the variables came from the first file)."""
    files = []
    for i in range(3):
        p = tmp_path / f"s{i}.nc"
        with nc4.Dataset(p, "w") as ds:
            ds.createDimension("x", 4)
            t = ds.createVariable("time", "f8", ())
            t.units = "days since 2024-01-01"
            t.assignValue(float(i))
            ds.createVariable("v", "f4", ("x",))[:] = np.arange(4) + 10.0 * i
        files.append(str(p))
    ds = refset.open_dataset(combine(files, concat_dims="time"))
    want = xr.concat([xr.open_dataset(f) for f in files], dim="time")
    assert ds["v"].dims == ("time", "x")
    np.testing.assert_array_equal(ds["v"].values, want["v"].values)
    np.testing.assert_array_equal(ds["time"].values, want["time"].values)


def test_inputs_that_disagree_on_a_dim_are_refused(tmp_path: Path) -> None:
    """A concat dim that one input holds as a dim and another as a scalar, and a dimension coordinate
    whose values differ between inputs, are refused naming the inputs: the variables would keep only
    the first input's values, or be labelled with them."""
    scalar = tmp_path / "scalar.nc"
    with nc4.Dataset(scalar, "w") as ds:
        ds.createDimension("lat", 3)
        ds.createDimension("lon", 4)
        t = ds.createVariable("time", "f8", ())
        t.units = "days since 2000-01-01"
        t.assignValue(50.0)
        ds.createVariable("v", "f4", ("lat", "lon"))[:] = 1.0
    dims = _day(tmp_path / "dims.nc", 0, extra=False)
    with pytest.raises(Unsupported, match=r"variable 'v': has concat dim 'time' in input '.*dims\.nc' but not in "
                                          r"input '.*scalar\.nc'"):
        combine([scalar, dims], concat_dims="time")
    other_lat = _day(tmp_path / "b.nc", 2, lat=(1.0, 2.0, 4.0))
    with pytest.raises(InvalidReferences, match=r"coordinate 'lat': values in input '.*b\.nc' differ from input "
                                                r"'.*dims\.nc'"):
        combine([_day(tmp_path / "dims.nc", 0), other_lat], concat_dims="time")


def test_append_is_combining_with_the_existing_set(tmp_path: Path) -> None:
    files = _days(tmp_path, 4)
    out = tmp_path / "all.json"
    refset.save(combine(files[:2], concat_dims="time"), str(out))
    rs = combine([str(out), *files[2:]], concat_dims="time")
    xr.testing.assert_identical(refset.open_dataset(rs).load(), refset.open_dataset(
        combine(files, concat_dims="time")).load())


def test_peers_read_the_combined_set(tmp_path: Path) -> None:
    """fsspec's ReferenceFileSystem + xarray's zarr engine read what combine wrote."""
    fsspec = pytest.importorskip("fsspec")
    files = _days(tmp_path, 3)
    out = tmp_path / "c.json"
    refset.save(combine(files, concat_dims="time", identical_dims=["lat", "lon"]), str(out))
    fs = fsspec.filesystem("reference", fo=str(out))
    peer = xr.open_dataset(fs.get_mapper(""), engine="zarr", consolidated=False, zarr_format=2).load()
    want = _mf(files, concat_dim="time")
    xr.testing.assert_identical(peer[["v", "w", "time"]].drop_attrs(), want[["v", "w", "time"]].drop_attrs())


def test_dask_tree_reduction_equals_the_in_process_combine(tmp_path: Path) -> None:
    """On a process cluster the inputs are opened on the workers and combined as a tree of batches
    (batch_size=2: three levels for 7 inputs): shuffled inputs in days and hours, shuffled inputs
    opened several per task, a new dim from a regex, INDEX and a callable give the same set as the
    in-process combine."""
    distributed = pytest.importorskip("distributed")
    files = [_day(tmp_path / f"d{i}.nc", 2 * i, units="hours since 2000-01-01" if i % 2 else
                  "days since 2000-01-01") for i in range(7)]
    shuffled = [str(files[i]) for i in (3, 0, 6, 1, 5, 2, 4)]
    members = [_day(tmp_path / f"{m}_{i}.nc", 2 * i, member=m, shift=ord(m)) for m in "ab" for i in range(3)]
    pattern = re.compile(r"/(\w)_\d+\.nc$")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        def both(inputs, **kw):
            return (combine(inputs, client=client, batch_size=2, **kw).to_dict(),
                    combine(inputs, **kw).to_dict())

        on, here = both(shuffled, concat_dims="time", identical_dims=["lat", "lon"])
        assert on == here
        assert json.loads(on["time/.zattrs"])["units"] == "hours since 2000-01-01"  # the first input's
        many = [str(_day(tmp_path / f"m{i:02d}.nc", 2 * i)) for i in range(13)]  # opened 2 per task
        order = np.random.default_rng(5).permutation(13)
        on = combine([many[i] for i in order], concat_dims="time", client=client, batch_size=4)
        assert on.to_dict() == combine(many, concat_dims="time").to_dict()
        on, here = both([str(m) for m in members[::-1]], concat_dims=["member", "time"],
                        coo_map={"member": pattern}, identical_dims=["lat", "lon"])
        assert on == here and json.loads(on["v/.zarray"])["shape"] == [2, 6, 3, 4]
        on, here = both(shuffled[:4], concat_dims=["run", "time"], coo_map={"run": "INDEX"})
        assert on == here
        on, here = both(shuffled[:4], concat_dims=["run", "time"],
                        coo_map={"run": lambda i, rs, name: 10 * i})
        assert on == here and json.loads(on["v/.zarray"])["shape"][0] == 4
        on, here = both(shuffled[:3], concat_dims="time",  # scan options reach the scans on the workers
                        scan_options={"inline_threshold": 0, "drop_variables": ["w"]})
        assert on == here and "w/.zarray" not in on and isinstance(on["v/0.0.0"], list)


# -- the command line ----------------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "refset.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_cli_scan_concat_dim_on_a_process_cluster_then_append(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    files = _days(tmp_path, 4)
    out = tmp_path / "all.parq"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster:
        r = _cli("scan", str(tmp_path / "day0[01].nc"), "--concat-dim", "time", "--identical-dims", "lat,lon",
                 "-o", str(out), "--scheduler", cluster.scheduler_address, "--inline-threshold", "0")
        assert r.returncode == 0, r.stderr
        assert "2 inputs" in r.stderr and "references" in r.stderr
        listing = tmp_path / "more.txt"
        listing.write_text("\n".join(str(f) for f in files[2:]) + "\n")
        r = _cli("scan", f"@{listing}", "--concat-dim", "time", "-o", str(out), "--append", "--quiet",
                 "--scheduler", cluster.scheduler_address, "--inline-threshold", "0")
        assert r.returncode == 0 and not r.stderr, r.stderr
    v = refset.load(out).table("v")
    assert not v.inline and v.count() == 8  # --inline-threshold 0: every chunk of v a range, none inline
    got = refset.open_dataset(str(out)).load()
    xr.testing.assert_identical(got, refset.open_dataset(combine(files, concat_dims="time")).load())


def test_cli_combine_sets_with_coo_map_and_rename(tmp_path: Path) -> None:
    files = [_day(tmp_path / f"ens_r{m}.nc", 0, shift=m) for m in (2, 1)]
    sets = []
    for f in files:
        sets.append(str(f.with_suffix(".json")))
        refset.save(refset.scan(f), sets[-1])
    out = tmp_path / "ens.json"
    r = _cli("combine", *sets, "--concat-dim", "member", "--coo-map", r"member=re:ens_r(\d)",
             "--coo-dtype", "member=i4", "--identical-dims", "time,lat,lon", "-o", str(out), "--workers", "0")
    assert r.returncode == 0, r.stderr
    got = refset.open_dataset(str(out)).load()
    assert got.member.values.tolist() == [1, 2] and got.v.dims[0] == "member"
    moved = tmp_path / "moved"
    moved.mkdir()
    for f in files:
        f.rename(moved / f.name)
    r = _cli("convert", str(out), str(tmp_path / "moved.json"), "--rename", f"{tmp_path}/={moved}/")
    assert r.returncode == 0, r.stderr
    xr.testing.assert_identical(refset.open_dataset(str(tmp_path / "moved.json")).load(), got)
    r = _cli("combine", *sets, "--concat-dim", "member", "-o", str(tmp_path / "x.json"))
    assert r.returncode != 0 and "--coo-map member=SELECTOR" in r.stderr and not (tmp_path / "x.json").exists()


def test_cli_scan_options_reach_the_scans_of_a_combine(tmp_path: Path) -> None:
    """``scan FILES --concat-dim`` with scan's options: each file is scanned with them (small files whose
    chunks the default threshold would inline, here referenced; a variable and a group left out)."""
    files = _days(tmp_path, 2)
    out = tmp_path / "all.json"
    r = _cli("scan", *map(str, files), "--concat-dim", "time", "-o", str(out), "--inline-threshold", "0",
             "--drop-variables", "w", "--workers", "0")
    assert r.returncode == 0, r.stderr
    got, default = refset.load(out), combine(files, concat_dims="time")
    assert default.table("v").inline and not got.table("v").inline  # the default inlines these small chunks
    assert "w" not in got.grids and "w" in default.grids
    xr.testing.assert_identical(refset.open_dataset(str(out)).load(),
                                refset.open_dataset(default).load().drop_vars("w"))


def test_identical_dim_in_a_truncated_file_is_not_reachable(tmp_path: Path) -> None:
    """The values of an identical dim are read to check them: a file cut short since it was scanned
    is SourceChanged naming it (its record says another size) or, with the check off,
    ReferenceNotReachable naming it; never a short array compared as different values."""
    from refset.errors import ReferenceNotReachable, SourceChanged

    files = _days(tmp_path, 2)
    sets = [refset.scan(str(f), inline_threshold=0) for f in files]
    assert combine(sets, concat_dims="time", identical_dims=["lat"])["lat/0"] == sets[0]["lat/0"]
    url, offset, length = sets[1]["lat/0"]
    with open(files[1], "r+b") as f:
        f.truncate(offset + length - 1)
    with pytest.raises(SourceChanged, match=re.escape(url) + r" changed .*; now size"):
        combine(sets, concat_dims="time", identical_dims=["lat"])
    with pytest.raises(ReferenceNotReachable, match=re.escape(url)):
        combine(sets, concat_dims="time", identical_dims=["lat"], verify_sources=False)


def test_relative_paths_are_the_clients_on_a_cluster(tmp_path: Path, monkeypatch) -> None:
    """Relative inputs name files in the caller's working directory, not in a worker's: the workers here
    run in ``elsewhere/``, which holds other files of the same names (before, the set silently pointed
    at them; in the CLI too, with ``--scheduler``)."""
    distributed = pytest.importorskip("distributed")
    mine, elsewhere = tmp_path / "mine", tmp_path / "elsewhere"
    mine.mkdir()
    elsewhere.mkdir()
    for d, base in ((mine, 0), (elsewhere, 50)):
        for i in range(2):
            _day(d / f"day{i}.nc", base + 2 * i)
    monkeypatch.chdir(elsewhere)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        monkeypatch.chdir(mine)
        rs = combine(["day0.nc", "day1.nc"], concat_dims="time", client=client)
        assert set(rs.urls) == {str(mine / "day0.nc"), str(mine / "day1.nc")}
        (mine / "list.txt").write_text("day0.nc\nday1.nc\n")
        r = _cli("scan", "@list.txt", "--concat-dim", "time", "-o", "out.json", "--scheduler",
                 cluster.scheduler_address, "--quiet")
        assert r.returncode == 0, r.stderr
    got = refset.open_dataset(rs).load()
    xr.testing.assert_identical(got, refset.open_dataset(str(mine / "out.json")).load())
    np.testing.assert_array_equal(got.v.values, _mf([mine / "day0.nc", mine / "day1.nc"],
                                                    concat_dim="time").v.values)


def test_coordinates_read_over_http_are_checked(tmp_path: Path) -> None:
    """The coordinate values a combine reads from the data files go through the checked reader: a
    server that ignores Range (``python -m http.server``: 200 and the whole file) gives the local
    result (before: ``ValueError: buffer size must be a multiple of element size``); one answering a
    byte late is a ReferenceNotReachable naming the file, never shifted times."""
    from refset.errors import ReferenceNotReachable
    from tests.httpserver import RangeServer

    files = _days(tmp_path, 3)
    want = combine([refset.scan(f, inline_threshold=0) for f in files], concat_dims="time")
    with RangeServer(tmp_path) as srv:
        urls = [f"{srv.url}/{f.name}" for f in files]
        # time is a reference, read to combine: the sets as read back from a stored form (a scan's own
        # set keeps the values it read, which combine would not ask for again)
        sets = [refset.load(refset.scan(u, inline_threshold=0).to_dict()) for u in urls]
        srv.fault = "ignore"
        got = combine(sets, concat_dims="time")
        assert refset.rename_urls(got, {f"{srv.url}/": f"{tmp_path}/"}).to_dict() == want.to_dict()
        srv.fault = "shift"
        with pytest.raises(ReferenceNotReachable, match=re.escape(srv.url) + r"/day0\d\.nc.*Content-Range"):
            combine(sets, concat_dims="time")


def test_remote_data_files_cost_one_request_each(tmp_path: Path) -> None:
    """Combining data files over HTTP asks the server once per file: the scan's first read tells the
    file's kind and holds its metadata, and the coordinate values combine needs (time, and lat/lon
    checked as identical dims) come from what the scan read. Files are scanned concurrently; the
    result equals the local one, names the URLs, and pickles with what it kept."""
    import pickle

    from tests.httpserver import RangeServer

    files = _days(tmp_path, 5)
    want = combine(files, concat_dims="time", identical_dims=["lat", "lon"], scan_options={"inline_threshold": 0})
    with RangeServer(tmp_path, delay=0.02) as srv:
        urls = [f"{srv.url}/{f.name}" for f in files]
        got = combine(urls, concat_dims="time", identical_dims=["lat", "lon"],
                      scan_options={"inline_threshold": 0})
        assert srv.requests == len(urls)
        assert refset.rename_urls(got, {f"{srv.url}/": f"{tmp_path}/"}).to_dict() == want.to_dict()
        srv.reset()
        one = refset.scan(urls[0], inline_threshold=0)
        kept = dict(one.fetched)
        assert {k[0] for k in kept} == {urls[0]} and len(kept) >= 3  # time, lat, lon
        for (_url, off, n), data in kept.items():
            with open(files[0], "rb") as f:
                f.seek(off)
                assert f.read(n) == data
        assert pickle.loads(pickle.dumps(one)).fetched == kept
        assert refset.load(one.to_dict()).fetched == {}  # a stored form keeps references only
