"""Benchmark (issue 28): scan and combine many small NetCDF4 files over a slow HTTP server.

The corpus: ``--files N`` (default 1000) daily NetCDF4 files of ``../shared/bench/make_corpus.py``
(default grid, ~1.95 MB each) in ``--corpus`` (default ``/work/bench-data/remote{N}``, made when
missing, reused when present). ``tests/httpserver.py`` serves it in its own process, waiting
``--delay`` seconds before each answer (default 0.05) and, with ``--rate BYTES_PER_S``, sending
bodies under one bandwidth cap shared by all connections. The issue's two settings::

    python bench/bench_remote.py --files 1000                            # 50 ms, no cap
    python bench/bench_remote.py --files 1000 --delay 0.02 --rate 100e6  # 20 ms, 100 MB/s
    python bench/bench_remote.py --files 100 --sides refset,kerchunk     # a quick run

Sides (``--sides``), each in its own child process, the clock from just before the work to its
end (the side's imports before it; the child's whole life is reported too, as "process s"):

* ``refset``: the command line with its defaults, as a user types it:
  ``refset scan @urls.txt --concat-dim time -o OUT.json`` (``refset.cli.main`` called with those
  arguments). From 500 inputs the command starts an embedded Dask cluster of a worker per core by
  itself: starting it (and closing it) is part of the user's time and stays inside the clock.
* ``kerchunk``: ``SingleHdf5ToZarr(fsspec.open(url, mode="rb"), url, inline_threshold=500)
  .translate()`` per URL on a ``ThreadPoolExecutor(16)``, as kerchunk's docs show (fsspec's HTTP
  filesystem with its defaults), then ``MultiZarrToZarr(concat_dims=["time"],
  identical_dims=["lat", "lon"], remote_protocol="http")`` and ``json.dump``. MultiZarrToZarr reads
  each input's time chunk (4 KB, not inline) one input after another; with zarr 3 it fails on a
  synchronous HTTP filesystem (aiohttp's "Timeout context manager should be used inside a task",
  then ``ReferenceNotReachable``), so the side makes the reference filesystems asynchronous through
  fsspec's config (``conf["reference"] = {"asynchronous": True}``, ``remote_options={"asynchronous":
  True}``): the one change that lets kerchunk 0.2.10 combine HTTP inputs here.
* ``virtualizarr``: ``open_virtual_mfdataset(urls, registry=..., parser=HDFParser(),
  combine="nested", concat_dim="time", parallel=<a ThreadPoolExecutor of 16 threads>,
  coords="minimal", compat="override", data_vars="minimal")`` over obstore's ``HTTPStore``
  (``allow_http``), then ``.vz.to_kerchunk(OUT, format="json")``. Its ``parallel=`` takes an
  Executor class and makes it without arguments (a ThreadPoolExecutor would get min(32, cores + 4)
  = 6 threads here), so a subclass fixes 16 threads, as kerchunk's pool has.

Measured per side: wall time, the requests and body bytes the server answered (its
``/__count__`` and ``/__bytes__`` read before and after the side), the child's peak RSS
(``VmHWM``) and the sampled peak of the summed RSS of the child and its descendants (refset's
embedded cluster workers), the CPU seconds inside the clock (the child's and those of the children
it reaped) and the server process's CPU seconds meanwhile (it shares the machine's cores).
``--sides`` may add ``refset-workers0``: the same command with ``--workers 0`` (no embedded
cluster). ``--repeat R`` runs the sides R times in turn; medians are reported.

Checks (after the timed runs, untimed): refset's and kerchunk's sets name the same chunk (URL,
offset, length) for every chunk key of the data variables present in both (inline chunks compared
by their bytes; an inline chunk against a reference by the referenced bytes of the local file),
the same chunk keys, the same shape/chunks/dtype, and the same time values (xarray over each set:
``refset.open_dataset`` for refset's, ``engine="kerchunk"`` for the others). VirtualiZarr's set
(which inlines nothing) is checked against kerchunk's the same way (against refset's when kerchunk
is not run). A mismatch prints FAIL and
the bench exits with status 1.

The floor: max(files x rounds x latency / concurrency, bytes / bandwidth, local CPU), with
``--rounds`` (default 4: the head, two chunk-index levels and the chunks to inline, a round
each), concurrency 64 (refset's default), bytes = what refset's side read (the files' total is
shown beside it), and the local term the wall time of the same command on the local files
(``refset scan FILES... --concat-dim time``, in a child; its CPU seconds are shown too: this process's and the children it reaped, an embedded cluster's workers).
``--no-local`` skips it.

usage: python bench/bench_remote.py [--files 1000] [--delay 0.05] [--rate BYTES_PER_S]
    [--sides refset,kerchunk,virtualizarr] [--repeat 1] [--rounds 4] [--corpus DIR] [--work DIR]
    [--side-timeout S]
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared"
DATA_VARS = ("lst", "lst_uncertainty", "n", "qual")
CONCURRENCY = 64  # refset's default number of remote files in flight

# -- the sides, each the body of a child script -----------------------------------------------------

SIDES = {
    "refset": """
