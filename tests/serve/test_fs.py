"""refset.ReferenceFileSystem against real files, fsspec's ReferenceFileSystem and an HTTP server."""

from __future__ import annotations

import asyncio
import base64
import json
import os

import fsspec
import numpy as np
import pytest
from fsspec.implementations.reference import ReferenceFileSystem as FsspecRFS

import refset
from refset import ReferenceFileSystem
from refset.errors import ReferenceNotReachable
from refset.io.fetch import plan_ranges
from tests.httpserver import RangeServer
from tests.servedata import kerchunk_refs, write_netcdf


@pytest.fixture(scope="module")
def ncdir(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("nc")
    expect = write_netcdf(d / "a.nc")
    return d, expect


@pytest.fixture(scope="module")
def server(ncdir):
    with RangeServer(ncdir[0]) as srv:
        yield srv


def test_cat_matches_fsspec(ncdir) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    ours = ReferenceFileSystem(fo=refs)
    theirs = FsspecRFS(fo=refs)
    keys = sorted(refs)
    for k in keys:
        assert ours.cat_file(k) == theirs.cat_file(k), k
    assert ours.cat(keys) == theirs.cat(keys)
    assert ours.find("") == theirs.find("")
    assert ours.ls("", detail=False) == sorted(theirs.ls("", detail=False))
    assert ours.ls("temp", detail=False) == sorted(theirs.ls("temp", detail=False))


@pytest.mark.parametrize(
    ("start", "end"),
    [(None, None), (0, 5), (3, None), (None, 4), (-5, None), (-5, -1), (2, 10**9), (10**9, None),
     (5, 3), (-10**9, 2), (0, 0)],
)
def test_cat_file_start_end_clamped(ncdir, start, end) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    refs["inline"] = "0123456789"
    refs["whole"] = [str(d / "a.nc")]
    raw = (d / "a.nc").read_bytes()
    ours = ReferenceFileSystem(fo=refs)
    theirs = FsspecRFS(fo=refs)
    for k in ("temp/0.0.0", "count/0.0", "inline", "whole"):
        ref = refs[k]
        block = (ref.encode() if isinstance(ref, str) else raw if len(ref) == 1
                 else raw[ref[1]:ref[1] + ref[2]])  # the bytes the key stands for, read directly
        got = ours.cat_file(k, start=start, end=end)
        assert got == block[start:end], (k, start, end)
        if (start, end) != (5, 3):  # fsspec raises for end < start on a range (docs/compat.md)
            assert got == theirs.cat_file(k, start=start, end=end), (k, start, end)
        assert ours.cat_ranges([k] * 2, [start, 0], [end, 3]) == [block[start:end], block[0:3]]


def test_missing_key_is_file_not_found(ncdir) -> None:
    d, _ = ncdir
    fs = ReferenceFileSystem(fo=kerchunk_refs(d / "a.nc"))
    with pytest.raises(FileNotFoundError):
        fs.cat_file("temp/9.9.9")
    with pytest.raises(FileNotFoundError):
        fs.info("nope")
    with pytest.raises(FileNotFoundError):
        fs.cat(["temp/0.0.0", "nope"])
    with pytest.raises(FileNotFoundError):
        fs.ls("nope")
    assert "nope" not in fs.cat(["temp/0.0.0", "nope"], on_error="omit")
    assert isinstance(fs.cat(["nope"], on_error="return")["nope"], FileNotFoundError)
    with pytest.raises(FileNotFoundError):
        fs.open("nope")
    assert not fs.exists("nope")
    assert fs.exists("temp/0.0.0") and fs.exists("temp") and fs.isdir("temp")


def test_find_respects_path_boundaries(tmp_path) -> None:
    refs = {"x/0": "a", "xy/0": "b", "x": "c", "x0": "d", "x/y/z": "e"}
    fs = ReferenceFileSystem(fo=refs)
    assert fs.find("x") == ["x", "x/0", "x/y/z"]
    assert fs.find("x/y") == ["x/y/z"]
    assert fs.find("xy") == ["xy/0"]
    assert fs.find("") == sorted(refs)
    assert fs.ls("", detail=False) == ["x", "x0", "xy"]
    assert fs.isdir("x/y") and not fs.isdir("x/y/z") and not fs.isdir("x0")


def test_find_in_chunk_grids_respects_boundaries() -> None:
    meta = {"shape": [30], "chunks": [1], "dtype": "<i1", "compressor": None, "fill_value": 0,
            "order": "C", "filters": None, "zarr_format": 2}
    refs = {"a/.zarray": json.dumps(meta), "ab/.zarray": json.dumps(meta)}
    refs.update({f"a/{i}": bytes([i]).decode() for i in range(0, 30, 3)})
    refs.update({f"ab/{i}": "x" for i in range(2)})
    fs = ReferenceFileSystem(fo=refs)
    assert fs.find("a") == sorted(["a/.zarray"] + [f"a/{i}" for i in range(0, 30, 3)])
    assert fs.find("a/1") == []  # "a/1" is not a directory; "a/12" is not below it
    assert fs.find("ab") == ["ab/.zarray", "ab/0", "ab/1"]
    assert fs.info("a/3")["size"] == 1
    assert fs.ls("a", detail=False)[:3] == ["a/.zarray", "a/0", "a/12"]


def test_nested_chunk_dirs() -> None:
    meta = {"shape": [4, 4], "chunks": [2, 2], "dtype": "<i1", "compressor": None, "fill_value": 0,
            "order": "C", "filters": None, "zarr_format": 2, "dimension_separator": "/"}
    v3 = {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int8",
          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
          "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}]}
    refs = {"a/.zarray": json.dumps(meta), "a/1/0": "ab", "a/1/1": "cd", "b/zarr.json": json.dumps(v3),
            "b/c/1": "ef"}
    fs = ReferenceFileSystem(fo=refs)
    assert fs.ls("a", detail=False) == ["a/.zarray", "a/1"]
    assert fs.ls("a/1", detail=False) == ["a/1/0", "a/1/1"]
    assert fs.isdir("a/1") and not fs.isdir("a/0")
    with pytest.raises(FileNotFoundError):
        fs.ls("a/0")
    assert fs.ls("b", detail=False) == ["b/c", "b/zarr.json"]
    assert fs.ls("b/c", detail=False) == ["b/c/1"]
    assert fs.find("b/c") == ["b/c/1"]
    assert fs.info("b/c") == {"name": "b/c", "type": "directory", "size": 0}


def test_info_sizes(ncdir) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    refs["b64"] = "base64:" + "AAECAw=="
    refs["whole"] = [os.fspath(d / "a.nc")]
    fs = ReferenceFileSystem(fo=refs)
    assert fs.info("b64")["size"] == 4  # decoded length
    assert fs.cat_file("b64") == b"\x00\x01\x02\x03"
    assert fs.info("whole")["size"] == os.path.getsize(d / "a.nc")
    assert fs.info("temp/0.0.0")["size"] == refs["temp/0.0.0"][2]
    assert fs.size("temp/0.0.0") == refs["temp/0.0.0"][2]


def test_open_is_seekable(ncdir) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    fs = ReferenceFileSystem(fo=refs)
    whole = fs.cat_file("temp/0.0.0")
    with fs.open("temp/0.0.0", block_size=4) as f:
        assert f.read(3) == whole[:3]
        f.seek(-2, 2)
        assert f.read() == whole[-2:]
        f.seek(1)
        assert f.read(100000) == whole[1:]
    with fs.open("temp/.zarray") as f:
        assert json.loads(f.read())["chunks"] == [1, 4, 5]


def test_unreachable_missing_file(tmp_path) -> None:
    refs = {"k": [os.fspath(tmp_path / "gone.nc"), 0, 10], "w": [os.fspath(tmp_path / "gone.nc")]}
    fs = ReferenceFileSystem(fo=refs)
    for key in ("k", "w"):
        with pytest.raises(ReferenceNotReachable) as ei:
            fs.cat_file(key)
        assert key in str(ei.value) and "gone.nc" in str(ei.value)
        assert isinstance(ei.value.__cause__, FileNotFoundError)
        assert isinstance(ei.value, OSError)
    with pytest.raises(ReferenceNotReachable):
        fs.cat(["k", "w"])
    out = fs.cat(["k"], on_error="return")
    assert isinstance(out["k"], ReferenceNotReachable)


def test_short_read_is_an_error(tmp_path) -> None:
    (tmp_path / "f").write_bytes(b"0123456789")
    refs = {"past": [os.fspath(tmp_path / "f"), 8, 5], "ok": [os.fspath(tmp_path / "f"), 2, 3]}
    fs = ReferenceFileSystem(fo=refs)
    with pytest.raises(ReferenceNotReachable, match="past"):
        fs.cat_file("past")
    out = fs.cat(["past", "ok"], on_error="return")
    assert out["ok"] == b"234" and isinstance(out["past"], ReferenceNotReachable)


def test_http_404_and_reads(ncdir, server) -> None:
    d, _ = ncdir
    url = f"{server.url}/a.nc"
    refs = kerchunk_refs(d / "a.nc", url=url)
    refs["gone"] = [f"{server.url}/gone.nc", 0, 10]
    fs = ReferenceFileSystem(fo=refs)
    local = ReferenceFileSystem(fo=kerchunk_refs(d / "a.nc"))
    keys = [k for k in refs if k.startswith("temp/") and ".z" not in k]
    assert fs.cat(keys) == local.cat(keys)
    with pytest.raises(ReferenceNotReachable, match="gone") as ei:
        fs.cat_file("gone")
    assert isinstance(ei.value.__cause__, FileNotFoundError)


def test_ranges_are_coalesced(ncdir, server) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc", url=f"{server.url}/a.nc")
    keys = [k for k in refs if k.startswith("temp/") and ".z" not in k]
    fs = ReferenceFileSystem(fo=refs, max_gap=1 << 20)
    server.reset()
    merged = fs.cat(keys)
    assert server.requests == 1
    fs2 = ReferenceFileSystem(fo=refs, max_gap=-1)
    server.reset()
    assert fs2.cat(keys) == merged
    assert server.requests == len(keys)
    fs3 = ReferenceFileSystem(fo=refs, max_gap=1 << 20, max_block=1)
    server.reset()
    assert fs3.cat(keys) == merged
    assert server.requests == len(keys)


def test_mixed_protocols(ncdir, server) -> None:
    d, _ = ncdir
    mem = fsspec.filesystem("memory")
    mem.pipe("/refset-test/blob", b"memory bytes here")
    (d / "plain.bin").write_bytes(b"local file bytes")
    refs = {
        "m": ["memory://refset-test/blob", 7, 5],
        "f": [os.fspath(d / "plain.bin"), 6, 4],
        "u": ["file://" + os.fspath(d / "plain.bin"), 0, 5],
        "h": [f"{server.url}/a.nc", 0, 4],
        "i": "inline",
    }
    fs = ReferenceFileSystem(fo=refs)
    want = {"m": b"bytes", "f": b"file", "u": b"local", "h": b"\x89HDF", "i": b"inline"}
    assert fs.cat(list(refs)) == want
    assert {k: fs.cat_file(k) for k in refs} == want
    assert FsspecRFS(fo=refs, fs={"memory": mem, "file": fsspec.filesystem("file"),
                                  "http": fsspec.filesystem("http")}).cat(list(refs)) == want
    # remote_protocol names the filesystem of protocol-less URLs; the other protocols still work
    # (fsspec then creates only that one filesystem and fails on the others: docs/compat.md)
    one = ReferenceFileSystem(fo=refs, remote_protocol="memory")
    assert one.cat_file("u") == b"local" and one.cat_file("m") == b"bytes"
    with pytest.raises(Exception, match="file://"):
        FsspecRFS(fo=refs, remote_protocol="memory").cat_file("u")


def test_fs_dict_and_instance(tmp_path) -> None:
    mem = fsspec.filesystem("memory")
    mem.pipe("/refset-test/x", b"abcdef")
    refs = {"k": ["memory://refset-test/x", 1, 2], "p": ["/refset-test/x", 0, 1]}
    assert ReferenceFileSystem(fo=refs, fs=mem).cat(["k", "p"]) == {"k": b"bc", "p": b"a"}
    assert ReferenceFileSystem(fo=refs, fs={"memory": {}}).cat_file("k") == b"bc"
    assert ReferenceFileSystem(fo=refs, remote_protocol="memory").cat_file("p") == b"a"


def test_async_api_any_target(ncdir, server) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    refs["h"] = [f"{server.url}/a.nc", 0, 4]

    async def main() -> tuple[bytes, dict, list]:
        # fsspec raises "same value of asynchronous" for this combination; refset does not
        fs = ReferenceFileSystem(fo=refs, asynchronous=True, remote_options={"asynchronous": False})
        one = await fs._cat_file("h")
        many = await fs._cat(["temp/0.0.0", "h"])
        rng = await fs._cat_ranges(["temp/0.0.0", "h"], [0, 1], [2, 3])
        assert (await fs._info("temp"))["type"] == "directory"
        assert "temp/0.0.0" in await fs._find("temp")
        assert "temp" in await fs._ls("", detail=False)
        return one, many, rng

    one, many, rng = asyncio.run(main())
    sync_fs = ReferenceFileSystem(fo=refs)
    assert one == b"\x89HDF"
    assert many == sync_fs.cat(["temp/0.0.0", "h"])
    assert rng == [sync_fs.cat_file("temp/0.0.0")[:2], b"HD"]


def test_entry_point_and_load_forms(ncdir, tmp_path) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    p = tmp_path / "refs.json"
    p.write_text(json.dumps(refs))
    fs = fsspec.filesystem("refset", fo=os.fspath(p))
    assert isinstance(fs, ReferenceFileSystem)
    rs = refset.load(os.fspath(p))
    assert ReferenceFileSystem(fo=rs).refs is rs
    with fsspec.open("refset://temp/.zarray", fo=os.fspath(p)) as f:
        assert json.loads(f.read())["shape"] == [2, 8, 10]
    m = fs.get_mapper("")
    assert m["temp/.zarray"] == refs["temp/.zarray"].encode()


def test_cli_cat_recipe(ncdir) -> None:
    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    rs = refset.load(refs)
    fs = refset.ReferenceFileSystem(fo=rs)
    assert fs.cat_file("temp/.zarray", start=0, end=1) == b"{"


def test_plan_ranges() -> None:
    pid = np.array([1, 0, 0, 0, 1, 0])
    start = np.array([0, 100, 0, 50, 10, 1000])
    end = np.array([10, 150, 40, 90, 20, 1010])
    p = plan_ranges(pid, start, end, max_gap=9, max_block=1000)
    blocks = sorted(zip(p.block_pid.tolist(), p.block_start.tolist(), p.block_end.tolist(), strict=True))
    assert blocks == [(0, 0, 40), (0, 50, 90), (0, 100, 150), (0, 1000, 1010), (1, 0, 20)]
    assert plan_ranges(pid, start, end, max_gap=10).nblocks == 3  # a gap equal to max_gap merges
    for i in range(6):
        b = p.req_block[i]
        assert p.block_pid[b] == pid[i] and p.block_start[b] <= start[i] and end[i] <= p.block_end[b]
    assert plan_ranges(pid, start, end, max_gap=-1).nblocks == 6
    assert plan_ranges(pid, start, end, max_gap=10**6).nblocks == 2
    assert plan_ranges(pid, start, end, max_gap=10**6, max_block=100).nblocks == 4
    # adjacent ranges merge with max_gap=0, not with a negative max_gap
    assert plan_ranges([0, 0], [0, 5], [5, 9], max_gap=0).nblocks == 1
    assert plan_ranges([0, 0], [0, 5], [5, 9], max_gap=-1).nblocks == 2
    assert plan_ranges([], [], []).nblocks == 0


def test_listing_a_scalar_array() -> None:
    import asyncio

    from refset import ZarrStore

    scalar = json.dumps({"shape": [], "chunks": [], "dtype": "<f8", "compressor": None, "fill_value": 0,
                         "filters": None, "order": "C", "zarr_format": 2})
    refs = {".zgroup": '{"zarr_format": 2}', "s/.zarray": scalar, "s/0": "abcdefgh"}
    fs = ReferenceFileSystem(fo=refs)
    assert fs.ls("s", detail=False) == ["s/.zarray", "s/0"]
    assert sorted(fs.find("", withdirs=True)) == [".zgroup", "s", "s/.zarray", "s/0"]

    async def children() -> list[str]:
        return [k async for k in ZarrStore(refs).list_dir("s")]

    assert sorted(asyncio.run(children())) == [".zarray", "0"]


@pytest.mark.filterwarnings("ignore:.*fastparquet.*", "ignore:.*infer_string.*")  # fsspec's parquet reader
@pytest.mark.parametrize("form", ["json", "parquet"])
def test_references_mapping_like_fsspecs(ncdir, tmp_path, form) -> None:
    """``fs.references``: a read-only mapping with fsspec's value forms, on the same stored set."""
    from collections.abc import Mapping

    d, _ = ncdir
    refs = kerchunk_refs(d / "a.nc")
    assert "temp/0.1.1" not in refs and "temp/1.0.1" not in refs  # chunks never written
    refs["temp/0.1.1"] = [str(d / "a.nc")]  # a whole-file reference
    refs["temp/1.0.1"] = "base64:" + base64.b64encode(b"\x00\xff\x10").decode()  # inline binary
    path = str(tmp_path / ("refs.json" if form == "json" else "refs.parq"))
    refset.save(refs, path)
    ours = ReferenceFileSystem(fo=path).references
    theirs = FsspecRFS(fo=path).references
    assert isinstance(ours, Mapping) and not isinstance(ours, dict)
    with pytest.raises(TypeError):
        ours["x"] = b"1"  # type: ignore[index]
    keys = set(refs)
    assert set(ours) == keys and len(ours) == len(keys)
    if form == "json":  # fsspec's parquet mapper lists directories beside keys
        assert set(theirs) == keys and len(theirs) == len(keys)

    def plain(v):  # fsspec keeps Version 0 inline text as it was written
        if isinstance(v, str):
            return base64.b64decode(v[7:]) if v.startswith("base64:") else v.encode()
        return v

    for k in keys:
        a, b = ours[k], theirs[k]
        assert k in ours and type(a) in (bytes, list), k
        if isinstance(a, list):
            assert a == list(b) and len(a) in (1, 3), k
        elif k.endswith((".zarray", ".zattrs", ".zgroup")):
            assert json.loads(a) == json.loads(plain(b)), k
        else:
            assert a == plain(b), k
    assert "nope" not in ours and ours.get("nope") is None
    with pytest.raises(KeyError):
        ours["temp/9.9.9"]
    assert dict(ours.items()) == {k: ours[k] for k in ours}


def test_references_are_looked_up_not_copied() -> None:
    """A set of a million chunk keys: len, lookups, ``in`` and the first keys without a dict of them."""
    import tracemalloc

    n = 1_000_000
    rs = refset.ReferenceSet.from_arrays(
        {".zgroup": {"zarr_format": 2},
         "v/.zarray": {"shape": [n], "chunks": [1], "dtype": "<f4", "compressor": None, "fill_value": 0,
                       "filters": None, "order": "C", "zarr_format": 2}},
        {"v": {"path_id": np.zeros(n, np.int64), "offset": np.arange(n) * 4, "length": np.full(n, 4)}},
        ["s3://bucket/data.bin"])
    fs = ReferenceFileSystem(fo=rs)
    tracemalloc.start()
    refs = fs.references
    assert len(refs) == n + 2 and "v/999999" in refs and "v/1000000" not in refs
    assert refs["v/123456"] == ["s3://bucket/data.bin", 123456 * 4, 4]
    it = iter(refs)
    first = [next(it) for _ in range(4)]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert first == [".zgroup", "v/.zarray", "v/0", "v/1"]
    assert peak < 20 * 2**20, peak  # a dict of a million keys and lists takes hundreds of MB


def test_fsspec_behaviours_kerchunk_relies_on(tmp_path) -> None:
    """What fsspec's tests and kerchunk's helpers expect of a reference filesystem: sync calls on an
    ``asynchronous=True`` instance (kerchunk's ``refs_as_fs``) work on fsspec's loop; ``cat`` of one
    unreachable key with ``on_error="return"`` gives the error, with ``"omit"`` nothing; options given
    as JSON text are read; listing is answered by the async primitives alone."""
    from refset.errors import InvalidOption, ReferenceNotReachable

    data = tmp_path / "d.bin"
    data.write_bytes(bytes(range(50)))
    refs = {"a": [str(data), 10, 5], "gone": [str(tmp_path / "missing.bin"), 0, 4], "dir/x": "text"}
    fs = refset.ReferenceFileSystem(refs, asynchronous=True)
    assert fs.cat("a") == bytes(range(10, 15)) and fs.ls("dir", detail=False) == ["dir/x"]
    assert fs.info("a")["size"] == 5 and fs.isdir("dir") and fs.exists("dir/x") and not fs.exists("b")
    plain = refset.ReferenceFileSystem(refs, remote_options='{"auto_mkdir": false}')
    assert isinstance(plain.cat("gone", on_error="return"), ReferenceNotReachable)
    assert plain.cat("gone", on_error="omit") == {}
    with pytest.raises(ReferenceNotReachable):
        plain.cat("gone")
    assert plain.cat(["a", "gone"], on_error="omit") == {"a": bytes(range(10, 15))}
    with pytest.raises(InvalidOption, match="remote_options: a JSON object"):
        refset.ReferenceFileSystem(refs, remote_options="not json")
    assert sorted(plain.find("")) == ["a", "dir/x", "gone"]
