"""Benchmark (issue 29): variables made of parts against the same archive stored regularly.

Archives of ``--files`` NetCDF4 files (one variable ``tas(time, lat, lon)``, float32, values equal in
every pair of archives, so only the storage differs), scanned once to single-file JSON sets (not timed):

* ``regular``: one step a file, zlib, chunks (1, 45, 90);
* ``halfway``: the same, with shuffle turned on from the middle file on (two parts);
* ``regular3``: three steps a file in chunks of 3;
* ``padded``: the same values in chunks of 2, so each file's last chunk is padded (one part a file);
* ``regular4``: four steps a file in chunks of 2: as many chunks as ``padded``, each as large, as
  many bytes decoded (``padded`` decodes its padding too), one regular array: what the parts
  themselves cost.

Timed, each in a child process of its own, the sides alternating, medians of ``--repeat``:

* ``combine``: ``refset.combine(jsons, concat_dims="time")`` (the JSON batch path), halfway vs regular
  (target <= 1.5x);
* ``read``: ``refset.open_dataset(set).tas.values`` of a saved combined set, whole, halfway vs regular
  and padded vs regular3 and vs regular4 (target <= 1.3x); ``xr.open_mfdataset`` of the padded files
  (``combine="nested"``, opened before the clock) vs refset reading the same; ``open``: ``refset.open_dataset(set)`` alone (opening is
  O(parts): 2 parts, 1000 parts).

usage: python bench/bench_parts.py [--files 1000] [--repeat 5] [--work /work/bench-data/parts]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

LAT, LON = 90, 180


def make(work: Path, name: str, n: int, steps: int, chunk: int, shuffle_from: int | None) -> list[str]:
    """``n`` files of ``steps`` days, scanned to JSON sets; the list of JSON paths."""
    import netCDF4
    import numpy as np

    import refset

    d = work / name
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for k in range(n):
        nc, js = d / f"f{k:05d}.nc", d / f"f{k:05d}.json"
        out.append(str(js))
        if js.exists():
            continue
        rng = np.random.default_rng(k)
        with netCDF4.Dataset(nc, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", LAT)
            ds.createDimension("lon", LON)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = k * steps + np.arange(steps)
            v = ds.createVariable("tas", "f4", ("time", "lat", "lon"), zlib=True, complevel=1,
                                  shuffle=shuffle_from is not None and k >= shuffle_from,
                                  chunksizes=(chunk, LAT // 2, LON // 2))
            v[:] = (250 + 40 * rng.random((steps, LAT, LON))).astype("f4")
        refset.save(refset.scan(str(nc)), js)
    return out


COMBINE = """
import sys, time, json, refset
paths = json.load(open(sys.argv[1]))
t = time.perf_counter(); rs = refset.combine(paths, concat_dims="time"); dt = time.perf_counter() - t
print(json.dumps({"s": dt, "arrays": len(rs.grids)}))
"""

READ = """
import sys, time, json, warnings, refset
warnings.simplefilter("ignore")
import xarray  # imported before the clock, as every side
t = time.perf_counter()
if len(sys.argv) > 2:  # the peer: xarray over the files themselves
    files = [p.replace(".json", ".nc") for p in json.load(open(sys.argv[1]))]
    ds = xarray.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal",
                               coords="minimal", compat="override")
else:
    ds = refset.open_dataset(sys.argv[1])
o = time.perf_counter() - t
t = time.perf_counter(); v = ds.tas.values; r = time.perf_counter() - t
print(json.dumps({"open": o, "read": r, "sum": float(v.sum(dtype="f8"))}))
"""


def child(code: str, *args: str) -> dict[str, float]:
    got = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def ab(label: str, a: tuple[str, ...], b: tuple[str, ...], code: str, key: str, repeat: int) -> float:
    """Median seconds of ``key`` for sides A and B (alternating), printed with their ratio B/A."""
    ta, tb = [], []
    for _ in range(repeat):
        ta.append(child(code, *a)[key])
        tb.append(child(code, *b)[key])
    ma, mb = statistics.median(ta), statistics.median(tb)
    print(f"{label:<42} {ma * 1e3:9.1f} ms {mb * 1e3:9.1f} ms   {mb / ma:5.2f}x", flush=True)
    return mb / ma


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", default="/work/bench-data/parts")
    a = ap.parse_args()
    import warnings

    import refset

    work = Path(a.work)
    n = a.files
    sets = {"regular": make(work, "regular", n, 1, 1, None), "halfway": make(work, "halfway", n, 1, 1, n // 2),
            "regular3": make(work, "regular3", n, 3, 3, None), "padded": make(work, "padded", n, 3, 2, None),
            "regular4": make(work, "regular4", n, 4, 2, None)}
    lists, saved = {}, {}
    for name, paths in sets.items():
        lists[name] = str(work / f"{name}.list.json")
        Path(lists[name]).write_text(json.dumps(paths))
        saved[name] = str(work / f"{name}.combined.json")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            refset.save(refset.combine(paths, concat_dims="time"), saved[name])
    print(f"{n} files; side A then side B, medians of {a.repeat}", flush=True)
    print(f"{'':<42} {'A':>12} {'B':>12}   B/A")
    ab("combine: regular (A) vs halfway (B)", (lists["regular"],), (lists["halfway"],), COMBINE, "s", a.repeat)
    ab("combine: regular3 (A) vs padded (B)", (lists["regular3"],), (lists["padded"],), COMBINE, "s", a.repeat)
    ab("read whole: regular (A) vs halfway (B)", (saved["regular"],), (saved["halfway"],), READ, "read", a.repeat)
    ab("read whole: regular3 (A) vs padded (B)", (saved["regular3"],), (saved["padded"],), READ, "read", a.repeat)
    ab("read whole: regular4 (A) vs padded (B)", (saved["regular4"],), (saved["padded"],), READ, "read", a.repeat)
    ab("read whole: open_mfdataset (A) vs refset (B), padded", (lists["padded"], "mf"), (saved["padded"],), READ,
       "read", a.repeat)
    ab("open: regular (A) vs halfway, 2 parts (B)", (saved["regular"],), (saved["halfway"],), READ, "open", a.repeat)
    ab(f"open: regular3 (A) vs padded, {n} parts (B)", (saved["regular3"],), (saved["padded"],), READ, "open",
       a.repeat)


if __name__ == "__main__":
    main()
