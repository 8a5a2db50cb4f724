"""Benchmark (issue 28): one big NetCDF4 file scanned over a slow HTTP server, refset vs kerchunk.

The files (made when missing in ``--data``, default ``/work/bench-data/big``, by netCDF4 with random
float32 values, so that nothing compresses): four variables of ``--chunks`` chunks each, written
one variable after another as netCDF-C lays them out (each variable's B-tree nodes among its
chunks). The cases (``--cases``, default ``4k,400``):

* ``4k``: chunks of 4 KB (1,024 values): 40,000 chunks, ~165 MB; the metadata is the four chunk
  B-trees, ~700 nodes of 4 KB spread through the file (one every 256 KB of data);
* ``400``: chunks of 400 B (100 values), under the inline threshold: every chunk is read (inlined),
  ~17 MB;
* ``1g``: chunks of 4 KB, ten times as many (400,000 chunks, ~1.65 GB).

``tests/httpserver.py`` serves them (own process, ``--delay`` seconds before each answer, default
0.05). Sides, each in its own child process, clocked around the scan alone:

* ``refset``: ``refset.scan(url)`` (the defaults), saved as JSON;
* ``kerchunk``: ``SingleHdf5ToZarr(fsspec.open(url, mode="rb"), url, inline_threshold=500)
  .translate()``, as its docs show (fsspec's HTTP file with its defaults: 5 MB read-ahead blocks).

Measured: wall, requests and body bytes the server answered, the round trips refset counted.
Checked: both sets name the same chunks (URL, offset, length; inline chunks by their bytes).

usage: python bench/bench_remote_file.py [--cases 4k,400,1g] [--delay 0.05] [--sides refset,kerchunk]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_remote import counters, start_server  # noqa: E402

CASES = {"4k": (10_000, 1024), "400": (10_000, 100), "1g": (100_000, 1024)}  # chunks a variable, values a chunk

CHILD = {
    "refset": """
import json, os, sys, time
import refset
from refset.scan import Scan
url, out = sys.argv[1], sys.argv[2]
t = time.perf_counter()
run = Scan()
rs = run(url)
wall = time.perf_counter() - t
if os.path.exists(out):
    os.unlink(out)
refset.save(rs, out)
print(json.dumps({"wall": wall, "rounds": run.rounds}))
""",
    "kerchunk": """
import json, sys, time
import fsspec
from kerchunk.hdf import SingleHdf5ToZarr
url, out = sys.argv[1], sys.argv[2]
t = time.perf_counter()
with fsspec.open(url, mode="rb") as f:
    refs = SingleHdf5ToZarr(f, url, inline_threshold=500).translate()
wall = time.perf_counter() - t
with open(out, "w") as f:
    json.dump(refs, f)
