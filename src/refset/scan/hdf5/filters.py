"""HDF5 filter pipelines as zarr v2 ``filters`` (numcodecs ids), in HDF5's order.

Only codecs that decode HDF5's stored bytes exactly are used: deflate (``zlib``), shuffle,
fletcher32 (the checksum is verified and stripped), blosc and zstd (their HDF5 plugins store plain
blosc/zstd frames). The others (szip, nbit, scaleoffset, lzf, lz4, bitshuffle, ...) frame or
transform data in ways no numcodecs codec reads; such datasets are read through h5py instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from refset.scan.writer import cannot

__all__ = ["hdf5_filters", "encode_chunk", "FILTER_NAMES"]

FILTER_NAMES = {
    1: "deflate", 2: "shuffle", 3: "fletcher32", 4: "szip", 5: "nbit", 6: "scaleoffset",
    32000: "lzf", 32001: "blosc", 32004: "lz4", 32008: "bitshuffle", 32013: "zfp", 32015: "zstd",
    32017: "sz", 32026: "blosc2",
}
_BLOSC_NAMES = {0: "blosclz", 1: "lz4", 2: "lz4hc", 3: "snappy", 4: "zlib", 5: "zstd"}


def _codec(code: int, values: tuple[int, ...], dt: np.dtype) -> dict[str, Any] | None:
    if code == 1:
        return {"id": "zlib", "level": int(values[0]) if values else 1}
    if code == 2:
        return {"id": "shuffle", "elementsize": int(dt.itemsize)}
    if code == 3:
        return {"id": "fletcher32"}
    if code == 32001:  # blosc frames describe themselves; the parameters matter for encoding only
        v = list(values) + [0] * 7
        return {"id": "blosc", "cname": _BLOSC_NAMES.get(v[6], "blosclz"), "clevel": int(v[4]) or 5,
                "shuffle": int(v[5]), "blocksize": 0}
    if code == 32015:
        return {"id": "zstd", "level": int(values[0]) if values else 0}
    return None


def hdf5_filters(pipeline: list[tuple[int, tuple[int, ...], str]], dt: np.dtype,
                 path: str) -> tuple[list[dict[str, Any]], str | None]:
    """``(filters, None)`` when every filter of ``pipeline`` (filter id, client values, name) has an
    exact codec, else ``([], why not)``."""
    out = []
    for code, values, name in pipeline:
        codec = _codec(int(code), tuple(values), dt)
        if codec is None:
            label = FILTER_NAMES.get(int(code)) or name or "?"
            return [], f"HDF5 filter {label} (id {code}) has no codec that decodes it exactly"
        out.append(codec)
    if dt.kind == "O" and out:
        raise cannot(path, "variable-length data with filters")
    return out, None


def encode_chunk(block: np.ndarray, filters: list[dict[str, Any]]) -> bytes:
    """A chunk encoded as zarr v2 stores it with ``filters`` (C order, no compressor)."""
    from numcodecs import get_codec

    data: Any = block if block.dtype.kind == "O" else np.ascontiguousarray(block).view("u1").reshape(-1)
    for spec in filters:
        data = get_codec(dict(spec)).encode(data)
    return bytes(memoryview(data).cast("B")) if not isinstance(data, bytes) else data
