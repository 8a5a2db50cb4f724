"""Reads refuse a file that changed since its set was made (issue 40, item 3): the case of the issue (a
NetCDF4 file rewritten in place with the same layout, new values and a new ``scale_factor``) in every
stored form and through every reader; at no extra request (one ``stat`` per local file per open set;
conditional HTTP and S3 reads); ``verify_sources=False`` reads as before."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import SourceChanged

netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")

FORMS = {"json": "s.json", "v1": "s.v1.json", "parquet": "s.parq", "packed": "s.packed"}
NY = 400  # chunks above the inline threshold: read from the file


def packed_file(path: Path, day: int = 0) -> Path:
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", 2)
        ds.createDimension("y", NY)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = [day, day + 1]
        v = ds.createVariable("v", "i2", ("time", "y"), chunksizes=(1, NY))
        v.scale_factor = np.float32(0.5)
        v.set_auto_maskandscale(False)
        v[:] = np.arange(2 * NY, dtype="i2").reshape(2, NY)
    return path


def rewrite_in_place(path: Path) -> None:
    """New values and a new scale_factor, the same layout (offsets and lengths), the modification
    time moved on by two seconds (as a later reprocessing does; HTTP dates have whole seconds)."""
    before = path.stat()
    with netCDF4.Dataset(path, "a") as ds:
        v = ds["v"]
        v.set_auto_maskandscale(False)
        v[:] = np.arange(2 * NY, dtype="i2").reshape(2, NY)[::-1]
        v.scale_factor = np.float32(0.25)
    assert path.stat().st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 2 * 10**9))


@pytest.mark.parametrize("form", list(FORMS))
def test_a_file_rewritten_in_place_is_refused_in_every_form(tmp_path: Path, form: str) -> None:
    f = packed_file(tmp_path / "day.nc")
    rs = refset.scan(f)
    out = tmp_path / FORMS[form]
    refset.save(rs, out)
    want = xr.open_dataset(f).v.values
    np.testing.assert_array_equal(refset.open_dataset(str(out)).v.values, want)
    layout = rs["v/1.0"]
    rewrite_in_place(f)
    assert refset.scan(f)["v/1.0"] == layout  # the same offsets and lengths: only the record tells
    with pytest.raises(SourceChanged, match=rf"{f} changed since its reference set was made: recorded size "
                                            r"[\d,]+, modified .*; now size [\d,]+, modified .*refset refresh"):
        refset.open_dataset(str(out)).v.load()
    with pytest.raises(SourceChanged):
        xr.open_dataset(str(out), engine="refset").v.load()
    old = refset.open_dataset(str(out), verify_sources=False).v.values  # the old behaviour, asked for
    assert not np.array_equal(old, want) and not np.array_equal(old, xr.open_dataset(f).v.values)


def test_the_zarr_store_and_the_filesystem_refuse_it_too(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    f = packed_file(tmp_path / "day.nc")
    out = tmp_path / "s.json"
    refset.save(refset.scan(f), out)
    rewrite_in_place(f)
    fs = refset.ReferenceFileSystem(str(out))
    with pytest.raises(SourceChanged, match=r"day\.nc changed"):
        fs.cat_file("v/0.0")
    with pytest.raises(SourceChanged):
        fs.cat(["v/0.0", "v/1.0"])
    assert fs.cat_file("v/.zarray")  # metadata is the set's own: readable
    g = zarr.open_group(refset.ZarrStore(str(out)), mode="r", zarr_format=2)
    with pytest.raises(SourceChanged):
        g["v"][:]
    unchecked = refset.ReferenceFileSystem(str(out), verify_sources=False)
    assert len(unchecked.cat_file("v/0.0")) == 2 * NY


def test_one_stat_per_file_per_open_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file is looked at once however many of its chunks are read (a counting wrapper around the
    stat, not a stand-in: the real stat runs)."""
    import refset.io.fetch as fetch

    files = [packed_file(tmp_path / f"d{k}.nc", 2 * k) for k in range(3)]
    rs = refset.combine(files, concat_dims="time")
    out = tmp_path / "s.json"
    refset.save(rs, out)
    calls: list[str] = []
    real = fetch.local_fingerprint

    def counted(path: str) -> object:
        calls.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(fetch, "local_fingerprint", counted)
    ds = refset.open_dataset(str(out))
    ds.v.load()
    ds.v.isel(time=0).load()
    assert sorted(calls) == sorted(map(str, files))


