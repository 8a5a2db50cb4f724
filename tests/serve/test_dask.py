"""Everything a user hands to Dask pickles cheaply and reopens lazily; a process-based
distributed.LocalCluster computes through engine="refset", chunks={} for every format."""

from __future__ import annotations

import json
import pickle
import threading

import numpy as np
import pytest

import refset
from refset.errors import InvalidReferences, ReferenceNotReachable
from refset.formats.json.plan import MIN_SIZE
from tests.servedata import raw_array_set

FORMATS = ("json", "v1", "parquet", "packed")


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A real data file and its references stored in every format (JSON large enough to be read
    lazily)."""
    d = tmp_path_factory.mktemp("dask")
    small, data = raw_array_set(d, shape=(12, 20, 30), chunks=(1, 10, 10))
    # a long history attribute, as real files carry: the JSON passes 64 KiB with few chunks
    attrs = {**json.loads(small["v/.zattrs"]), "history": "regridded; " * 7000}
    meta = {k: bytes(small[k]) for k in (".zgroup", "v/.zarray")} | {"v/.zattrs": attrs}
    t = small.table("v")
    gv = t.grid_view()
    rs = refset.ReferenceSet.from_arrays(meta, {"v": {"path_id": gv.path_id, "offset": gv.offset,
                                                      "length": gv.length}}, small.urls)
    paths = {}
    for fmt in FORMATS:
        p = d / f"refs.{fmt}"
        refset.save(rs, p, format=fmt)
        paths[fmt] = p
    assert paths["json"].stat().st_size > MIN_SIZE
    return rs, data, paths


@pytest.mark.parametrize("fmt", FORMATS)
def test_sets_stores_and_filesystems_pickle_by_what_reopens_them(stored, fmt):
    rs, _data, paths = stored
    src = str(paths[fmt])
    for lazy in (False, True):
        opened = refset.load(src, lazy=lazy) if fmt in ("json", "v1") else refset.load(src)
        opened["v/3.1.2"]  # some state: a table or a block read, a lock taken
        blob = pickle.dumps(opened)
        assert len(blob) < 500 and src.encode() in blob  # the path and options, not the columns
        back = pickle.loads(blob)
        assert back.to_dict() == rs.to_dict() and back.format_info()["format"] == opened.format_info()["format"]
    store = refset.ZarrStore(src)
    fs = refset.ReferenceFileSystem(fo=src, remote_options={"anon": True})
    for obj in (store, fs):
        blob = pickle.dumps(obj)
        assert len(blob) < 2000
        again = pickle.loads(blob)
        if isinstance(again, refset.ReferenceFileSystem):
            assert again.cat_file("v/3.1.2") == fs.cat_file("v/3.1.2")
        else:  # the store reads the same bytes through the zarr API
            from zarr.core.buffer import default_buffer_prototype
            from zarr.core.sync import sync

            got = sync(again.get("v/3.1.2", default_buffer_prototype()))
            assert got is not None and got.to_bytes() == fs.cat_file("v/3.1.2")
    assert pickle.loads(pickle.dumps(fs)).targets.remote_options == {"anon": True}
    # a worker unpickling the tasks of one computation, and of the next, opens the set once
    blob = pickle.dumps(store)
    assert pickle.loads(blob).engine is pickle.loads(blob).engine is not store.engine


def test_in_memory_sets_pickle_their_columns(stored):
    rs, _data, _paths = stored
    back = pickle.loads(pickle.dumps(rs))
    assert back.to_dict() == rs.to_dict() and back.table("v").offset.flags.writeable is False
    store = pickle.loads(pickle.dumps(refset.ZarrStore(rs)))
    assert store.refs.to_dict() == rs.to_dict()


def test_errors_pickle():
    for e in (InvalidReferences(["a: bad", "b: worse"]), ReferenceNotReachable("k", "s3://b/x", "gone")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)
    assert pickle.loads(pickle.dumps(InvalidReferences(["a", "b"]))).problems == ["a", "b"]


def test_concurrent_lookups_decode_each_block_once(stored):
    rs, _data, paths = stored
    back = refset.load(str(paths["parquet"]))
    calls: list[tuple[str, int]] = []
    block = back.source.block

    def counting(path, i):
        calls.append((path, i))
        return block(path, i)

    back.source.block = counting  # type: ignore[method-assign]
    keys = list(rs.chunk_keys("v"))
    errors: list[BaseException] = []

    def worker(part):
        try:
            for k in part:
                assert back[k] == rs[k]
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(keys[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(calls) == sorted(set(calls))  # never the same record twice at once


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.mark.parametrize("fmt", FORMATS)
def test_process_cluster_computes_through_engine_refset(stored, client, fmt):
    xr = pytest.importorskip("xarray")
    _rs, data, paths = stored
    from distributed import get_task_stream

    dask = pytest.importorskip("dask")
    with dask.config.set({"array.chunk-size": "4KiB"}):  # tasks of 10 stored chunks (400 bytes each)
        ds = xr.open_dataset(paths[fmt], engine="refset", chunks={})
    assert ds.v.chunks == ((10, 2), (10, 10), (10, 10, 10)) and ds.v.data.npartitions == 12
    with get_task_stream(client) as stream:
        total = ds.v.astype("f8").sum().compute()  # the default scheduler is the cluster's client
    assert np.isclose(float(total), data.astype("f8").sum())
    assert len({t["worker"] for t in stream.data}) == 2  # the chunks were read in both worker processes
    means = ds.v.mean(dim=("y", "x")).compute().values
    np.testing.assert_allclose(means, data.mean(axis=(1, 2)), rtol=1e-5)
    assert client.run(lambda: True)  # the workers are alive: nothing crashed them


def test_relative_paths_reopen_from_any_directory(stored, tmp_path, monkeypatch):
    rs, _data, paths = stored
    monkeypatch.chdir(paths["packed"].parent)
    blob = pickle.dumps(refset.load(paths["packed"].name))
    monkeypatch.chdir(tmp_path)  # a worker started elsewhere
    assert pickle.loads(blob)["v/3.1.2"] == rs["v/3.1.2"]


def test_a_small_selection_reads_only_its_blocks(tmp_path, monkeypatch):
    """xarray reading a slice of a parquet set reads the records of that slice, not the whole
    table (on S3, a request per record file)."""
    from refset.io.store import LocalStore

    rs, data = raw_array_set(tmp_path, shape=(40, 20, 20), chunks=(1, 10, 10))
    refset.save(rs, tmp_path / "r.parq", record_size=8)
    read: list[str] = []
    orig = LocalStore.read

    def recorded(self, path="", start=None, end=None):
        read.append(path)
        return orig(self, path, start, end)

    monkeypatch.setattr(LocalStore, "read", recorded)
    ds = refset.open_dataset(str(tmp_path / "r.parq"))
    got = ds.v[10:12].values
    np.testing.assert_array_equal(got, data[10:12])
    records = sorted({r for r in read if r.startswith("v/")})
    assert records == ["v/refs.5.parq"], records  # chunks 40..47 of 160: one record of 8


@pytest.fixture(scope="module")
def daily(tmp_path_factory):
    """Twelve NetCDF4 files of two days each (tests/servedata.write_netcdf), combined along time and
    saved as JSON whose URLs are filled in by :func:`_served`."""
    from tests.servedata import write_netcdf

    d = tmp_path_factory.mktemp("daily")
    expect = [write_netcdf(d / f"day{k:02d}.nc", seed=k, t0=2 * k)["temp"] for k in range(12)]
    sets = [refset.scan(str(p), inline_threshold=0) for p in sorted(d.glob("day*.nc"))]  # every chunk in its file
    rs = refset.combine(sets, concat_dims=["time"], identical_dims=["y", "x"])
    return d, rs, np.concatenate(expect)


def _served(daily, srv, name: str) -> str:
    d, rs, _ = daily
    path = d / name
    refset.save(refset.rename_urls(rs, {str(d): srv.url}), path)
    return str(path)


@pytest.mark.parametrize("where", ["threads", "processes"])
def test_a_task_reads_many_chunks_in_one_round(daily, client, where):
    """With chunks={} a time series at one point of twelve files is one task that reads the twelve
    files' chunks at once (requests in flight together at the server), in Dask's threads and on a
    process cluster; the storage chunks, asked for, are still what Dask gets."""
    xr = pytest.importorskip("xarray")
    from tests.httpserver import RangeServer

    _d, _rs, want = daily
    with RangeServer(daily[0], delay=0.02) as srv:
        refs = _served(daily, srv, f"refs-{where}.json")
        ds = xr.open_dataset(refs, engine="refset", chunks={})
        assert ds.temp.chunks == ((24,), (8,), (10,))  # one task: all 24 days (12 files), all chunks
        series = ds.temp[:, 2, 3]
        srv.reset()
        got = series.compute(scheduler="threads") if where == "threads" else client.compute(series).result()
        np.testing.assert_array_equal(got.values, want[:, 2, 3])
        assert srv.requests <= 12 and srv.most_inflight >= 6  # a request a file, many in flight at once
        with pytest.warns(UserWarning, match="separate the stored chunks"):  # xarray: they split preferred chunks
            stored = xr.open_dataset(refs, engine="refset", chunks={"time": 1, "y": 4, "x": 5})
        assert stored.temp.chunks == ((1,) * 24, (4, 4), (5, 5))
        np.testing.assert_array_equal(stored.temp[:, 2, 3].compute(scheduler="threads").values, want[:, 2, 3])
