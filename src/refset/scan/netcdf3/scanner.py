"""NetCDF3 files (classic CDF-1, 64-bit offset CDF-2, 64-bit data CDF-5) -> reference sets: the
:class:`NetCDF3Scanner`.

The header is parsed by refset itself (:mod:`.header`): no netCDF library is needed and only the
header's bytes are read. Fixed-size variables are one chunk (or several along the first axis with
``subchunk``); record variables are one chunk per record, since records interleave in the file.
Values stay big-endian as stored.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import DropList
from refset.io.magic import is_netcdf3
from refset.io.scanfile import ScanFile
from refset.model.setwriter import SetWriter
from refset.scan.flat import FlatScanner
from refset.scan.netcdf3.header import Variable, read_header
from refset.scan.writer import cannot, json_value, split_rows

__all__ = ["NetCDF3Scanner"]


class NetCDF3Scanner(FlatScanner):
    """NetCDF3 files. ``group`` may only name the root (NetCDF3 has no groups); options of other
    scanners (``max_inline``) are accepted and unused, so that one option set scans any file."""

    name: ClassVar[str] = "netcdf3"
    title: ClassVar[str] = "NetCDF3"

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return is_netcdf3(head)

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        # docstring inherited
        header = read_header(file)
        out.group("", {k: json_value(v) for k, v in header.attrs.items()})
        for var in header.variables:
            if var.name in drop or f"/{var.name}" in drop:
                continue
            attrs = {k: json_value(v) for k, v in var.attrs.items() if k != "_FillValue"}
            fill = _fill(var)
            if var.is_record:
                chunks = (1, *var.shape[1:])
                n = var.shape[0]
                step, length = header.recsize, var.nbytes
            else:
                rows = split_rows(var.shape, var.dtype.itemsize, self.subchunk)
                chunks = (rows, *var.shape[1:]) if var.shape else ()
                n = var.shape[0] // rows if var.shape else 1
                step = length = var.nbytes // n
            grid = (n, *([1] * (len(var.shape) - 1))) if var.shape else ()
            offsets = var.begin + step * np.arange(n, dtype=np.int64)
            out.array(var.name, shape=var.shape, chunks=tuple(max(c, 1) for c in chunks), dtype=var.dtype,
                      fill_value=fill, filters=None, attrs=attrs, dims=list(var.dims),
                      offset=offsets.reshape(grid), length=np.full(grid, length, np.int64))


def _fill(var: Variable) -> Any:
    """The ``_FillValue`` attribute as the zarr fill value (netCDF's default fills are not masked
    by xarray either, so they are not set)."""
    if "_FillValue" not in var.attrs:
        return None
    v = np.asarray(var.attrs["_FillValue"]).reshape(-1)
    if v.size != 1:
        raise cannot(var.name, f"its _FillValue has {v.size} values, expected one")
    return v[0]
