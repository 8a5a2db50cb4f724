"""Benchmark (issue 10): ``refset.scan`` of NetCDF4/HDF5 files vs kerchunk and VirtualiZarr.

Parts (``--parts``, all by default):

* ``check``: refset's and kerchunk's references name the same chunks (offsets, lengths, inlined
  bytes) for every corpus file and the synthetic files, and VirtualiZarr's manifests the same byte
  ranges, so no broken path is timed.
* ``files``: per-file scan time over the corpus (``../shared/bench/make_corpus.py DIR --files 30``).
  refset ``refset.scan(path, inline_threshold=T)``, kerchunk
  ``SingleHdf5ToZarr(f, path, inline_threshold=T).translate()`` on an open local file, VirtualiZarr
  ``HDFParser()(url, registry)`` into a ``ManifestStore`` (it has no inline threshold and never reads
  chunk data: ``refset-0``, refset with ``inline_threshold=0``, is the like-for-like side).
* ``chunks``: one synthetic HDF5 file per chunk count (default 10k-300k chunks of 600 bytes, above
  the inline threshold, so this times the chunk index), refset vs kerchunk.
* ``http``: the first ``--http-files`` corpus files scanned through tests/httpserver.py (own process,
  127.0.0.1, ``--delay`` s per request): wall time, requests and body bytes per side (kerchunk
  through ``fsspec.open(url)`` with fsspec's defaults, VirtualiZarr through an obstore HTTPStore).
* ``profile``: pyinstrument (if installed) over refset's per-file scans of the corpus.

Every side runs in its own child process, peers interleaved, ``--repeat`` times. A child imports its
library and scans one file untimed (imports and first-call set-up: reported as "cold"), then times
each scan. We report min and median over the runs of each run's median per-file time, and ratios of
the medians.

usage: python bench/bench_scan.py [--corpus /work/bench-data/corpus30] [--repeat 5] [--parts files,...]
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
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# Each child defines SCAN(path_or_url) from its library; the driver below times it.
SIDES = {
    "refset": """
from refset.scan import Scan
RUN = Scan(inline_threshold=INLINE)  # one run, as combine and the CLI scan many files: files of one product share parsed headers
def SCAN(u):
    return RUN(u)
""",
    "refset-0": """
from refset.scan import Scan
RUN = Scan(inline_threshold=0)  # one run, as combine and the CLI scan many files: files of one product share parsed headers
def SCAN(u):
    return RUN(u)
""",
    "kerchunk": """
import fsspec
from kerchunk.hdf import SingleHdf5ToZarr
def SCAN(u):
    # a local path: a plain open file (kerchunk's fastest local route); a URL: fsspec, as users do
    with (open(u, "rb") if "://" not in u else fsspec.open(u, "rb")) as f:
        return SingleHdf5ToZarr(f, u, inline_threshold=INLINE).translate()
""",
    "virtualizarr": """
import warnings
warnings.filterwarnings("ignore")  # numcodecs-in-zarr-3 warning on every array
from virtualizarr.parsers import HDFParser
from obspec_utils.registry import ObjectStoreRegistry
PARSER = HDFParser()
REGISTRIES = {}
def SCAN(u):
    if "://" not in u:
        u = "file://" + u
    base = u.split("/", 3)
    base = "/".join(base[:3]) + "/"
    if base not in REGISTRIES:
        if base == "file:///":
            from obstore.store import LocalStore
            store = LocalStore()
        else:
            from obstore.store import HTTPStore
            store = HTTPStore.from_url(base, client_options={"allow_http": True})
        REGISTRIES[base] = ObjectStoreRegistry({base: store})
    return PARSER(u, REGISTRIES[base])
""",
}

DRIVER = """
import json, time, urllib.request
def counters():  # the test server's request and byte counts (its counter URLs are not counted)
    if COUNTER is None:
        return [0, 0]
    return [int(urllib.request.urlopen(COUNTER + w).read()) for w in ("/__count__", "/__bytes__")]
t0 = time.perf_counter()
{side}
SCAN(WARMUP)
cold = time.perf_counter() - t0
before = counters()
times = []
for u in TARGETS:
    t = time.perf_counter()
    SCAN(u)
    times.append(time.perf_counter() - t)
after = counters()
print(json.dumps({{"cold": cold, "times": times, "requests": after[0] - before[0],
                  "bytes": after[1] - before[1]}}))
