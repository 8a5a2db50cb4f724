"""The header of a NetCDF3 file (classic CDF-1, 64-bit offset CDF-2, 64-bit data CDF-5), parsed from the
format specification: dimensions, attributes, and each variable's type, shape and where its data lies.
Every count and offset is checked against the file's size before anything is allocated."""

from __future__ import annotations

import builtins
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from refset.io.scanfile import Broken, ScanFile

__all__ = ["read_header", "Header", "Variable"]


_DIMENSION, _VARIABLE, _ATTRIBUTE = 10, 11, 12
# nc_type -> numpy dtype as stored; 7..11 exist only in CDF-5.
_TYPES = {1: "i1", 2: "S1", 3: ">i2", 4: ">i4", 5: ">f4", 6: ">f8",
          7: "u1", 8: ">u2", 9: ">u4", 10: ">i8", 11: ">u8"}


@dataclass(frozen=True)
class Variable:
    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    attrs: dict[str, Any]
    begin: int
    is_record: bool

    @property
    def nbytes(self) -> int:
        """Bytes of the whole variable (fixed) or of one record (record variable), unpadded."""
        shape = self.shape[1:] if self.is_record else self.shape
        return math.prod(shape) * self.dtype.itemsize  # Python ints: exact for any header


@dataclass(frozen=True)
class Header:
    version: int
    numrecs: int
    recsize: int
    attrs: dict[str, Any]
    variables: tuple[Variable, ...]
    size: int  # bytes of the header itself


