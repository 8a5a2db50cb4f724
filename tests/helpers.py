"""Small builders for test reference sets (real metadata documents, no mocks)."""

from __future__ import annotations

import json
from typing import Any


def zarray(shape: list[int], chunks: list[int], *, sep: str | None = None, dtype: str = "<f4",
           fill_value: Any = 0) -> str:
    meta: dict[str, Any] = {"shape": shape, "chunks": chunks, "dtype": dtype, "compressor": None,
                            "fill_value": fill_value, "filters": None, "order": "C", "zarr_format": 2}
    if sep is not None:
        meta["dimension_separator"] = sep
    return json.dumps(meta)


def zarr_json(shape: list[int], chunks: list[int], *, encoding: str = "default", sep: str = "/") -> str:
    return json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": encoding, "configuration": {"separator": sep}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    })
