"""Data for the serving tests: real files written by netCDF4 and zarr, and reference sets over them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

FILL = -999.0


def write_netcdf(path: Path, seed: int = 0, t0: int = 0) -> dict[str, np.ndarray]:
    """A NetCDF4 file: ``temp(time, y, x)`` float32 zlib-chunked 2x4x5 with some chunks never
    written (read back as the fill value), ``count(y, x)`` int16 contiguous, coordinates.
    Returns the expected arrays (fill values where nothing was written)."""
    import netCDF4

    rng = np.random.default_rng(seed)
    ny, nx, nt = 8, 10, 2
    temp = np.full((nt, ny, nx), FILL, np.float32)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
        ds.createDimension("time", None)
        ds.createDimension("y", ny)
        ds.createDimension("x", nx)
        tv = ds.createVariable("time", "f8", ("time",))
        tv.units = "days since 2000-01-01"
        tv[:] = np.arange(t0, t0 + nt, dtype="f8")
        ds.createVariable("y", "f4", ("y",))[:] = np.arange(ny, dtype="f4")
        ds.createVariable("x", "f4", ("x",))[:] = np.arange(nx, dtype="f4") * 0.5
        v = ds.createVariable("temp", "f4", ("time", "y", "x"), zlib=True, shuffle=True,
                              chunksizes=(1, 4, 5), fill_value=FILL)
        v.units = "K"
        for t in range(nt):
            for y0 in (0, 4):
                for x0 in (0, 5):
                    if (t + y0 // 4 + x0 // 5) % 3 == 2:
                        continue  # never written: a missing chunk
                    block = (280 + rng.normal(0, 5, (4, 5))).astype(np.float32)
                    v[t, y0:y0 + 4, x0:x0 + 5] = block
                    temp[t, y0:y0 + 4, x0:x0 + 5] = block
        count = rng.integers(0, 100, (ny, nx)).astype(np.int16)
        ds.createVariable("count", "i2", ("y", "x"))[:] = count
    return {"temp": temp, "count": count}


def kerchunk_refs(path: Path | str, url: str | None = None) -> dict[str, Any]:
    """Version 0 references of one HDF5/NetCDF4 file made by kerchunk, targets named ``url``."""
    from kerchunk.hdf import SingleHdf5ToZarr

    refs = SingleHdf5ToZarr(os.fspath(path), inline_threshold=0).translate()
    refs = refs["refs"] if "refs" in refs else refs
    if url is not None:
        refs = {k: [url, *v[1:]] if isinstance(v, list) else v for k, v in refs.items()}
    return refs


def zarr_dir_refs(root: Path, prefix: str = "") -> dict[str, Any]:
    """Whole-file references ``[path]`` to every file of a local zarr directory store; metadata
    documents inline."""
    out: dict[str, Any] = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            key = os.path.relpath(full, root).replace(os.sep, "/")
            if name in (".zarray", ".zattrs", ".zgroup", "zarr.json", ".zmetadata"):
                with open(full) as f:
                    out[prefix + key] = f.read()
            else:
                out[prefix + key] = [full]
    return out


def write_zarr(root: Path, zarr_format: int, separator: str = ".") -> np.ndarray:
    """A zarr array ``a`` (int32, 6x7, chunks 2x3, fill 7, some chunks never written) in group
    ``root``; returns the expected values."""
    import zarr

    g = zarr.open_group(os.fspath(root), mode="w", zarr_format=zarr_format)
    kw: dict[str, Any] = {}
    if zarr_format == 2:
        kw["chunk_key_encoding"] = {"name": "v2", "separator": separator}
    else:
        kw["dimension_names"] = ["r", "c"]
    a = g.create_array("a", shape=(6, 7), chunks=(2, 3), dtype="i4", fill_value=7, **kw)
    if zarr_format == 2:
        a.attrs["_ARRAY_DIMENSIONS"] = ["r", "c"]
    expect = np.full((6, 7), 7, np.int32)
    vals = np.arange(42, dtype=np.int32).reshape(6, 7)
    expect[:4] = vals[:4]  # the last row of chunks is never written
    a[:4] = vals[:4]
    return expect


def raw_array_set(root: Path, shape: tuple[int, ...] = (40, 50, 60), chunks: tuple[int, ...] = (1, 10, 10),
                  seed: int = 0) -> tuple[Any, np.ndarray]:
    """A real file of raw little-endian float32 chunks (C order of chunk index) and its reference set,
    built with ``ReferenceSet.from_arrays``: array ``v(t, y, x)``, uncompressed. Returns (set, data)."""
    import refset

    rng = np.random.default_rng(seed)
    data = rng.standard_normal(shape).astype("<f4")
    grid = tuple(s // c for s, c in zip(shape, chunks, strict=True))
    nd = len(shape)
    blocks = data.reshape([v for g, c in zip(grid, chunks, strict=True) for v in (g, c)])
    blocks = blocks.transpose([2 * i for i in range(nd)] + [2 * i + 1 for i in range(nd)])
    path = root / "data.bin"
    np.ascontiguousarray(blocks).tofile(path)
    nbytes = int(np.prod(chunks)) * 4
    n = int(np.prod(grid))
    meta = {
        ".zgroup": {"zarr_format": 2},
        "v/.zarray": {"shape": list(shape), "chunks": list(chunks), "dtype": "<f4", "compressor": None,
                      "fill_value": None, "filters": None, "order": "C", "zarr_format": 2},
        "v/.zattrs": {"_ARRAY_DIMENSIONS": ["t", "y", "x"][:nd], "units": "K"},
    }
    arrays = {"v": {"path_id": np.zeros(grid, np.int64),
                    "offset": (np.arange(n, dtype=np.int64) * nbytes).reshape(grid),
                    "length": np.full(grid, nbytes, np.int64)}}
    return refset.ReferenceSet.from_arrays(meta, arrays, [path.as_uri()]), data
