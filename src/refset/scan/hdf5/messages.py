"""Decoders of object header message bodies (HDF5 File Format Specification v3, IV.A.2): dataspace
(0x01), datatype (0x03), fill value (0x04/0x05), data layout v3 (0x08), filter pipeline (0x0B),
attribute (0x0C), link (0x06, hard links only), and the heap and B-tree addresses of link info (0x02)
and attribute info (0x15) messages. Each takes the message's bytes and raises :class:`NotNative` for
what it does not decode."""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from refset.scan.hdf5.base import UNDEF, NotNative, need

__all__ = ["dataspace", "Datatype", "datatype", "fill_value", "layout", "filters", "link", "attribute",
           "dense_address"]


@functools.lru_cache(maxsize=1024)  # many attributes share a space; the result is not mutated
def dataspace(body: bytes) -> tuple[tuple[int, ...], tuple[int | None, ...]] | None:
    """(shape, maxshape with None for unlimited) of a dataspace message; None for a null space."""
    version, rank, flags = body[0], body[1], body[2]
    if version == 1:
        need(not flags & 0x02, "dataspace permutation")
        p = 8
        kind = 1 if rank else 0
    else:
        need(version == 2, "dataspace version")
        kind = body[3]
        p = 4
        need(kind in (0, 1, 2), "dataspace type")
        if kind == 2:
            return None
    need(rank <= 32 and len(body) >= p + 8 * rank * (2 if flags & 1 else 1), "dataspace")
    shape = struct.unpack_from(f"<{rank}Q", body, p)
    if flags & 1:
        mx = struct.unpack_from(f"<{rank}Q", body, p + 8 * rank)
        maxshape = tuple(None if m == UNDEF else int(m) for m in mx)
    else:
        maxshape = tuple(shape)
    if kind == 0:
        need(rank == 0, "scalar dataspace with dimensions")
    # libhdf5 refuses a size past its maximum (a corrupt extent would be a wrong shape)
    need(all(m is None or s <= m for s, m in zip(shape, maxshape, strict=True)), "dataspace size past its maximum")
    return tuple(int(s) for s in shape), maxshape


class Datatype:
    """A decoded datatype: ``kind`` one of "num", "str" (fixed), "vstr", "vref" (vlen of object
    references); ``dtype`` the numpy dtype h5py gives; ``size`` bytes per element in the file."""

    def __init__(self, kind: str, dtype: np.dtype, size: int, cset: int = 0) -> None:
        self.kind, self.dtype, self.size, self.cset = kind, dtype, size, cset


_IEEE = {  # size: (sign bit, exponent at, exponent bits, mantissa at, mantissa bits, bias)
    2: (15, 10, 5, 0, 10, 15), 4: (31, 23, 8, 0, 23, 127), 8: (63, 52, 11, 0, 52, 1023),
}


@functools.lru_cache(maxsize=1024)  # and a type
def datatype(body: bytes) -> Datatype:
    need(len(body) >= 8, "datatype")
    cls, version = body[0] & 0x0F, body[0] >> 4
    bits = body[1] | body[2] << 8 | body[3] << 16
    size = struct.unpack_from("<I", body, 4)[0]
    need(version in (1, 2, 3), "datatype version")
    order = ">" if bits & 1 else "<"
    if cls == 0:  # fixed-point
        need(not bits & ~0x09, "fixed-point padding")
        off, prec = struct.unpack_from("<HH", body, 8)
        need(size in (1, 2, 4, 8) and off == 0 and prec == 8 * size, "fixed-point precision")
        return Datatype("num", np.dtype(f"{order}{'i' if bits & 8 else 'u'}{size}"), size)
    if cls == 1:  # floating point
        need(size in _IEEE and not bits & 0x4E and (bits >> 4) & 3 == 2, "float layout")
        off, prec, epos, esize, mpos, msize, bias = struct.unpack_from("<HHBBBBI", body, 8)
        need(off == 0 and prec == 8 * size and ((bits >> 8) & 0xFF, epos, esize, mpos, msize, bias)
              == _IEEE[size], "not an IEEE float")
        return Datatype("num", np.dtype(f"{order}f{size}"), size)
    if cls == 3:  # fixed-length string
        pad, cset = bits & 0x0F, (bits >> 4) & 0x0F
        need(pad in (0, 1) and cset in (0, 1) and size > 0, "string padding/charset")
        return Datatype("str", np.dtype(f"S{size}"), size, cset)
    if cls == 9:  # variable-length
        vkind, cset = bits & 0x0F, (bits >> 8) & 0x0F
        need(size == 16, "vlen size")
        base = datatype(body[8:]) if vkind == 0 else None
        if vkind == 1:
            need(cset in (0, 1), "vlen string charset")
            return Datatype("vstr", np.dtype(object), 16, cset)
        need(vkind == 0 and base is not None and base.kind == "oref", "vlen sequence")
        return Datatype("vref", np.dtype(object), 16)
    if cls == 7:  # reference: object references only (inside DIMENSION_LIST)
        need(bits & 0x0F == 0 and size == 8, "reference type")
        return Datatype("oref", np.dtype("<u8"), 8)
    raise NotNative(f"datatype class {cls}")


