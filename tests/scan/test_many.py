"""Scanning many files: ``Scan.many`` keeps remote files in flight at once (a real HTTP server with
latency counts the requests it answers together), yields the sets in the order given, raises a
file's error where that file comes, and reads local files one after another."""

from __future__ import annotations

from pathlib import Path

import h5py
import netCDF4
import numpy as np
import pytest

import refset
from refset.errors import ReferenceNotReachable, Unsupported
from refset.scan import CONCURRENCY, Scan
from tests.httpserver import RangeServer


def _files(tmp_path: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        p = tmp_path / f"f{i:02d}.nc"
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("t", 4)
            ds.createVariable("v", "f4", ("t",), zlib=True)[:] = np.arange(4) + 10 * i
        out.append(p)
    return out


def test_remote_files_are_scanned_together_in_order(tmp_path: Path) -> None:
    files = _files(tmp_path, 12)
    want = [refset.scan(f).to_dict() for f in files]
    with RangeServer(tmp_path, delay=0.2) as srv:
        urls = [f"{srv.url}/{f.name}" for f in files]
        run = Scan()
        got = list(run.many(urls))
        assert srv.requests == len(urls)  # one GET a small file
        # the run counts what its threads' scans cost, as the server does
        assert (run.files, run.requests, run.nbytes) == (len(urls), srv.requests, srv.bytes)
        assert srv.most_inflight >= 3  # all 12 at once under the default; a busy machine starts them slower
        srv.reset()
        got_two = list(Scan().many(urls, concurrency=2))
        assert srv.most_inflight <= 2
    for w, g, g2, f, u in zip(want, got, got_two, files, urls, strict=True):
        assert refset.rename_urls(g, {u: str(f)}).to_dict() == w
        assert g2.to_dict() == g.to_dict()


def test_an_error_comes_where_its_file_does(tmp_path: Path) -> None:
    files = _files(tmp_path, 4)
    (tmp_path / "not-data.txt").write_text("hello")
    with RangeServer(tmp_path) as srv:
        urls = [f"{srv.url}/{f.name}" for f in files]
        urls.insert(2, f"{srv.url}/not-data.txt")
        urls.insert(4, f"{srv.url}/missing.nc")
        it = Scan().many(urls)
        assert next(it)["v/.zarray"] and next(it)["v/.zarray"]
        with pytest.raises(Unsupported, match=r"not-data\.txt: not a NetCDF3, NetCDF4 or HDF5 file"):
            next(it)
        # the run goes on past a file's error, as a loop of scans would
        it = Scan().many(urls[3:])
        assert next(it)["v/.zarray"]
        with pytest.raises((FileNotFoundError, ReferenceNotReachable), match=r"missing\.nc"):
            next(it)
        # what no scanner reads is None, from the same single read
        srv.reset()
        got = list(Scan().scan_many_if_data(urls[:4]))
        assert [g is None for g in got] == [False, False, True, False] and srv.requests == 4


def test_local_files_one_after_another_and_checked_options(tmp_path: Path) -> None:
    files = _files(tmp_path, 3)
    with h5py.File(tmp_path / "h.h5", "w") as f:
        f["x"] = np.arange(3)
    got = list(Scan(inline_threshold=0).many([*files, tmp_path / "h.h5"]))
    assert [len(g.urls) for g in got] == [1, 1, 1, 1]
    assert got[3]["x/0"][0] == str(tmp_path / "h.h5")
    with pytest.raises(ValueError, match="concurrency: must be a positive integer, got 0"):
        list(Scan().many(files, concurrency=0))
    assert CONCURRENCY == 64


def _days(tmp_path: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        p = tmp_path / f"d{i:02d}.nc"
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("time", 1)
            ds.createDimension("x", 3)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [i]
            ds.createVariable("v", "f4", ("time", "x"), zlib=True)[:] = np.arange(3)[None] + 10 * i
        out.append(p)
    return out


def test_a_cluster_combine_counts_what_its_workers_scans_cost(tmp_path: Path) -> None:
    """Remote inputs scanned on a process cluster: the caller's run counts the files, requests and
    bytes of the workers' scans (the command line's summary said nothing in cluster mode), as the
    server counts them, and the set equals the in-process combine."""
    distributed = pytest.importorskip("distributed")
    files = _days(tmp_path, 9)
    with RangeServer(tmp_path, delay=0.05) as srv:
        urls = [f"{srv.url}/{f.name}" for f in files]
        here = refset.combine(urls, concat_dims="time").to_dict()
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
            srv.reset()
            run = Scan()
            seen: list[int] = []
            on = refset.combine(urls, concat_dims="time", client=client, batch_size=2, scan=run,
                                progress=lambda n: seen.append(run.read_so_far()))
            assert on.to_dict() == here
            assert seen and seen[0] > 0 and seen == sorted(seen)  # counted as each task's part arrives
            assert (run.files, run.requests, run.nbytes) == (9, srv.requests, srv.bytes)
            assert run.rounds == 1  # small files: the first answer holds each


def test_bytes_read_so_far_grow_while_the_scans_run(tmp_path: Path) -> None:
    """progress is called as each remote input's scan ends, while the others run, and the run's
    read_so_far counts the bytes its threads have read by then (a progress bar's count: it showed
    only the final total, after every scan had ended)."""
    files = _days(tmp_path, 8)
    with RangeServer(tmp_path, delay=0.2) as srv:
        run = Scan(head_bytes=4096)  # more than one round a file
        seen: list[int] = []
        refset.combine([f"{srv.url}/{f.name}" for f in files], concat_dims="time", scan=run,
                       progress=lambda n: seen.append(run.read_so_far()), concurrency=4)
        assert len(seen) == 8 and 0 < seen[0] < seen[-1] <= run.nbytes == srv.bytes
        assert seen == sorted(seen)


def test_threads_leave_the_process_warnings_as_they_were(tmp_path: Path) -> None:
    """Each thread's native HDF5 walk holds its warnings until it succeeds: per thread, not by swapping
    the process's warning state (catch_warnings in 8 threads whose walks wait on reads left the filters
    changed and every later warning of the process appended to a finished walk's list, never shown)."""
    import warnings

    rng = np.random.default_rng(0)
    for k in range(16):
        with netCDF4.Dataset(tmp_path / f"w{k:02d}.nc", "w") as ds:
            ds.createDimension("y", 300)
            ds.createDimension("x", 300)
            for name in ("a", "b", "c"):  # chunk indexes past the head: read inside each walk
                ds.createVariable(name, "f4", ("y", "x"), zlib=True, chunksizes=(30, 30))[:] = rng.random((300, 300))
    with warnings.catch_warnings(record=True) as log:
        filters = list(warnings.filters)
        with RangeServer(tmp_path, delay=0.02) as srv:
            sets = list(Scan().many([f"{srv.url}/w{k:02d}.nc" for k in range(16)], concurrency=8))
        assert warnings.filters == filters
        warnings.warn("after the scans", UserWarning, stacklevel=1)
    assert [str(w.message) for w in log][-1:] == ["after the scans"]
    assert [sorted(rs.metadata) for rs in sets] == [["a", "b", "c"]] * 16
