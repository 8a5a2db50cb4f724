"""Benchmark: the daily reads of a set made once, through xarray, over a slow HTTP server (issue 41).

A corpus of daily NetCDF4 files (``../shared/bench/make_corpus.py --ny 360 --nx 720 --chunk 60``, kept
under bench/data/, which git ignores) is combined along time by refset and saved as kerchunk JSON
(Version 0), its URLs pointing at a local HTTP server (tests/httpserver.py, its own process) that adds
``--delay`` seconds to every request and counts them. Three reads of ``lst``:

- ``series``: the time series at one land point (one chunk in every file);
- ``map``: one day's map (every chunk of one file);
- ``mean30``: a 30-day mean over a 120 x 120 region (4 chunks in each of 30 files).

Each (reader, read) runs in its own child process, which opens the dataset and then times the read
alone (its requests counted at the server around it), then the same read again ("again": connections
open, and on a cluster the workers' set open). Readers: ``refset`` (engine="refset", eager),
``refset-dask`` (``chunks={}``, Dask's threaded scheduler), ``fsspec`` (fsspec's ReferenceFileSystem +
zarr 3's FsspecStore, engine="zarr", eager); with ``--cluster`` also ``refset-cluster`` and
``fsspec-cluster`` (``chunks={}`` computed on a ``distributed.LocalCluster`` of 2 worker processes,
started, and the libraries imported in them, before the clock; each worker reopens the set within
the read, by what the graph pickles). The floor of a read is measured too: one round of the fewest requests that
fetch its bytes (one range per file, from its first needed chunk to its last), all in flight at once,
sent by a bare aiohttp client that decodes nothing, over connections it opened in an untimed round
before (the readers open theirs within the read: a fresh process each).

usage: python bench/bench_daily.py [--files 365] [--delay 0.02] [--repeat 3] [--cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLACEHOLDER = "http://SERVER/"
VAR = "lst"

READS = {
    "series": "ds[VAR][:, IY, IX].values",
    "map": "ds[VAR][DAY].values",
    "mean30": "ds[VAR][T0:T0 + 30, Y0:Y0 + 120, X0:X0 + 120].mean().values",
}

OPEN = {
    "refset": 'xr.open_dataset(REFS, engine="refset")',
    "refset-dask": 'xr.open_dataset(REFS, engine="refset", chunks={})',
    "fsspec": ('xr.open_dataset(zarr.storage.FsspecStore(fsspec.filesystem("reference", fo=REFS, asynchronous=True, '
               'remote_protocol="http", remote_options={"asynchronous": True}), read_only=True), engine="zarr", '
               "consolidated=False, zarr_format=2)"),
}
OPEN["refset-cluster"] = OPEN["refset-dask"]
OPEN["fsspec-cluster"] = OPEN["fsspec"][:-1] + ", chunks={})"

CHILD = """
import json, time, urllib.request
import numpy as np, xarray as xr, fsspec, zarr, dask, dask.array, distributed, aiohttp, fsspec.implementations.http
# (imported before the clock: what a first isel, compute and HTTP read import)
def count():
    with urllib.request.urlopen(SERVER + "/__count__") as r:
        return int(r.read())
dask.config.set(scheduler="threads")
if CLUSTER:
    import distributed
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    client = distributed.Client(cluster)

    def warm():  # the workers import what any reader's first task imports: startup is not a read
        import aiohttp, fsspec.implementations.http, numcodecs, xarray, zarr  # noqa: F401
        import refset.serve.array, refset.serve.parts, refset.formats.json  # noqa: F401

    client.run(warm)
    dask.array.ones(4, chunks=2).sum().compute()
    tz = time.perf_counter()
    dask.array.ones(4, chunks=2).sum().compute()  # what any computation costs on the cluster
    trivial = time.perf_counter() - tz
else:
    trivial = 0.0
t0 = time.perf_counter()
ds = OPEN
t1 = time.perf_counter()
c0 = count()
t2 = time.perf_counter()
v = READ
t3 = time.perf_counter()
c1 = count()
t4 = time.perf_counter()
v = READ  # again: connections open, a worker's set open
t5 = time.perf_counter()
print(json.dumps({"open": t1 - t0, "read": t3 - t2, "again": t5 - t4, "requests": c1 - c0,
                  "check": float(np.nansum(v)), "trivial": trivial}))
