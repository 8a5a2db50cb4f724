"""The producers' operations: ``ReferenceSet.from_arrays`` of 1M chunks, and concatenating 1000 chunk
tables of 1,152 chunks (one daily file of a 24x48 grid each) along time, with the URL-table union.

usage: python bench/bench_core.py [--repeat N]

Targets (issue 9): each <= 50 ms. Timings are the median of --repeat runs (min in brackets).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import refset
from refset.model.keys import ChunkGrid
from refset.model.table import RANGE, ChunkTable, concat_tables, union_urls


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    ts, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), min(ts), out


def zarray(shape: list[int], chunks: list[int]) -> dict[str, Any]:
    return {"shape": shape, "chunks": chunks, "dtype": "<f4", "compressor": {"id": "zlib", "level": 4},
            "fill_value": None, "filters": None, "order": "C", "zarr_format": 2}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args(argv)
    rng = np.random.default_rng(0)

    # from_arrays: 1,000,000 chunks (1000 files x 1000 chunks), 2% absent
    grid = (1000, 25, 40)
    n = int(np.prod(grid))
    length = rng.integers(20_000, 40_000, n)
    offset = (np.cumsum(length) - length).reshape(grid) % (1 << 40)
    pid = np.repeat(np.arange(1000), 1000).reshape(grid)
    pid[rng.random(grid) < 0.02] = -1
    urls = [f"s3://bucket/product/day-{i:04d}.nc" for i in range(1000)]
    meta = {".zgroup": {"zarr_format": 2}, "v/.zarray": zarray([1000, 1500, 2400], [1, 60, 60]),
            "v/.zattrs": {"_ARRAY_DIMENSIONS": ["time", "y", "x"]}}
    arrays = {"v": {"path_id": pid, "offset": offset, "length": length.reshape(grid)}}
    med, lo, rs = timed(lambda: refset.ReferenceSet.from_arrays(meta, arrays, urls), a.repeat)
    assert rs.table("v").count() == int((pid >= 0).sum())
    print(f"from_arrays, {n:,} chunks: {1000 * med:.1f} ms [{1000 * lo:.1f}] (target <= 50 ms)")

    # concat: 1000 single-file tables of a 24x48 grid (1,152 chunks), each with its own URL table
    g = ChunkGrid((1, 1440, 2880), (1, 60, 60))
    tables, url_tables = [], []
    for i in range(1000):
        ln = rng.integers(20_000, 40_000, g.nchunks)
        tables.append(ChunkTable(g, np.full(g.nchunks, RANGE, np.uint8), np.zeros(g.nchunks, np.uint16),
                                 np.cumsum(ln) - ln, ln))
        url_tables.append([f"s3://bucket/product/day-{i:04d}.nc"])

    def combine() -> ChunkTable:
        _urls, maps = union_urls(url_tables)
        return concat_tables(tables, 0, path_maps=maps)

    med, lo, out = timed(combine, a.repeat)
    assert out.grid.grid_shape == (1000, 24, 48) and out.count() == 1_152_000
    print(f"union_urls + concat_tables, 1000 x 1,152 chunks: {1000 * med:.1f} ms [{1000 * lo:.1f}] "
          "(target <= 50 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
