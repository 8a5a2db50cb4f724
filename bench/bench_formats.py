"""Scanning TIFF, GRIB2, FITS and HDF4 files: refset vs kerchunk's scanner of each format, per file,
over a generated batch and the corpus's files, in one run.

usage: python bench/bench_formats.py [--files N] [--repeat R] [--only GRIB2] [--http DELAY]

The batch: N small files per format like a product's (a 512x512 Deflate COG with two overviews; a GRIB2
forecast of 27 messages on a 31x16 grid; a FITS file of three image HDUs; a FITS file holding a 256x256
int16 image Rice-compressed in 8 tiles, which kerchunk references as raw pixels: wrong values), each scanned by one refset
run (``refset.scan.Scan``: a run keeps what files of one product share) and by kerchunk
(``tiff_to_zarr``, ``scan_grib``, ``fits.process_file``, ``HDF4ToZarr``). Medians of R passes; read the ratios.
The GRIB2 batch runs twice: as is, and with a wgrib2 ``.idx`` inventory beside each file (refset builds
every file but the first from its inventory and one message; kerchunk's ``scan_grib`` reads them whole).
With ``--http DELAY`` the same files are served by ``tests/httpserver.py`` (its own process, DELAY seconds
before each answer) and each side scans their URLs once, with the requests and bytes it cost: refset
with ``Scan.many`` (what ``refset scan URL...`` and ``combine`` use: several files in flight at once),
kerchunk with its scanner a file at a time (it has no call for many files).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _tiffs(d: Path, n: int) -> list[Path]:
    import tifffile

    out = []
    for i in range(n):
        p = d / f"c{i:04d}.tif"
        full = (np.arange(512 * 512, dtype=np.uint32).reshape(512, 512) * (i + 1) % 251).astype(np.uint8)
        with tifffile.TiffWriter(p) as tw:
            for k, lv in enumerate((full, full[::2, ::2], full[::4, ::4])):
                tw.write(lv, tile=(128, 128), compression="zlib", subfiletype=1 if k else 0, metadata=None)
        out.append(p)
    return out


def _gribs(d: Path, n: int, idx: bool = False) -> list[Path]:
    from tests.scan.grib.gribfiles import forecast, write_idx

    out = []
    d.mkdir(exist_ok=True)
    for i in range(n):
        p = d / f"g{i:04d}.grib2"
        forecast(p, date=20240101 + i % 28, seed=i)
        if idx:
            write_idx(p)
        out.append(p)
    return out


def _fitss(d: Path, n: int) -> list[Path]:
    from astropy.io import fits

    out = []
    for i in range(n):
        p = d / f"f{i:04d}.fits"
        rng = np.random.default_rng(i)
        fits.HDUList([fits.PrimaryHDU(rng.integers(0, 1000, (64, 64)).astype(np.int16)),
                      fits.ImageHDU(rng.standard_normal((32, 32)).astype(np.float32), name="SCI"),
                      fits.ImageHDU(rng.standard_normal((16, 16)), name="ERR")]).writeto(p)
        out.append(p)
    return out


def _tiled_fitss(d: Path, n: int) -> list[Path]:
    from astropy.io import fits

    out = []
    for i in range(n):
        p = d / f"z{i:04d}.fits"
        rng = np.random.default_rng(i)
        fits.HDUList([fits.PrimaryHDU(),
                      fits.CompImageHDU(rng.integers(0, 1000, (256, 256)).astype(np.int16), name="SCI",
                                        compression_type="RICE_1", tile_shape=(32, 256))]).writeto(p)
        out.append(p)
    return out


def _time(fn: Callable[[], object], repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="run the cases whose label holds this text (e.g. GRIB2)")
    ap.add_argument("--http", type=float, default=None, metavar="DELAY",
                    help="serve the files over HTTP (tests/httpserver.py, DELAY seconds a request) and scan "
                         "their URLs once a side, counting requests and bytes")
    a = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    from kerchunk.fits import process_file
    from kerchunk.grib2 import scan_grib
    from kerchunk.hdf4 import HDF4ToZarr
    from kerchunk.tiff import tiff_to_zarr

    from refset.scan import Scan

    corpus = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "kerchunk-fixtures"
    rows = ["| files | per file: refset | kerchunk | ratio |", "|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cases = [
            (f"{a.files} COGs (512x512 + 2 overviews)", _tiffs(d, a.files), tiff_to_zarr),
            (f"{a.files} GRIB2 forecasts (27 messages)", _gribs(d, a.files), scan_grib),
            (f"{a.files} GRIB2 forecasts with .idx sidecars", _gribs(d / "idx", a.files, idx=True), scan_grib),
            (f"{a.files} FITS files (3 images)", _fitss(d, a.files), process_file),
            (f"{a.files} FITS files, a Rice tile-compressed image (kerchunk: wrong values)", _tiled_fitss(d, a.files),
             lambda f: process_file(f, extension=1)),
        ]
        for p in sorted(corpus.glob("*.tif")) + sorted(corpus.glob("*.grib2")) + sorted(corpus.glob("*.grb2")):
            cases.append((f"corpus {p.name}", [p], tiff_to_zarr if p.suffix == ".tif" else scan_grib))
        for p in sorted(corpus.glob("*.hdf4")):
            cases.append((f"corpus {p.name}", [p], lambda f: HDF4ToZarr(f).translate()))
        server = None
        if a.http is not None:
            import shutil

            from bench_remote import counters, start_server

            for p in corpus.iterdir() if corpus.is_dir() else ():
                shutil.copy(p, d / p.name)
            server, url = start_server(d, a.http, None)
            rows = ["| files over HTTP | refset | kerchunk | ratio |", "|---|---:|---:|---:|"]
        for label, files, peer in cases:
            if a.only and a.only not in label:
                continue
            names = [str(f) for f in files]
            if server is not None:
                from refset.scan import Scan

                Scan()(names[0])
                peer(names[0])  # imports, and ecCodes' definitions of the grid, loaded before the clock
                rows.append(_remote(label, [f"{url}/{Path(f).relative_to(d) if Path(f).is_relative_to(d) else Path(f).name}"
                                            for f in files[:a.files]], peer, counters, url))
                print(rows[-1], flush=True)
                continue

            def ours(names: list[str] = names) -> None:
                run = Scan()
                for f in names:
                    run(f)

            def theirs(names: list[str] = names, peer: Callable[[str], object] = peer) -> None:
                for f in names:
                    peer(f)

            ours()
            theirs()  # warm caches and imports
            t_ours, t_theirs = _time(ours, a.repeat), _time(theirs, a.repeat)
            n = len(names)
            rows.append(f"| {label} | {1e3 * t_ours / n:.2f} ms | {1e3 * t_theirs / n:.2f} ms | "
                        f"{t_theirs / t_ours:.1f}x |")
            print(rows[-1], flush=True)
    if server is not None:
        server.terminate()
    print("\n".join(rows))
    return 0


def _remote(label: str, urls: list[str], peer: Callable[[str], object], counters: Callable[[str], tuple[int, int]],
            server: str) -> str:
    """One pass a side over ``urls``: wall time, requests and bytes the server answered."""
    from refset.scan import Scan

    got = []
    for side in ("refset", "kerchunk"):
        n0, b0 = counters(server)
        t = time.perf_counter()
        if side == "refset":
            list(Scan().many(urls))  # what `refset scan URL...` and combine call: files in flight at once
        else:  # kerchunk's scanners take one file a call
            for u in urls:
                peer(u)
        wall = time.perf_counter() - t
        n1, b1 = counters(server)
        got.append((wall, n1 - n0, (b1 - b0) / 1e6))
    (w0, n0, m0), (w1, n1, m1) = got
    return (f"| {label} | {w0:.2f} s, {n0} requests, {m0:.2f} MB | {w1:.2f} s, {n1} requests, {m1:.2f} MB | "
            f"{w1 / w0:.1f}x |")


if __name__ == "__main__":
    raise SystemExit(main())
