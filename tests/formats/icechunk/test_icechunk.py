"""Icechunk repositories written from reference sets: read back with zarr and xarray over Icechunk's
own store, against refset's serving of the same set and against xarray over the original files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidOption, Unsupported
from tests.conftest import hdf5_corpus

icechunk = pytest.importorskip("icechunk")
zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")
netCDF4 = pytest.importorskip("netCDF4")

from refset.formats.icechunk import open_store  # noqa: E402
from refset.model.table import RANGE  # noqa: E402
from refset.model.transforms import with_zarr_format  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # zarr: numcodecs codecs are not in v3's spec


def _days(d: Path, n: int, start: int = 0, *, chunk: tuple[int, int, int] = (1, 3, 500), size: int = 500) -> list[str]:
    """Daily NetCDF4 files of two steps: ``tas`` (zlib, a fill value, chunks large enough to be
    byte ranges) and times in units of their own day, as many products write them."""
    files = []
    for i in range(start, start + n):
        f = d / f"day{i:03d}.nc"
        with netCDF4.Dataset(f, "w") as nc:
            nc.createDimension("time", None)
            nc.createDimension("lat", 6)
            nc.createDimension("lon", size)
            t = nc.createVariable("time", "f8", ("time",))
            t.units = f"hours since 2020-01-{i + 1:02d}"
            t.calendar = "standard"
            t[:] = [0, 12]
            v = nc.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=chunk,
                                  fill_value=-999.0)
            v.units = "K"
            vals = np.random.default_rng(i).normal(280, 5, (2, 6, size)).astype("f4")
            vals[0, 0, :3] = -999.0
            v[:] = vals
            nc.createVariable("lat", "f4", ("lat",))[:] = np.arange(6)
            nc.createVariable("lon", "f4", ("lon",))[:] = np.arange(size)
        files.append(str(f))
    return files


def _open(dest: str, **kw: object) -> xr.Dataset:
    return xr.open_zarr(open_store(dest, **kw), consolidated=False)


def _equal(got: xr.Dataset, want: xr.Dataset) -> None:
    assert sorted(got.variables) == sorted(want.variables)
    for v in want.variables:
        np.testing.assert_array_equal(got[v].values, want[v].values, err_msg=v)


def _history(path: str) -> list[str]:
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(path))
    return [s.message for s in repo.ancestry(branch="main")]


def test_combined_archive_reads_as_xarray_reads_the_files(tmp_path: Path) -> None:
    files = _days(tmp_path, 4)
    rs = refset.combine(files, concat_dims=["time"])
    dest = str(tmp_path / "repo")
    refset.save(rs, "icechunk://" + dest, message="four days")
    assert _history(dest) == ["four days", "Repository initialized"]
    with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
        _equal(_open(dest), want.load())
    # the byte ranges are virtual chunks pointing into the files; the inlined coordinates are native
    session = icechunk.Repository.open(icechunk.local_filesystem_storage(dest)).readonly_session(branch="main")
    assert session.all_virtual_chunk_locations() and all(
        loc.startswith("file://" + str(tmp_path)) for loc in session.all_virtual_chunk_locations())
    table, grid = rs.table("tas"), rs.grids["tas"]
    for flat in range(grid.nchunks):
        kind = session.chunk_type("/tas", list(np.unravel_index(flat, grid.grid_shape)))
        want = icechunk.ChunkType.VIRTUAL if table.kind[flat] == RANGE else icechunk.ChunkType.INLINE
        assert kind == want, flat  # small native chunks Icechunk keeps in its manifest
    assert (table.kind == RANGE).sum() > grid.nchunks // 2


def _raw(group: object, path: str) -> np.ndarray:
    return group[path][...]  # type: ignore[index]


@pytest.mark.parametrize("path", hdf5_corpus(), ids=lambda p: p.name)
def test_corpus_files_read_as_refset_serves_them(path: Path, tmp_path: Path) -> None:
    """Every array's stored values through Icechunk equal refset's own serving of the set (zarr
    reads both, no CF decoding), and xarray over Icechunk decodes what refset.open_dataset decodes;
    a file whose set has no zarr v3 form is refused before a repository is made."""
    try:
        rs = refset.scan(str(path))
    except refset.RefsetError:
        pytest.skip("refset does not scan this file")
    dest = str(tmp_path / "repo")
    try:
        refset.save(rs, dest, format="icechunk")
    except Unsupported as e:
        assert not os.path.exists(dest), "a refused set left a repository"
        if "byte order" not in str(e):
            with pytest.raises(Unsupported):  # only what has no zarr v3 form is refused
                with_zarr_format(rs, 3)
        return
    ours = zarr.open_group(refset.ZarrStore(rs), mode="r", zarr_format=2)
    theirs = zarr.open_group(open_store(dest), mode="r", zarr_format=3)
    for p in rs.metadata:
        try:
            want = _raw(ours, p)
        except Exception:
            continue  # zarr cannot decode it from refset's store either (e.g. a codec not installed)
        np.testing.assert_array_equal(_raw(theirs, p), want, err_msg=p)
    # decoded: xarray over Icechunk equals refset.open_dataset of the set
    try:
        want_ds = refset.open_dataset(rs)
    except Exception:
        return  # xarray cannot decode the set from refset either (compound defaults, enums)
    try:
        got_ds = xr.open_zarr(open_store(dest), consolidated=False)
    except ValueError as e:  # xarray's zarr v3 reader decodes no bytes (|S) _FillValue (docs/compat.md)
        assert "Failed to decode fill_value. Unsupported dtype |S" in str(e)
        return
    for v in want_ds.variables:
        try:
            a = want_ds[v].values
        except Exception:
            continue
        b = got_ds[v].values
        assert a.dtype == b.dtype and a.shape == b.shape, v
        if a.dtype.kind in "OSUV":
            assert a.tolist() == b.tolist(), v
        else:
            np.testing.assert_array_equal(b, a, err_msg=v)


def test_append_adds_a_commit_with_the_new_days(tmp_path: Path) -> None:
    files = _days(tmp_path, 5)
    dest = "icechunk://" + str(tmp_path / "repo")
    refset.append(files[:2], dest, concat_dim="time")  # made from the inputs alone
    refset.append(files[2:4], dest, concat_dim="time", message="days 2-3")
    refset.append(files[4:], dest, concat_dim="time")
    history = _history(str(tmp_path / "repo"))
    assert len(history) == 4 and history[1] == "days 2-3"
    with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
        _equal(_open(dest), want.load())


def test_append_from_another_directory_adds_a_container(tmp_path: Path) -> None:
    """New inputs outside the places the repository's containers cover get a container of their own,
    saved in the repository's config, so a reader opening it later reads them."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = _days(tmp_path / "a", 1), _days(tmp_path / "b", 1, start=1)
    dest = "icechunk://" + str(tmp_path / "repo")
    refset.append(first, dest, concat_dim="time")
    refset.append(second, dest, concat_dim="time")
    config = icechunk.Repository.fetch_config(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    assert sorted(config.virtual_chunk_containers) == [f"file://{tmp_path}/a/", f"file://{tmp_path}/b/"]
    with xr.open_mfdataset(first + second, combine="nested", concat_dim="time") as want:
        _equal(_open(dest), want.load())


def test_append_refuses_what_the_repository_cannot_take_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    dest = "icechunk://" + str(tmp_path / "repo")
    files = _days(tmp_path / "a", 2)
    refset.append(files, dest, concat_dim="time")
    before = _history(str(tmp_path / "repo"))
    with pytest.raises(refset.InvalidReferences, match="both have the value"):  # the same days again
        refset.append(files[1:], dest, concat_dim="time")
    other_chunks = _days(tmp_path / "b", 1, start=2, chunk=(2, 6, 100))
    with pytest.raises(Unsupported, match=r"variable 'tas': chunks \[2, 6, 100\] in 'tas/part1' differ from .* a part "
                                          "of their own"):
        refset.append(other_chunks, dest, concat_dim="time")
    assert _history(str(tmp_path / "repo")) == before
    with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
        _equal(_open(dest), want.load())


def test_append_after_a_partial_last_chunk_is_refused(tmp_path: Path) -> None:
    files = _days(tmp_path, 2, chunk=(4, 6, 100))  # 2 rows in chunks of 4: each file's chunk is partial
    dest = "icechunk://" + str(tmp_path / "repo")
    refset.save(refset.scan(files[0]), dest)
    with pytest.raises(Unsupported, match=r"end in a partial .*chunk of 4 rows along 'time'"):
        refset.append(files[1:], dest, concat_dim="time")
    assert len(_history(str(tmp_path / "repo"))) == 2


def test_cli_scan_and_append(tmp_path: Path) -> None:
    files = _days(tmp_path, 3)
    dest = "icechunk://" + str(tmp_path / "repo")
    cli = [sys.executable, "-m", "refset.cli"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *args], capture_output=True, text=True, cwd=tmp_path)

    assert run("scan", *files[:2], "--concat-dim", "time", "-o", dest).returncode == 0
    again = run("scan", files[2], "--concat-dim", "time", "-o", dest)
    assert again.returncode != 0 and "give --append" in again.stderr
    got = run("scan", files[2], "--concat-dim", "time", "--append", "-o", dest, "-O", "message=day 3")
    assert got.returncode == 0, got.stderr
    assert _history(str(tmp_path / "repo"))[0] == "day 3"
    with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
        _equal(_open(dest), want.load())
    conv = run("convert", str(tmp_path / "x.json"), "icechunk://" + str(tmp_path / "r2"))
    assert conv.returncode != 0  # no such input: nothing made
    assert not (tmp_path / "r2").exists()


