"""Benchmark (b): read one full variable of 30 NetCDF4 files through a slow HTTP server.

The corpus comes from ``../shared/bench/make_corpus.py DIR --files 30``; each file is referenced with
kerchunk (``SingleHdf5ToZarr``) and the set combined along time (``MultiZarrToZarr``). A local HTTP
server (tests/httpserver.py, its own process) adds ``--delay`` seconds to every request. Each peer
runs in a child process: ``xr.open_dataset(...)[VAR].values`` with engine="refset" vs fsspec's
ReferenceFileSystem + zarr 3. We print whole-process wall, read wall, peak RSS and request counts.

usage: python bench/bench_read_http.py [--corpus /work/bench-data/corpus30] [--delay 0.02]
"""

from __future__ import annotations

import argparse
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
PLACEHOLDER = "http://SERVER"

CHILD = {
    "refset": """
import time, xarray as xr
t = time.perf_counter()
ds = xr.open_dataset(REFS, engine="refset")
v = ds[VAR].values
print(f"{time.perf_counter() - t:.3f}", v.shape, float(abs(v[v == v]).sum()))
""",
    "refset-dask": """
import time, xarray as xr, dask
dask.config.set(scheduler="threads")
t = time.perf_counter()
ds = xr.open_dataset(REFS, engine="refset", chunks={"time": 1, "lat": -1, "lon": -1})
v = ds[VAR].values
print(f"{time.perf_counter() - t:.3f}", v.shape, float(abs(v[v == v]).sum()))
""",
    "fsspec": """
import time, fsspec, xarray as xr, zarr
t = time.perf_counter()
# zarr 3 reads through async filesystems: fsspec needs asynchronous=True on both levels
fs = fsspec.filesystem("reference", fo=REFS, asynchronous=True, remote_protocol="http",
                       remote_options={"asynchronous": True})
ds = xr.open_dataset(zarr.storage.FsspecStore(fs, read_only=True), engine="zarr",
                     consolidated=False, zarr_format=2)
v = ds[VAR].values
print(f"{time.perf_counter() - t:.3f}", v.shape, float(abs(v[v == v]).sum()))
""",
}


def prepare(corpus: Path, files: int) -> Path:
    """Make the corpus (if missing) and the combined kerchunk references (URLs with a placeholder)."""
    out = corpus / "combined.json"
    if out.exists():
        return out
    if len(glob.glob(str(corpus / "*.nc"))) < files:
        subprocess.run([sys.executable, str(ROOT.parent / "shared" / "bench" / "make_corpus.py"),
                        str(corpus), "--files", str(files)], check=True)
    from kerchunk.combine import MultiZarrToZarr
    from kerchunk.hdf import SingleHdf5ToZarr

    # combine reads the time coordinate, so reference the local files first, then swap in the server
    local = os.path.realpath(corpus)
    singles = [SingleHdf5ToZarr(path, inline_threshold=0).translate()
               for path in sorted(glob.glob(os.path.join(local, "*.nc")))[:files]]
    combined = MultiZarrToZarr(singles, concat_dims=["time"], identical_dims=["lat", "lon"]).translate()
    text = json.dumps(combined)
    out.write_text(text.replace(json.dumps(local)[1:-1] + "/", PLACEHOLDER + "/"))
    return out


def count(server: str) -> int:
    with urllib.request.urlopen(f"{server}/__count__") as r:
        return int(r.read())


def run(peer: str, refs: str, var: str, server: str) -> tuple[float, float, float, int, str]:
    code = CHILD[peer].replace("REFS", repr(refs)).replace("VAR", repr(var))
    before = count(server)
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out = p.stdout.read().decode().strip() if p.stdout else ""
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{peer} failed:\n{err}")
    # the server counts its "/__count__" answers apart from file requests
    n = count(server) - before
    read_wall = float(out.split()[0])
    return wall, read_wall, ru.ru_maxrss / 1024, n, " ".join(out.split()[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="/work/bench-data/corpus30", type=Path)
    ap.add_argument("--files", type=int, default=30)
    ap.add_argument("--delay", type=float, default=0.02)
    ap.add_argument("--var", default="lst")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--peers", default=",".join(CHILD))
    a = ap.parse_args()
    a.corpus.mkdir(parents=True, exist_ok=True)
    template = prepare(a.corpus, a.files)
    srv = subprocess.Popen([sys.executable, str(ROOT / "tests" / "httpserver.py"), str(a.corpus),
                            "--delay", str(a.delay)], stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None
        server = srv.stdout.readline().strip()
        refs = a.corpus / f"combined-{os.getpid()}.json"
        refs.write_text(template.read_text().replace(PLACEHOLDER, server))
        peers = a.peers.split(",")
        res: dict[str, list[tuple[float, float, float, int, str]]] = {p: [] for p in peers}
        for _ in range(a.repeat):
            for peer in peers:
                res[peer].append(run(peer, str(refs), a.var, server))
        refs.unlink()
    finally:
        srv.terminate()
        srv.wait()
    print(f"{a.files} files, variable {a.var!r}, {a.delay * 1000:.0f} ms per request, "
          f"median of {a.repeat}")
    print(f"{'peer':12} {'process s':>9} {'read s':>7} {'peak MB':>8} {'requests':>9}  check")
    med = {}
    for peer, rows in res.items():
        w = statistics.median(r[0] for r in rows)
        rw = statistics.median(r[1] for r in rows)
        m = max(r[2] for r in rows)
        med[peer] = (w, rw)
        print(f"{peer:12} {w:9.2f} {rw:7.2f} {m:8.0f} {rows[-1][3]:9d}  {rows[-1][4]}")
    if "fsspec" in med:
        for peer in med:
            if peer != "fsspec":
                print(f"{peer} vs fsspec+zarr: {med['fsspec'][0] / med[peer][0]:.1f}x faster (process), "
                      f"{med['fsspec'][1] / med[peer][1]:.1f}x faster (open+read)  (target >= 3x)")


if __name__ == "__main__":
    main()
