"""Fingerprints in every stored form (issue 40, item 2): a scan records what each file was, every form
keeps it, and fsspec, kerchunk and zarr read the saved sets exactly as before (they do not see it);
combine, append, ``rename_urls`` and pickling carry it."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import SourceChanged
from refset.model.fingerprints import Fingerprints
from refset.model.transforms import rename_urls

netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")

FORMS = {"json": "s.json", "v1": "s.v1.json", "gz": "s.json.gz", "parquet": "s.parq", "packed": "s.packed"}


def daily(path: Path, day: int, *, ny: int = 20) -> Path:
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("y", ny)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = [day]
        v = ds.createVariable("v", "i2", ("time", "y"), chunksizes=(1, ny), zlib=True)
        v.scale_factor = np.float32(0.5)
        v[:] = np.arange(ny, dtype="f4").reshape(1, ny) + day
    return path


def test_a_scan_records_each_file_as_its_stat_says(tmp_path: Path) -> None:
    f = daily(tmp_path / "d0.nc", 0)
    rs = refset.scan(f)
    st = os.stat(f)
    assert rs.fingerprints.records() == {str(f): (st.st_size, st.st_mtime_ns, None, None)}
    assert ".refset" not in rs and rs[".zgroup"] == b'{"zarr_format":2}'  # not a key of the set


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_keeps_them(tmp_path: Path, form: str) -> None:
    f = daily(tmp_path / "d0.nc", 0)
    rs = refset.scan(f)
    out = tmp_path / FORMS[form]
    refset.save(rs, out)
    back = refset.load(out)
    assert back.fingerprints == rs.fingerprints
    assert back.to_dict() == rs.to_dict()  # the keys are what they were
    bare = tmp_path / ("bare-" + FORMS[form])
    refset.save(rs.with_fingerprints(Fingerprints.empty()), bare)
    assert not refset.load(bare).fingerprints  # a set without them reads as one
    assert pickle.loads(pickle.dumps(back)).fingerprints == rs.fingerprints
    assert pickle.loads(pickle.dumps(back.loaded())).fingerprints == rs.fingerprints


def test_a_large_json_set_read_lazily_keeps_them(tmp_path: Path) -> None:
    n = 3000
    urls = [f"/data/day{k:04d}.nc" for k in range(n)]
    rs = refset.ReferenceSet.from_arrays(
        {".zgroup": {"zarr_format": 2}, "v/.zarray": {"shape": [n], "chunks": [1], "dtype": "<f4",
                                                      "compressor": None, "fill_value": None, "filters": None,
                                                      "order": "C", "zarr_format": 2}},
        {"v": {"path_id": np.arange(n), "offset": np.full(n, 4096), "length": np.full(n, 4)}}, urls,
        fingerprints=Fingerprints.of({u: (10_000 + k, 1_795_000_000_000_000_000 + k, None, None)
                                      for k, u in enumerate(urls)}))
    out = tmp_path / "big.json"
    refset.save(rs, out)
    assert out.stat().st_size > 1 << 16  # read by the vectorised reader
    for lazy in (True, False):
        back = refset.load(out, lazy=lazy)
        assert back.fingerprints == rs.fingerprints and len(back.fingerprints) == n
        assert back[".zgroup"] == rs[".zgroup"] and ".refset" not in back
        assert back.to_dict() == rs.to_dict()


@pytest.mark.parametrize("form", ["json", "v1", "parquet"])
def test_foreign_readers_read_the_saved_set_as_before(tmp_path: Path, form: str) -> None:
    """fsspec's ReferenceFileSystem lists the same keys, xarray's zarr engine reads the same dataset
    without a warning, for a set with and without fingerprints."""
    import fsspec

    f = daily(tmp_path / "d0.nc", 0)
    rs = refset.scan(f)
    with_, without = tmp_path / FORMS[form], tmp_path / ("bare-" + FORMS[form])
    refset.save(rs, with_)
    refset.save(rs.with_fingerprints(Fingerprints.empty()), without)
    got = []
    for p in (with_, without):
        fs = fsspec.filesystem("reference", fo=str(p))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ds = xr.open_dataset(fs.get_mapper(""), engine="zarr", consolidated=False).load()
        assert not [w for w in seen if "recognized" in str(w.message) or "refset" in str(w.message)]
        got.append((sorted(fs.ls("", detail=False)), ds))
    assert got[0][0] == got[1][0]
    xr.testing.assert_identical(got[0][1], got[1][1])
    np.testing.assert_array_equal(got[0][1].v.values, xr.open_dataset(f).v.values)


def test_kerchunk_combines_sets_that_hold_them(tmp_path: Path) -> None:
    kerchunk = pytest.importorskip("kerchunk.combine")
    files = [daily(tmp_path / f"d{k}.nc", k) for k in range(3)]
    docs = []
    for k, f in enumerate(files):
        out = tmp_path / f"s{k}.json"
        refset.save(refset.scan(f), out)
        docs.append(json.loads(out.read_text()))
    m = kerchunk.MultiZarrToZarr(docs, concat_dims=["time"]).translate()
    ds = xr.open_dataset("reference://", engine="zarr", backend_kwargs={
        "consolidated": False, "storage_options": {"fo": m}}).load()
    np.testing.assert_array_equal(ds.v.values, xr.open_mfdataset(files, combine="nested", concat_dim="time").v.values)
    # its output carries the first input's .zgroup, so refset checks that file of it
    assert refset.load(m).fingerprints.scanned() == [str(files[0])]


def test_combine_append_and_rename_carry_them(tmp_path: Path) -> None:
    files = [daily(tmp_path / f"d{k}.nc", k) for k in range(4)]
    rs = refset.combine(files[:3], concat_dims="time")
    assert rs.fingerprints.scanned() == sorted(map(str, files[:3]))
    out = tmp_path / "a.json"
    refset.save(rs, out)
    refset.append([files[3]], out, concat_dim="time")
    assert refset.load(out).fingerprints.scanned() == sorted(map(str, files))
    moved = rename_urls(refset.load(out), {str(tmp_path): "s3://bucket/data"})
    assert moved.fingerprints.scanned() == [f"s3://bucket/data/d{k}.nc" for k in range(4)]
    assert moved.fingerprints.get("s3://bucket/data/d0.nc") == rs.fingerprints.get(str(files[0]))


def test_combining_two_scans_of_one_file_at_different_times_is_refused(tmp_path: Path) -> None:
    f = daily(tmp_path / "d0.nc", 0)
    g = daily(tmp_path / "d1.nc", 1)
    early = tmp_path / "early.json"
    refset.save(refset.combine([f, g], concat_dims="time"), early)
    st = os.stat(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: another version for its record
    with pytest.raises(SourceChanged, match=r"d0\.nc changed .*inputs '.*early\.json' and '.*d0\.nc' were scanned "
                                            "from different versions"):
        refset.combine([early, f], concat_dims="time")