from refset.cli import main
# the command's own modules and what a remote scan and combine use, imported before the clock as
# the peers' libraries are; the embedded cluster (from 500 inputs) starts inside the clock
import refset.cli.scan, refset.cli.combine, refset.combine, refset.scan  # noqa
import fsspec, fsspec.implementations.http, aiohttp, distributed  # noqa
def RUN(urls_file, out):
    rc = main(["scan", "@" + urls_file, "--concat-dim", "time", "-o", out])
    if rc:
        raise SystemExit(f"refset scan exited with {rc}")
    return {}
""",
    # not a default side: the same command with --workers 0 (no embedded cluster), to see what the
    # cluster costs or gives from 500 inputs
    "refset-workers0": """
from refset.cli import main
import refset.cli.scan, refset.cli.combine, refset.combine, refset.scan  # noqa
import fsspec, fsspec.implementations.http, aiohttp  # noqa
def RUN(urls_file, out):
    rc = main(["scan", "@" + urls_file, "--concat-dim", "time", "--workers", "0", "-o", out])
    if rc:
        raise SystemExit(f"refset scan exited with {rc}")
    return {}
""",
    "kerchunk": """
import json, time
from concurrent.futures import ThreadPoolExecutor
import fsspec
from kerchunk.hdf import SingleHdf5ToZarr
from kerchunk.combine import MultiZarrToZarr
SO = {"mode": "rb"}  # fsspec's HTTP filesystem with its defaults (no anon/fill-cache options for HTTP)
def single(u):
    with fsspec.open(u, **SO) as f:
        return SingleHdf5ToZarr(f, u, inline_threshold=500).translate()
def RUN(urls_file, out):
    urls = [line.strip() for line in open(urls_file) if line.strip()]
    t = time.perf_counter()
    with ThreadPoolExecutor(16) as ex:
        singles = list(ex.map(single, urls))
    t1 = time.perf_counter()
    # MultiZarrToZarr reads each input's time chunk (4 KB, a reference) through a reference
    # filesystem; with zarr 3 a synchronous HTTP filesystem fails there (aiohttp: "Timeout context
    # manager should be used inside a task", then ReferenceNotReachable), so its reference
    # filesystems and their HTTP filesystem are made asynchronous (fsspec's config, public API)
    fsspec.config.conf["reference"] = {"asynchronous": True}
    refs = MultiZarrToZarr(singles, concat_dims=["time"], identical_dims=["lat", "lon"],
                           remote_protocol="http", remote_options={"asynchronous": True}).translate()
    with open(out, "w") as f:
        json.dump(refs, f)
    return {"phases": {"singles": t1 - t, "combine+save": time.perf_counter() - t1}}
""",
    "virtualizarr": """
import time
from concurrent.futures import ThreadPoolExecutor
import xarray  # noqa
from obstore.store import HTTPStore
from obspec_utils.registry import ObjectStoreRegistry
from virtualizarr import open_virtual_mfdataset
from virtualizarr.parsers import HDFParser
class Pool16(ThreadPoolExecutor):  # parallel= takes an Executor class and makes it without arguments
    def __init__(self):
        super().__init__(max_workers=16)
def RUN(urls_file, out):
    urls = [line.strip() for line in open(urls_file) if line.strip()]
    base = urls[0].rsplit("/", 1)[0]
    registry = ObjectStoreRegistry({base: HTTPStore.from_url(base, client_options={"allow_http": True})})
    t = time.perf_counter()
    vds = open_virtual_mfdataset(urls, registry=registry, parser=HDFParser(), combine="nested",
                                 concat_dim="time", parallel=Pool16, coords="minimal",
                                 compat="override", data_vars="minimal")
    t1 = time.perf_counter()
    vds.vz.to_kerchunk(out, format="json")
    return {"phases": {"open_virtual_mfdataset": t1 - t, "to_kerchunk": time.perf_counter() - t1}}
