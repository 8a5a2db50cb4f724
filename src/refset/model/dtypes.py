"""Data types and fill values between numpy, zarr v2 (``.zarray``: numpy typestrings and field lists,
fill values as JSON with "NaN"/"Infinity" and base64 for bytes) and zarr v3 (``data_type`` names and
objects; fill values as v3 writes them), and xarray's ``_FillValue`` attribute of a v3 array."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from refset.errors import InvalidReferences, Unsupported

__all__ = ["dtype_json", "v2_numpy", "v3_numpy", "v3_data_type", "fill_json", "fill_of", "float_json",
           "xarray_fill_attr", "xarray_fill_value", "v3_default_fill", "v3_fill", "bytes_codec",
           "OBJECT_CODECS", "V3_NUMERIC"]

#: numcodecs codecs that turn an object array into bytes, and the v3 data types they stand for.
OBJECT_CODECS = {"vlen-utf8": "string", "vlen-bytes": "variable_length_bytes"}


def dtype_json(dtype: np.dtype[Any]) -> Any:
    """A numpy dtype as zarr v2 ``.zarray`` writes it (structured types as field lists)."""
    if dtype.names is None:
        return dtype.str
    out: list[Any] = []
    for name in dtype.names:
        sub, _ = dtype.fields[name][:2]  # type: ignore[index]
        base = dtype_json(sub.base)
        out.append([name, base, list(sub.shape)] if sub.shape else [name, base])
    return out


def v2_numpy(spec: Any) -> np.dtype[Any]:
    if isinstance(spec, list):
        fields = []
        for f in spec:
            if not isinstance(f, list) or len(f) not in (2, 3) or not isinstance(f[0], str):
                raise InvalidReferences(f".zarray: dtype field {f!r} is not [name, dtype] or [name, dtype, shape]")
            fields.append((f[0], v2_numpy(f[1]), *([tuple(f[2])] if len(f) == 3 else [])))
        return np.dtype(fields)
    if not isinstance(spec, str):
        raise InvalidReferences(f".zarray: dtype {spec!r} is not a zarr v2 data type")
    try:
        return np.dtype(spec)
    except TypeError as e:
        raise InvalidReferences(f".zarray: dtype {spec!r} is not a numpy data type ({e})") from None


V3_NUMERIC = {"bool": "b1", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "uint8": "u1",
               "uint16": "u2", "uint32": "u4", "uint64": "u8", "float16": "f2", "float32": "f4",
               "float64": "f8", "complex64": "c8", "complex128": "c16"}


def v3_numpy(spec: Any, endian: str) -> np.dtype[Any]:
    name = spec.get("name") if isinstance(spec, Mapping) else spec
    cfg = spec.get("configuration") or {} if isinstance(spec, Mapping) else {}
    if name in V3_NUMERIC:
        return np.dtype(endian + V3_NUMERIC[name])
    if name in ("string", "variable_length_bytes"):
        return np.dtype(object)
    if name == "null_terminated_bytes":
        return np.dtype(f"S{int(cfg['length_bytes'])}")
    if name == "raw_bytes":
        return np.dtype(f"V{int(cfg['length_bytes'])}")
    if name == "fixed_length_utf32":
        return np.dtype(f"{endian}U{int(cfg['length_bytes']) // 4}")
    if name in ("numpy.datetime64", "numpy.timedelta64"):
        code = "M8" if name == "numpy.datetime64" else "m8"
        scale = int(cfg.get("scale_factor", 1))
        return np.dtype(f"{endian}{code}[{'' if scale == 1 else scale}{cfg['unit']}]")
    if name == "structured":
        return np.dtype([(f[0], v3_numpy(f[1], endian)) for f in cfg["fields"]])
    raise Unsupported(f"zarr.json: data type {spec!r} has no numpy counterpart refset knows")


def v3_data_type(dt: np.dtype[Any], object_codec: str | None) -> Any:
    if dt.names is not None:
        return {"name": "structured", "configuration": {
            "fields": [[n, v3_data_type(dt.fields[n][0], None)] for n in dt.names]}}  # type: ignore[index]
    if dt.kind == "O":
        if object_codec not in OBJECT_CODECS:
            raise Unsupported(f"object data with codec {object_codec!r} has no zarr v3 data type "
                              "(vlen-utf8 and vlen-bytes have)")
        return OBJECT_CODECS[object_codec]
    if dt.kind in "biufc":
        return dt.name if dt.kind != "b" else "bool"
    if dt.kind == "S":
        return {"name": "null_terminated_bytes", "configuration": {"length_bytes": dt.itemsize}}
    if dt.kind == "V":
        return {"name": "raw_bytes", "configuration": {"length_bytes": dt.itemsize}}
    if dt.kind == "U":
        return {"name": "fixed_length_utf32", "configuration": {"length_bytes": dt.itemsize}}
    if dt.kind in "Mm":
        unit, count = np.datetime_data(dt)
        return {"name": "numpy.datetime64" if dt.kind == "M" else "numpy.timedelta64",
                "configuration": {"unit": unit, "scale_factor": int(count)}}
    raise Unsupported(f"data type {dt} has no zarr v3 counterpart")


# -- fill values ---------------------------------------------------------------------------------------
def float_json(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def fill_json(value: Any, dtype: np.dtype[Any]) -> Any:
    """A fill value as zarr v2 writes it in ``.zarray`` (exact for every dtype; None stays None)."""
    if value is None:
        return None
    if dtype.kind in "SV" or dtype.names is not None:
        raw = np.asarray(value, dtype=dtype).tobytes()
        return base64.standard_b64encode(raw).decode() if raw.strip(b"\0") else None
    v = np.asarray(value, dtype=dtype).item()
    if dtype.kind == "f":
        return float_json(float(v))
    if dtype.kind == "c":
        return [float_json(v.real), float_json(v.imag)]
    if dtype.kind == "b":
        return bool(v)
    if dtype.kind == "U":
        return str(v)
    if dtype.kind in "Mm":
        return int(np.asarray(value, dtype=dtype).view(np.int64))
    return int(v)


def fill_of(fill: Any, dtype: np.dtype[Any]) -> Any:
    """The value a v2 ``fill_value`` (JSON form) stands for (None stays None)."""
    if fill is None:
        return None
    if dtype.kind in "SV" or dtype.names is not None:
        if isinstance(fill, str):
            return np.frombuffer(base64.standard_b64decode(fill), dtype)[0]
        return fill
    if dtype.kind == "f" and isinstance(fill, str):
        return float(fill)  # "NaN", "Infinity", "-Infinity"
    if dtype.kind == "c" and isinstance(fill, list):
        return complex(float(fill[0]), float(fill[1]))
    return fill


def xarray_fill_attr(value: Any, dt: np.dtype[Any]) -> Any:
    """``_FillValue`` as xarray stores it in a zarr v3 array's attributes."""
    if dt.kind == "f":
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode()
    if dt.kind == "c":
        return [base64.standard_b64encode(struct.pack("<d", float(x))).decode()
                for x in (complex(value).real, complex(value).imag)]
    if dt.kind == "S":
        return base64.standard_b64encode(bytes(value)).decode()
    if dt.kind == "b":
        return bool(value)
    if dt.kind in "iu":
        return int(value)
    return value if isinstance(value, str | int | float) else None