def test_convert_to_icechunk(tmp_path: Path) -> None:
    files = _days(tmp_path, 2)
    refset.save(refset.combine(files, concat_dims=["time"]), str(tmp_path / "a.parq"))
    out = subprocess.run([sys.executable, "-m", "refset.cli", "convert", str(tmp_path / "a.parq"),
                          "icechunk://" + str(tmp_path / "repo"), "-O", "branch=dev", "--quiet"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
        _equal(_open(str(tmp_path / "repo"), branch="dev"), want.load())


def test_a_repository_or_a_session_store_as_destination(tmp_path: Path) -> None:
    """An icechunk.Repository is written and committed; a writable session's store is written and
    left for its caller to commit; either without a container for the set's files is refused before
    anything is written, naming the prefix to add."""
    files = _days(tmp_path, 2)
    rs = refset.combine(files, concat_dims=["time"])
    prefix = f"file://{tmp_path}/"
    bare = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "bare")))
    with pytest.raises(Unsupported, match=f"no virtual chunk container for {prefix}"):
        refset.save(rs, bare)
    assert not bare.writable_session("main").has_uncommitted_changes
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(str(tmp_path))))
    creds = icechunk.containers_credentials({prefix: None})
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r")), config=config,
                                      authorize_virtual_chunk_access=creds)
    refset.save(rs, repo, message="from a Repository")
    assert _history(str(tmp_path / "r"))[0] == "from a Repository"
    session = repo.writable_session("main")
    with pytest.raises(Unsupported, match="read-only"):
        refset.save(rs, repo.readonly_session(branch="main").store)
    refset.save(rs, session.store)
    assert session.has_uncommitted_changes
    session.commit("by the caller")
    with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
        _equal(xr.open_zarr(repo.readonly_session(branch="main").store, consolidated=False), want.load())