""",
}

DRIVER = """
import json, sys, time, warnings
warnings.filterwarnings("ignore")
def _hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0
{side}
if __name__ == "__main__":
    import os
    c = os.times()
    t = time.perf_counter()
    info = RUN({urls!r}, {out!r})
    wall = time.perf_counter() - t
    c1 = os.times()  # this process's CPU and that of the children it reaped (an embedded cluster's)
    cpu = sum(c1[:4]) - sum(c[:4])
    print(json.dumps({{"wall": wall, "cpu": cpu, "peak": _hwm(), **info}}), flush=True)
"""


# -- helpers ----------------------------------------------------------------------------------------


def corpus_files(corpus: Path, n: int) -> list[str]:
    files = sorted(glob.glob(str(corpus / "*.nc")))
    if len(files) < n:
        print(f"making {n} files in {corpus} ...", flush=True)
        subprocess.run([sys.executable, str(SHARED / "bench" / "make_corpus.py"), str(corpus), "--files", str(n)],
                       check=True)
        files = sorted(glob.glob(str(corpus / "*.nc")))
    return files[:n]


def warm(files: list[str]) -> None:
    """Read every file once so the server answers every side from the page cache."""
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 22):
                pass


def counters(server: str) -> tuple[int, int]:
    with urllib.request.urlopen(f"{server}/__count__") as r:
        n = int(r.read())
    with urllib.request.urlopen(f"{server}/__bytes__") as r:
        b = int(r.read())
    return n, b


def tree_rss(pid: int) -> int:
    import psutil

    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_child(name: str, side: str, urls_file: str, out: str, work: Path, timeout: float | None) -> dict[str, Any]:
    """Run one side in a child (its own session, so a timeout ends it and its cluster); wall, peaks,
    CPU seconds of the child and the descendants it reaped."""
    script = work / f"child-{name}.py"
    script.write_text(DRIVER.format(side=SIDES[side], urls=urls_file, out=out))
    if os.path.exists(out):
        os.unlink(out)
    so, se = work / f"child-{name}.out", work / f"child-{name}.err"
    with open(so, "w") as fo, open(se, "w") as fe:
        t0 = time.perf_counter()
        p = subprocess.Popen([sys.executable, str(script)], stdout=fo, stderr=fe, cwd=work, start_new_session=True)
        peak_tree = 0
        status, ru = 0, None
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            peak_tree = max(peak_tree, tree_rss(p.pid))
            if timeout and time.perf_counter() - t0 > timeout:
                os.killpg(p.pid, signal.SIGKILL)  # the child's own session: it and what it started
                os.wait4(p.pid, 0)
                return {"timeout": True, "process": time.perf_counter() - t0, "stderr": se.read_text()[-3000:]}
            time.sleep(0.1)
        process = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = se.read_text()
    if p.returncode:
        return {"error": True, "process": process, "stderr": err[-3000:]}
    lines = so.read_text().strip().splitlines()
    r = json.loads(lines[-1])
    r.update(process=process, peak_tree=max(peak_tree, r["peak"]), cpu_process=ru.ru_utime + ru.ru_stime,
             stderr=err)
    return r


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(corpus: Path, delay: float, rate: float | None) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, str(ROOT / "tests" / "httpserver.py"), str(corpus), "--delay", str(delay), "--port", "0"]
    if rate:
        cmd += ["--rate", str(rate)]
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert srv.stdout is not None
    return srv, srv.stdout.readline().strip()


# -- checks -----------------------------------------------------------------------------------------


def _refs(path: str, side: str) -> dict[str, Any]:
    if side == "refset":
        import refset

        return dict(refset.load(path).to_dict())
    with open(path) as f:
        doc = json.load(f)
    return doc.get("refs", doc)


class _Bytes:
    """A reference's or an inline value's bytes (references read from the local copy of the file)."""

    def __init__(self, server: str, corpus: Path) -> None:
        self.server, self.corpus = server, corpus

    def __call__(self, v: Any) -> bytes:
        if isinstance(v, bytes | bytearray):
            return bytes(v)
        if isinstance(v, str):
            return base64.b64decode(v[7:]) if v.startswith("base64:") else v.encode()
        url = v[0]
        path = self.corpus / url[len(self.server) + 1:] if url.startswith(self.server + "/") else Path(url)
        with open(path, "rb") as f:
            if len(v) == 1:
                return f.read()
            f.seek(int(v[1]))
            return f.read(int(v[2]))


def _norm(v: Any) -> tuple[Any, ...]:
    if isinstance(v, list | tuple):
        return ("ref", str(v[0]), int(v[1]), int(v[2])) if len(v) == 3 else ("ref", str(v[0]))
    return ("inline",)


def compare_sets(a_name: str, a: dict[str, Any], b_name: str, b: dict[str, Any], read: _Bytes) -> list[str]:
    """Problems between two sets' data variables (empty: the same chunks)."""
    problems: list[str] = []
    total = same_ref = by_bytes = 0
    for var in DATA_VARS:
        ka = {k for k in a if k.startswith(var + "/") and k[len(var) + 1:][:1].isdigit()}
        kb = {k for k in b if k.startswith(var + "/") and k[len(var) + 1:][:1].isdigit()}
        if ka != kb:
            problems.append(f"{var}: chunk keys differ: {len(ka - kb)} only in {a_name} "
                            f"(e.g. {sorted(ka - kb)[:3]}), {len(kb - ka)} only in {b_name} (e.g. {sorted(kb - ka)[:3]})")
        za, zb = a.get(f"{var}/.zarray"), b.get(f"{var}/.zarray")
        if za is None or zb is None:
            problems.append(f"{var}: no .zarray in {a_name if za is None else b_name}")
        else:
            ma, mb = (json.loads(z) if isinstance(z, str | bytes) else z for z in (za, zb))
            for field in ("shape", "chunks", "dtype"):
                if ma.get(field) != mb.get(field):
                    problems.append(f"{var}: {field} {ma.get(field)} in {a_name}, {mb.get(field)} in {b_name}")
        bad = []
        for k in sorted(ka & kb):
            total += 1
            na, nb = _norm(a[k]), _norm(b[k])
            if na[0] == "ref" and nb[0] == "ref":
                if na == nb:
                    same_ref += 1
                    continue
                bad.append((k, a[k], b[k]))
            elif read(a[k]) == read(b[k]):
                by_bytes += 1
            else:
                bad.append((k, str(a[k])[:80], str(b[k])[:80]))
        if bad:
            problems.append(f"{var}: {len(bad)} chunks differ, e.g. {bad[:3]}")
    print(f"  {a_name} vs {b_name}: {total:,} chunk keys of {len(DATA_VARS)} variables in both, {same_ref:,} the "
          f"same (url, offset, length), {by_bytes:,} the same bytes (inline)")
    return problems


