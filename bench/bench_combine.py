"""Benchmark (issue 11): ``refset.combine`` vs kerchunk's MultiZarrToZarr and VirtualiZarr.

Parts (``--parts``, all by default):

* ``check``: on the first 100 inputs, refset's combined set and MultiZarrToZarr's name the same
  chunks (URL, offset, length) for every data variable and the same time values, so no broken path
  is timed.
* ``sets``: combine ``--sets`` single-file reference sets (kerchunk JSON of the 30 files of
  ``../shared/bench/make_corpus.py``, copy k of file j with time shifted by 30 days per round, as a
  daily product of ``--sets`` days): ``refset.combine(paths, concat_dims="time",
  identical_dims=["lat", "lon"])`` vs ``MultiZarrToZarr(paths, concat_dims=["time"],
  identical_dims=["lat", "lon"], coo_map={"time": "cf:time"}).translate()`` vs VirtualiZarr
  (``open_virtual_dataset`` of each set with ``KerchunkJSONParser``, ``xr.concat`` along time, then
  ``.vz.to_kerchunk(format="dict")``). Each side in its own child process; wall time and the
  child's peak RSS (VmHWM: whole process, and above its after-import baseline).
* ``e2e``: end to end on ``--e2e-files`` small NetCDF4 files (make_corpus.py with a 90x180 grid):
  scan + combine + save JSON (``refset-packed``: save refset's packed format) +
  ``xr.open_dataset`` + one computed mean, on a
  ``distributed.LocalCluster(processes=True)`` of 1 and 2 workers (started before the clock).
  refset: ``refset.combine(files, ..., client=client)`` (scan on the workers, tree-combine),
  ``refset.save``, ``engine="refset"``. kerchunk: ``client.map`` of ``SingleHdf5ToZarr`` per file,
  gathered, ``MultiZarrToZarr`` in the client, ``json.dump``, ``engine="zarr"`` over fsspec's
  ReferenceFileSystem. Both sides import their libraries and xarray's backend entry points before
  the clock. Memory: peak of the summed RSS of the child and its cluster's processes.
  ``--e2e-repeat N``: N rounds of the sides in turn; medians are compared (the machine is noisy).

usage: python bench/bench_combine.py [--corpus /work/bench-data/corpus30] [--parts check,sets,e2e]
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared"

# -- preparing inputs -------------------------------------------------------------------------------


def kerchunk_singles(corpus: list[str], inline: int) -> list[dict[str, Any]]:
    from kerchunk.hdf import SingleHdf5ToZarr

    out = []
    for f in corpus:
        with open(f, "rb") as fh:
            out.append(SingleHdf5ToZarr(fh, f, inline_threshold=inline).translate())
    return out


def _shift_time(refs: dict[str, Any], days: float) -> dict[str, Any]:
    """A copy of a kerchunk set whose ``time/0`` chunk (a 512-value chunk holding one day) is stored
    inline with that day + ``days``."""
    import numpy as np

    refs = json.loads(json.dumps(refs))
    v = refs["refs"]["time/0"]
    if isinstance(v, list):
        with open(v[0], "rb") as f:
            f.seek(v[1])
            raw = f.read(v[2])
    else:
        raw = base64.b64decode(v[7:]) if v.startswith("base64:") else v.encode()
    t = np.frombuffer(raw, "<f8").copy()
    t[0] += days
    refs["refs"]["time/0"] = "base64:" + base64.b64encode(t.tobytes()).decode()
    return refs


LONG_DIR = "archive/earth-observation/products/land-surface-temperature/v2.1/daily/global-0.25deg"


def _renamed(refs: dict[str, Any], url: str) -> dict[str, Any]:
    """The set with every reference's URL replaced by ``url`` (a single-file set names one file)."""
    refs["refs"] = {key: [url, *v[1:]] if isinstance(v, list) else v for key, v in refs["refs"].items()}
    return refs


