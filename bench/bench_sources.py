"""Benchmark (issue 40): what it costs a set to remember its files and refuse changed ones.

1. **read**: a whole variable of an archive of ``--files`` daily NetCDF4 files (made by
   ``../shared/bench/make_corpus.py``) read with ``refset.open_dataset`` of its packed set, checks on
   (the default) and off (``verify_sources=False``), locally and through an HTTP server adding
   ``--delay`` s per request (its own process; requests counted there). Each read in a process of its
   own, on and off alternating; medians and the ratio.
2. **verify**: ``refset verify`` (the command, its own process) of a set recording ``--verify-files``
   small files, over HTTP at ``--verify-delay`` s a request and locally. The floor over HTTP:
   ``ceil(files / 64) * delay`` (64 HEAD requests in flight).
3. **refresh**: the archive's set after ``--changed`` of its files were rewritten in place:
   ``refset refresh`` against a full rescan (``refset scan DIR/*.nc --concat-dim time``), locally and
   over HTTP (requests and bytes counted at the server).
4. **size**: the set on disk in every form, with and without fingerprints: bytes per file.

usage: python bench/bench_sources.py [--files 1000] [--changed 10] [--verify-files 10000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("REFSET_SHARED", ROOT.parent / "shared"))
DATA = HERE / "data" / "sources"

READ = """
import sys, time, refset
t = time.perf_counter()
ds = refset.open_dataset(sys.argv[1], verify_sources=sys.argv[2] == "on")
v = ds["lst"].values
print(json.dumps({"s": time.perf_counter() - t, "sum": float(abs(v[v == v]).sum())}))
"""


def server(root: Path, delay: float) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen([sys.executable, str(ROOT / "tests" / "httpserver.py"), str(root), "--delay", str(delay)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    return p, p.stdout.readline().strip()


def counts(url: str) -> tuple[int, int]:
    got = [int(urllib.request.urlopen(f"{url}/{what}").read()) for what in ("__count__", "__bytes__")]
    return got[0], got[1]


def run(cmd: list[str]) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return time.perf_counter() - t, out.stdout


def corpus(n: int) -> Path:
    d = DATA / f"corpus{n}"
    if len(glob.glob(str(d / "*.nc"))) != n:
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run([sys.executable, str(SHARED / "bench" / "make_corpus.py"), str(d), "--files", str(n),
                        "--ny", "180", "--nx", "360", "--chunk", "60"], check=True)
    return d


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def bench_read(d: Path, delay: float, rounds: int) -> list[str]:
    import refset

    files = sorted(glob.glob(str(d / "*.nc")))
    work = DATA / "read"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    local = work / "local.packed"
    refset.save(refset.combine(files, concat_dims="time"), local)
    srv, url = server(d, delay)
    try:
        remote_sets = [refset.scan(f"{url}/{os.path.basename(f)}") for f in files]
        remote = work / "http.packed"
        refset.save(refset.combine(remote_sets, concat_dims="time"), remote)
        lines = ["| read | checks on | checks off | on / off | requests on / off |", "|---|---:|---:|---:|---:|"]
        for name, path in (("local", local), (f"HTTP, {delay * 1000:.0f} ms a request", remote)):
            t: dict[str, list[float]] = {"on": [], "off": []}
            req: dict[str, list[int]] = {"on": [], "off": []}
            for _ in range(rounds):
                for mode in ("on", "off"):
                    before = counts(url)[0]
                    _, out = run([sys.executable, "-c", "import json\n" + READ, str(path), mode])
                    t[mode].append(json.loads(out)["s"])
                    req[mode].append(counts(url)[0] - before)
            ratio = median([a / b for a, b in zip(t["on"], t["off"], strict=True)])
            lines.append(f"| {name} | {median(t['on']):.3f} s | {median(t['off']):.3f} s | {ratio:.3f} | "
                         f"{int(median(req['on']))} / {int(median(req['off']))} |")
        return lines
    finally:
        srv.terminate()


def bench_verify(n: int, delay: float) -> list[str]:
    """A set recording ``n`` small files served over HTTP (records as the server tells them)."""
    import numpy as np
    from tests.httpserver import validators

    import refset
    from refset.model.fingerprints import Fingerprints

    d = DATA / f"verify{n}"
    if len(os.listdir(d)) != n if d.exists() else True:
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for k in range(n):
            (d / f"f{k:05d}.bin").write_bytes(k.to_bytes(8, "little") * 16)
    names = sorted(os.listdir(d))
    srv, url = server(d, delay)
    lines = ["| verify | files | time | requests | floor |", "|---|---:|---:|---:|---:|"]
    try:
        for where in ("HTTP", "local"):
            urls = [f"{url}/{x}" if where == "HTTP" else str(d / x) for x in names]
            recs = {}
            for u, x in zip(urls, names, strict=True):
                st = os.stat(d / x)
                etag, lm = validators(str(d / x))
                recs[u] = (st.st_size, None, etag, lm) if where == "HTTP" else (st.st_size, st.st_mtime_ns, None, None)
            rs = refset.ReferenceSet.from_arrays(
                {"v/.zarray": {"shape": [n], "chunks": [1], "dtype": "<u8", "compressor": None, "fill_value": None,
                               "filters": None, "order": "C", "zarr_format": 2}},
                {"v": {"path_id": np.arange(n), "offset": np.zeros(n, np.int64), "length": np.full(n, 8)}}, urls,
                fingerprints=Fingerprints.of(recs))
            out = DATA / f"verify-{where}.packed"
            refset.save(rs, out)
            before = counts(url)[0]
            secs, _ = run([sys.executable, "-m", "refset.cli", "verify", str(out), "--quiet"])
            made = counts(url)[0] - before
            floor = -(-n // 64) * delay if where == "HTTP" else float("nan")
            lines.append(f"| {where}{f', {delay * 1000:.0f} ms a request' if where == 'HTTP' else ''} | {n:,} | "
                         f"{secs:.2f} s | {made:,} | {'' if floor != floor else f'{floor:.2f} s'} |")
    finally:
        srv.terminate()
    return lines


def _rewrite(files: list[str], bump: int) -> None:
    import netCDF4

    for f in files:
        st = os.stat(f)
        with netCDF4.Dataset(f, "a") as ds:
            ds["lst"].set_auto_maskandscale(False)
            v = ds["lst"][0, :60, :60]
            ds["lst"][0, :60, :60] = v + 0.5
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + (2 + bump) * 10**9))


def bench_refresh(d: Path, changed: int, delay: float, rounds: int) -> list[str]:
    import refset

    files = sorted(glob.glob(str(d / "*.nc")))
    work = DATA / "refresh"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(d, work / "files")
    files = sorted(glob.glob(str(work / "files" / "*.nc")))
    lines = [f"| refresh of a set of {len(files):,} files, {changed} changed | refresh | full rescan | refresh / rescan | requests "
             "(refresh / rescan) | bytes read (refresh / rescan) |",
             "|---|---:|---:|---:|---:|---:|"]
    srv, url = server(work / "files", delay)
    try:
        for where in ("local", f"HTTP, {delay * 1000:.0f} ms a request"):
            remote = where != "local"
            inputs = [f"{url}/{os.path.basename(f)}" for f in files] if remote else files
            base = work / ("http.json" if remote else "local.json")
            refset.save(refset.combine(inputs, concat_dims="time"), base)
            tr, ts, rr, rs_, br, bs = [], [], [], [], [], []
            for r in range(rounds):
                _rewrite(files[r * changed:(r + 1) * changed], r)
                target = work / f"target-{r}.json"
                shutil.copy(base, target)
                c0 = counts(url)
                secs, _ = run([sys.executable, "-m", "refset.cli", "refresh", str(target), "--quiet"])
                c1 = counts(url)
                tr.append(secs)
                rr.append(c1[0] - c0[0])
                br.append(c1[1] - c0[1])
                listing = work / "inputs.txt"  # HTTP cannot be listed: the URLs as a list
                listing.write_text("\n".join(inputs) + "\n")
                c0 = counts(url)
                secs, _ = run([sys.executable, "-m", "refset.cli", "scan", f"@{listing}", "--concat-dim", "time",
                               "-o", str(work / f"rescan-{r}.json"), "--overwrite", "--quiet", "--workers", "0"])
                c1 = counts(url)
                ts.append(secs)
                rs_.append(c1[0] - c0[0])
                bs.append(c1[1] - c0[1])
            ratio = median([a / b for a, b in zip(tr, ts, strict=True)])
            lines.append(f"| {where} | {median(tr):.2f} s | {median(ts):.2f} s | {ratio:.3f} | "
                         f"{int(median(rr)):,} / {int(median(rs_)):,} | {int(median(br)):,} / {int(median(bs)):,} |")
    finally:
        srv.terminate()
    return lines


def bench_size(d: Path) -> list[str]:
    import refset
    from refset.model.fingerprints import Fingerprints

    files = sorted(glob.glob(str(d / "*.nc")))
    rs = refset.combine(files, concat_dims="time")
    bare = rs.with_fingerprints(Fingerprints.empty())
    work = DATA / "size"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    lines = [f"| form ({len(files):,} files) | with fingerprints | without | bytes per file |", "|---|---:|---:|---:|"]
    for form, name in (("json", "s.json"), ("v1", "s.v1.json"), ("json.zst", "s.json.zst"), ("parquet", "s.parq"),
                       ("packed", "s.packed")):
        sizes = []
        for which, s in (("with", rs), ("without", bare)):
            p = work / f"{which}-{name}"
            refset.save(s, p)
            sizes.append(sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size)
        lines.append(f"| {form} | {sizes[0]:,} | {sizes[1]:,} | {(sizes[0] - sizes[1]) / len(files):.1f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--changed", type=int, default=10)
    ap.add_argument("--verify-files", type=int, default=10_000)
    ap.add_argument("--delay", type=float, default=0.02)
    ap.add_argument("--verify-delay", type=float, default=0.05)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", choices=("read", "verify", "refresh", "size"), action="append")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    d = corpus(a.files)
    parts = a.only or ["size", "read", "verify", "refresh"]
    for part in parts:
        if part == "read":
            out = bench_read(d, a.delay, a.rounds)
        elif part == "verify":
            out = bench_verify(a.verify_files, a.verify_delay)
        elif part == "refresh":
            out = bench_refresh(d, a.changed, a.delay, a.rounds)
        else:
            out = bench_size(d)
        print("\n".join(out) + "\n", flush=True)


if __name__ == "__main__":
    main()
