"""Benchmark (a): ``xr.open_dataset`` of a large JSON reference set, refset vs fsspec+zarr.

Each peer runs in its own child process (imports included, refset's bytecode compiled first like
the peers' in site-packages); we report whole-process wall time and peak RSS (``wait4`` rusage of that child), the median of ``--repeat`` runs, peers interleaved.

usage: python bench/bench_open.py [/work/bench-data/refs.json] [--repeat 3]
The default input is made by ``python ../shared/bench/synth_refs.py refs.json --files 1000 --grid 24x48``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = {
    "refset": """
import xarray as xr
ds = xr.open_dataset(PATH, engine="refset")
print(len(ds.data_vars), dict(ds.sizes))
""",
    "refset-packed": """
import xarray as xr
ds = xr.open_dataset(PATH + ".packed", engine="refset")
print(len(ds.data_vars), dict(ds.sizes))
""",
    "refset-parquet": """
import xarray as xr
ds = xr.open_dataset(PATH + ".parq", engine="refset")
print(len(ds.data_vars), dict(ds.sizes))
""",
    "fsspec": """
import fsspec, xarray as xr, zarr
# the fastest correct fsspec route under zarr 3: an asynchronous ReferenceFileSystem in an FsspecStore
# (a sync one raises "same value of asynchronous" or gets re-created from JSON by zarr)
fs = fsspec.filesystem("reference", fo=PATH, asynchronous=True, remote_protocol="s3",
                       remote_options={"anon": True, "asynchronous": True})
store = zarr.storage.FsspecStore(fs, read_only=True)
ds = xr.open_dataset(store, engine="zarr", consolidated=False, zarr_format=2)
print(len(ds.data_vars), dict(ds.sizes))
""",
}


def run(peer: str, path: str) -> tuple[float, float, str]:
    code = CHILD[peer].replace("PATH", repr(path))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out = p.stdout.read().decode() if p.stdout else ""
    err = p.stderr.read().decode() if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{peer} failed:\n{err}")
    return wall, ru.ru_maxrss / 1024, out.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("refs", nargs="?", default="/work/bench-data/refs.json")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peers", default="refset,fsspec,refset-packed,refset-parquet",
                    help="refset-packed/-parquet open a conversion of the same set (made first, in a "
                         "temporary directory)")
    a = ap.parse_args()
    peers = a.peers.split(",")
    # refset's bytecode, as an installed package has it (the peers' is in site-packages); without
    # it a PYTHONDONTWRITEBYTECODE environment recompiles refset in every child
    subprocess.run([sys.executable, "-c", "import compileall, os, refset; "
                    "compileall.compile_dir(os.path.dirname(refset.__file__), quiet=1)"], check=True)
    tmp = tempfile.mkdtemp(prefix="refset-bench-")
    base = os.path.join(tmp, "refs")
    if any(p.startswith("refset-") for p in peers):
        subprocess.run([sys.executable, "-c", f"""
import refset
rs = refset.load({a.refs!r})
refset.save(rs, {base + '.packed'!r}); refset.save(rs, {base + '.parq'!r})
"""], check=True)
    res: dict[str, list[tuple[float, float]]] = {p: [] for p in peers}
    outs: dict[str, str] = {}
    for _ in range(a.repeat):
        for peer in peers:
            w, m, out = run(peer, base if peer.startswith("refset-") else a.refs)
            res[peer].append((w, m))
            outs[peer] = out
    size = os.path.getsize(a.refs)
    print(f"input: {a.refs} ({size / 1e6:.0f} MB), {a.repeat} runs each, median wall, max peak RSS")
    print(f"{'peer':8} {'wall s':>8} {'peak MB':>9}  output")
    med = {}
    for peer, rows in res.items():
        w = statistics.median(r[0] for r in rows)
        m = max(r[1] for r in rows)
        med[peer] = (w, m)
        print(f"{peer:8} {w:8.2f} {m:9.0f}  {outs[peer]}")
    (wr, mr), (wf, mf) = med["refset"], med["fsspec"]
    print(f"refset is {wf / wr:.1f}x faster and uses {mr / mf:.2f}x the peak memory of fsspec+zarr "
          f"(targets: >= 5x faster, <= 0.5x memory)")
    for peer in peers:
        if peer.startswith("refset-"):
            w, m = med[peer]
            print(f"{peer} (same references, converted): {wf / w:.1f}x faster, {m / mf:.2f}x the memory")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
