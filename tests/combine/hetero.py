"""Heterogeneous archives written with netCDF4: the cases of files whose storage differs along time
(chunks, padding, filters, compression, packing, fill values, dtype), as archives in the wild have them.
Each writer returns the files in time order; values are distinct per file so a misplaced or misdecoded
chunk shows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import netCDF4
import numpy as np

NY, NX = 3, 4


def write(path: Path, day0: int, n: int, *, dtype: str = "f4", chunk: int | None = None, zlib: bool = True,
          shuffle: bool = False, contiguous: bool = False, pack: tuple[float, float] | None = None,
          fill: Any = None, units: str = "days since 2000-01-01", seed: int = 0, tas: bool = True,
          label: int | None = None, duration: str | None = None) -> Path:
    """One file of ``n`` days from ``day0``: ``time`` and ``tas(time, y, x)`` stored as asked (none
    when not ``tas``); ``label``: a char variable ``label(time, strlen)`` in chunks of ``label`` steps;
    ``duration``: a variable ``dur(time)`` in these units (hours, days)."""
    rng = np.random.default_rng(seed + day0)
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None if not contiguous else n)
        ds.createDimension("y", NY)
        ds.createDimension("x", NX)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = units
        scale = 24 if units.startswith("hours") else 1
        t[:] = (day0 + np.arange(n)) * scale
        if label is not None:
            ds.createDimension("strlen", 6)
            lab = ds.createVariable("label", "S1", ("time", "strlen"), chunksizes=(label, 6))
            lab[:] = netCDF4.stringtochar(np.array([f"d{day0 + k:03d}" for k in range(n)], "S6"))
        if duration is not None:
            d = ds.createVariable("dur", "f8", ("time",), chunksizes=(n,))
            d.units = duration
            d[:] = day0 + np.arange(n)
        if not tas:
            return path
        kw: dict[str, Any] = {}
        if contiguous:
            kw["contiguous"] = True
        else:
            kw["chunksizes"] = (chunk or n, NY, NX)
            kw["zlib"] = zlib
            kw["shuffle"] = shuffle
        if fill is not None:
            kw["fill_value"] = fill
        v = ds.createVariable("tas", dtype, ("time", "y", "x"), **kw)
        v.long_name = "air temperature"
        values = 250 + 40 * rng.random((n, NY, NX))
        if pack is not None:
            v.scale_factor, v.add_offset = pack
            v.set_auto_maskandscale(True)
        if fill is not None:
            values[0, 0, 0] = np.nan  # one missing value per file
            values = np.ma.masked_invalid(values)
        v[:] = values
    return path


Case = Callable[[Path], list[Path]]


def monthly(d: Path) -> list[Path]:
    """Monthly files of daily data, each chunked as its whole month."""
    out, day = [], 0
    for k, n in enumerate((31, 28, 31, 30)):
        out.append(write(d / f"monthly-{k}.nc", day, n, chunk=n))
        day += n
    return out


def padded(d: Path) -> list[Path]:
    """Files of 10 steps in chunks of 4: each file's last chunk padded."""
    return [write(d / f"padded-{k}.nc", 10 * k, 10, chunk=4) for k in range(4)]


def shuffle_on(d: Path) -> list[Path]:
    """A producer that turned shuffle on halfway."""
    return [write(d / f"shuffle-{k}.nc", 5 * k, 5, chunk=5, shuffle=k >= 2) for k in range(4)]


def compression_off(d: Path) -> list[Path]:
    """Compressed files, then uncompressed contiguous ones (GOES-16, April 2023)."""
    return [write(d / f"plain-{k}.nc", 6 * k, 6, chunk=3, zlib=k < 2, contiguous=k >= 2) for k in range(4)]


def packing(d: Path) -> list[Path]:
    """int16 packed with a scale and offset chosen per file (per-request ERA5 downloads)."""
    packs = [(0.01, 250.0), (0.02, 240.0), (0.005, 260.0), (0.01, 255.0)]
    return [write(d / f"packed-{k}.nc", 4 * k, 4, chunk=2, dtype="i2", pack=packs[k]) for k in range(4)]


def fills(d: Path) -> list[Path]:
    """Fill values chosen per file."""
    return [write(d / f"fill-{k}.nc", 3 * k, 3, chunk=3, fill=np.float32(-999 - k)) for k in range(4)]


def dtypes(d: Path) -> list[Path]:
    """float32 for the first years, float64 after."""
    return [write(d / f"dtype-{k}.nc", 4 * k, 4, chunk=2, dtype="f4" if k < 2 else "f8") for k in range(4)]


def everything(d: Path) -> list[Path]:
    """All of the above in one archive, one change after another."""
    day = 0
    out = []

    def nxt(name: str, n: int, **kw: Any) -> None:
        nonlocal day
        out.append(write(d / f"all-{len(out):02d}-{name}.nc", day, n, **kw))
        day += n

    nxt("month31", 31, chunk=31)
    nxt("month28", 28, chunk=28)
    nxt("pad-a", 10, chunk=4)
    nxt("pad-b", 10, chunk=4)
    nxt("shuffle", 8, chunk=4, shuffle=True)
    nxt("shuffle2", 8, chunk=4, shuffle=True)
    nxt("plain", 6, contiguous=True)
    nxt("packed-a", 4, chunk=2, dtype="i2", pack=(0.01, 250.0))
    nxt("packed-b", 4, chunk=2, dtype="i2", pack=(0.02, 240.0))
    nxt("fill", 3, chunk=3, fill=np.float32(-999))
    nxt("f8", 4, chunk=2, dtype="f8")
    nxt("hours", 2, chunk=2, units="hours since 2000-01-01")
    return out


CASES: dict[str, Case] = {
    "monthly": monthly, "padded": padded, "shuffle": shuffle_on, "compression_off": compression_off,
    "packing": packing, "fills": fills, "dtypes": dtypes, "everything": everything,
}
