"""``refset demo``: what refset is for, in one run.

Makes a month of small daily NetCDF4 files, scans and combines them along ``time`` into one
reference set on a local Dask cluster, saves it in every format (sizes side by side), opens it with
xarray, and checks what it reads against the files themselves. Needs the ``all`` extra (h5py and
h5netcdf write the files, dask[distributed] runs the scans, xarray reads). :func:`cmd_demo` is the
command; :func:`run` the demo itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from refset.cli.common import EXIT_OK, UsageError
from refset.cli.progress import Bar, wanted
from refset.errors import RefsetError, Unsupported
from refset.model.table import RANGE

__all__ = ["DemoResult", "FORMATS", "cmd_demo", "make_files", "next_steps", "prepare", "run"]

# (label, file name, refset format) of the saved sets, in the order printed.
FORMATS = (("json V0", "combined.json", "json"), ("json V1", "combined.v1.json", "v1"),
           ("parquet", "combined.parq", "parquet"), ("packed", "combined.packed", "packed"))
MARKER = ".refset-demo"  # a directory holding it was made by the demo and may be overwritten by it
START = np.datetime64("2024-01-01")
NY, NX, CHUNKS = 90, 180, (1, 30, 45)  # a 2-degree global grid; 3 x 4 chunks per day and variable


@dataclass
class DemoResult:
    """What a run made: its directory, the data files, the saved sets and the values compared."""

    directory: str
    files: list[str]
    outputs: dict[str, str] = field(default_factory=dict)  # format -> path
    sizes: dict[str, int] = field(default_factory=dict)  # format -> bytes on disk
    keys: int = 0
    mean_refs: float = float("nan")  # mean of tas read through the references
    mean_files: float = float("nan")  # the same, read from the NetCDF files
    seconds: float = 0.0


def make_files(directory: str, n: int, *, bar: Bar | None = None) -> list[str]:
    """``n`` daily NetCDF4 files in ``directory`` (``daily-2024-01-01.nc``, ...): a CF ``time``
    (unlimited, days since 2024-01-01), ``lat``/``lon`` and two float32 variables chunked 1x30x45 with
    shuffle + zlib: ``tas`` (air temperature) and ``pr`` (precipitation, one band of chunks never
    written each day, as a satellite swath gap: read as the fill value, NaN). Deterministic."""
    import h5netcdf

    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)
    lat = np.linspace(-89, 89, NY, dtype="f4")
    lon = np.linspace(-179, 179, NX, dtype="f4")
    climate = 258.0 + 40.0 * np.cos(np.deg2rad(lat))[:, None] + 3.0 * np.sin(np.deg2rad(2 * lon))[None, :]
    paths = []
    for day in range(n):
        path = os.path.join(directory, f"daily-{START + day}.nc")
        with h5netcdf.File(path, "w") as f:
            f.dimensions = {"time": None, "lat": NY, "lon": NX}
            f.attrs["title"] = "refset demo: synthetic daily surface fields"
            t = f.create_variable("time", ("time",), "f8", chunks=(1,))
            f.resize_dimension("time", 1)
            t[:] = [day]
            t.attrs.update(units="days since 2024-01-01", calendar="standard", standard_name="time")
            f.create_variable("lat", ("lat",), data=lat).attrs.update(units="degrees_north")
            f.create_variable("lon", ("lon",), data=lon).attrs.update(units="degrees_east")
            tas = (climate + 2.0 * np.sin(day / 5) + rng.normal(0, 1.5, (NY, NX))).astype("f4")
            v = f.create_variable("tas", ("time", "lat", "lon"), "f4", chunks=CHUNKS, compression="gzip",
                                  shuffle=True, fillvalue=np.float32(1e20))
            v.attrs.update(units="K", long_name="near-surface air temperature")
            v[0] = tas
            pr = np.round(rng.gamma(0.5, 6.0, (NY, NX)), 1).astype("f4")
            v = f.create_variable("pr", ("time", "lat", "lon"), "f4", chunks=CHUNKS, compression="gzip",
                                  shuffle=True, fillvalue=np.float32(-999))
            v.attrs.update(units="mm/day", long_name="precipitation")
            gap = day % (NX // CHUNKS[2])  # this day's swath gap: one column of chunks never written
            for j in range(NX // CHUNKS[2]):
                if j != gap:
                    cols = slice(j * CHUNKS[2], (j + 1) * CHUNKS[2])
                    v[0, :, cols] = pr[:, cols]
        paths.append(path)
        if bar is not None:
            bar.update()
    return paths


def run(directory: str | None = None, *, files: int = 30, workers: int = 2, progress: bool = False,
        out: IO[str] | None = None) -> DemoResult:
    """Run the demo in ``directory`` (a new temporary one when None), printing to ``out``.

    ``workers``: processes of the local Dask cluster that scans the files (0: scan in this process).
    ``progress``: progress bars on stderr. Raises :class:`~refset.errors.RefsetError` when what xarray
    reads through the references differs from what it reads from the files.
    """
    t0 = time.perf_counter()
    out = out or sys.stdout
    directory = prepare(directory)
    try:
        import h5netcdf  # noqa: F401
        import xarray as xr
        if workers:
            import distributed  # noqa: F401
    except ImportError as e:
        raise RefsetError(f"the demo needs the 'all' extra ({e.name} is missing): "
                          "pip install 'refset[all]'") from None
    import refset

    def say(text: str = "") -> None:
        out.write(text + "\n")
        out.flush()

    say(f"refset demo: {files} daily NetCDF4 files -> one reference set -> one xarray dataset")
    say("(a reference set maps every chunk of the combined dataset to its byte range in one of the\n"
        " files: xarray reads them as one dataset, nothing copied)\n")
    data = os.path.join(directory, "data")
    t = time.perf_counter()
    with Bar(files, "making files", progress) as bar:
        paths = make_files(data, files, bar=bar)
    res = DemoResult(directory, paths)
    total = sum(os.path.getsize(p) for p in paths)
    say(f"1. Made {files} daily NetCDF4 files ({total:,} bytes) in {data}/ in {time.perf_counter() - t:.1f} s")
    say(f"   {os.path.basename(paths[0])} ... {os.path.basename(paths[-1])}: each 1 time step x {NY} lat x"
        f" {NX} lon; tas and pr float32, chunks {'x'.join(map(str, CHUNKS))}, shuffle+zlib")

    t = time.perf_counter()
    rs = _combine(refset, paths, workers, progress)
    n_ranges = sum(int(rs.table(p).kind_counts()[RANGE]) for p in rs.grids)
    res.keys = len(rs)
    where = (f"on a local Dask cluster ({workers} worker processes, its start included)" if workers
             else "in this process")
    say(f"2. Scanned the files and combined them along time {where} in {time.perf_counter() - t:.1f} s:")
    say(f"   {len(rs.grids)} arrays, {res.keys:,} keys: {n_ranges:,} byte ranges into {len(rs.urls)} files,"
        f" {res.keys - n_ranges:,} inline (metadata, small coordinates)")
    grid = rs.grids["pr"]
    present = rs.table("pr").count()
    say(f"   pr: shape {'x'.join(map(str, grid.shape))}, {present}/{grid.nchunks} chunks present"
        " (the swath gaps were never written)")

    say("3. Saved it in every format:")
    say(f"   {'format':<9}{'file':<18}{'bytes':>10}{'bytes/key':>11}")
    for label, name, fmt in FORMATS:
        path = os.path.join(directory, name)
        refset.save(rs, path, format=fmt)
        res.outputs[fmt], res.sizes[fmt] = path, _disk_size(path)
        shown = name + ("/" if os.path.isdir(path) else "")
        say(f"   {label:<9}{shown:<18}{res.sizes[fmt]:>10,}{res.sizes[fmt] / res.keys:>11.1f}")

    packed = res.outputs["packed"]
    say(f"4. Opened {os.path.basename(packed)} with xarray (refset.open_dataset):")
    ds = refset.open_dataset(packed)
    say("   " + repr(ds).replace("\n", "\n   "))

    res.mean_refs = float(ds["tas"].mean(dtype="f8"))
    originals = [xr.open_dataset(p, engine="h5netcdf") for p in paths]
    try:
        files_ds = xr.concat(originals, dim="time").load()
    finally:
        for o in originals:
            o.close()
    res.mean_files = float(files_ds["tas"].mean(dtype="f8"))
    differ = [v for v in ("time", "lat", "lon", "tas", "pr")
              if not np.array_equal(ds[v].values, files_ds[v].values, equal_nan=v == "pr")]
    if differ or res.mean_refs != res.mean_files:
        raise RefsetError(f"variables {differ} read through {packed} differ from the files "
                          f"(mean of tas {res.mean_refs!r} != {res.mean_files!r})")
    say(f"5. Mean of tas over {files} days and the globe, through the references: {res.mean_refs!r} K")
    say(f"   the same from the {files} NetCDF files with xarray (h5netcdf): {res.mean_files!r} K: equal;"
        " every value of tas and pr is equal too")

    res.seconds = time.perf_counter() - t0
    say(f"\nDone in {res.seconds:.1f} s. Everything is in {directory}/. Try next (the same scan takes"
        " thousands of files; --workers N spreads it):")
    for line in next_steps(res):
        say("  " + line)
    return res


def next_steps(res: DemoResult) -> list[str]:
    """Shell commands to try on what a run made (paths quoted for the shell)."""
    q = {k: shlex.quote(v) for k, v in res.outputs.items()}
    files = shlex.quote(os.path.join(res.directory, "data", "daily-*.nc"))  # refset expands the glob
    again = shlex.quote(os.path.join(res.directory, "again.json"))
    code = (f"import refset; ds = refset.open_dataset({json.dumps(res.outputs['parquet'])}); "
            'print(ds.pr.mean("time").sel(lat=0, method="nearest").values[:5])')
    return [
        f"refset info {q['json']}",
        f"refset ls -l {q['json']} pr | head -5",
        f"refset scan {files} --concat-dim time -o {again}",
        f"refset convert {q['json']} {q['json']}.zst",
        f"python -c {shlex.quote(code)}",
    ]


def _combine(refset: Any, paths: list[str], workers: int, progress: bool) -> Any:
    """The files scanned (on a local cluster of ``workers`` processes, or here) and combined along time."""
    if not workers:
        return refset.combine(paths, concat_dims="time")
    import logging

    from distributed import Client, LocalCluster

    with (LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                       silence_logs=logging.ERROR) as cluster,
          Client(cluster) as client,
          Bar(len(paths), f"scanning on {workers} workers", progress) as bar):
        return refset.combine(paths, concat_dims="time", client=client, progress=bar.update)


def prepare(directory: str | None) -> str:
    """An absolute directory for the run: a new temporary one, an empty or new one, or one a previous
    run made (its demo files removed). Anything else is refused."""
    if directory is None:
        directory = tempfile.mkdtemp(prefix="refset-demo-")
    directory = os.path.abspath(directory)
    if os.path.exists(directory):
        if not os.path.isdir(directory):
            raise Unsupported(f"DIR {directory!r} is a file, not a directory")
        entries = os.listdir(directory)
        if entries and MARKER not in entries:
            raise Unsupported(f"DIR {directory!r} is not empty and was not made by "
                              "refset demo; give a new or empty directory")
        for name in ["data", "again.json", "combined.json.zst", *[n for _, n, _ in FORMATS]]:
            path = os.path.join(directory, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, MARKER), "w") as f:
        f.write("made by refset demo; a later run may overwrite this directory\n")
    return directory


def _disk_size(path: str) -> int:
    """Bytes of a file, or of every file under a directory."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)
    return os.path.getsize(path)


def cmd_demo(a: argparse.Namespace) -> int:
    """``refset demo [DIR]``: :func:`prepare` the directory (a refusal is a usage error), then :func:`run`."""
    if a.dir is not None and os.path.isfile(os.path.join(a.dir, MARKER)) and not a.quiet:
        sys.stderr.write(f"replacing the files of an earlier refset demo in {a.dir}\n")
    try:
        directory = prepare(a.dir)
    except Unsupported as e:
        raise UsageError(str(e)) from None
    run(directory, files=a.files, workers=a.workers, progress=wanted(a.quiet))
    return EXIT_OK
