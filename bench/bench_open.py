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
    "refset-coords": """
import xarray as xr
ds = xr.open_dataset(PATH + ".coords.json", engine="refset")
print(len(ds.data_vars), dict(ds.sizes), float(ds.lat[-1]))
""",
    "fsspec-coords": """
import fsspec, xarray as xr, zarr
from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper
# two protocols: one filesystem each, the local one wrapped to be asynchronous like the other
fss = {"s3": fsspec.filesystem("s3", anon=True, asynchronous=True),
       "file": AsyncFileSystemWrapper(fsspec.filesystem("file"))}
fs = fsspec.filesystem("reference", fo=PATH + ".coords.json", asynchronous=True, fs=fss)
store = zarr.storage.FsspecStore(fs, read_only=True)
ds = xr.open_dataset(store, engine="zarr", consolidated=False, zarr_format=2)
print(len(ds.data_vars), dict(ds.sizes), float(ds.lat[-1]))
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


def with_coordinates(src: str, base: str) -> None:
    """``base + ".coords.json"``: the set plus 1-D ``time``/``lat``/``lon`` arrays whose chunks are
    references into a local file, as in a real combined set (xarray reads them at open)."""
    import json

    import numpy as np

    import refset

    rs = refset.load(src, lazy=True)
    nt, ny, nx = next(g.shape for g in rs.grids.values() if len(g.shape) == 3)
    with open(src, "rb") as f:
        text = f.read()
    arrays = {"time": np.arange(nt, dtype="<i8"), "lat": np.linspace(-90, 90, ny, dtype="<f4"),
              "lon": np.linspace(-180, 180, nx, dtype="<f4")}
    blob = base + ".coords.bin"
    refs: dict[str, object] = {}
    off = 0
    for name, values in arrays.items():
        refs[f"{name}/.zarray"] = json.dumps({
            "shape": [values.size], "chunks": [values.size], "dtype": values.dtype.str,
            "fill_value": None, "order": "C", "filters": None, "compressor": None, "zarr_format": 2})
        attrs = {"_ARRAY_DIMENSIONS": [name]}
        if name == "time":
            attrs.update(units="days since 2003-01-01", calendar="standard")
        refs[f"{name}/.zattrs"] = json.dumps(attrs)
        refs[f"{name}/0"] = [f"file://{blob}", off, values.nbytes]
        off += values.nbytes
    with open(blob, "wb") as f:
        f.write(b"".join(v.tobytes() for v in arrays.values()))
    with open(base + ".coords.json", "wb") as f:
        f.write(b"{" + json.dumps(refs)[1:-1].encode() + b", " + text.lstrip()[1:])


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
                    help="refset-packed/-parquet open a conversion of the same set; refset-coords and "
                         "fsspec-coords the set plus referenced 1-D coordinates (made first, in a "
                         "temporary directory)")
    a = ap.parse_args()
    peers = a.peers.split(",")
    # refset's bytecode, as an installed package has it (the peers' is in site-packages); without
    # it a PYTHONDONTWRITEBYTECODE environment recompiles refset in every child
    subprocess.run([sys.executable, "-c", "import compileall, os, refset; "
                    "compileall.compile_dir(os.path.dirname(refset.__file__), quiet=1)"], check=True)
    tmp = tempfile.mkdtemp(prefix="refset-bench-")
    base = os.path.join(tmp, "refs")
    if any(p.endswith("-coords") for p in peers):
        # in a child: a child's peak RSS starts from this process's RSS when it forks
        here = os.path.dirname(os.path.abspath(__file__))
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {here!r}); import bench_open; "
                        f"bench_open.with_coordinates({a.refs!r}, {base!r})"], check=True)
    if any(p in ("refset-packed", "refset-parquet") for p in peers):
        subprocess.run([sys.executable, "-c", f"""
import refset
rs = refset.load({a.refs!r})
refset.save(rs, {base + '.packed'!r}); refset.save(rs, {base + '.parq'!r})
"""], check=True)
    res: dict[str, list[tuple[float, float]]] = {p: [] for p in peers}
    outs: dict[str, str] = {}
    for _ in range(a.repeat):
        for peer in peers:
            w, m, out = run(peer, a.refs if peer in ("refset", "fsspec") else base)
            res[peer].append((w, m))
            outs[peer] = out
    size = os.path.getsize(a.refs)
    print(f"input: {a.refs} ({size / 1e6:.0f} MB), {a.repeat} runs each, median wall, max peak RSS")
    print(f"{'peer':14} {'wall s':>8} {'peak MB':>9}  output")
    med = {}
    for peer, rows in res.items():
        w = statistics.median(r[0] for r in rows)
        m = max(r[1] for r in rows)
        med[peer] = (w, m)
        print(f"{peer:14} {w:8.2f} {m:9.0f}  {outs[peer]}")
    if "refset" in med and "fsspec" in med:
        (wr, mr), (wf, mf) = med["refset"], med["fsspec"]
        print(f"refset is {wf / wr:.1f}x faster and uses {mr / mf:.2f}x the peak memory of fsspec+zarr "
              f"(targets: >= 5x faster, <= 0.5x memory)")
        for peer in ("refset-packed", "refset-parquet"):
            if peer in med:
                w, m = med[peer]
                print(f"{peer} (same references, converted): {wf / w:.1f}x faster, {m / mf:.2f}x the memory")
    if "refset-coords" in med and "fsspec-coords" in med:
        (wr, mr), (wf, mf) = med["refset-coords"], med["fsspec-coords"]
        print(f"with referenced coordinates: refset is {wf / wr:.1f}x faster and uses {mr / mf:.2f}x "
              f"the peak memory of fsspec+zarr")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