def test_s3_repository_of_s3_files(tmp_path: Path, s3: dict[str, object]) -> None:
    """The repository on S3 (Icechunk's own storage) and the data files on S3 (virtual chunk
    containers with the data's credentials), both on moto's server."""
    import fsspec

    files = _days(tmp_path, 2)
    fs = fsspec.filesystem("s3", **s3)
    urls = []
    for f in files:
        url = f"s3://refs/icechunk-data/{os.path.basename(f)}"
        fs.put(f, url)
        urls.append(url)
    rs = refset.combine(urls, concat_dims=["time"], storage_options=s3, remote_options=s3)
    dest = "icechunk://s3://refs/repos/daily"
    refset.save(rs, dest, storage_options=s3, remote_options=s3)
    assert fs.exists("refs/repos/daily")
    with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
        _equal(_open(dest, storage_options=s3, remote_options=s3), want.load())
        more = _days(tmp_path, 1, start=2)
        fs.put(more[0], "s3://refs/icechunk-data/day002.nc")
        refset.append(["s3://refs/icechunk-data/day002.nc"], dest, concat_dim="time", storage_options=s3,
                      remote_options=s3)
    with xr.open_mfdataset(files + more, combine="nested", concat_dim="time") as want:
        _equal(_open(dest, storage_options=s3, remote_options=s3), want.load())


def test_refusals_name_what_and_why(tmp_path: Path) -> None:
    dest = str(tmp_path / "repo")
    plain = refset.load({"version": 1, "refs": {"key0": "data"}})
    with pytest.raises(Unsupported, match="'key0' is not zarr metadata"):
        refset.save(plain, dest, format="icechunk")
    assert not os.path.exists(dest)
    relative = refset.load({".zgroup": '{"zarr_format":2}',
                            "a/.zarray": '{"chunks":[2],"compressor":null,"dtype":"<i4","fill_value":0,'
                                         '"filters":null,"order":"C","shape":[2],"zarr_format":2}',
                            "a/0": ["data/x.bin", 0, 8]})
    with pytest.raises(Unsupported, match=r"'data/x\.bin' is relative"):
        refset.save(relative, dest, format="icechunk")
    assert not os.path.exists(dest)
    files = _days(tmp_path, 1)
    refset.save(refset.scan(files[0]), dest, format="icechunk")
    with pytest.raises(Unsupported, match="repository exists there"):
        refset.save(refset.scan(files[0]), dest, format="icechunk")
    with pytest.raises(Unsupported, match="open it with xarray"):
        refset.load("icechunk://" + dest)
    with pytest.raises(InvalidOption, match="message"):
        refset.save(refset.scan(files[0]), str(tmp_path / "r3"), format="icechunk", message=3)


