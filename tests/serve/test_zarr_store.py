"""refset.ZarrStore with real zarr 3: NetCDF4 via kerchunk, zarr v2/v3 directories, HTTP batching."""

from __future__ import annotations

import asyncio
import os

import fsspec
import numpy as np
import pytest
import zarr
from fsspec.implementations.reference import ReferenceFileSystem as FsspecRFS
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype

import refset
from refset import ZarrStore
from refset.errors import ReferenceNotReachable
from tests.httpserver import RangeServer
from tests.servedata import kerchunk_refs, write_netcdf, write_zarr, zarr_dir_refs


@pytest.fixture(scope="module")
def ncdir(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("ncz")
    return d, write_netcdf(d / "a.nc")


def _arr(st: ZarrStore, name: str, zarr_format: int | None = None) -> np.ndarray:
    return zarr.open_group(st, mode="r", zarr_format=zarr_format)[name][...]


def test_netcdf_through_store_matches_fsspec(ncdir) -> None:
    d, expect = ncdir
    refs = kerchunk_refs(d / "a.nc")
    st = ZarrStore(refs)
    got = _arr(st, "temp", 2)
    np.testing.assert_array_equal(got, expect["temp"])  # missing chunks are the fill value
    np.testing.assert_array_equal(_arr(st, "count", 2), expect["count"])
    theirs = zarr.open_group(FsspecRFS(fo=refs).get_mapper(""), mode="r", zarr_format=2)
    np.testing.assert_array_equal(theirs["temp"][...], got)


@pytest.mark.parametrize(("zarr_format", "sep"), [(2, "."), (2, "/"), (3, "/")])
def test_zarr_directory_whole_file_refs(tmp_path, zarr_format, sep) -> None:
    expect = write_zarr(tmp_path / "z", zarr_format, sep)
    refs = zarr_dir_refs(tmp_path / "z")
    st = ZarrStore(refs)
    np.testing.assert_array_equal(_arr(st, "a", zarr_format), expect)
    np.testing.assert_array_equal(_arr(st, "a"), expect)  # format found by zarr itself
    direct = zarr.open_group(os.fspath(tmp_path / "z"), mode="r")["a"]
    np.testing.assert_array_equal(direct[1:5, 2:6], zarr.open_group(st, mode="r")["a"][1:5, 2:6])


def test_listing(tmp_path) -> None:
    write_zarr(tmp_path / "z", 3)
    refs = zarr_dir_refs(tmp_path / "z")
    st = ZarrStore(refs)

    async def collect(agen) -> list[str]:
        return sorted([k async for k in agen])

    async def main() -> None:
        assert await collect(st.list()) == sorted(refs)
        assert await collect(st.list_prefix("a/")) == sorted(k for k in refs if k.startswith("a/"))
        assert await collect(st.list_prefix("a/c/1")) == ["a/c/1/0", "a/c/1/1", "a/c/1/2"]
        assert await collect(st.list_dir("")) == ["a", "zarr.json"]
        assert await collect(st.list_dir("a")) == ["c", "zarr.json"]
        assert await collect(st.list_dir("a/c/")) == ["0", "1"]
        assert await collect(st.list_dir("a/c/0")) == ["0", "1", "2"]
        assert await collect(st.list_dir("nope")) == []
        assert await st.exists("a/zarr.json") and not await st.exists("a/c/2/0")
        assert await st.getsize("a/c/0/0") == os.path.getsize(tmp_path / "z" / "a" / "c" / "0" / "0")
        assert not await st.is_empty("a")

    asyncio.run(main())


def test_get_byte_ranges(ncdir) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    refs["inl"] = "0123456789"
    st = ZarrStore(refs)
    proto = default_buffer_prototype()
    fs = refset.ReferenceFileSystem(fo=refs)
    whole = fs.cat_file("temp/0.0.0")

    async def main() -> None:
        for key, data in (("temp/0.0.0", whole), ("inl", b"0123456789")):
            cases = [(None, data), (RangeByteRequest(1, 4), data[1:4]),
                     (OffsetByteRequest(3), data[3:]), (SuffixByteRequest(2), data[-2:]),
                     (RangeByteRequest(2, 10**9), data[2:])]
            for br, want in cases:
                got = await st.get(key, proto, br)
                assert got is not None and got.to_bytes() == want, (key, br)
            vals = await st.get_partial_values(proto, [(key, br) for br, _ in cases] + [("nope", None)])
            assert [v.to_bytes() if v is not None else None for v in vals] == [w for _, w in cases] + [None]
        assert await st.get("nope", proto) is None

    asyncio.run(main())


def test_unreachable_propagates(tmp_path, ncdir) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc", url=os.fspath(tmp_path / "moved.nc"))
    st = ZarrStore(refs)
    with pytest.raises(ReferenceNotReachable, match=r"moved\.nc"):
        _arr(st, "temp", 2)


def test_read_only(ncdir) -> None:
    d, _ = ncdir
    st = ZarrStore(kerchunk_refs(d / "a.nc"))
    assert st.read_only and not st.supports_writes and st.supports_listing
    with pytest.raises(ValueError):
        asyncio.run(st.set("k", default_buffer_prototype().buffer.from_bytes(b"x")))
    assert st == ZarrStore(st.engine) and st.with_read_only(True) == st


def test_concurrent_gets_are_coalesced_over_http(tmp_path) -> None:
    files = []
    for i in range(3):
        write_netcdf(tmp_path / f"f{i}.nc", seed=i, t0=2 * i)
        files.append(f"f{i}.nc")
    with RangeServer(tmp_path, delay=0.005) as srv:
        for name in files:
            refs = kerchunk_refs(tmp_path / name, url=f"{srv.url}/{name}")
            local = kerchunk_refs(tmp_path / name)
            st = ZarrStore(refs)
            g = zarr.open_group(st, mode="r", zarr_format=2)
            srv.reset()
            got = g["temp"][...]
            nchunks = sum(1 for k in refs if k.startswith("temp/") and ".z" not in k)
            assert srv.requests < nchunks
            np.testing.assert_array_equal(got, _arr(ZarrStore(local), "temp", 2))
            # fsspec under zarr 3 (async path): one request per chunk, and it needs asynchronous
            # remote filesystems to be asked for explicitly
            theirs = fsspec.filesystem("reference", fo=refs, asynchronous=True,
                                       remote_protocol="http", remote_options={"asynchronous": True})
            srv.reset()
            fst = zarr.storage.FsspecStore(theirs, read_only=True)
            np.testing.assert_array_equal(zarr.open_group(fst, mode="r", zarr_format=2)["temp"][...], got)
            assert srv.requests >= nchunks


def test_fsspec_store_over_our_filesystem(ncdir) -> None:
    """zarr's own FsspecStore over refset.ReferenceFileSystem: no 'same value of asynchronous'."""
    d, expect = ncdir
    refs = kerchunk_refs(d / "a.nc")
    g = zarr.open_group("refset://", mode="r", zarr_format=2, storage_options={"fo": refs})
    np.testing.assert_array_equal(g["temp"][...], expect["temp"])