if CLUSTER:
    client.close()
    cluster.close()
"""


def prepare(files: int) -> tuple[Path, Path, dict[str, int]]:
    """The corpus of ``files`` days (made when missing), its set saved as JSON with placeholder URLs,
    and where the reads look (a land point and region, chunks present in every file)."""
    corpus = HERE / "data" / f"daily{files}"
    refs = corpus / "refs.json"
    where = corpus / "where.json"
    if refs.exists() and where.exists():
        return corpus, refs, json.loads(where.read_text())
    if len(glob.glob(str(corpus / "*.nc"))) < files:
        subprocess.run([sys.executable, str(ROOT.parent / "shared" / "bench" / "make_corpus.py"), str(corpus),
                        "--files", str(files), "--ny", "360", "--nx", "720", "--chunk", "60"], check=True)
    import numpy as np

    import refset

    local = os.path.realpath(corpus) + "/"
    paths = sorted(glob.glob(local + "*.nc"))[:files]
    rs = refset.combine(paths, concat_dims=["time"], identical_dims=["lat", "lon"])
    present = rs.table(VAR).grid_view().path_id[0] >= 0  # (lat chunks, lon chunks) at day 0
    ys, xs = np.nonzero(present[:-1, :-1] & present[1:, :-1] & present[:-1, 1:] & present[1:, 1:])
    y, x = int(ys[len(ys) // 2]), int(xs[len(xs) // 2])  # a 2 x 2 block of land chunks
    spot = {"IY": y * 60 + 30, "IX": x * 60 + 30, "DAY": files // 2, "T0": max(0, files // 3 - 15),
            "Y0": y * 60, "X0": x * 60}
    refset.save(refset.rename_urls(rs, {local: PLACEHOLDER}), refs)
    where.write_text(json.dumps(spot))
    return corpus, refs, spot


def count(server: str) -> int:
    with urllib.request.urlopen(f"{server}/__count__") as r:
        return int(r.read())


def run(reader: str, read: str, refs: str, server: str, spot: dict[str, int]) -> dict[str, float]:
    expr = READS[read].replace("VAR", repr(VAR))
    for k, v in spot.items():
        expr = expr.replace(k, str(v))
    code = (CHILD.replace("OPEN", OPEN[reader]).replace("READ", expr).replace("REFS", repr(refs))
            .replace("SERVER", repr(server)).replace("CLUSTER", str(reader.endswith("-cluster"))))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{reader} {read} failed:\n{p.stderr}")
    got: dict[str, float] = json.loads(p.stdout.strip().splitlines()[-1])
    return got


def floor(refs_path: Path, server: str, read: str, spot: dict[str, int], repeat: int,
          ) -> tuple[float, float, int]:
    """One round of the fewest requests that fetch ``read``'s bytes (one range a file, from its first
    needed chunk to its last), all at once, by a bare aiohttp client: the first round, which opens its
    connections (cold), the best of ``repeat`` more over them (warm); and how many requests that is."""
    import aiohttp
    import numpy as np

    import refset

    rs = refset.load(str(refs_path))
    t = rs.table(VAR).grid_view()
    sel = {"series": (slice(None), spot["IY"] // 60, spot["IX"] // 60),
           "map": (spot["DAY"], slice(None), slice(None)),
           "mean30": (slice(spot["T0"], spot["T0"] + 30), slice(spot["Y0"] // 60, spot["Y0"] // 60 + 2),
                      slice(spot["X0"] // 60, spot["X0"] // 60 + 2))}[read]
    pid, off, ln = (np.asarray(c[sel]).ravel() for c in (t.path_id, t.offset, t.length))
    keep = pid >= 0
    pid, off, end = pid[keep], off[keep].astype(np.int64), (off[keep] + ln[keep]).astype(np.int64)
    ranges = []
    for p in np.unique(pid).tolist():
        m = pid == p
        url = rs.urls[p].replace(PLACEHOLDER, server + "/")
        ranges.append((url, int(off[m].min()), int(end[m].max())))

    async def rounds() -> tuple[float, float]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            async def get(url: str, a: int, b: int) -> int:
                async with s.get(url, headers={"Range": f"bytes={a}-{b - 1}"}) as r:
                    return len(await r.read())

            took = []
            for _ in range(repeat + 1):  # the first round opens the connections
                t0 = time.perf_counter()
                got = await asyncio.gather(*(get(*r) for r in ranges))
                took.append(time.perf_counter() - t0)
                assert sum(got) == sum(b - a for _, a, b in ranges)
            return took[0], min(took[1:])

    cold, warm = asyncio.run(rounds())
    return cold, warm, len(ranges)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=365)
    ap.add_argument("--delay", type=float, default=0.02)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--readers", default="refset,refset-dask,fsspec")
    ap.add_argument("--reads", default=",".join(READS))
    ap.add_argument("--cluster", action="store_true", help="also refset-cluster and fsspec-cluster")
    a = ap.parse_args()
    corpus, template, spot = prepare(a.files)
    readers = a.readers.split(",") + (["refset-cluster", "fsspec-cluster"] if a.cluster else [])
    reads = a.reads.split(",")
    srv = subprocess.Popen([sys.executable, str(ROOT / "tests" / "httpserver.py"), str(corpus),
                            "--delay", str(a.delay)], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None
        server = srv.stdout.readline().strip()
        refs = corpus / f"refs-{os.getpid()}.json"
        refs.write_text(template.read_text().replace(PLACEHOLDER, server + "/"))
        res: dict[tuple[str, str], list[dict[str, float]]] = {}
        floors = {r: floor(template, server, r, spot, a.repeat) for r in reads}
        for _ in range(a.repeat):  # rounds: every reader once per round, side by side in time
            for read in reads:
                for reader in readers:
                    res.setdefault((reader, read), []).append(run(reader, read, str(refs), server, spot))
        refs.unlink()
    finally:
        srv.terminate()
        srv.wait()
    print(f"{a.files} files, {VAR!r}, {a.delay * 1000:.0f} ms per request, median of {a.repeat} "
          f"(each in its own process; read timed after open)")
    print(f"{'read':8} {'reader':15} {'open s':>7} {'read s':>7} {'again s':>7} {'requests':>8} "
          f"{'read/cold floor':>15} {'again/warm floor':>16} {'read/refset':>11} {'fsspec/read':>11}")
    med: dict[tuple[str, str], float] = {}
    for read in reads:
        cold, warm, nfl = floors[read]
        print(f"{read:8} {'floor cold/warm':15} {'':>7} {cold:7.3f} {warm:7.3f} {nfl:8d}")
        for reader in readers:
            med[(reader, read)] = statistics.median(r["read"] for r in res[(reader, read)])
        for reader in readers:
            rows = res[(reader, read)]
            t = med[(reader, read)]
            again = statistics.median(r["again"] for r in rows)
            base = med.get(("refset", read))
            fs = med.get(("fsspec-cluster" if reader.endswith("-cluster") else "fsspec", read))
            print(f"{read:8} {reader:15} {statistics.median(r['open'] for r in rows):7.3f} {t:7.3f} {again:7.3f} "
                  f"{int(statistics.median(r['requests'] for r in rows)):8d} {t / cold:15.1f} {again / warm:16.1f} "
                  f"{t / base if base else float('nan'):11.2f} {fs / t if fs else float('nan'):11.2f}")
    for read in reads:  # every reader read the same values
        checks = {reader: res[(reader, read)][-1]["check"] for reader in readers}
        first = next(iter(checks.values()))
        if any(abs(c - first) > 1e-6 * max(abs(first), 1) for c in checks.values()):
            raise SystemExit(f"{read}: the readers disagree: {checks}")
    trivial = [r["trivial"] for (reader, _), rows in res.items() if reader.endswith("-cluster") for r in rows]
    if trivial:
        print(f"a trivial computation on the cluster (2 chunks, a sum): {statistics.median(trivial):.3f} s")


if __name__ == "__main__":
    main()