def make_sets(corpus: list[str], work: Path, n: int, inline: bool = True, long_urls: bool = False) -> list[str]:
    """``n`` kerchunk sets: copy k of corpus file j (time shifted, inline, when ``inline``; else
    kerchunk's sets with ``inline_threshold=0`` as they are: VirtualiZarr reads no inline data).
    ``long_urls``: the sets name links to the corpus files under ``LONG_DIR`` (URLs of ~130
    characters, as real archives' absolute paths and ``s3://`` URLs are): the same 30 files, so only
    the URLs' length differs from the plain sets."""
    d = work / f"sets{n}{'' if inline else '-noinline'}{'-long' if long_urls else ''}"
    paths = [str(d / f"s{k:05d}.json") for k in range(n)]
    if all(os.path.exists(p) for p in paths):
        return paths
    d.mkdir(parents=True, exist_ok=True)
    singles = kerchunk_singles(corpus, 500 if inline else 0)
    m = len(singles)
    links = work / LONG_DIR
    links.mkdir(parents=True, exist_ok=True)
    for k, p in enumerate(paths):
        refs = _shift_time(singles[k % m], (k // m) * m) if inline else singles[k % m]
        if long_urls:
            link = links / os.path.basename(corpus[k % m])
            if not link.exists():
                link.symlink_to(os.path.abspath(corpus[k % m]))
            refs = _renamed(refs, str(link))
        with open(p, "w") as f:
            json.dump(refs, f)
    return paths


def make_small_files(work: Path, n: int) -> list[str]:
    d = work / "small"
    files = sorted(glob.glob(str(d / "*.nc")))
    if len(files) < n:
        subprocess.run([sys.executable, str(SHARED / "bench" / "make_corpus.py"), str(d), "--files", str(n),
                        "--ny", "90", "--nx", "180", "--chunk", "15"], check=True)
        files = sorted(glob.glob(str(d / "*.nc")))
    return files[:n]


# -- sides ------------------------------------------------------------------------------------------

SETS = {
    "refset": """
from refset import combine  # imported before the clock, as the peers' are
def RUN(paths):
    rs = combine(paths, concat_dims="time", identical_dims=["lat", "lon"])
    return len(rs)
""",
    "kerchunk": """
from kerchunk.combine import MultiZarrToZarr
def RUN(paths):
    out = MultiZarrToZarr(paths, concat_dims=["time"], identical_dims=["lat", "lon"],
                          coo_map={"time": "cf:time"}).translate()
    return len(out["refs"])
""",
    "virtualizarr": """
import warnings
warnings.filterwarnings("ignore")
import numpy as np
import xarray as xr
from obstore.store import LocalStore
from obspec_utils.registry import ObjectStoreRegistry
from virtualizarr import open_virtual_dataset
from virtualizarr.parsers import KerchunkJSONParser
REG = ObjectStoreRegistry({"file:///": LocalStore()})
PARSER = KerchunkJSONParser()
def RUN(paths):
    # sets without inline data (VirtualiZarr reads none); each copy's day is shifted after opening
    vds = []
    for k, p in enumerate(paths):
        ds = open_virtual_dataset("file://" + p, registry=REG, parser=PARSER,
                                  loadable_variables=["time", "lat", "lon"])
        vds.append(ds.assign_coords(time=ds.time + np.timedelta64((k // 30) * 30, "D")))
    out = xr.concat(vds, dim="time", coords="minimal", compat="override", data_vars="minimal")
    return len(out.vz.to_kerchunk(format="dict")["refs"])
""",
}

SETS_DRIVER = """
import json, sys, time
def rss(field="VmRSS:"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
{side}
PATHS = json.load(open({paths!r}))
base = rss()
t = time.perf_counter()
n = RUN(PATHS)
wall = time.perf_counter() - t
peak = rss("VmHWM:")  # not ru_maxrss, which keeps the parent's peak across vfork + exec
print(json.dumps({{"wall": wall, "peak": peak, "base": base, "refs": n}}))
"""


E2E = {
    "refset": """
import refset, xarray as xr
refset.combine, refset.save  # imported before the clock (import refset is lazy), as the peers' are
def RUN(files, client, out):
    rs = refset.combine(files, concat_dims="time", identical_dims=["lat", "lon"], client=client)
    refset.save(rs, out + ".json")
    ds = xr.open_dataset(out + ".json", engine="refset")
    return len(rs), float(ds.lst.isel(time=-1).mean().values)
""",
    "refset-packed": """
import refset, xarray as xr
refset.combine, refset.save  # imported before the clock (import refset is lazy), as the peers' are
def RUN(files, client, out):
    rs = refset.combine(files, concat_dims="time", identical_dims=["lat", "lon"], client=client)
    refset.save(rs, out + ".packed")
    ds = xr.open_dataset(out + ".packed", engine="refset")
    return len(rs), float(ds.lst.isel(time=-1).mean().values)
""",
    "kerchunk": """
import json, fsspec, xarray as xr
from kerchunk.hdf import SingleHdf5ToZarr
from kerchunk.combine import MultiZarrToZarr
def single(f):
    with open(f, "rb") as fh:
        return SingleHdf5ToZarr(fh, f, inline_threshold=500).translate()
def RUN(files, client, out):
    singles = client.gather(client.map(single, files))
    refs = MultiZarrToZarr(singles, concat_dims=["time"], identical_dims=["lat", "lon"],
                           coo_map={"time": "cf:time"}).translate()
    with open(out + ".json", "w") as f:
        json.dump(refs, f)
    fs = fsspec.filesystem("reference", fo=out + ".json")
    ds = xr.open_dataset(fs.get_mapper(""), engine="zarr", consolidated=False, zarr_format=2)
    return len(refs["refs"]), float(ds.lst.isel(time=-1).mean().values)
""",
}

E2E_DRIVER = """
import json, os, threading, time, warnings
warnings.filterwarnings("ignore")
import psutil
from distributed import Client, LocalCluster
{side}
import xarray
# xarray loads every installed backend's entry point at the first open_dataset: kerchunk's imports
# fsspec, numcodecs and zarr (~70 ms), which the kerchunk side has imported above, before the clock.
# Loaded here on both sides, so both start the clock with them imported (the refset side would
# import most of them itself later: as its own imports, they are outside the clock as kerchunk's are).
xarray.backends.list_engines()
if __name__ == "__main__":
    FILES = json.load(open({files!r}))
    me = psutil.Process()
    peak = [0, 0]
    stop = threading.Event()
    def watch():
        while not stop.is_set():
            try:
                kids = me.children(recursive=True)
                total = me.memory_info().rss + sum(k.memory_info().rss for k in kids)
            except psutil.Error:
                continue
            peak[0] = max(peak[0], total)
            peak[1] = max(peak[1], me.memory_info().rss)
            time.sleep(0.05)
    with LocalCluster(n_workers={workers}, threads_per_worker=1, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        threading.Thread(target=watch, daemon=True).start()
        t = time.perf_counter()
        n, value = RUN(FILES, client, {out!r})
        wall = time.perf_counter() - t
        stop.set()
    print(json.dumps({{"wall": wall, "peak_total": peak[0], "peak_client": peak[1], "refs": n,
                       "value": value, "bytes": os.path.getsize(
                           next(p for p in ({out!r} + ".json", {out!r} + ".packed") if os.path.exists(p)))}}))
"""


def child(code: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        raise SystemExit(f"child failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def mb(x: float) -> str:
    return f"{x / 1e6:.0f}"


# -- parts ------------------------------------------------------------------------------------------


def check(paths: list[str]) -> None:
    import numpy as np
    from kerchunk.combine import MultiZarrToZarr

    import refset

    ours = refset.combine(paths, concat_dims="time", identical_dims=["lat", "lon"]).to_dict()
    theirs = MultiZarrToZarr(paths, concat_dims=["time"], identical_dims=["lat", "lon"],
                             coo_map={"time": "cf:time"}).translate()["refs"]
    n = 0
    for var in ("lst", "lst_uncertainty", "n", "qual"):
        a = {k: v for k, v in ours.items() if k.startswith(var + "/") and k[len(var) + 1:][0].isdigit()}
        b = {k: v for k, v in theirs.items() if k.startswith(var + "/") and k[len(var) + 1:][0].isdigit()}
        assert a.keys() == b.keys(), (var, len(a), len(b))
        assert all(list(a[k]) == list(b[k]) for k in a), var
        n += len(a)
    ds = refset.open_dataset(refset.load(ours))
    times = ds.time.values
    assert len(times) == len(paths) and (np.diff(times.astype("datetime64[s]").astype(np.int64)) > 0).all()
    print(f"check: refset == MultiZarrToZarr on {len(paths)} sets: {n} chunk references of 4 variables, "
          f"{len(times)} increasing times")


def bench_sets(paths: list[str], plain: list[str], sides: list[str], repeat: int, work: Path) -> None:
    lst = work / f"paths{len(paths)}.json"
    lst.write_text(json.dumps(paths))
    lst0 = work / f"paths{len(paths)}-noinline.json"
    if plain:
        lst0.write_text(json.dumps(plain))
    res: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for _ in range(repeat):
        for side in sides:
            which = lst0 if side == "virtualizarr" else lst
            res[side].append(child(SETS_DRIVER.format(side=SETS[side], paths=str(which))))
    print(f"\n## combine {len(paths)} single-file kerchunk sets (30 corpus files, time-shifted copies), "
          f"{repeat} run(s), each side in its own process")
    print(f"{'side':14} {'min s':>8} {'median s':>9} {'peak MB':>8} {'above base MB':>14} {'refs':>8}")
    med, peak = {}, {}
    for side, rows in res.items():
        w = [r["wall"] for r in rows]
        med[side] = statistics.median(w)
        peak[side] = statistics.median(r["peak"] for r in rows)
        above = statistics.median(r["peak"] - r["base"] for r in rows)
        print(f"{side:14} {min(w):8.2f} {med[side]:9.2f} {mb(peak[side]):>8} {mb(above):>14} {rows[0]['refs']:8d}")
    for peer in sides:
        if peer != "refset" and "refset" in med:
            print(f"refset vs {peer}: {med[peer] / med['refset']:.1f}x faster, peak RSS "
                  f"{peak['refset'] / peak[peer]:.2f} of theirs (target vs kerchunk: >= 20x, <= 1/3)")


def bench_e2e(files: list[str], workers: list[int], sides: list[str], work: Path, repeat: int = 1) -> None:
    lst = work / f"files{len(files)}.json"
    lst.write_text(json.dumps(files))
    print(f"\n## end to end: scan + combine + save (JSON; refset-packed: packed) + xarray open + one mean, "
          f"{len(files)} files of "
          f"{statistics.fmean(os.path.getsize(f) for f in files[:50]) / 1e3:.0f} KB, LocalCluster(processes=True)"
          + (f", {repeat} rounds of the sides in turn (medians compared)" if repeat > 1 else ""))
    print(f"{'side':13} {'workers':>7} {'wall s':>8} {'peak MB (all procs)':>20} {'client MB':>10} "
          f"{'refs':>9} {'out MB':>8}")
    for w in workers:
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        for _ in range(repeat):
            for side in sides:
                out = str(work / f"e2e-{side}-{len(files)}-{w}")
                r = child(E2E_DRIVER.format(side=E2E[side], files=str(lst), workers=w, out=out))
                runs[side].append(r)
                print(f"{side:13} {w:7d} {r['wall']:8.2f} {mb(r['peak_total']):>20} {mb(r['peak_client']):>10} "
                      f"{r['refs']:9d} {r['bytes'] / 1e6:8.1f}", flush=True)
        wall = {side: statistics.median(r["wall"] for r in rs) for side, rs in runs.items()}
        for mine in ("refset", "refset-packed"):
            if mine in runs and "kerchunk" in runs:
                a, b = runs[mine][-1], runs["kerchunk"][-1]
                same = all(abs(x["value"] - b["value"]) <= 1e-6 * abs(b["value"]) for x in runs[mine])
                spread = ""
                if repeat > 1:
                    lo = min(r["wall"] for r in runs["kerchunk"]) / max(r["wall"] for r in runs[mine])
                    hi = max(r["wall"] for r in runs["kerchunk"]) / min(r["wall"] for r in runs[mine])
                    spread = f" (median {wall[mine]:.2f} s vs {wall['kerchunk']:.2f} s; {lo:.1f}-{hi:.1f}x over all runs)"
                peak = statistics.median(r["peak_total"] for r in runs[mine]) / statistics.median(
                    r["peak_total"] for r in runs["kerchunk"])
                print(f"{mine} vs kerchunk, {w} worker(s): {wall['kerchunk'] / wall[mine]:.1f}x faster end to end"
                      f"{spread} (target >= 10x), peak memory {peak:.2f} of theirs; "
                      f"mean of the last day {'equal' if same else 'DIFFERENT'} ({a['value']:.4f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="/work/bench-data/corpus30")
    ap.add_argument("--work", default="/work/bench-data/combine")
    ap.add_argument("--parts", default="check,sets,e2e")
    ap.add_argument("--sets", type=int, default=1000)
    ap.add_argument("--sides", default="refset,refset-packed,kerchunk,virtualizarr")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--long-urls", action="store_true",
                    help="sets naming ~130-character paths (links to the corpus files)")
    ap.add_argument("--e2e-files", default="1000,6000")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--e2e-repeat", type=int, default=1, help="rounds of the end-to-end sides (medians compared)")
    a = ap.parse_args()
    import h5py
    import kerchunk

    import refset

    corpus = sorted(glob.glob(os.path.join(a.corpus, "*.nc")))
    if not corpus:
        subprocess.run([sys.executable, str(SHARED / "bench" / "make_corpus.py"), a.corpus, "--files", "30"],
                       check=True)
        corpus = sorted(glob.glob(os.path.join(a.corpus, "*.nc")))
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    print(f"python {sys.version.split()[0]}, h5py {h5py.__version__}, kerchunk {kerchunk.__version__}, "
          f"refset {refset.__version__}, {os.cpu_count()} cores")
    parts = a.parts.split(",")
    paths = make_sets(corpus, work, a.sets, long_urls=a.long_urls) if {"check", "sets"} & set(parts) else []
    if "check" in parts:
        check(paths[:100])
    if "sets" in parts:
        plain = make_sets(corpus, work, a.sets, inline=False, long_urls=a.long_urls) if "virtualizarr" in a.sides else []
        bench_sets(paths, plain, [s for s in a.sides.split(",") if s in SETS], a.repeat, work)
    if "e2e" in parts:
        counts = [int(x) for x in a.e2e_files.split(",")]
        files = make_small_files(work, max(counts))
        for n in counts:
            bench_e2e(files[:n], [int(w) for w in a.workers.split(",")],
                      [s for s in a.sides.split(",") if s in E2E], work, a.e2e_repeat)


if __name__ == "__main__":
    main()