def time_values(path: str, side: str) -> Any:
    import xarray as xr

    if side == "refset":
        import refset

        ds = refset.open_dataset(path)
    else:
        ds = xr.open_dataset(path, engine="kerchunk", storage_options={"remote_protocol": "http"})
    return ds.time.values


def check(outs: dict[str, str], server: str, corpus: Path, n: int) -> list[str]:
    import numpy as np

    read = _Bytes(server, corpus)
    problems: list[str] = []
    sets = {side: _refs(path, side) for side, path in outs.items()}
    base = "kerchunk" if "kerchunk" in sets else "refset"  # every other set is compared with this one
    pairs = [(x, base) for x in sets if x != base] if base in sets else []
    for x, y in pairs:
        problems += [f"{x} vs {y}: {p}" for p in compare_sets(x, sets[x], y, sets[y], read)]
    times = {}
    for side, path in outs.items():
        try:
            times[side] = time_values(path, side)
        except Exception as e:  # a set xarray cannot open is a failed check
            problems.append(f"{side}: xarray could not open its set: {type(e).__name__}: {e}")
    for side, t in times.items():
        if len(t) != n:
            problems.append(f"{side}: {len(t)} time values, not {n}")
        elif n > 1 and not (np.diff(t.astype("datetime64[s]").astype(np.int64)) > 0).all():
            problems.append(f"{side}: time values not increasing")
    for x, y in pairs:
        if x in times and y in times and not np.array_equal(times[x], times[y]):
            problems.append(f"{x} vs {y}: time values differ: {times[x][:3]}... vs {times[y][:3]}...")
    if times:
        side, t = next(iter(times.items()))
        print(f"  time values: {len(t)} from {t[0]} to {t[-1]} ({side}); compared over {[p for p in pairs]}")
    return problems