print(json.dumps({"wall": wall}))
""",
}


def make(path: Path, nchunks: int, csize: int) -> None:
    import netCDF4
    import numpy as np

    tmp = path.with_suffix(".tmp")
    with netCDF4.Dataset(tmp, "w") as ds:
        ds.createDimension("x", nchunks * csize)
        rng = np.random.default_rng(0)
        for name in "abcd":
            v = ds.createVariable(name, "f4", ("x",), chunksizes=(csize,))
            for s in range(0, nchunks * csize, 1 << 22):
                n = min(1 << 22, nchunks * csize - s)
                v[s:s + n] = rng.random(n, dtype=np.float32)
    tmp.rename(path)


def refs_of(path: str) -> dict[str, Any]:
    with open(path) as f:
        doc = json.load(f)
    return doc.get("refs", doc)


def same_chunks(a: dict[str, Any], b: dict[str, Any], local: str) -> str:
    """'' when the two sets name the same chunks of the variables, else what differs."""
    keys = {k for k in a if k.split("/")[0] in "abcd" and not k.split("/")[-1].startswith(".")}
    other = {k for k in b if k.split("/")[0] in "abcd" and not k.split("/")[-1].startswith(".")}
    if keys != other:
        return f"chunk keys differ: {len(keys)} vs {len(other)}"
    with open(local, "rb") as f:
        def val(v: Any) -> Any:
            if isinstance(v, list):
                if len(v) == 3:
                    return tuple(v[1:])
                return None
            if isinstance(v, str) and v.startswith("base64:"):
                return base64.b64decode(v[7:])
            return v.encode() if isinstance(v, str) else v

        for k in sorted(keys):
            x, y = val(a[k]), val(b[k])
            if isinstance(x, tuple) and isinstance(y, bytes):
                f.seek(x[0])
                x = f.read(x[1])
            if isinstance(y, tuple) and isinstance(x, bytes):
                f.seek(y[0])
                y = f.read(y[1])
            if x != y:
                return f"{k}: {a[k]!r:.80} vs {b[k]!r:.80}"
    return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="4k,400")
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--sides", default="refset,kerchunk")
    ap.add_argument("--data", default="/work/bench-data/big")
    ap.add_argument("--work", default="/tmp/bench_remote_file")
    a = ap.parse_args()
    data, work = Path(a.data), Path(a.work)
    data.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    sides = a.sides.split(",")
    import kerchunk

    import refset

    print(f"python {sys.version.split()[0]}, refset {refset.__version__}, kerchunk {kerchunk.__version__}, "
          f"{os.cpu_count()} cores; {a.delay * 1000:.0f} ms per request")
    rows, failed = [], False
    for case in a.cases.split(","):
        nchunks, csize = CASES[case]
        path = data / f"big_{nchunks}_{csize}.nc"
        if not path.exists():
            print(f"making {path} ...", flush=True)
            make(path, nchunks, csize)
        with open(path, "rb") as f:  # the page cache serves every side alike
            while f.read(1 << 24):
                pass
        size = path.stat().st_size
        srv, url = start_server(data, a.delay, None)
        try:
            outs = {}
            for side in sides:
                script = work / f"child-{side}.py"
                script.write_text(CHILD[side])
                out = str(work / f"out-{case}-{side}.json")
                n0, b0 = counters(url)
                t = time.perf_counter()
                p = subprocess.run([sys.executable, str(script), f"{url}/{path.name}", out],
                                   capture_output=True, text=True)
                process = time.perf_counter() - t
                n1, b1 = counters(url)
                if p.returncode:
                    print(f"{case} {side}: FAILED\n{p.stderr[-2000:]}")
                    failed = True
                    continue
                r = json.loads(p.stdout.strip().splitlines()[-1])
                outs[side] = out
                rows.append((case, size, side, r["wall"], process, n1 - n0 - 2 * 0, b1 - b0, r.get("rounds")))
                print(f"{case} {side}: {r['wall']:.2f} s, {n1 - n0:,} requests, {(b1 - b0) / 1e6:.2f} MB"
                      + (f", {r['rounds']} round trips" if "rounds" in r else ""), flush=True)
            if len(outs) == 2:
                diff = same_chunks(refs_of(outs["refset"]), refs_of(outs["kerchunk"]), str(path))
                print(f"{case} check: " + ("PASS (the same chunks)" if not diff else f"FAIL {diff}"))
                failed |= bool(diff)
        finally:
            srv.terminate()
            srv.wait()
    print(f"\n### One file, {a.delay * 1000:.0f} ms per request\n")
    print("| case | file MB | side | wall s | requests | MB read | round trips | refset faster |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    walls = {(c, s): w for c, _z, s, w, *_ in rows}
    for case, size, side, wall, _p, n, b, rounds in rows:
        ratio = walls.get((case, "refset"))
        fast = f"{wall / ratio:.1f}x" if side != "refset" and ratio else ""
        print(f"| {case} | {size / 1e6:,.0f} | {side} | {wall:.2f} | {n:,} | {b / 1e6:,.2f} | "
              f"{rounds if rounds is not None else ''} | {fast} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
