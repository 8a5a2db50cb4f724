"""Benchmark (issue 41, items 3 and 4): random access and opening at 10^7 and 10^8 references.

- **11.3 million references**: the combined V0 set of ``../shared/bench/synth_refs.py --files 10000
  --grid 24x48``, saved as parquet (record_size 20,000) and packed. In a fresh process each: open, then
  10,000 random chunk keys looked up (``rs[key]``); time and peak memory. ``--peers`` adds fsspec's
  ``LazyReferenceMapper`` on the same parquet directory, and ``xr.open_dataset`` of the JSON through
  refset and through fsspec + zarr (minutes and GBs for fsspec: off by default).
- **100 million references**: a set made with ``ReferenceSet.from_arrays`` (25,000 files x 4 variables
  x 1,000 chunks), saved as packed and parquet; in a fresh process each: open, ``refset.open_dataset``,
  10,000 lookups; time and peak memory (goals: open <= 1 s, lookups <= 2 s, peak <= 1 GB).

usage: python bench/bench_scale.py [--only 11m|100m] [--peers] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = Path(os.environ.get("REFSET_SHARED", HERE.parent.parent / "shared"))
DATA = HERE / "data" / "scale"

PEAK = """
def peak():  # this process's own high-water mark (ru_maxrss is inherited from the parent across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""

LOOKUPS = PEAK + """
import sys, time, random, json
t0 = time.perf_counter()
import refset
rs = refset.load(sys.argv[1])
t1 = time.perf_counter()
n, shape = int(sys.argv[2]), json.loads(sys.argv[3])
rng = random.Random(0)
names = sorted(rs.grids)
keys = [f"{rng.choice(names)}/" + ".".join(str(rng.randrange(s)) for s in shape) for _ in range(n)]
found = 0
for k in keys:
    try:
        rs[k]
        found += 1
    except KeyError:
        pass
t2 = time.perf_counter()
print(json.dumps({"open": t1 - t0, "lookups": t2 - t1, "found": found,
                  "peak_mb": peak()}))
"""

FSSPEC_LOOKUPS = PEAK + """
import sys, time, random, json, warnings
warnings.simplefilter("ignore")
from fsspec.implementations.reference import LazyReferenceMapper
t0 = time.perf_counter()
m = LazyReferenceMapper(sys.argv[1])
t1 = time.perf_counter()
n, shape = int(sys.argv[2]), json.loads(sys.argv[3])
rng = random.Random(0)
names = ["lst", "lst_uncertainty", "n", "qual"]
keys = [f"{rng.choice(names)}/" + ".".join(str(rng.randrange(s)) for s in shape) for _ in range(n)]
found = 0
for k in keys:
    try:
        m[k]
        found += 1
    except KeyError:
        pass
t2 = time.perf_counter()
print(json.dumps({"open": t1 - t0, "lookups": t2 - t1, "found": found,
                  "peak_mb": peak()}))
"""

OPEN_DATASET = PEAK + """
import sys, time, json, warnings
warnings.simplefilter("ignore")
t0 = time.perf_counter()
import xarray as xr
if sys.argv[2] == "refset":
    import refset
    ds = refset.open_dataset(sys.argv[1])
else:
    import fsspec, zarr
    fs = fsspec.filesystem("reference", fo=sys.argv[1], asynchronous=True, remote_protocol="s3",
                           remote_options={"anon": True, "asynchronous": True})
    ds = xr.open_dataset(zarr.storage.FsspecStore(fs, read_only=True), engine="zarr", consolidated=False,
                         zarr_format=2)
t1 = time.perf_counter()
print(json.dumps({"open_dataset": t1 - t0, "vars": len(ds.data_vars),
                  "peak_mb": peak()}))
"""