def fill_value(old: bytes | None, new: bytes | None) -> bytes | None:
    """The raw fill value, None for the library default (zeros), from the fill value messages."""
    if new is not None:
        version = new[0]
        if version in (1, 2):
            need(new[3] == 1, "fill value not defined")
            n = struct.unpack_from("<I", new, 4)[0]
            need(len(new) >= 8 + n, "fill value")
            return new[8:8 + n] if n else None
        need(version == 3, "fill value version")
        flags = new[1]
        need(not flags & 0xC0, "fill value flags")
        need(not flags & 0x10, "undefined fill value")
        if flags & 0x20:
            n = struct.unpack_from("<I", new, 2)[0]
            need(len(new) >= 6 + n, "fill value")
            return new[6:6 + n] if n else None
        return None
    if old is not None:
        n = struct.unpack_from("<I", old)[0]
        need(len(old) >= 4 + n, "old fill value")
        return old[4:4 + n] if n else None
    return None


def layout(body: bytes) -> tuple[str, Any]:
    """("contiguous", (address, size)), ("chunked", (index, chunk shape, element size)) or
    ("compact", data): a version 3, 4 or 5 layout message (spec IV.A.2.i). ``index`` is the chunk
    index: ``("btree1", address)`` (version 3), else version 4's ``("single", address, filtered size
    or None, filter mask)``, ``("implicit", address)``, ``("farray", address)`` or ``("earray",
    address)``; a version 2 B-tree index is not native."""
    version = body[0]
    # version 5 (libhdf5 2.0) is version 4 with filtered chunk sizes in 8-byte fields, which the
    # indexes' own entry sizes say
    need(version in (3, 4, 5), "layout version")
    need(len(body) >= 2, "layout message")
    cls = body[1]
    if cls == 0:
        need(len(body) >= 4, "compact layout")
        size = struct.unpack_from("<H", body, 2)[0]
        need(len(body) >= 4 + size, "compact layout data")
        return "compact", body[4:4 + size]
    if cls == 1:
        need(len(body) >= 18, "contiguous layout")
        addr, size = struct.unpack_from("<QQ", body, 2)
        return "contiguous", (addr, size)
    if cls != 2:
        raise NotNative(f"layout class {cls}")
    if version == 3:
        rank = body[2]
        need(rank >= 1 and len(body) >= 11 + 4 * rank, "chunked layout")
        addr = struct.unpack_from("<Q", body, 3)[0]
        dims = struct.unpack_from(f"<{rank}I", body, 11)
        return "chunked", (("btree1", addr), tuple(int(d) for d in dims[:-1]), int(dims[-1]))
    need(len(body) >= 5, "chunked layout")
    flags, ndims, enc = body[2], body[3], body[4]
    need(ndims >= 2 and 1 <= enc <= 8 and not flags & ~0x03, "chunked layout")
    # edge chunks stored unfiltered under a filter pipeline: a reader applying the codecs to every
    # chunk would decode them wrong
    need(not flags & 0x01, "partial edge chunks not filtered")
    p = 5 + ndims * enc
    need(len(body) >= p + 1, "chunked layout dimensions")
    sizes = [int.from_bytes(body[5 + i * enc:5 + (i + 1) * enc], "little") for i in range(ndims)]
    kind = body[p]
    p += 1
    extra = {1: 12 if flags & 0x02 else 0, 2: 0, 3: 1, 4: 5, 5: 6}.get(kind)
    need(extra is not None, "chunk index type")
    assert extra is not None  # for mypy: need raised otherwise
    need(len(body) >= p + extra + 8, "chunk index information")
    addr = struct.unpack_from("<Q", body, p + extra)[0]
    if kind == 1:
        fsize, mask = struct.unpack_from("<QI", body, p) if flags & 0x02 else (None, 0)
        index: tuple[Any, ...] = ("single", addr, fsize, mask)
    elif kind == 2:
        index = ("implicit", addr)
    elif kind == 3:
        index = ("farray", addr)
    elif kind == 4:
        index = ("earray", addr)
    else:
        raise NotNative("version 2 B-tree chunk index")
    return "chunked", (index, tuple(sizes[:-1]), sizes[-1])


