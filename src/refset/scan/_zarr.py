"""What every scanner hands over: zarr v2 metadata as kerchunk writes it, JSON-safe attributes and
fill values, and chunk columns collected per array into one ``ReferenceSet.from_arrays`` call.

Chunks below the inline threshold are read in one batched ``cat_ranges`` call at the end, so a
remote scan costs one round of requests for all of them.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import Unsupported
from ..model import ReferenceSet

__all__ = ["SetWriter", "json_value", "json_attrs", "fill_json", "dtype_json", "cannot", "split_rows"]


def cannot(variable: str, reason: str) -> Unsupported:
    """The error for a variable the scan cannot reference exactly."""
    return Unsupported(f"variable {variable!r}: {reason}; pass drop_variables=[{variable!r}] to scan "
                       "the rest of the file")


def _float(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


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


def fill_json(value: Any, dtype: np.dtype) -> Any:
    """A fill value as zarr v2 writes it in ``.zarray`` (exact for every dtype)."""
    if value is None:
        return None
    if dtype.kind in "SV" or dtype.names is not None:
        raw = np.asarray(value, dtype=dtype).tobytes()
        return base64.standard_b64encode(raw).decode() if raw.strip(b"\0") else None
    v = np.asarray(value, dtype=dtype).item()
    if dtype.kind == "f":
        return _float(float(v))
    if dtype.kind == "c":
        return [_float(v.real), _float(v.imag)]
    if dtype.kind == "b":
        return bool(v)
    if dtype.kind == "U":
        return str(v)
    return int(v)


def dtype_json(dtype: np.dtype) -> Any:
    """A numpy dtype as zarr v2 ``.zarray`` writes it (structured types as field lists)."""
    if dtype.names is None:
        return dtype.str
    out = []
    for name in dtype.names:
        sub, _ = dtype.fields[name][:2]
        base = dtype_json(sub.base)
        out.append([name, base, list(sub.shape)] if sub.shape else [name, base])
    return out


def split_rows(shape: tuple[int, ...], itemsize: int, limit: int | None) -> int:
    """Rows per sub-chunk: the largest divisor of ``shape[0]`` whose rows fit in ``limit`` bytes."""
    if not shape:
        return 1
    if limit is None or shape[0] <= 1:
        return shape[0] or 1
    row = int(np.prod(shape[1:], dtype=np.int64)) * itemsize
    if row * shape[0] <= limit:
        return shape[0]
    best = 1
    for k in range(1, int(shape[0] ** 0.5) + 1):
        if shape[0] % k == 0:
            for d in (k, shape[0] // k):
                if d * row <= limit and d > best:
                    best = d
    return best


class SetWriter:
    """Collects a scan's groups and arrays, then builds the set in one checked call."""

    def __init__(self, url: str, inline_threshold: int) -> None:
        self.url = url
        self.inline_threshold = inline_threshold
        self.metadata: dict[str, Any] = {".zgroup": {"zarr_format": 2}}
        self.arrays: dict[str, dict[str, Any]] = {}
        self._small: list[tuple[str, np.ndarray, np.ndarray, np.ndarray]] = []

    def group(self, path: str, attrs: Mapping[str, Any]) -> None:
        pre = f"{path}/" if path else ""
        if path:
            self.metadata[f"{pre}.zgroup"] = {"zarr_format": 2}
        if attrs:
            self.metadata[f"{pre}.zattrs"] = dict(attrs)

    def array(
        self,
        path: str,
        *,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        dtype: np.dtype,
        fill_value: Any,
        filters: list[dict[str, Any]] | None,
        attrs: Mapping[str, Any],
        dims: list[str],
        offset: np.ndarray | None = None,
        length: np.ndarray | None = None,
        inline: Mapping[int, bytes] | None = None,
    ) -> None:
        """One array: ``offset``/``length`` shaped like the chunk grid (``length == 0``: absent) into
        the scanned file; ``inline``: flat chunk index -> the chunk's stored bytes."""
        self.metadata[f"{path}/.zarray"] = {
            "chunks": list(chunks),
            "compressor": None,
            "dimension_separator": ".",
            "dtype": dtype_json(dtype),
            "fill_value": fill_json(fill_value, dtype),
            "filters": filters or None,
            "order": "C",
            "shape": list(shape),
            "zarr_format": 2,
        }
        self.metadata[f"{path}/.zattrs"] = {**attrs, "_ARRAY_DIMENSIONS": list(dims)}
        grid = tuple(-(-s // c) if c else 0 for s, c in zip(shape, chunks))
        if offset is None:
            offset = np.zeros(grid, np.uint64)
            length = np.zeros(grid, np.uint64)
        assert length is not None
        offset = np.asarray(offset, np.int64).reshape(grid)
        length = np.asarray(length, np.int64).reshape(grid)
        present = length > 0
        pid = np.where(present, 0, -1).astype(np.int64)
        inl = dict(inline or {})
        if inl:
            pid.reshape(-1)[np.fromiter(inl, np.int64, len(inl))] = -1
        small = present & (length < self.inline_threshold)
        if inl:
            small.reshape(-1)[np.fromiter(inl, np.int64, len(inl))] = False
        if small.any():
            flat = np.flatnonzero(small)
            self._small.append((path, flat, offset.reshape(-1)[flat], length.reshape(-1)[flat]))
            pid.reshape(-1)[flat] = -1
        self.arrays[path] = {"path_id": pid, "offset": np.where(pid >= 0, offset, 0),
                             "length": np.where(pid >= 0, length, 0), "inline": inl}

    def build(self, read_ranges: Callable[[list[int], list[int]], list[bytes]]) -> ReferenceSet:
        """Read the small chunks (``read_ranges(offsets, lengths)``, one batch) and build the set."""
        if self._small:
            offs = np.concatenate([s[2] for s in self._small])
            lens = np.concatenate([s[3] for s in self._small])
            data = iter(read_ranges(offs.tolist(), lens.tolist()))
            for apath, flat, _, _ in self._small:
                self.arrays[apath]["inline"].update(zip(flat.tolist(), data))
        from ..producer import tables_from_arrays
        from ..source import MemorySource

        # the columns are built above (int64, grid-shaped): only the metadata is checked
        return ReferenceSet(MemorySource(*tables_from_arrays(self.metadata, self.arrays, [self.url],
                                                             trusted=True), {"format": "memory"}))