"""


def child(side: str, warmup: str, targets: list[str], inline: int,
          counter: str | None = None) -> dict[str, Any]:
    code = DRIVER.format(side=SIDES[side]).replace("INLINE", str(inline)).replace("COUNTER", repr(counter))
    code = code.replace("WARMUP", repr(warmup)).replace("TARGETS", repr(targets))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{side} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def ms(x: float) -> str:
    return f"{x * 1e3:.2f}"


# -- check ------------------------------------------------------------------------------------------
def _chunks(refs: dict[str, Any]) -> dict[str, Any]:
    """Chunk keys -> (offset, length) or the inlined bytes (metadata keys left out)."""
    out = {}
    for k, v in refs.items():
        if k.rsplit("/", 1)[-1].startswith("."):
            continue
        if isinstance(v, list):
            out[k] = (int(v[1]), int(v[2])) if len(v) == 3 else ("whole file",)
        else:
            b = v.encode() if isinstance(v, str) else v
            out[k] = base64.b64decode(b[7:]) if b.startswith(b"base64:") else b
    return out


def check(paths: list[str], inline: int) -> None:
    import warnings

    import kerchunk
    from kerchunk.hdf import SingleHdf5ToZarr

    import refset

    n = inl = 0
    for path in paths:
        rs = _chunks(refset.scan(path, inline_threshold=inline).to_dict())
        with open(path, "rb") as f:
            kc = _chunks(SingleHdf5ToZarr(f, path, inline_threshold=inline).translate()["refs"])
        if rs != kc:
            diff = sorted(set(rs) ^ set(kc))[:5] or [k for k in rs if rs[k] != kc[k]][:5]
            raise SystemExit(f"check: refset and kerchunk differ on {path}: {len(rs)} vs {len(kc)} "
                             f"chunks, e.g. {diff}")
        n += len(rs)
        inl += sum(isinstance(v, bytes) for v in rs.values())
    print(f"check: refset == kerchunk {kerchunk.__version__} (inline_threshold={inline}) on {len(paths)} "
          f"files: {n} chunk references, {inl} of them inlined, same offsets/lengths/bytes")
    try:
        from obspec_utils.registry import ObjectStoreRegistry
        from obstore.store import LocalStore
        from virtualizarr.parsers import HDFParser
    except ImportError:
        return
    reg = ObjectStoreRegistry({"file://": LocalStore()})
    n = 0
    for path in paths:
        rs = _chunks(refset.scan(path, inline_threshold=0).to_dict())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            store = HDFParser()("file://" + path, reg)
        vz = {}
        for name, arr in store._group.arrays.items():
            m = arr.manifest
            for idx in zip(*(a.ravel() for a in _indices(m._lengths.shape))):
                if m._paths[idx]:  # a missing chunk has no path (its offset/length are unset)
                    key = f"{name}/{'.'.join(map(str, idx)) or '0'}"
                    vz[key] = (int(m._offsets[idx]), int(m._lengths[idx]))
        if rs != vz:
            diff = sorted(set(rs) ^ set(vz))[:5] or [k for k in rs if rs[k] != vz[k]][:5]
            raise SystemExit(f"check: refset and VirtualiZarr differ on {path}, e.g. {diff}")
        n += len(rs)
    import virtualizarr

    print(f"check: refset (inline_threshold=0) == VirtualiZarr {virtualizarr.__version__} on "
          f"{len(paths)} files: {n} byte ranges")


def _indices(shape: tuple[int, ...]) -> list[Any]:
    import numpy as np

    return list(np.indices(shape)) if shape else [np.zeros(1, int)]


# -- files ------------------------------------------------------------------------------------------
def bench_files(files: list[str], sides: list[str], repeat: int, inline: int) -> None:
    res: dict[str, list[dict[str, Any]]] = {s: [] for s in sides}
    for _ in range(repeat):
        for side in sides:
            res[side].append(child(side, files[0], files, inline))
    print(f"\n## per-file scan, {len(files)} files, inline_threshold={inline}, {repeat} runs "
          "(each run: one child process, its per-file median)")
    print(f"{'side':14} {'min ms':>8} {'median ms':>10} {'mean ms':>8} {'cold s':>7}")
    med = {}
    for side, runs in res.items():
        per_run = [statistics.median(r["times"]) for r in runs]
        mean = statistics.median(statistics.fmean(r["times"]) for r in runs)
        med[side] = statistics.median(per_run)
        cold = statistics.median(r["cold"] for r in runs)
        print(f"{side:14} {ms(min(per_run)):>8} {ms(med[side]):>10} {ms(mean):>8} {cold:7.2f}")
    for base, peer, target in (("refset", "kerchunk", 5), ("refset", "virtualizarr", 2),
                               ("refset-0", "virtualizarr", 2), ("refset-0", "kerchunk", 5)):
        if base in med and peer in med:
            print(f"{base} vs {peer}: {med[peer] / med[base]:.2f}x faster (median per file; "
                  f"target >= {target}x)")


# -- chunks -----------------------------------------------------------------------------------------
def make_chunked(path: str, nchunks: int) -> None:
    """A 2-D float32 dataset of ``nchunks`` chunks of 1x150 values (600 bytes), 100 chunks a row,
    written raw with ``write_direct_chunk``; dimension scales on both axes, as netCDF4 has."""
    import h5py
    import numpy as np

    cols = 100
    rows = -(-nchunks // cols)
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("v", shape=(rows, cols * 150), chunks=(1, 150), dtype="<f4")
        payload = np.arange(150, dtype="<f4")
        for i in range(nchunks):
            r, c = divmod(i, cols)
            payload[0] = i
            ds.id.write_direct_chunk((r, c * 150), payload.tobytes())
        for name, n in (("y", rows), ("x", cols * 150)):
            f[name] = np.arange(n, dtype="<i4")
            f[name].make_scale(name)
        ds.dims[0].attach_scale(f["y"])
        ds.dims[1].attach_scale(f["x"])


def bench_chunks(work: Path, counts: list[int], sides: list[str], repeat: int, inline: int,
                 warmup: str) -> list[str]:
    paths = []
    for n in counts:
        p = work / f"chunks-{n}.h5"
        if not p.exists():
            t = time.perf_counter()
            make_chunked(str(p) + ".tmp", n)
            os.replace(str(p) + ".tmp", p)
            print(f"made {p} ({n} chunks, {p.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s")
        paths.append(str(p))
    res: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeat):
        for n, p in zip(counts, paths):
            for side in sides:
                res.setdefault((side, n), []).append(child(side, warmup, [p], inline)["times"][0])
    print(f"\n## one HDF5 file of N chunks (600 B each, inline_threshold={inline}), {repeat} runs")
    print(f"{'chunks':>8} " + " ".join(f"{s + ' s':>14} {'us/chunk':>8}" for s in sides)
          + "  " + " ".join(f"vs {s}" for s in sides[1:]))
    for n in counts:
        meds = {s: statistics.median(res[(s, n)]) for s in sides}
        mins = {s: min(res[(s, n)]) for s in sides}
        cells = " ".join(f"{mins[s]:6.3f}/{meds[s]:7.3f} {meds[s] / n * 1e6:8.2f}" for s in sides)
        ratios = " ".join(f"{meds[s] / meds[sides[0]]:6.1f}x" for s in sides[1:])
        print(f"{n:8d} {cells}  {ratios}")
    print("(cells: min/median seconds; us/chunk from the median)")
    return paths


# -- http -------------------------------------------------------------------------------------------
def bench_http(files: list[str], sides: list[str], repeat: int, inline: int, delay: float) -> None:
    root = os.path.dirname(files[0])
    srv = subprocess.Popen([sys.executable, str(ROOT / "tests" / "httpserver.py"), root,
                            "--delay", str(delay)], stdout=subprocess.PIPE, text=True)
    res: dict[str, list[tuple[float, int, int]]] = {s: [] for s in sides}
    try:
        assert srv.stdout is not None
        server = srv.stdout.readline().strip()
        urls = [f"{server}/{os.path.basename(f)}" for f in files]
        # warm-up: another file of the corpus over HTTP (imports, the HTTP session), not counted
        warm = f"{server}/{os.path.basename(sorted(glob.glob(os.path.join(root, '*.nc')))[-1])}"
        for _ in range(repeat):
            for side in sides:
                r = child(side, warm, urls, inline, counter=server)
                res[side].append((statistics.median(r["times"]), r["requests"], r["bytes"]))
    finally:
        srv.terminate()
        srv.wait()
    size = statistics.fmean(os.path.getsize(f) for f in files)
    print(f"\n## scan over HTTP, {len(files)} file(s) of {size / 1e6:.2f} MB, {delay * 1000:.0f} ms per "
          f"request, inline_threshold={inline}, {repeat} runs")
    print(f"{'side':14} {'min s':>7} {'median s':>9} {'requests':>9} {'KB fetched':>11}  (per file; "
          "each run: its per-file median)")
    med = {}
    for side, rows in res.items():
        w = [r[0] for r in rows]
        med[side] = statistics.median(w)
        n = statistics.median(r[1] for r in rows) / len(files)
        b = statistics.median(r[2] for r in rows) / len(files)
        print(f"{side:14} {min(w):7.3f} {med[side]:9.3f} {n:9.1f} {b / 1e3:11.1f}")
    for peer in sides:
        if peer != "refset" and "refset" in med:
            print(f"refset vs {peer}: {med[peer] / med['refset']:.2f}x faster over HTTP (target vs "
                  "kerchunk >= 3x, no more requests)")


# -- profile ----------------------------------------------------------------------------------------
PROFILE = """
import refset
from pyinstrument import Profiler
FILES = {files!r}
refset.scan(FILES[0], inline_threshold={inline})
p = Profiler(interval=0.0002)
p.start()
for _ in range({rounds}):
    for f in FILES:
        refset.scan(f, inline_threshold={inline})