def filters(body: bytes) -> list[tuple[int, tuple[int, ...], str]]:
    """(filter id, client values, name) of a filter pipeline message, in order."""
    version, n = body[0], body[1]
    need(version in (1, 2) and n <= 32, "filter pipeline")
    p = 8 if version == 1 else 2
    out = []
    for _ in range(n):
        fid = struct.unpack_from("<H", body, p)[0]
        if version == 1 or fid >= 256:
            namelen, _flags, nvals = struct.unpack_from("<HHH", body, p + 2)
            p += 8
        else:
            namelen = 0
            _flags, nvals = struct.unpack_from("<HH", body, p + 2)
            p += 6
        name = body[p:p + namelen].split(b"\0", 1)[0].decode("latin-1")
        p += ((namelen + 7) & ~7) if version == 1 else namelen
        need(p + 4 * nvals <= len(body), "filter values")
        vals = struct.unpack_from(f"<{nvals}I", body, p)
        p += 4 * nvals + (4 if version == 1 and nvals % 2 else 0)
        out.append((fid, tuple(int(v) for v in vals), name))
    return out


def link(body: bytes) -> tuple[bytes, int, int | None]:
    """(name, object header address, creation order or None) of a hard link message; other
    links are not native."""
    need(len(body) >= 4 and body[0] == 1, "link version")
    flags = body[1]
    p = 2
    if flags & 0x08:  # link type, then creation order, then charset
        need(body[p] == 0, "soft or external link")
        p += 1
    order = None
    if flags & 0x04:
        need(len(body) >= p + 8, "link creation order")
        order = struct.unpack_from("<q", body, p)[0]
        p += 8
    if flags & 0x10:
        p += 1
    w = 1 << (flags & 3)
    n = int.from_bytes(body[p:p + w], "little")
    p += w
    need(0 < n and p + n + 8 <= len(body) and b"\0" not in body[p:p + n], "link name")
    return body[p:p + n], struct.unpack_from("<Q", body, p + n)[0], order


def attribute(body: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    """(name, datatype, dataspace, data) of an attribute message."""
    version = body[0]
    need(version in (1, 2, 3), "attribute version")
    if version > 1:
        need(not body[1] & 0x03, "shared attribute type/space")
    nname, ntype, nspace = struct.unpack_from("<HHH", body, 2)
    p = 8 if version < 3 else 9
    pad: Callable[[int], int] = (lambda x: (x + 7) & ~7) if version == 1 else (lambda x: x)
    name = body[p:p + nname]
    need(nname > 0 and name[-1:] == b"\0" and b"\0" not in name[:-1], "attribute name")
    p += pad(nname)
    dt = body[p:p + ntype]
    p += pad(ntype)
    sp = body[p:p + nspace]
    p += pad(nspace)
    need(p <= len(body), "attribute message")
    return name[:-1], dt, sp, body[p:]


def dense_address(body: bytes, tracked_flag: int) -> tuple[int, int]:
    """(fractal heap, name index v2 B-tree) addresses of a link info or attribute info message
    (UNDEF: compact storage)."""
    need(body[0] == 0, "info message version")
    p = 2 + ((8 if tracked_flag == 8 else 2) if body[1] & 1 else 0)
    need(len(body) >= p + 16, "info message")
    return struct.unpack_from("<QQ", body, p)