def test_import_refset_does_not_import_icechunk() -> None:
    code = "import refset, sys; refset.save; refset.load; refset.append; print('icechunk' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"



def test_bad_destinations_and_options_are_named_and_leave_nothing(tmp_path: Path) -> None:
    files = _days(tmp_path, 2)
    rs = refset.scan(files[0])
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(Unsupported, match="is a file, not an Icechunk repository"):
        refset.save(rs, "icechunk://" + str(afile))
    with pytest.raises(Unsupported, match="is a file"):
        refset.append(files, "icechunk://" + str(afile), concat_dim="time")
    missing = tmp_path / "not" / "there"
    with pytest.raises(Unsupported, match="no Icechunk repository there"):
        open_store(str(missing))
    assert not (tmp_path / "not").exists()  # looking made nothing
    dest = "icechunk://" + str(tmp_path / "repo")
    with pytest.raises(InvalidOption, match="message"):
        refset.append(files, dest, concat_dim="time", message=123)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="remote_options"):
        refset.append(files, dest, concat_dim="time", remote_options="x")  # type: ignore[arg-type]
    assert not (tmp_path / "repo").exists()
    refset.append(files[:1], dest, concat_dim="time")
    with pytest.raises(Unsupported, match=r"branch 'nope'.*\(branches: main\)"):
        refset.append(files[1:], dest, concat_dim="time", branch="nope")
    with pytest.raises(refset.InvalidReferences, match=f"inputs '{dest}' and .*day000.nc' both have the value"):
        refset.append(files[:1], dest, concat_dim="time")  # the repository is named as the input it is
    out = subprocess.run([sys.executable, "-m", "refset.cli", "scan", str(tmp_path / "nope.nc"), "--concat-dim",
                          "time", "-o", "icechunk://" + str(tmp_path / "a" / "b")], capture_output=True, text=True)
    assert out.returncode != 0 and not (tmp_path / "a").exists()


def test_append_keeps_special_floats_partial_variables_and_virtual_chunks(tmp_path: Path) -> None:
    """An infinite valid_min (written as text: Icechunk takes standard JSON only) compares equal on the
    next append; a 1-D variable along time with a chunk never written, and one pointing into the
    files, keep their virtual chunks: only the coordinate is written anew."""
    files = []
    for i in range(3):
        f = tmp_path / f"d{i}.nc"
        with netCDF4.Dataset(f, "w") as nc:
            nc.createDimension("time", None)
            t = nc.createVariable("time", "f8", ("time",))
            t.units = "days since 2020-01-01"
            t[:] = [2 * i, 2 * i + 1]
            q = nc.createVariable("q", "f4", ("time",), chunksizes=(1,))
            q.valid_min = np.float32(-np.inf)
            q[1] = 5.0 + i  # chunk 0 never written: the fill value
            s = nc.createVariable("s", "f8", ("time",), chunksizes=(2,))
            s[:] = np.arange(2) + 10.0 * i
        files.append(str(f))
    dest = "icechunk://" + str(tmp_path / "repo")
    for f in files:
        refset.append([f], dest, concat_dim="time", scan_options={"inline_threshold": 0})
    with xr.open_mfdataset(files, combine="nested", concat_dim="time", mask_and_scale=False) as want:
        got = xr.open_zarr(open_store(str(tmp_path / "repo")), consolidated=False, mask_and_scale=False)
        for v in ("q", "s", "time"):
            np.testing.assert_array_equal(got[v].values, want[v].values, err_msg=v)
    session = icechunk.Repository.open(icechunk.local_filesystem_storage(str(tmp_path / "repo"))).readonly_session(
        branch="main")
    assert session.chunk_type("/time", [0]) == icechunk.ChunkType.INLINE  # the coordinate: rewritten
    assert session.chunk_type("/s", [0]) == icechunk.ChunkType.VIRTUAL  # the first file's, kept
    assert any(loc.endswith("/d0.nc") for loc in session.all_virtual_chunk_locations())
    assert len(_history(str(tmp_path / "repo"))) == 4


