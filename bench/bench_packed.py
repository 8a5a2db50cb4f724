"""Packed format vs V0 JSON, V0+zstd and parquet on one large reference set, in one run.

usage: python bench/bench_packed.py [REFS.json] [--repeat N] [--out results.md] [--kerchunk]

REFS.json defaults to /work/bench-data/refs.json, made by
``python ../shared/bench/synth_refs.py refs.json --files 1000 --grid 24x48`` (1,132,010 references).
Timings are the median of --repeat runs (min in brackets); the machine is noisy, so read the ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import refset
from refset.io.compression import compress


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    ts, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), min(ts), out


def du(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    return os.path.getsize(path)


def first_present_key(rs: refset.ReferenceSet) -> str:
    path = next(iter(rs.grids))
    return next(rs.chunk_keys(path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("refs", nargs="?", default="/work/bench-data/refs.json")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", help="also write the table as markdown here")
    ap.add_argument("--kerchunk", action="store_true",
                    help="also write kerchunk's parquet (kerchunk.df.refs_to_dataframe; slow)")
    a = ap.parse_args(argv)
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    tmp = tempfile.mkdtemp(prefix="bench-packed-")
    try:
        json_open, json_min, rs = timed(lambda: refset.load(a.refs), min(a.repeat, 3))
        n = len(rs)
        key = first_present_key(rs)
        say(f"reference set: {a.refs}: {n:,} references, {len(rs.grids)} arrays, {len(rs.urls):,} urls")
        say(f"command: python bench/bench_packed.py {' '.join(argv if argv is not None else sys.argv[1:])}")
        say(f"machine: {os.cpu_count()} cpus, shared and noisy; timings: median of {a.repeat} runs "
            f"(V0 JSON open: {min(a.repeat, 3)}) [min]")
        say()

        # -- sizes --------------------------------------------------------------------------------------
        v0 = os.path.getsize(a.refs)
        with open(a.refs, "rb") as f:
            raw = f.read()
        v0z = len(compress(raw, "x.json.zst"))  # what refset.save writes for .json.zst (zstd level 9)
        del raw
        packed_path = os.path.join(tmp, "refs.packed")
        pack_med, pack_min, _ = timed(lambda: refset.save(rs, packed_path), a.repeat)
        packed = os.path.getsize(packed_path)
        parq_path = os.path.join(tmp, "refs.parq")
        parq: int | None = None
        parq_note = "refset.save(format='parquet')"
        try:
            t = time.perf_counter()
            refset.save(rs, parq_path, format="parquet")
            parq_write = time.perf_counter() - t
            parq = du(parq_path)
        except Exception as e:  # the parquet writer is another module's; report, don't fail
            parq_note = f"refset parquet unavailable ({type(e).__name__}: {e})"
            parq_write = float("nan")
        kparq: int | None = None
        if a.kerchunk:
            from kerchunk.df import refs_to_dataframe

            kp = os.path.join(tmp, "kerchunk.parq")
            refs_to_dataframe(a.refs, kp)
            kparq = du(kp)

        say("| format | bytes | bytes/ref | vs packed |")
        say("|---|---:|---:|---:|")
        rows = [("V0 JSON", v0), ("V0 JSON + zstd (level 9)", v0z)]
        if parq is not None:
            rows.append(("parquet (refset)", parq))
        if kparq is not None:
            rows.append(("parquet (kerchunk.df)", kparq))
        rows.append(("packed", packed))
        for name, size in rows:
            say(f"| {name} | {size:,} | {size / n:.2f} | {size / packed:.1f}x |")
        if parq is None:
            say(f"\n{parq_note}; kerchunk's parquet is 6.5 bytes/ref on this set (issue text)")
        say()

        # -- times ---------------------------------------------------------------------------------------
        def first_key(path: str) -> Callable[[], object]:
            return lambda: refset.load(path)[key]

        def all_tables(path: str) -> Callable[[], object]:
            def run() -> object:
                r = refset.load(path)
                return [r.table(p) for p in r.grids]
            return run

        open_med, open_min, ref = timed(first_key(packed_path), a.repeat)
        assert ref == rs[key], (ref, rs[key])
        dec_med, dec_min, _ = timed(all_tables(packed_path), a.repeat)
        times = [
            ("V0 JSON open (refset.load)", json_open, json_min),
        ]
        if parq is not None:
            m, mn, _ = timed(first_key(parq_path), a.repeat)
            times.append(("parquet open + first key", m, mn))
            m2, mn2, _ = timed(all_tables(parq_path), a.repeat)
            times.append(("parquet open + decode all arrays", m2, mn2))
            times.append(("parquet write (once)", parq_write, parq_write))
        times += [
            ("packed open + first key", open_med, open_min),
            ("packed open + decode all arrays", dec_med, dec_min),
            ("packed write (pack + atomic write)", pack_med, pack_min),
        ]
        say("| operation | seconds | [min] |")
        say("|---|---:|---:|")
        for name, med, mn in times:
            say(f"| {name} | {med:.4f} | {mn:.4f} |")
        say()
        say("ratios (median times):")
        say(f"- size: V0 / packed = {v0 / packed:.0f}x, V0+zstd / packed = {v0z / packed:.1f}x"
            + (f", parquet / packed = {parq / packed:.1f}x" if parq else ""))
        say(f"- open + first key: V0 JSON open / packed = {json_open / open_med:,.0f}x")
        say(f"- decode all: V0 JSON open / packed decode = {json_open / dec_med:,.0f}x")
        if parq is not None:
            say(f"- open + first key: parquet / packed = {times[1][1] / open_med:.1f}x")
            say(f"- decode all: parquet / packed = {times[2][1] / dec_med:.1f}x")
        say()
        say(f"targets: <= 2.0 bytes/ref: {packed / n:.2f} {'ok' if packed / n <= 2 else 'MISSED'}; "
            f"open + first key <= 20 ms: {open_med * 1e3:.1f} ms; decode all <= 0.1 s: {dec_med:.3f} s; "
            f"pack <= 0.5 s: {pack_med:.3f} s; open >= 10x faster than V0 JSON: "
            f"{json_open / open_med:,.0f}x")
        info = refset.load(packed_path).format_info()["packed_arrays"]
        say()
        say("| array | present | skipped | modal length | unique | distinct lengths | gaps | neg. gaps "
            "| files | gfactor | bytes/ref |")
        say("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p, s in info.items():  # type: ignore[union-attr]
            say(f"| {p} | {s['present']:,} | {s['skipped']:,} | {s['modal_length']} | {s['unique']:,} | "
                f"{s['distinct_lengths']:,} | {s['gaps']:,} | {s['negative_gaps']:,} | {s['files']:,} | "
                f"{s['gfactor']} | {s['bytes_per_ref']} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