# -- main -------------------------------------------------------------------------------------------


def fmt_mb(x: float) -> str:
    return f"{x / 1e6:,.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--corpus", type=Path, default=None, help="default /work/bench-data/remote{N}")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_remote"))
    ap.add_argument("--delay", type=float, default=0.05, help="seconds the server waits per request")
    ap.add_argument("--rate", type=float, default=None, help="server bandwidth cap, bytes/s (default none)")
    ap.add_argument("--sides", default="refset,kerchunk,virtualizarr")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4, help="round trips a file needs, for the floor")
    ap.add_argument("--no-local", action="store_true", help="skip the local scan (the floor's CPU term)")
    ap.add_argument("--side-timeout", type=float, default=None, help="seconds before a side is killed")
    a = ap.parse_args()
    sides = [s for s in a.sides.split(",") if s]
    for s in sides:
        if s not in SIDES:
            raise SystemExit(f"unknown side {s!r}: one of {', '.join(SIDES)}")
    corpus = a.corpus or Path(f"/work/bench-data/remote{a.files}")
    corpus.mkdir(parents=True, exist_ok=True)
    files = corpus_files(corpus, a.files)
    n = len(files)
    work = a.work / f"n{n}"
    work.mkdir(parents=True, exist_ok=True)
    total_bytes = sum(os.path.getsize(f) for f in files)
    warm(files)

    import fsspec
    import kerchunk
    import virtualizarr

    import refset

    print(f"python {sys.version.split()[0]}, refset {refset.__version__}, kerchunk {kerchunk.__version__}, "
          f"virtualizarr {virtualizarr.__version__}, fsspec {fsspec.__version__}, {os.cpu_count()} cores")
    cap = f"{a.rate / 1e6:g} MB/s cap" if a.rate else "no bandwidth cap"
    print(f"{n} files ({total_bytes / n / 1e6:.2f} MB each, {total_bytes / 1e6:,.0f} MB in all) over HTTP, "
          f"{a.delay * 1000:g} ms per request, {cap}; sides {sides}, {a.repeat} round(s)", flush=True)
    t_start = time.perf_counter()

    local: dict[str, Any] | None = None
    if not a.no_local:
        lst = work / "local.txt"
        lst.write_text("\n".join(os.path.realpath(f) for f in files) + "\n")
        local = run_child("local", "refset", str(lst), str(work / "out-local.json"), work, a.side_timeout)
        if "wall" not in local:
            raise SystemExit(f"the local scan failed:\n{local['stderr']}")
        print(f"local scan (refset scan FILES --concat-dim time, CLI defaults): {local['wall']:.2f} s, "
              f"{local['cpu']:.2f} CPU s in the clock (the child's and its reaped children's; "
              f"{local['cpu_process']:.2f} CPU s in the whole child process)", flush=True)

    srv, server = start_server(corpus, a.delay, a.rate)
    failed: list[str] = []
    res: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    outs: dict[str, str] = {}
    try:
        urls = work / "urls.txt"
        urls.write_text("\n".join(f"{server}/{os.path.basename(f)}" for f in files) + "\n")
        for rnd in range(a.repeat):
            for side in sides:
                out = str(work / f"out-{side}.json")
                before, cpu0 = counters(server), cpu_of(srv.pid)
                r = run_child(side, side, str(urls), out, work, a.side_timeout)
                after, cpu1 = counters(server), cpu_of(srv.pid)
                r["requests"], r["bytes"] = after[0] - before[0], after[1] - before[1]
                r["server_cpu"] = cpu1 - cpu0
                if "wall" not in r:
                    why = "timed out" if r.get("timeout") else "failed"
                    print(f"{side} {why} after {r['process']:.1f} s ({r['requests']:,} requests): "
                          f"{r['stderr'].strip().splitlines()[-1:] if r['stderr'].strip() else ''}", flush=True)
                    if r.get("error"):
                        print(r["stderr"], flush=True)
                        failed.append(f"{side} failed")
                    continue
                res[side].append(r)
                outs[side] = out
                said = [ln for ln in r["stderr"].splitlines() if ln.startswith("wrote ")]
                phases = ", ".join(f"{k} {v:.2f} s" for k, v in r.get("phases", {}).items())
                print(f"round {rnd + 1}: {side}: {r['wall']:.2f} s (process {r['process']:.2f} s), "
                      f"{r['requests']:,} requests, {r['bytes'] / 1e6:,.1f} MB, CPU {r['cpu']:.1f} s "
                      f"(the server's {r['server_cpu']:.1f} s), peak {fmt_mb(r['peak'])} MB "
                      f"(tree {fmt_mb(r['peak_tree'])} MB)" + (f" [{phases}]" if phases else "")
                      + (f"; it said: {said[-1]}" if said else ""), flush=True)
        print("\nchecks:", flush=True)
        problems = check(outs, server, corpus, n) if len(outs) else ["no side produced a set"]
    finally:
        srv.terminate()
        srv.wait()
    elapsed = time.perf_counter() - t_start

    # -- the table, the ratios and the floor --
    med = {s: {k: statistics.median(r[k] for r in rs) for k in ("wall", "process", "requests", "bytes", "peak",
                                                                   "peak_tree", "cpu", "server_cpu")}
           for s, rs in res.items() if rs}
    print(f"\n### {n} files, {a.delay * 1000:g} ms per request, {cap}"
          + (f", median of {a.repeat}" if a.repeat > 1 else ""))
    print()
    print("| side | wall s | process s | CPU s | server CPU s | requests/file | KB/file | of the file | "
          "peak RSS MB | tree peak MB | refset faster |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s, m in med.items():
        ratio = f"{m['wall'] / med['refset']['wall']:.1f}x" if "refset" in med and s != "refset" else ""
        print(f"| {s} | {m['wall']:.2f} | {m['process']:.2f} | {m['cpu']:.1f} | {m['server_cpu']:.1f} | "
              f"{m['requests'] / n:.1f} | {m['bytes'] / n / 1e3:,.0f} | {m['bytes'] / total_bytes:.3f} | "
              f"{fmt_mb(m['peak'])} | {fmt_mb(m['peak_tree'])} | {ratio} |")
    if "refset" in med:
        m = med["refset"]
        lat = n * a.rounds * a.delay / CONCURRENCY
        bw = m["bytes"] / a.rate if a.rate else 0.0
        bw_all = total_bytes / a.rate if a.rate else 0.0
        cpu = local["wall"] if local else 0.0
        floor = max(lat, bw, cpu)
        print()
        print("| floor term | s |")
        print("|---|---:|")
        print(f"| files x rounds x latency / concurrency = {n} x {a.rounds} x {a.delay:g} / {CONCURRENCY} | {lat:.2f} |")
        if a.rate:
            print(f"| refset's bytes / bandwidth = {m['bytes'] / 1e6:,.1f} MB / {a.rate / 1e6:g} MB/s | {bw:.2f} |")
            print(f"| (the files' bytes / bandwidth = {total_bytes / 1e6:,.0f} MB / {a.rate / 1e6:g} MB/s) | "
                  f"({bw_all:.2f}) |")
        else:
            print("| bytes / bandwidth (no cap) | 0 |")
        if local:
            print(f"| local scan, same command on the local files (wall; {local['cpu']:.2f} CPU s) | {cpu:.2f} |")
        print(f"| **floor** | **{floor:.2f}** |")
        print()
        verdicts = [f"refset {m['wall']:.2f} s = {m['wall'] / floor:.1f}x the floor (target <= 3x)" if floor else "",
                    f"{m['requests'] / n:.1f} requests/file (target <= 4)",
                    f"{m['bytes'] / total_bytes:.3f} of the files' bytes (target <= 0.25)"]
        if "kerchunk" in med:
            verdicts.insert(0, f"refset {med['kerchunk']['wall'] / m['wall']:.1f}x faster than kerchunk (target >= 20x)")
        if "virtualizarr" in med:
            verdicts.insert(1, f"refset {med['virtualizarr']['wall'] / m['wall']:.1f}x faster than VirtualiZarr")
        print("; ".join(v for v in verdicts if v))
    print(f"\nthe bench took {elapsed:.0f} s (local scan, sides and checks; the corpus excluded)")
    problems += failed
    if problems:
        print("\n" + "!" * 100)
        for p in problems:
            print(f"FAIL: {p}")
        print("!" * 100)
        raise SystemExit(1)
    print("checks: PASS (the sets name the same chunks and the same time values)")


if __name__ == "__main__":
    main()
