"""``refset.verify`` and ``refset.refresh`` (issue 40, items 4 and 5): every recorded file looked at
(locally, over HTTP with HEAD requests, on S3), and a set brought up to date by rescanning only what
changed, its values then those of ``xr.open_mfdataset`` over the files as they are now, in every form
and from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import Unsupported
from refset.model.parts import find_parts

netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")

NY = 300
FORMS = {"json": "s.json", "v1": "s.v1.json", "parquet": "s.parq", "packed": "s.packed"}


def day(path: Path, d: int, *, scale: float = 0.5, w: float | None = None, chunks: int = NY, shift: int = 0) -> Path:
    """A daily file: ``v`` int16 packed with ``scale``, ``w`` float32, one chunk a day (``chunks``
    along y); its modification time a second later than the last file's write."""
    before = path.stat().st_mtime_ns if path.exists() else None
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("y", NY)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = [d]
        v = ds.createVariable("v", "i2", ("time", "y"), chunksizes=(1, chunks), zlib=True)
        v.scale_factor = np.float32(scale)
        v[:] = (np.arange(NY) % 100 + d + shift).reshape(1, NY) * scale
        x = ds.createVariable("w", "f4", ("time", "y"), chunksizes=(1, chunks))
        x[:] = np.full((1, NY), d + 0.25 if w is None else w, "f4")
    if before is not None:  # a rewrite: its time moves on (as a reprocessing's does)
        os.utime(path, ns=(before, before + 10**9))
    return path


def _mf(files: list[Path]) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with xr.open_mfdataset([str(f) for f in files], combine="nested", concat_dim="time") as ds:
            return ds.load()


def _open(src) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return refset.open_dataset(src).load()


def _same(src, files: list[Path]) -> None:
    got, want = _open(src), _mf(files)
    for name in ("v", "w", "time"):
        np.testing.assert_allclose(got[name].values.astype("f8") if name != "time" else got[name].values.view("i8"),
                                   want[name].values.astype("f8") if name != "time" else want[name].values.view("i8"),
                                   rtol=1e-6, err_msg=name)


@pytest.fixture
def archive(tmp_path: Path) -> list[Path]:
    return [day(tmp_path / f"d{k}.nc", k) for k in range(6)]


