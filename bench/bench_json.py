"""Foundation benchmark: refset vs fsspec's ReferenceFileSystem on a large combined V0 JSON set.

Each side runs in its own child process (so peak RSS is the whole process), one after the other, in
the same run; results are printed as ratios. Make the input with
``python ../shared/bench/synth_refs.py refs.json --files 1000 --grid 24x48``.

usage: python bench/bench_json.py refs.json [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import gc, json, os, random, resource, sys, time
path, side, n_lookup = sys.argv[1], sys.argv[2], int(sys.argv[3])

def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0

if side == "fsspec":
    import fsspec, fsspec.implementations.reference, json
else:
    import refset, refset.formats.json.read, msgspec
base = rss_mb()  # after importing the library: what follows is the reference set's own memory
t0 = time.perf_counter()
if side == "fsspec":
    fs = fsspec.filesystem("reference", fo=path)
    refs = fs.references
    lookup = refs.__getitem__
    keys = [k for k in refs if not k.endswith((".zarray", ".zattrs", ".zgroup"))]
else:
    rs = refset.load(path)
    lookup = rs.__getitem__
    keys = None
t_open = time.perf_counter() - t0
gc.collect()
resident = rss_mb() - base
if keys is None:
    keys = [k for _, k in zip(range(200_000), rs) if not k.endswith((".zarray", ".zattrs", ".zgroup"))]
    # sample keys over all arrays
    import numpy as np
    keys = []
    for p in rs.grids:
        t = rs.table(p)
        flat = t.present()
        keys += rs.keys_at(p, flat[:: max(1, flat.size // 3000)])
random.seed(0)
sample = [random.choice(keys) for _ in range(n_lookup)]
t0 = time.perf_counter()
for k in sample:
    lookup(k)
t_lookup = (time.perf_counter() - t0) / n_lookup
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"open_s": t_open, "lookup_us": t_lookup * 1e6, "resident_mb": resident,
                  "peak_mb": peak}))
"""


def run(path: str, side: str, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, path, side, str(n)], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def best(rows: list[dict]) -> dict:
    return {k: min(r[k] for r in rows) for k in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("refs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lookups", type=int, default=10_000)
    a = ap.parse_args()
    res: dict[str, list[dict]] = {"fsspec": [], "refset": []}
    for _ in range(a.repeat):  # interleaved so that load changes hit both sides alike
        for side in res:
            res[side].append(run(a.refs, side, a.lookups))
    f, r = best(res["fsspec"]), best(res["refset"])
    print(f"input: {a.refs} ({os.path.getsize(a.refs) / 1e6:.1f} MB), best of {a.repeat}")
    print(f"{'':18}{'fsspec':>12}{'refset':>12}{'ratio':>10}")
    for k, label, better in [("open_s", "open (s)", "faster"), ("peak_mb", "peak RSS (MB)", "less"),
                             ("resident_mb", "resident (MB)", "less"), ("lookup_us", "lookup (us)", "faster")]:
        print(f"{label:18}{f[k]:12.3f}{r[k]:12.3f}{f[k] / r[k]:9.1f}x {better}")
    # V1 output size
    import refset

    rs = refset.load(a.refs)
    with tempfile.TemporaryDirectory() as d:
        refset.save(rs, os.path.join(d, "v0.json"))
        refset.save(rs, os.path.join(d, "v1.json"), format="v1")
        s0, s1 = (os.path.getsize(os.path.join(d, n)) for n in ("v0.json", "v1.json"))
    print(f"V0 written {s0 / 1e6:.1f} MB, V1 written {s1 / 1e6:.1f} MB: V1 = {s1 / s0:.2f} of V0")


if __name__ == "__main__":
    main()