def test_a_set_without_fingerprints_reads_as_before(tmp_path: Path) -> None:
    """kerchunk's sets (and refset's older ones) record nothing: read as they always were."""
    kerchunk_hdf = pytest.importorskip("kerchunk.hdf")
    f = packed_file(tmp_path / "day.nc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refs = kerchunk_hdf.SingleHdf5ToZarr(str(f), inline_threshold=0).translate()
    rs = refset.load(refs)
    assert not rs.fingerprints
    rewrite_in_place(f)
    assert refset.open_dataset(rs).v.shape == (2, NY)


def _http_set(tmp_path: Path, srv: object, f: Path) -> Path:
    url = f"{srv.url}/{f.name}"  # type: ignore[attr-defined]
    rs = refset.scan(url)
    out = tmp_path / "remote.json"
    refset.save(rs, out)
    return out


def test_http_reads_are_conditional_and_cost_no_extra_request(tmp_path: Path) -> None:
    from tests.httpserver import RangeServer

    root = tmp_path / "www"
    root.mkdir()
    f = packed_file(root / "day.nc")
    with RangeServer(root) as srv:
        out = _http_set(tmp_path, srv, f)
        rec = refset.load(out).fingerprints.get(f"{srv.url}/day.nc")
        assert rec is not None and rec[0] == f.stat().st_size and rec[2].startswith('"') and rec[3].endswith("GMT")
        counts = []
        for verify in (True, False):
            srv.reset()
            np.testing.assert_array_equal(refset.open_dataset(str(out), verify_sources=verify).v.values,
                                          xr.open_dataset(f).v.values)
            counts.append(srv.requests)
        assert counts[0] == counts[1] and srv.refused == 0  # the same requests, checks on or off
        rewrite_in_place(f)
        srv.reset()
        with pytest.raises(SourceChanged, match=r"day\.nc changed .*412 Precondition Failed"):
            refset.open_dataset(str(out)).v.load()
        assert srv.refused >= 1
        srv.fault = "ignore-conditions"  # a server that ignores If-Match: its answer's own ETag tells
        with pytest.raises(SourceChanged, match=r"recorded size .*ETag .*; now .*ETag"):
            refset.open_dataset(str(out)).v.load()


def test_s3_reads_are_conditional(tmp_path: Path, s3: dict) -> None:
    import fsspec

    f = packed_file(tmp_path / "day.nc")
    fs = fsspec.filesystem("s3", **s3)
    fs.put_file(str(f), "refs/sources/day.nc")
    url = "s3://refs/sources/day.nc"
    rs = refset.scan(url, storage_options=s3)
    rec = rs.fingerprints.get(url)
    assert rec is not None and rec[0] == f.stat().st_size and rec[2] and rec[3].endswith("GMT")
    out = tmp_path / "s3.json"
    refset.save(rs, out)
    np.testing.assert_array_equal(refset.open_dataset(str(out), remote_options=s3).v.values,
                                  xr.open_dataset(f).v.values)
    rewrite_in_place(f)
    fs.put_file(str(f), "refs/sources/day.nc")  # re-uploaded: a new ETag
    with pytest.raises(SourceChanged, match=r"s3://refs/sources/day\.nc changed"):
        refset.open_dataset(str(out), remote_options=s3).v.load()
    assert refset.open_dataset(str(out), remote_options=s3, verify_sources=False).v.shape == (2, NY)


def test_a_process_cluster_refuses_it_too(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    f = packed_file(tmp_path / "day.nc")
    out = tmp_path / "s.parq"
    refset.save(refset.scan(f), out)
    rewrite_in_place(f)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            distributed.Client(c):
        ds = refset.open_dataset(str(out), chunks={})
        with pytest.raises(SourceChanged, match=r"day\.nc changed"):
            ds.v.compute()
