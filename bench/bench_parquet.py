"""Parquet reference sets: refset against fsspec / kerchunk on the same data, in the same run.

    python bench/bench_parquet.py --refs /work/bench-data/refs.json [--record-size N] [--out FILE]

Every measurement runs in its own child process (so peak RSS is that process's own ``ru_maxrss``);
libraries are imported before the clock starts. Reported:

- convert: JSON -> parquet. refset ``load`` + ``save`` (and ``save`` alone) vs kerchunk's
  ``refs_to_dataframe``; time and whole-process peak RSS, same ``record_size`` for both.
- open: ``refset.load(dir)`` vs fsspec's ``LazyReferenceMapper`` setup (reads ``.zmetadata``) and
  ``ReferenceFileSystem(fo=dir)``.
- cold lookup: one key in a record file not read yet (median over many records; the OS page cache is
  warm for both sides), vs fsspec's mapper (its default fastparquet engine).
- warm lookup: keys of an already decoded record, mean per lookup.
- a record_size sweep for refset: write time, files, bytes, cold lookup, whole-array decode.

The machine is small and shared: read the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

warnings.simplefilter("ignore")


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# -- children ---------------------------------------------------------------------------------------
def child_refset_convert(a: dict) -> dict:
    import pyarrow.parquet  # noqa: F401

    import refset

    base = _rss_mb()
    t0 = time.perf_counter()
    rs = refset.load(a["refs"])
    t1 = time.perf_counter()
    after_load = _rss_mb()
    refset.save(rs, a["out"], format="parquet", record_size=a["record_size"])
    t2 = time.perf_counter()
    return {"load_s": t1 - t0, "save_s": t2 - t1, "total_s": t2 - t0, "rss_mb": _rss_mb(),
            "rss_before_mb": base, "rss_after_load_mb": after_load}


def child_refset_save(a: dict) -> dict:
    """Save alone: the set is read from a parquet copy first (fast), then saved again."""
    import pyarrow.parquet  # noqa: F401

    import refset

    rs = refset.load(a["src"])
    for p in rs.grids:
        rs.table(p)
    base = _rss_mb()
    t0 = time.perf_counter()
    refset.save(rs, a["out"], format="parquet", record_size=a["record_size"])
    return {"save_s": time.perf_counter() - t0, "rss_mb": _rss_mb(), "rss_before_mb": base}


def child_kerchunk_convert(a: dict) -> dict:
    import fastparquet  # noqa: F401
    import kerchunk.df
    import pandas  # noqa: F401

    base = _rss_mb()
    t0 = time.perf_counter()
    kerchunk.df.refs_to_dataframe(a["refs"], a["out"], record_size=a["record_size"])
    return {"total_s": time.perf_counter() - t0, "rss_mb": _rss_mb(), "rss_before_mb": base}


def _median_time(fn, n: int) -> float:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def child_open(a: dict) -> dict:
    import fsspec
    from fsspec.implementations.reference import LazyReferenceMapper, ReferenceFileSystem

    import refset
    from refset.formats.parquet.reader import read_parquet

    d = a["dir"]
    refset.load(d)

    def fs_mapper():
        LazyReferenceMapper(d).record_size  # noqa: B018  (setup reads .zmetadata)

    out = {
        "refset_s": _median_time(lambda: refset.load(d), 300),
        "refset_read_parquet_s": _median_time(lambda: read_parquet(d), 300),
        "fsspec_mapper_s": _median_time(fs_mapper, 300),
        "fsspec_fs_s": _median_time(
            lambda: ReferenceFileSystem(fo=d, remote_protocol="memory", skip_instance_cache=True), 50),
    }
    del fsspec
    return out


def _cold(get, keys: list[str]) -> float:
    ts = []
    for k in keys:
        t = time.perf_counter()
        get(k)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _warm(get, keys: list[str], rounds: int = 5) -> float:
    for k in keys:
        get(k)
    t = time.perf_counter()
    for _ in range(rounds):
        for k in keys:
            get(k)
    return (time.perf_counter() - t) / (rounds * len(keys))


def child_lookup(a: dict) -> dict:
    import pyarrow.parquet  # noqa: F401

    import refset

    rs = refset.load(a["dir"])
    rs[a["warmup"]]  # imports and first-call costs out of the way
    cold = _cold(rs.__getitem__, a["cold"])
    warm = _warm(rs.__getitem__, a["warm"])
    return {"cold_s": cold, "warm_s": warm}


def child_lookup_fsspec(a: dict) -> dict:
    import fastparquet  # noqa: F401
    import pandas  # noqa: F401
    from fsspec.implementations.reference import LazyReferenceMapper

    lz = LazyReferenceMapper(a["dir"])
    lz[a["warmup"]]
    cold = _cold(lz.__getitem__, a["cold"])
    warm = _warm(lz.__getitem__, a["warm"])
    return {"cold_s": cold, "warm_s": warm}


def child_sweep(a: dict) -> dict:
    import pyarrow.parquet  # noqa: F401

    import refset

    src = refset.load(a["src"])
    for p in src.grids:
        src.table(p)
    rows = {}
    for size in a["sizes"]:
        out = os.path.join(a["tmp"], f"sweep-{size}.parq")
        t = time.perf_counter()
        refset.save(src, out, format="parquet", record_size=size)
        save_s = time.perf_counter() - t
        files = nbytes = 0
        for root, _, names in os.walk(out):
            for n in names:
                files += 1
                nbytes += os.path.getsize(os.path.join(root, n))
        warmup, keys, _ = _pick_keys(out, size, 40)
        rs = refset.load(out)
        rs[warmup]
        cold = _cold(rs.__getitem__, keys)
        rs = refset.load(out)
        t = time.perf_counter()
        rs.table(a["array"])
        table_s = time.perf_counter() - t
        rows[size] = {"save_s": save_s, "files": files, "mb": nbytes / 1e6, "cold_s": cold,
                      "array_s": table_s}
        shutil.rmtree(out)
    return rows


CHILDREN = {f.__name__[len("child_"):]: f for f in [
    child_refset_convert, child_refset_save, child_kerchunk_convert, child_open, child_lookup,
    child_lookup_fsspec, child_sweep]}


def run_child(task: str, args: dict) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", task, json.dumps(args)],
                       capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"child {task} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# -- parent -----------------------------------------------------------------------------------------
def _pick_keys(parq: str, record_size: int, n: int) -> tuple[str, list[str], list[str]]:
    """A warm-up key, ``n`` present keys each in a distinct record, and keys of one record."""
    import numpy as np

    import refset

    rs = refset.load(parq)
    cold: list[str] = []
    warm: list[str] = []
    warmup = ""
    paths = sorted(rs.grids)
    for j, p in enumerate(paths):
        t = rs.table(p)
        g = t.grid
        nrec = -(-g.nchunks // record_size)
        recs = np.linspace(1, nrec - 1, max(2, n // len(paths) + 1)).astype(int).tolist()
        for r in sorted(set(recs)):
            lo = r * record_size + record_size // 2
            hit = np.flatnonzero(t.kind[lo: (r + 1) * record_size])
            if hit.size:
                idx = np.unravel_index(lo + int(hit[0]), g.grid_shape)
                cold.append(f"{p}/{g.chunk_key([int(i) for i in idx])}")
        if j == 0:
            flat = np.flatnonzero(t.kind[:record_size])
            keys = [f"{p}/{g.chunk_key([int(i) for i in np.unravel_index(f, g.grid_shape)])}"
                    for f in flat[:2000]]
            warmup, warm = keys[0], keys
    return warmup, cold[:n], warm


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--refs", default="/work/bench-data/refs.json")
    ap.add_argument("--record-size", type=int, default=0, help="default: refset's default")
    ap.add_argument("--sweep", default="5000,10000,20000,50000,100000")
    ap.add_argument("--out", default="")
    ap.add_argument("--skip-kerchunk", action="store_true")
    ap.add_argument("--child", nargs=2)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(CHILDREN[a.child[0]](json.loads(a.child[1]))))
        return

    from refset.formats.parquet.writer import DEFAULT_RECORD_SIZE

    size = a.record_size or DEFAULT_RECORD_SIZE
    tmp = tempfile.mkdtemp(prefix="bench-parquet-")
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    try:
        ours = os.path.join(tmp, "refset.parq")
        theirs = os.path.join(tmp, "kerchunk.parq")
        say(f"# Parquet reference sets: refset vs fsspec/kerchunk\n\ninput: `{a.refs}` "
            f"({os.path.getsize(a.refs) / 1e6:.0f} MB), record_size {size}, python {sys.version.split()[0]}\n")
        rc = run_child("refset_convert", {"refs": a.refs, "out": ours, "record_size": size})
        rsave = run_child("refset_save", {"src": ours, "out": os.path.join(tmp, "again.parq"),
                                          "record_size": size})
        say("## convert JSON -> parquet\n")
        say("| | time s | peak RSS MB |\n|---|---|---|")
        say(f"| refset load+save | {rc['total_s']:.2f} (load {rc['load_s']:.2f}, save {rc['save_s']:.2f}) "
            f"| {rc['rss_mb']:.0f} |")
        say(f"| (refset peak after load, before save) | | {rc['rss_after_load_mb']:.0f} |")
        say(f"| refset save alone (set in memory) | {rsave['save_s']:.2f} | {rsave['rss_mb']:.0f} |")
        if not a.skip_kerchunk:
            kc = run_child("kerchunk_convert", {"refs": a.refs, "out": theirs, "record_size": size})
            say(f"| kerchunk refs_to_dataframe | {kc['total_s']:.2f} | {kc['rss_mb']:.0f} |")
            say(f"\nratios: load+save {kc['total_s'] / rc['total_s']:.1f}x faster, "
                f"save alone {kc['total_s'] / rsave['save_s']:.1f}x faster; peak RSS "
                f"{rc['rss_mb'] / kc['rss_mb']:.2f} (load+save) / {rsave['rss_mb'] / kc['rss_mb']:.2f} "
                "(save alone) of kerchunk's\n")
            for name, d in (("refset", ours), ("kerchunk", theirs)):
                nb = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
                nf = sum(len(fs) for _, _, fs in os.walk(d))
                say(f"- {name} output: {nf} files, {nb / 1e6:.1f} MB")
            say()

        op = run_child("open", {"dir": ours})
        say("## open (reads .zmetadata only)\n")
        say(f"refset.load {op['refset_s'] * 1e3:.3f} ms (the parquet reader alone "
            f"{op['refset_read_parquet_s'] * 1e3:.3f} ms); fsspec LazyReferenceMapper "
            f"{op['fsspec_mapper_s'] * 1e3:.3f} ms ({op['fsspec_mapper_s'] / op['refset_s']:.1f}x refset); "
            f"ReferenceFileSystem {op['fsspec_fs_s'] * 1e3:.3f} ms "
            f"({op['fsspec_fs_s'] / op['refset_s']:.1f}x)\n")

        warmup, cold, warm = _pick_keys(ours, size, 40)
        args = {"dir": ours, "warmup": warmup, "cold": cold, "warm": warm}
        lr = run_child("lookup", args)
        say(f"## lookups ({len(cold)} cold keys in distinct records; {len(warm)} warm keys)\n")
        say("| | cold (unread record) | warm |\n|---|---|---|")
        say(f"| refset on refset's files | {lr['cold_s'] * 1e3:.2f} ms | {lr['warm_s'] * 1e6:.2f} us |")
        lf = run_child("lookup_fsspec", args)
        say(f"| fsspec on refset's files | {lf['cold_s'] * 1e3:.2f} ms | {lf['warm_s'] * 1e6:.2f} us |")
        if not a.skip_kerchunk:
            args_k = {**args, "dir": theirs}
            lk = run_child("lookup", args_k)
            say(f"| refset on kerchunk's files | {lk['cold_s'] * 1e3:.2f} ms | {lk['warm_s'] * 1e6:.2f} us |")
            lfk = run_child("lookup_fsspec", args_k)
            say(f"| fsspec on kerchunk's files | {lfk['cold_s'] * 1e3:.2f} ms | "
                f"{lfk['warm_s'] * 1e6:.2f} us |")
        say(f"\nratios (fsspec / refset, refset's files): cold {lf['cold_s'] / lr['cold_s']:.1f}x, "
            f"warm {lf['warm_s'] / lr['warm_s']:.1f}x\n")

        if a.sweep:
            sizes = [int(s) for s in a.sweep.split(",")]
            sw = run_child("sweep", {"src": ours, "tmp": tmp, "sizes": sizes,
                                     "array": sorted(refset_grids(ours))[0]})
            say("## record_size sweep (refset)\n")
            say("| record_size | save s | files | MB | cold lookup ms | decode one array s |\n"
                "|---|---|---|---|---|---|")
            for s in sizes:
                r = sw[str(s)]
                say(f"| {s} | {r['save_s']:.2f} | {r['files']} | {r['mb']:.1f} | "
                    f"{r['cold_s'] * 1e3:.2f} | {r['array_s']:.2f} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


def refset_grids(d: str) -> list[str]:
    import refset

    return list(refset.load(d).grids)


if __name__ == "__main__":
    main()
