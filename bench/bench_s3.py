"""Benchmark (issue 28): thousands of NetCDF4 files on S3 (moto's server on 127.0.0.1), end to end with
the command line and a local cluster of 2 workers.

The corpus: ``--files N`` (default 6000) daily files of ``../shared/bench/make_corpus.py`` on a
``--ny`` x ``--nx`` grid (default 360 x 720, ~0.5 MB a file: moto holds every object in memory),
made in ``--corpus`` when missing, uploaded to a bucket of a moto server started in its own process.
Then, clocked:

1. ``refset scan 's3://bench/*.nc' --concat-dim time --workers 2 --storage-options JSON -o OUT.json``
   (the glob listed on S3, every file scanned and the sets combined on the cluster);
2. ``refset.open_dataset(OUT.json, remote_options=...)`` and one variable's mean over the last day,
   checked equal to xarray's over the local copy of that file.

Measured: wall time of each step, the requests and bytes (counted by refset itself: the command's
summary line; moto has no counter), the peak of the summed RSS of the command and its workers
(sampled), and the CPU seconds moto's server used meanwhile: it runs on the same 2 cores, and
answers a few hundred requests a second.

usage: python bench/bench_s3.py [--files 6000] [--ny 360] [--nx 720] [--corpus DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(HERE))

from bench_remote import cpu_of, tree_rss  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=6000)
    ap.add_argument("--ny", type=int, default=360)
    ap.add_argument("--nx", type=int, default=720)
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--work", default="/tmp/bench_s3")
    a = ap.parse_args()
    corpus = Path(a.corpus or f"/work/bench-data/s3_{a.files}_{a.ny}x{a.nx}")
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    files = sorted(glob.glob(str(corpus / "*.nc")))
    if len(files) < a.files:
        print(f"making {a.files} files in {corpus} ...", flush=True)
        subprocess.run([sys.executable, str(SHARED / "bench" / "make_corpus.py"), str(corpus), "--files",
                        str(a.files), "--ny", str(a.ny), "--nx", str(a.nx)], check=True)
        files = sorted(glob.glob(str(corpus / "*.nc")))
    files = files[:a.files]
    total = sum(os.path.getsize(f) for f in files)

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    so = {"key": "testing", "secret": "testing",
          "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    try:
        import boto3
        import fsspec

        s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
        for _ in range(150):
            try:
                s3.create_bucket(Bucket="bench")
                break
            except Exception:
                time.sleep(0.2)
        fs = fsspec.filesystem("s3", skip_instance_cache=True, **so)
        t = time.perf_counter()
        fs.put(files, [f"bench/{os.path.basename(f)}" for f in files])
        print(f"{len(files)} files ({total / 1e6:,.0f} MB, {total / len(files) / 1e3:,.0f} KB each) uploaded "
              f"to moto in {time.perf_counter() - t:.0f} s", flush=True)

        out = work / "out.json"
        if out.exists():
            out.unlink()
        cmd = [sys.executable, "-m", "refset.cli", "scan", "s3://bench/*.nc", "--concat-dim", "time",
               "--workers", "2", "--storage-options", json.dumps(so), "-o", str(out)]
        moto_cpu = cpu_of(moto.pid)
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
        peak = 0
        while p.poll() is None:
            peak = max(peak, tree_rss(p.pid))
            time.sleep(0.2)
        wall = time.perf_counter() - t
        moto_cpu = cpu_of(moto.pid) - moto_cpu
        stdout, stderr = p.communicate()
        if p.returncode:
            raise SystemExit(f"refset scan failed:\n{stderr[-3000:]}")
        said = (stdout + stderr).strip().splitlines()[-1]
        m = re.search(r"([\d,]+) requests and ([\d,]+) bytes read", said)
        reqs = int(m.group(1).replace(",", "")) if m else None
        nbytes = int(m.group(2).replace(",", "")) if m else None
        print(f"scan + combine: {wall:.1f} s ({len(files) / wall:,.0f} files a second), peak RSS "
              f"{peak / 1e6:,.0f} MB (the command and its workers); moto's server used {moto_cpu:.1f} CPU s "
              f"meanwhile (of the 2 cores); it said: {said}", flush=True)

        import numpy as np
        import xarray as xr

        import refset

        t = time.perf_counter()
        ds = refset.open_dataset(str(out), remote_protocol="s3", remote_options=so)
        got = float(ds["lst"].isel(time=-1).mean())
        t_open = time.perf_counter() - t
        want = float(xr.open_dataset(files[-1])["lst"].isel(time=-1).mean())
        ok = np.isclose(got, want, equal_nan=True) and ds.sizes["time"] == len(files)
        print(f"open + one day's mean: {t_open:.2f} s; {ds.sizes['time']} days; mean {got:.6f} vs xarray "
              f"{want:.6f} on the local file: {'PASS' if ok else 'FAIL'}")
        print(f"\n### {len(files)} files on S3 (moto on 127.0.0.1), `refset scan` with 2 workers\n")
        print("| files | MB | wall s | files/s | requests | requests/file | KB/file | peak RSS MB | moto CPU s |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {len(files):,} | {total / 1e6:,.0f} | {wall:.1f} | {len(files) / wall:,.0f} | "
              f"{reqs if reqs is None else f'{reqs:,}'} | {reqs / len(files) if reqs else float('nan'):.1f} | "
              f"{nbytes / len(files) / 1e3 if nbytes else float('nan'):,.0f} | {peak / 1e6:,.0f} | {moto_cpu:.0f} |")
        sys.exit(0 if ok else 1)
    finally:
        moto.terminate()
        moto.wait()


if __name__ == "__main__":
    main()