def test_verify_tells_changed_and_missing_files(archive: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    refset.save(refset.combine(archive, concat_dims="time"), out)
    assert refset.verify(out).ok and refset.verify(out).counts() == {"unchanged": 6}
    day(archive[2], 2, w=9.0)
    archive[4].unlink()
    ver = refset.verify(out)
    assert not ver.ok
    assert [c.url for c in ver.of("changed")] == [str(archive[2])]
    assert [c.url for c in ver.of("missing")] == [str(archive[4])]
    c = ver.of("changed")[0]
    assert c.recorded[0] == c.now[0] and c.recorded[1] != c.now[1]  # same size, another time


@pytest.mark.parametrize("form", list(FORMS))
def test_refresh_rescans_only_the_changed_files(archive: list[Path], tmp_path: Path, form: str) -> None:
    out = tmp_path / FORMS[form]
    refset.save(refset.combine(archive, concat_dims="time"), out)
    before = refset.load(out).loaded()
    day(archive[1], 1, w=7.5)  # new values, the same layout and decoding
    day(archive[4], 4, w=-1.0)
    got = refset.refresh(out)
    assert not find_parts(got)
    back = refset.load(out)
    assert refset.verify(back).ok
    _same(str(out), archive)
    # every other file's references are as they were
    for path in before.grids:
        if path == "time":
            continue
        old, new = before.table(path), back.table(path)
        for k in (0, 2, 3, 5):
            assert back.chunk_refs(path, np.array([k]))[0] == before.chunk_refs(path, np.array([k]))[0]
        assert old.grid == new.grid
    assert back.fingerprints.get(str(archive[1]))[1] == archive[1].stat().st_mtime_ns


def test_a_file_that_now_decodes_otherwise_becomes_a_part(archive: list[Path], tmp_path: Path) -> None:
    """The case of the issue: a day reprocessed with a new scale_factor. Its rows of ``v`` become a
    part of their own; ``w`` (decoded alike) stays one array."""
    out = tmp_path / "s.json"
    refset.save(refset.combine(archive, concat_dims="time"), out)
    day(archive[3], 3, scale=0.25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs = refset.refresh(out)
    layout = find_parts(rs)["v"]
    assert layout.bounds == (0, 3, 4, 6) and "w" in rs.metadata
    _same(str(out), archive)
    day(archive[0], 0, scale=0.25)  # then the first day too: the first part splits
    day(archive[3], 3, scale=0.5)  # and day 3 back: its part is replaced whole
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs = refset.refresh(out)
    assert find_parts(rs)["v"].bounds == (0, 1, 3, 4, 6)
    _same(str(out), archive)


def test_other_chunks_and_missing_files(archive: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "s.packed"
    refset.save(refset.combine(archive, concat_dims="time"), out)
    day(archive[5], 5, chunks=NY // 2)  # other chunks along y: a part of its own
    archive[2].unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = refset.refresh(out)
    assert set(find_parts(r)) == {"v", "w"}
    assert [c.url for c in refset.verify(out).of("missing")] == [str(archive[2])]  # left as it was
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refset.refresh(out, drop_missing=True)
    ds = _open(str(out))
    assert np.isnan(ds.w.values[2]).all() and np.isnan(ds.v.values[2]).all()
    assert refset.verify(out).ok
    rest = [f for f in archive if f.exists()]
    np.testing.assert_array_equal(ds.w.values[[0, 1, 3, 4, 5]], _mf(rest).w.values)


def test_a_set_of_one_file_and_nothing_changed(tmp_path: Path) -> None:
    f = day(tmp_path / "one.nc", 0)
    out = tmp_path / "one.json"
    refset.save(refset.scan(f), out)
    text = out.read_bytes()
    refset.refresh(out)
    assert out.read_bytes() == text  # nothing changed: nothing written
    day(f, 0, scale=0.25, chunks=50)
    refset.refresh(out)
    assert refset.verify(out).ok
    _same(str(out), [f])


def test_what_refresh_refuses(archive: list[Path], tmp_path: Path) -> None:
    kerchunk_hdf = pytest.importorskip("kerchunk.hdf")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refs = kerchunk_hdf.SingleHdf5ToZarr(str(archive[0])).translate()
    with pytest.raises(Unsupported, match="records no fingerprints"):
        refset.refresh(refs)
    files = [tmp_path / f"m{k}.nc" for k in range(3)]
    for k, f in enumerate(files):
        day(f, 0, shift=k)
    rs = refset.combine(files, concat_dims="member", coo_map={"member": [0, 1, 2]},
                        scan_options={"inline_threshold": 0})  # the files' cells tell their places
    day(files[1], 0, scale=0.25, shift=1)  # along a new dim: no parts there
    with pytest.raises(Unsupported, match=r"m1\.nc: variable 'v': scale_factor 0\.25 .*along an existing dim only"):
        refset.refresh(rs)


def test_verify_over_http_is_one_head_request_a_file(archive: list[Path], tmp_path: Path) -> None:
    from tests.httpserver import RangeServer

    root = archive[0].parent
    with RangeServer(root) as srv:
        sets = [refset.scan(f"{srv.url}/{f.name}") for f in archive]
        out = tmp_path / "remote.json"
        refset.save(refset.combine(sets, concat_dims="time"), out)
        srv.reset()
        assert refset.verify(out).ok and srv.requests == len(archive)
        day(archive[2], 2, w=3.0)
        os.utime(archive[2], ns=(0, archive[2].stat().st_mtime_ns + 2 * 10**9))  # HTTP dates are seconds
        ver = refset.verify(out)
        assert [c.url for c in ver.of("changed")] == [f"{srv.url}/d2.nc"]
        assert ver.of("changed")[0].now[2] != ver.of("changed")[0].recorded[2]  # another ETag
        srv.reset()
        refset.refresh(out)
        assert refset.verify(out).ok
        _same(str(out), archive)


def test_verify_on_s3(archive: list[Path], tmp_path: Path, s3: dict) -> None:
    import fsspec

    fs = fsspec.filesystem("s3", **s3)
    for f in archive[:3]:
        fs.put_file(str(f), f"refs/verify/{f.name}")
    urls = [f"s3://refs/verify/{f.name}" for f in archive[:3]]
    rs = refset.combine(urls, concat_dims="time", storage_options=s3)
    assert refset.verify(rs, remote_options=s3).ok
    day(archive[1], 1, w=4.0)
    fs.put_file(str(archive[1]), "refs/verify/d1.nc")
    ver = refset.verify(rs, remote_options=s3)
    assert [c.url for c in ver.of("changed")] == [urls[1]]


def test_the_command_line(archive: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "s.parq"
    refset.save(refset.combine(archive, concat_dims="time"), out)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "refset.cli", *args], capture_output=True, text=True)

    got = run("verify", str(out))
    assert got.returncode == 0 and "6 file(s) checked" in got.stderr and "6 unchanged" in got.stderr
    day(archive[2], 2, w=1.0)
    archive[5].unlink()
    got = run("verify", str(out))
    assert got.returncode == 1
    lines = got.stdout.splitlines()
    assert lines[0].startswith(f"changed    {archive[2]}: recorded size ") and "; now size " in lines[0]
    assert lines[1].startswith(f"missing    {archive[5]}: ") and lines[1].endswith("now no such file")
    assert "4 unchanged, 1 changed, 1 missing" in got.stderr
    doc = json.loads(run("verify", str(out), "--json").stdout)
    assert doc["ok"] is False and doc["counts"] == {"unchanged": 4, "changed": 1, "missing": 1}
    got = run("refresh", str(out))
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == [f"rescanned  {archive[2]}", f"missing    {archive[5]}"]
    assert "rescanned 1 of 6 file(s)" in got.stderr and "1 missing left as they are" in got.stderr
    got = run("refresh", str(out), "--drop-missing", "-o", str(tmp_path / "t.json"))
    assert got.returncode == 0 and "1 missing dropped" in got.stderr
    assert run("verify", str(tmp_path / "t.json")).returncode == 0