p.stop()
print(p.output_text(unicode=False, color=False, short_mode=False))
"""


def profile(files: list[str], inline: int, rounds: int = 5) -> None:
    code = PROFILE.format(files=files, inline=inline, rounds=rounds)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if p.returncode:
        print(f"profile: skipped ({p.stderr.strip().splitlines()[-1]})")
        return
    print(f"\n## pyinstrument, refset.scan of the {len(files)} files x {rounds}")
    print(p.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="/work/bench-data/corpus30", type=Path)
    ap.add_argument("--files", type=int, default=30)
    ap.add_argument("--work", default="/work/bench-data/scan", type=Path,
                    help="where the synthetic many-chunk files are made (kept for later runs)")
    ap.add_argument("--parts", default="check,files,chunks,http,profile")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--inline", type=int, default=500, help="inline threshold, the same on all sides")
    ap.add_argument("--sides", default="refset,kerchunk,virtualizarr,refset-0")
    ap.add_argument("--chunks", default="10000,30000,100000,300000")
    ap.add_argument("--chunk-repeat", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.02)
    ap.add_argument("--http-files", type=int, default=3)
    ap.add_argument("--http-sides", default="refset,kerchunk,virtualizarr")
    a = ap.parse_args()
    parts = a.parts.split(",")
    if len(glob.glob(str(a.corpus / "*.nc"))) < a.files:
        subprocess.run([sys.executable, str(ROOT.parent / "shared" / "bench" / "make_corpus.py"),
                        str(a.corpus), "--files", str(a.files)], check=True)
    files = sorted(glob.glob(os.path.join(os.path.realpath(a.corpus), "*.nc")))[:a.files]
    sides = [s for s in a.sides.split(",") if s != "virtualizarr" or _have("virtualizarr")]
    # refset's bytecode, as an installed package has it (the peers' is in site-packages)
    subprocess.run([sys.executable, "-c", "import compileall, os, refset; "
                    "compileall.compile_dir(os.path.dirname(refset.__file__), quiet=1)"], check=True)
    import h5py

    import refset

    print(f"python {sys.version.split()[0]}, h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}), "
          f"refset {refset.__version__}, corpus {a.corpus} ({len(files)} files)")
    chunk_files: list[str] = []
    if "chunks" in parts or "check" in parts:
        a.work.mkdir(parents=True, exist_ok=True)
    if "check" in parts:
        check(files, a.inline)
    if "files" in parts:
        bench_files(files, sides, a.repeat, a.inline)
    if "chunks" in parts:
        counts = [int(x) for x in a.chunks.split(",")]
        chunk_files = bench_chunks(a.work, counts, [s for s in ("refset", "kerchunk") if s in sides],
                                   a.chunk_repeat, a.inline, files[0])
    if "check" in parts and chunk_files:
        check(chunk_files[:1] + [p for p, n in zip(chunk_files, counts) if n == 100_000], a.inline)
    if "http" in parts:
        hs = [s for s in a.http_sides.split(",") if s != "virtualizarr" or _have("virtualizarr")]
        bench_http(files[:a.http_files], hs, a.repeat, a.inline, a.delay)
    if "profile" in parts:
        profile(files, a.inline)


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()