def child(code: str, *args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def med(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def eleven_million(rounds: int, peers: bool) -> list[str]:
    import refset

    DATA.mkdir(parents=True, exist_ok=True)
    js = DATA / "synth10k.json"
    if not js.exists():
        subprocess.run([sys.executable, str(SHARED / "bench" / "synth_refs.py"), str(js), "--files", "10000",
                        "--grid", "24x48"], check=True)
    parq, packed = DATA / "synth10k.parq", DATA / "synth10k.packed"
    if not parq.exists() or not packed.exists():
        rs = refset.load(js)
        refset.save(rs, parq)
        refset.save(rs, packed)
    shape = json.dumps([10000, 24, 48])
    lines = ["| 11.3M references, 10,000 random lookups, fresh process | open | lookups | peak |",
             "|---|---:|---:|---:|"]
    forms = [("refset parquet", LOOKUPS, parq), ("refset packed", LOOKUPS, packed)]
    if peers:
        forms.append(("fsspec LazyReferenceMapper (parquet)", FSSPEC_LOOKUPS, parq))
    for name, code, path in forms:
        runs = [child(code, str(path), "10000", shape) for _ in range(rounds if "fsspec" not in name else 1)]
        lines.append(f"| {name} | {med(runs, 'open'):.3f} s | {med(runs, 'lookups'):.3f} s | "
                     f"{med(runs, 'peak_mb'):,.0f} MB |")
    if peers:
        lines += ["", "| 11.3M references, xr.open_dataset of the JSON | time | peak |", "|---|---:|---:|"]
        for who in ("refset", "fsspec"):
            r = child(OPEN_DATASET, str(js), who)
            lines.append(f"| {who} | {r['open_dataset']:.1f} s | {r['peak_mb']:,.0f} MB |")
    return lines


def hundred_million(rounds: int) -> list[str]:
    import numpy as np

    import refset

    files, nvar, gy, gx = 25_000, 4, 20, 50
    DATA.mkdir(parents=True, exist_ok=True)
    packed, parq = DATA / "refs100m.packed", DATA / "refs100m.parq"
    if not packed.exists() or not parq.exists():
        rng = np.random.default_rng(0)
        urls = [f"s3://bucket/daily/{f:06d}.nc" for f in range(files)]
        meta: dict[str, object] = {".zgroup": {"zarr_format": 2}}
        arrays = {}
        for v in range(nvar):
            name = f"v{v}"
            meta[f"{name}/.zarray"] = {"shape": [files, gy * 60, gx * 60], "chunks": [1, 60, 60], "dtype": "<f4",
                                       "compressor": {"id": "zlib", "level": 4}, "fill_value": None,
                                       "filters": None, "order": "C", "zarr_format": 2}
            meta[f"{name}/.zattrs"] = {"_ARRAY_DIMENSIONS": ["time", "lat", "lon"]}
            ln = rng.integers(8000, 12000, (files, gy, gx), dtype=np.int64)
            off = 40_000 + np.cumsum(ln.reshape(files, -1), axis=1).reshape(files, gy, gx) - ln + v * 20_000_000
            pid = np.broadcast_to(np.arange(files, dtype=np.int32)[:, None, None], (files, gy, gx))
            arrays[name] = {"path_id": pid, "offset": off, "length": ln}
        meta["time/.zarray"] = {"shape": [files], "chunks": [files], "dtype": "<i4", "compressor": None,
                                "fill_value": None, "filters": None, "order": "C", "zarr_format": 2}
        meta["time/.zattrs"] = {"_ARRAY_DIMENSIONS": ["time"], "units": "days since 2000-01-01"}
        arrays["time"] = {"path_id": np.full(1, -1), "offset": np.zeros(1, np.int64), "length": np.zeros(1, np.int64),
                          "inline": {0: np.arange(files, dtype="<i4").tobytes()}}
        rs = refset.ReferenceSet.from_arrays(meta, arrays, urls)
        del arrays
        refset.save(rs, packed)
        refset.save(rs, parq, record_size=100_000)
        del rs
    shape = json.dumps([files, gy, gx])
    lines = ["| 100M references (25,000 files) | open | open_dataset | 10,000 lookups | peak (lookups) | peak "
             "(open_dataset) |", "|---|---:|---:|---:|---:|---:|"]
    for name, path in (("packed", packed), ("parquet (record_size 100,000)", parq)):
        runs = [child(LOOKUPS, str(path), "10000", shape) for _ in range(rounds)]
        opens = [child(OPEN_DATASET, str(path), "refset") for _ in range(rounds)]
        lines.append(f"| {name} | {med(runs, 'open'):.3f} s | {med(opens, 'open_dataset'):.3f} s | "
                     f"{med(runs, 'lookups'):.3f} s | {med(runs, 'peak_mb'):,.0f} MB | "
                     f"{med(opens, 'peak_mb'):,.0f} MB |")
    size = {p.name: (sum(f.stat().st_size for f in p.rglob('*') if f.is_file()) if p.is_dir() else p.stat().st_size)
            for p in (packed, parq)}
    lines.append("")
    lines.append("sizes on disk: " + ", ".join(f"{k} {v / 1e6:,.0f} MB" for k, v in size.items()))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("11m", "100m"), action="append")
    ap.add_argument("--peers", action="store_true", help="also fsspec (slow: minutes, GBs)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    for part in a.only or ["11m", "100m"]:
        out = eleven_million(a.rounds, a.peers) if part == "11m" else hundred_million(a.rounds)
        print("\n".join(out) + "\n", flush=True)


if __name__ == "__main__":
    main()
