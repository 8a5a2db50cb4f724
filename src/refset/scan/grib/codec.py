"""The numcodecs codec that decodes one GRIB message (edition 1 or 2) into its field's values, with
ecCodes: ``{"id": "refset_grib", "dtype": "<f4"}``. Missing points (the bitmap) become NaN, as cfgrib
reads them. Registered under numcodecs' ``numcodecs.codecs`` entry-point group, so zarr and fsspec read
a scanned GRIB set wherever refset is installed."""

from __future__ import annotations

from typing import Any

import numpy as np
from numcodecs.abc import Codec

__all__ = ["GribCodec"]

_SENTINEL = 3.4028234663852886e38  # float32's largest value, as cfgrib marks missing points


class GribCodec(Codec):  # type: ignore[misc]  # numcodecs is untyped
    codec_id = "refset_grib"

    def __init__(self, dtype: str = "<f4") -> None:
        self.dtype = np.dtype(dtype).str

    def encode(self, buf: Any) -> Any:
        raise NotImplementedError("refset_grib decodes GRIB messages; it does not write them")

    def decode(self, buf: Any, out: Any = None) -> Any:
        import eccodes

        data = bytes(memoryview(buf).cast("B")) if not isinstance(buf, bytes) else buf
        h = eccodes.codes_new_from_message(data)
        try:
            bitmap = bool(eccodes.codes_get(h, "bitmapPresent"))
            if bitmap:  # a sentinel no field holds marks the missing points (9999, the default, is data)
                eccodes.codes_set(h, "missingValue", _SENTINEL)
            values = np.asarray(eccodes.codes_get_values(h), dtype=np.float64)
            if bitmap:
                values[values == _SENTINEL] = np.nan
        finally:
            eccodes.codes_release(h)
        values = values.astype(self.dtype)
        if out is not None:
            np.copyto(np.asarray(out).reshape(values.shape), values)
            return out
        return values

    def get_config(self) -> dict[str, Any]:
        return {"id": self.codec_id, "dtype": self.dtype}