class _Reader:
    """Reads the header from the file in growing blocks (a remote file: one or two requests)."""

    def __init__(self, file: ScanFile) -> None:
        self.file, self.size = file, file.size
        self.buf = bytearray()
        self.pos = 0
        magic = self.take(4, "the magic number")
        self.version = magic[3]
        self.count_size = 8 if self.version == 5 else 4

    def error(self, what: str) -> Broken:
        return Broken(f"NetCDF3 header: {what} (at byte {self.pos})", titled=False)

    def take(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if end > self.size:
            raise self.error(f"the file ends ({self.size} bytes) while reading {what}")
        if end > len(self.buf):
            grow = max(end - len(self.buf), len(self.buf), 65536)
            self.buf += self.file.read_at(len(self.buf), min(grow, self.size - len(self.buf)))
            if end > len(self.buf):
                raise self.error(f"short read of {what}")
        out = bytes(self.buf[self.pos:end])
        self.pos = end
        return out

    def int(self, size: int, what: str) -> int:
        return int.from_bytes(self.take(size, what), "big", signed=False)

    def count(self, what: str) -> builtins.int:  # builtins: the method int shadows it here
        n = self.int(self.count_size, what)
        if self.count_size == 4 and n >= 2**31:
            raise self.error(f"{what} is {n}, not a non-negative 32-bit integer")
        if n >= 2**63:
            raise self.error(f"{what} is {n}, not a non-negative 64-bit integer")
        return n

    def items(self, tag: builtins.int, what: str, min_size: builtins.int) -> builtins.int:
        """The number of items of a dimension/attribute/variable list (0 when ABSENT)."""
        got = self.int(4, f"the {what} list tag")
        n = self.count(f"the number of {what}s")
        if got == 0 and n == 0:
            return 0
        if got != tag:
            raise self.error(f"the {what} list tag is {got}, expected {tag} (or an absent list)")
        if n * min_size > self.size - self.pos:
            raise self.error(f"{n} {what}s cannot fit in the rest of the file")
        return n

    def padded(self, n: builtins.int, what: str) -> bytes:
        data = self.take(n, what)
        self.take(-n % 4, f"the padding of {what}")
        return data

    def name(self, what: str) -> str:
        n = self.count(f"the length of the name of {what}")
        raw = self.padded(n, f"the name of {what}").split(b"\0", 1)[0]  # a C string, as netCDF-C reads it
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"the name of {what} is not UTF-8: {raw!r}") from None

    def key_name(self, what: str) -> str:
        """A dimension's or variable's name: it becomes a zarr key, so it may not be empty, ``.`` or
        ``..``, nor hold ``/`` (netCDF-C's rules for names refuse them too)."""
        name = self.name(what)
        if name in ("", ".", "..") or "/" in name:
            raise self.error(f"{what} is named {name!r}, which is not a netCDF name")
        return name

    def dtype(self, what: str) -> np.dtype:
        t = self.int(4, f"the type of {what}")
        if t not in _TYPES or (t > 6 and self.version != 5):
            raise self.error(f"{what} has type {t}, not a NetCDF type of CDF-{self.version}")
        return np.dtype(_TYPES[t])

    def attributes(self, where: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for _ in range(self.items(_ATTRIBUTE, f"{where} attribute", 12)):
            name = self.name(f"an attribute of {where}")
            what = f"attribute {name!r} of {where}"
            dt = self.dtype(what)
            n = self.count(f"the number of values of {what}")
            if n * dt.itemsize > self.size - self.pos:
                raise self.error(f"{what} has {n} values, more than the rest of the file")
            raw = self.padded(n * dt.itemsize, f"the values of {what}")
            out[name] = _attr_value(raw, dt, name)
        return out


def _attr_value(raw: bytes, dt: np.dtype, name: str) -> Any:
    """As netCDF4-python gives it: text for chars (NULs removed), a scalar for one value."""
    if dt.kind == "S":
        if name == "_FillValue":
            return np.frombuffer(raw, dt)
        return raw.decode("utf-8", errors="replace").replace("\x00", "")
    return np.frombuffer(raw, dt).astype(dt.newbyteorder("="))


def read_header(file: ScanFile) -> Header:
    """Parse and check a NetCDF3 header: every variable's data must lie inside the file. The header's
    bytes are the file's metadata (``file.mark_metadata``)."""
    r = _Reader(file)
    size = file.size
    if r.version not in (1, 2, 5):
        raise r.error(f"unknown NetCDF3 version {r.version}")
    offset_size = 4 if r.version == 1 else 8
    numrecs = r.int(r.count_size, "the number of records")
    streaming = numrecs == 2 ** (8 * r.count_size) - 1
    if not streaming and numrecs >= 2 ** (8 * r.count_size - 1):
        raise r.error(f"the number of records is {numrecs}")
    dims: list[tuple[str, int]] = []
    for _ in range(r.items(_DIMENSION, "dimension", 2 * r.count_size)):
        name = r.key_name("a dimension")
        dims.append((name, r.count(f"the length of dimension {name!r}")))
    if sum(1 for _, n in dims if n == 0) > 1:
        raise r.error("more than one unlimited dimension")
    attrs = r.attributes("the file")
    raw_vars = []
    for _ in range(r.items(_VARIABLE, "variable", 4 * r.count_size)):
        name = r.key_name("a variable")
        ndims = r.count(f"the number of dimensions of variable {name!r}")
        if ndims * r.count_size > size - r.pos:
            raise r.error(f"variable {name!r} has {ndims} dimensions, more than the file can hold")
        ids = [r.count(f"a dimension id of variable {name!r}") for _ in range(ndims)]
        for i, d in enumerate(ids):
            if d >= len(dims):
                raise r.error(f"variable {name!r} names dimension id {d}; the file has {len(dims)}")
            if dims[d][1] == 0 and i:
                raise r.error(f"variable {name!r} has the unlimited dimension at position {i}, not first")
        vattrs = r.attributes(f"variable {name!r}")
        dt = r.dtype(f"variable {name!r}")
        r.int(r.count_size, f"the size of variable {name!r}")  # vsize: recomputed (it saturates at 4 GiB)
        begin = r.int(offset_size, f"the data offset of variable {name!r}")
        raw_vars.append((name, ids, vattrs, dt, begin))
    header_size = r.pos
    file.mark_metadata(0, header_size)

    record = [v for v in raw_vars if v[1] and dims[v[1][0]][1] == 0]
    # Each record holds every record variable's slab, padded to 4 bytes, unless there is just one.
    slabs = [math.prod(dims[d][1] for d in v[1][1:]) * v[3].itemsize for v in record]
    recsize = slabs[0] if len(slabs) == 1 else sum(s + (-s % 4) for s in slabs)
    if streaming:
        first = min((v[4] for v in record), default=size)
        numrecs = (size - first) // recsize if recsize and size > first else 0
    variables = []
    for name, ids, vattrs, dt, begin in raw_vars:
        is_record = bool(ids) and dims[ids[0]][1] == 0
        shape = tuple(numrecs if dims[d][1] == 0 else dims[d][1] for d in ids)
        var = Variable(name, tuple(dims[d][0] for d in ids), shape, dt, vattrs, begin, is_record)
        if begin < header_size:
            raise Broken(f"variable {name!r}: its data offset {begin} lies inside the header ({header_size} "
                         "bytes)", titled=False)
        end = begin + var.nbytes + (recsize * (numrecs - 1) if is_record and numrecs else 0)
        if (var.nbytes if not is_record else numrecs) and end > size:
            raise Broken(f"variable {name!r}: its data ends at byte {end}, past the end of the file ({size} "
                         "bytes)", titled=False)
        variables.append(var)
    _check_order(variables, header_size, slabs)
    return Header(r.version, numrecs, recsize, attrs, tuple(variables), header_size)


def _check_order(variables: list[Variable], header_size: int, slabs: list[int]) -> None:
    """Data laid out as netCDF-C lays it out and checks on opening (``NC_check_voffs``): the
    fixed-size variables one after another in the order they are defined, then the record
    variables' slabs in theirs, none overlapping another. A file where they overlap is refused by
    netCDF-C ("Unknown file format"), so it is here too: its values would be read twice."""
    prev, before = header_size, "the header"
    for v in (v for v in variables if not v.is_record):
        if v.begin < prev:
            raise Broken(f"variable {v.name!r}: its data at byte {v.begin} overlaps {before} (which ends at "
                         f"byte {prev})", titled=False)
        prev, before = v.begin + v.nbytes, f"variable {v.name!r}"
    for v, slab in zip((v for v in variables if v.is_record), slabs, strict=True):
        if v.begin < prev:
            raise Broken(f"record variable {v.name!r}: its data at byte {v.begin} overlaps {before} (which "
                         f"ends at byte {prev})", titled=False)
        prev, before = v.begin + slab, f"record variable {v.name!r}"
