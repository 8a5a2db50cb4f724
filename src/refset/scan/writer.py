"""What scanners share to hand over their arrays: JSON-safe attributes (:func:`json_value`,
:func:`json_attrs`), the error for a variable that cannot be referenced (:func:`cannot`), sub-chunk rows
(:func:`split_rows`). The writer that collects the arrays is :class:`refset.model.setwriter.SetWriter`;
the options every scanner takes and the names to drop are :mod:`refset.abc.scanner`'s (both are
re-exported here for the scanners written against this module).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from refset.abc.scanner import INLINE_THRESHOLD, DropList, UnusedDropWarning, common_options
from refset.errors import Unsupported
from refset.model.setwriter import SetWriter, zarr_fill

__all__ = ["SetWriter", "json_value", "json_attrs", "zarr_fill", "cannot", "split_rows", "INLINE_THRESHOLD",
           "UnusedDropWarning", "DropList", "common_options"]


def cannot(variable: str, reason: str) -> Unsupported:
    """The error for a variable the scan cannot reference exactly."""
    return Unsupported(f"variable {variable!r}: {reason}; pass drop_variables=[{variable!r}] to scan "
                       "the rest of the file")


def json_value(v: Any) -> Any:
    """An attribute value as JSON: numpy scalars as Python numbers (exact: float32 widens to the same
    double), bytes as UTF-8 text, length-1 arrays as their element (as netCDF4-python gives them),
    NaN/Infinity as Python's JSON writes them."""
    if isinstance(v, np.ndarray):
        if v.dtype.kind == "V" and v.dtype.names is None:
            return base64.standard_b64encode(v.tobytes()).decode()
        if v.size == 1 and v.ndim <= 1:
            return json_value(v.reshape(-1)[0])
        return [json_value(x) for x in v.tolist()] if v.dtype.kind not in "SUO" else [
            json_value(x) for x in v.reshape(-1)]
    if isinstance(v, bytes | np.bytes_):  # text, decoded as netCDF4-python does
        return bytes(v).decode("utf-8", errors="replace")
    if type(v).__name__ == "Empty":  # h5py's empty (null dataspace) attribute
        return "" if v.dtype.kind in "SUO" else []
    if isinstance(v, np.void):
        if v.dtype.names:
            return [json_value(v[n]) for n in v.dtype.names]
        return base64.standard_b64encode(v.tobytes()).decode()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool | int | str) or v is None:
        return v
    if isinstance(v, float):
        return v
    if isinstance(v, complex):
        return [v.real, v.imag]
    if isinstance(v, list | tuple):
        return [json_value(x) for x in v]
    return str(v)


def json_attrs(attrs: Iterable[tuple[str, Any]], skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Attributes as a JSON-safe dict (names in ``skip`` left out)."""
    return {k: json_value(v) for k, v in attrs if k not in skip}


def split_rows(shape: tuple[int, ...], itemsize: int, limit: int | None) -> int:
    """Rows per sub-chunk: the largest divisor of ``shape[0]`` whose rows fit in ``limit`` bytes."""
    if not shape:
        return 1
    if limit is None or shape[0] <= 1:
        return shape[0] or 1
    row = math.prod(shape[1:]) * itemsize
    if row * shape[0] <= limit:
        return shape[0]
    if math.isqrt(shape[0]) > 1 << 22:  # too many divisors to try: the largest power of two that fits
        best = shape[0] & -shape[0]
        while best > 1 and best * row > limit:
            best //= 2
        return best
    best = 1
    for k in range(1, math.isqrt(shape[0]) + 1):
        if shape[0] % k == 0:
            for d in (k, shape[0] // k):
                if d * row <= limit and d > best:
                    best = d
    return best