def xarray_fill_value(attr: Any, dt: np.dtype[Any]) -> Any:
    """The value of an xarray v3 ``_FillValue`` attribute (as :func:`xarray_fill_attr` wrote it)."""
    try:
        if dt.kind == "f" and isinstance(attr, str):
            return struct.unpack("<d", base64.standard_b64decode(attr))[0]
        if dt.kind == "c" and isinstance(attr, list):
            re_, im = (struct.unpack("<d", base64.standard_b64decode(x))[0] for x in attr)
            return complex(re_, im)
        if dt.kind == "S" and isinstance(attr, str):
            return base64.standard_b64decode(attr)
    except (ValueError, TypeError, struct.error):
        return None
    return attr


def v3_default_fill(data_type: Any, itemsize: int = 0) -> Any:
    """v3's fill value of ``data_type`` when v2 had none: zeros (a structured type's ``itemsize``
    zero bytes, base64-encoded: zarr-python reads ``""`` as no bytes and cannot view them as a record)."""
    name = data_type.get("name") if isinstance(data_type, Mapping) else data_type
    if name == "structured":
        return base64.standard_b64encode(bytes(itemsize)).decode()
    if name == "bool":
        return False
    if name in ("float16", "float32", "float64"):
        return 0.0
    if name in ("complex64", "complex128"):
        return [0.0, 0.0]
    if name in ("string", "fixed_length_utf32"):
        return ""
    if name in ("null_terminated_bytes", "raw_bytes", "structured", "variable_length_bytes"):
        return ""
    return 0


def v3_fill(value: Any, dt: np.dtype[Any], data_type: Any) -> Any:
    """A v2 fill value (its value, not None) in v3's JSON form."""
    if dt.kind == "f":
        return float_json(float(value))
    if dt.kind == "c":
        c = complex(value)
        return [float_json(c.real), float_json(c.imag)]
    if dt.kind in "SV" or dt.names is not None:
        return base64.standard_b64encode(np.asarray(value, dtype=dt).tobytes()).decode()
    if dt.kind == "b":
        return bool(value)
    if dt.kind in "iu":
        return int(value)
    if dt.kind in "Mm":
        return int(np.asarray(value, dtype=dt).view(np.int64))
    return value


def bytes_codec(dt: np.dtype[Any]) -> dict[str, Any]:
    """v3's ``bytes`` codec for values of ``dt``: with their byte order where they have one."""
    if dt.names is not None:
        orders = {dt.fields[n][0].base.byteorder for n in dt.names}  # type: ignore[index]
        if ">" in orders and orders & {"<", "="}:
            raise Unsupported(f"structured data type {dt} mixes byte orders: zarr v3 has one per array")
        big = ">" in orders
        multi = any(dt.fields[n][0].base.itemsize > 1 for n in dt.names)  # type: ignore[index]
    else:
        big = dt.byteorder == ">"
        multi = dt.itemsize > 1 and dt.kind not in "SVb"
    return {"name": "bytes", "configuration": {"endian": "big" if big else "little"}} if multi else {"name": "bytes"}