def test_a_refused_append_saves_no_container(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    dest = "icechunk://" + str(tmp_path / "repo")
    refset.append(_days(tmp_path / "a", 2, start=2), dest, concat_dim="time")
    with pytest.raises((Unsupported, refset.InvalidReferences)):
        refset.append(_days(tmp_path / "b", 1, start=0, chunk=(2, 6, 100)), dest, concat_dim="time")
    config = icechunk.Repository.fetch_config(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    assert list(config.virtual_chunk_containers) == [f"file://{tmp_path}/a/"]


def _rewritten(f: str) -> None:
    """``f`` rewritten in place: new values, the same layout, modified two seconds later."""
    before = os.stat(f)
    with netCDF4.Dataset(f, "a") as nc:
        nc["tas"][:] = nc["tas"][:] + 1
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns + 2 * 10**9))


def test_icechunk_itself_refuses_a_changed_source(tmp_path: Path) -> None:
    """Each virtual chunk carries Icechunk's own checksum of its file (a local file: its modification
    time), so that Icechunk's readers, not only refset's, refuse it once it changed (issue 40)."""
    files = _days(tmp_path, 2)
    dest = str(tmp_path / "repo")
    refset.save(refset.combine(files, concat_dims="time"), f"icechunk://{dest}")
    with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
        _equal(_open(dest), want.load())
    _rewritten(files[1])
    with pytest.raises(Exception, match="checksum of the object owning the virtual chunk has changed"):
        _open(dest).tas.load()
    np.testing.assert_array_equal(_open(dest).tas.isel(time=[0, 1]).values,  # the unchanged file reads
                                  xr.open_dataset(files[0]).tas.values)


def test_icechunk_checks_an_s3_file_by_its_etag(tmp_path: Path, s3: dict[str, object]) -> None:
    import fsspec

    files = _days(tmp_path, 1)
    fs = fsspec.filesystem("s3", **s3)
    url = "s3://refs/icechunk-etag/day000.nc"
    fs.put(files[0], url)
    rs = refset.scan(url, storage_options=s3)
    assert rs.fingerprints.get(url)[2]  # its ETag, from the scan's own read
    dest = "icechunk://s3://refs/repos/etag"
    refset.save(rs, dest, storage_options=s3, remote_options=s3)
    _equal(_open(dest, storage_options=s3, remote_options=s3), xr.open_dataset(files[0]).load())
    _rewritten(files[0])
    fs.put(files[0], url)  # re-uploaded: another ETag
    with pytest.raises(Exception, match="checksum of the object owning the virtual chunk has changed"):
        _open(dest, storage_options=s3, remote_options=s3).tas.load()


def test_http_sources_read_back_through_icechunk(tmp_path: Path) -> None:
    """An Icechunk repository of a set whose files are served over plain HTTP reads back (its
    container allows http://), each chunk checked by its ETag; an HTTP URL with a port, which Icechunk
    1.x would read without the port, is refused before anything is written, saying so."""
    from refset.formats.icechunk.repo import keeps_ports
    from tests.httpserver import RangeServer

    files = _days(tmp_path, 2)
    with RangeServer(tmp_path) as srv:
        urls = [f"{srv.url}/{os.path.basename(f)}" for f in files]
        rs = refset.combine(urls, concat_dims="time")
        if not keeps_ports():
            with pytest.raises(Unsupported, match=r":\d+/day000\.nc: this Icechunk reads virtual chunks over HTTP "
                                                  "without the URL's port"):
                refset.save(rs, f"icechunk://{tmp_path}/ported")
            assert not (tmp_path / "ported").exists()
    try:
        srv = RangeServer(tmp_path, port=80)  # the scheme's own port: no port in the URLs
    except OSError as e:
        pytest.skip(f"port 80 is not free here ({e}): a URL without a port cannot be served")
    with srv:
        urls = [f"{srv.url}/{os.path.basename(f)}" for f in files]
        rs = refset.combine(urls, concat_dims="time")
        assert rs.fingerprints.get(urls[0])[2]  # an ETag: each virtual chunk is checked by it
        dest = f"icechunk://{tmp_path}/repo"
        refset.save(rs, dest)
        with xr.open_mfdataset(files, combine="nested", concat_dim="time") as want:
            _equal(_open(dest), want.load())
        _rewritten(files[1])
        with pytest.raises(Exception, match="checksum of the object owning the virtual chunk has changed"):
            _open(dest).tas.load()
