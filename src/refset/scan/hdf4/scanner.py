"""HDF4 files (the SD scientific data interface, as MODIS products use it) -> reference sets: the
:class:`Hdf4Scanner`.

refset reads the structures itself (HDF4 Specification and Developer's Guide, 4.2): the chain of data
descriptor blocks, the ``Var0.0`` Vgroups that name each scientific dataset (SDS) and list its
dimensions (``Dim0.0`` Vgroups) and attributes (``Attr0.0`` Vdatas), its numeric data group (NDG) with
its dimension record (SDD) and number type (NT), and the file's ``CDF0.0`` Vgroup for the global
attributes. Each SDS is an array of the stored (big- or little-endian) type: one chunk of its
contiguous data, or of its deflate-compressed data (a special compressed element: one zlib stream);
``_FillValue`` is the fill value; other attributes are kept as they are (MODIS's ``scale_factor``/
``add_offset`` follow HDF4's convention, ``scale * (stored - offset)``, not CF's: see docs/scan.md).

Data never written reads as ``_FillValue``, else as the fill value a chunked dataset records, else as
netCDF's default fill for the type (what the HDF4 library gives); that value is the zarr fill value only
when some chunk was never written (xarray masks a zarr fill value).

Refused, naming the dataset: data in linked blocks (an unlimited dimension's appended data), external
or buffered storage, compressions other than deflate, character data. Broken structures are
:class:`~refset.errors.InvalidFile`.
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import DropList
from refset.io.magic import is_hdf4
from refset.io.scanfile import Broken, ScanFile
from refset.model.setwriter import SetWriter
from refset.scan.flat import FlatScanner
from refset.scan.writer import cannot

__all__ = ["Hdf4Scanner", "MAX_DDS"]

MAX_DDS = 10_000_000
NT, SDD, SD, NDG, VH, VS, VG, COMPRESSED, LINKED = 106, 701, 702, 720, 1962, 1963, 1965, 40, 20
SPECIAL = 0x4000
MAX_CHUNKS = 1 << 26  # chunks of one dataset's grid
#: netCDF's default fill values (what the SD interface gives for data never written), by numpy kind
_DEFAULT_FILL = {"i1": -127, "u1": 255, "i2": -32767, "u2": 65535, "i4": -2147483647, "u4": 4294967295,
                 "i8": -9223372036854775806, "u8": 18446744073709551614, "f4": 9.969209968386869e36,
                 "f8": 9.969209968386869e36}
#: HDF4 number types -> numpy kinds (DFNT_*); | 0x4000 is little-endian
_NT = {3: "u1", 4: "S1", 5: "f4", 6: "f8", 20: "i1", 21: "u1", 22: "i2", 23: "u2", 24: "i4", 25: "u4", 26: "i8",
       27: "u8"}


class _File:
    def __init__(self, file: ScanFile) -> None:
        self.f = file
        self.dds: dict[tuple[int, int], tuple[int, int]] = {}
        at, seen = 4, set()
        while at:
            if at in seen:
                raise Broken("the chain of descriptor blocks loops")
            seen.add(at)
            head = self.read(at, 6)
            n, nxt = struct.unpack(">hi", head)
            if n < 0 or len(self.dds) + n > MAX_DDS:
                raise Broken(f"a descriptor block of {n} entries at byte {at}")
            body = self.read(at + 6, 12 * n)
            for i in range(n):
                tag, ref, off, ln = struct.unpack_from(">HHii", body, 12 * i)
                if tag != 1:  # DFTAG_NULL: an empty slot
                    self.dds[(tag, ref)] = (off, ln)
            if nxt < 0 or nxt >= file.size:
                if nxt:
                    raise Broken(f"the next descriptor block at {nxt} lies past the end of the file")
            at = nxt

    def read(self, at: int, n: int) -> bytes:
        """Metadata: descriptor blocks, Vgroups, Vdatas, data groups, special element headers."""
        return self.f.read_exact(at, n)

    def element(self, tag: int, ref: int) -> bytes:
        got = self.dds.get((tag, ref))
        if got is None:
            raise Broken(f"element {tag}/{ref} is named but has no descriptor")
        return self.read(*got)

    def data(self, tag: int, ref: int, limit: int) -> bytes | None:
        """An element's bytes, also when stored in linked blocks (a special element of kind 1: a
        link table, DFTAG_LINKED, listing the blocks); None when it has none."""
        if (tag, ref) in self.dds:
            off, ln = self.dds[(tag, ref)]
            return None if off < 0 or ln <= 0 else self.read(off, min(ln, limit))
        if (tag | SPECIAL, ref) not in self.dds:
            return None
        head = self.element(tag | SPECIAL, ref)
        kind, length, block_len, nblocks, link = struct.unpack_from(">HiiiH", head, 0)
        if kind != 1:
            raise Broken(f"element {tag}/{ref}: special storage of kind {kind}")
        if length < 0 or block_len <= 0 or not 0 < nblocks <= 1 << 20:
            raise Broken(f"element {tag}/{ref}: linked blocks of {length} bytes in blocks of {block_len}")
        out = bytearray()
        seen: set[int] = set()
        while link and len(out) < min(length, limit):
            if link in seen:
                raise Broken(f"element {tag}/{ref}: its link tables loop")
            seen.add(link)
            table = self.element(LINKED, link)
            nxt, *blocks = struct.unpack_from(f">H{nblocks}H", table, 0)
            for b in blocks:
                if not b or len(out) >= length:
                    break
                out += self.element(LINKED, b)
            link = nxt
        return bytes(out[:min(length, limit)])

    def vgroup(self, ref: int) -> tuple[list[tuple[int, int]], str, str]:
        b = self.element(VG, ref)
        (n,) = struct.unpack_from(">H", b, 0)
        tags = struct.unpack_from(f">{n}H", b, 2)
        refs = struct.unpack_from(f">{n}H", b, 2 + 2 * n)
        at = 2 + 4 * n
        (ln,) = struct.unpack_from(">H", b, at)
        name = b[at + 2:at + 2 + ln].decode("latin-1")
        at += 2 + ln
        (lc,) = struct.unpack_from(">H", b, at)
        klass = b[at + 2:at + 2 + lc].decode("latin-1")
        return list(zip(tags, refs)), name, klass

    def vdata_header(self, ref: int) -> tuple[int, int, list[tuple[str, int, int, int]], str, str]:
        """``(records, record size, [(field, number type, offset, order)], name, class)`` of a Vdata."""
        h = self.element(VH, ref)
        interlace, nvert, ivsize, nfields = struct.unpack_from(">hiHh", h, 0)
        if not 0 < nfields <= 1024 or nvert < 0 or interlace != 0:
            raise Broken(f"a Vdata of {nfields} fields, {nvert} records, interlace {interlace}")
        at = 10
        types = struct.unpack_from(f">{nfields}h", h, at)
        offsets = struct.unpack_from(f">{nfields}h", h, at + 4 * nfields)
        orders = struct.unpack_from(f">{nfields}h", h, at + 6 * nfields)
        at += 8 * nfields
        names = []
        for _ in range(nfields):
            (ln,) = struct.unpack_from(">h", h, at)
            names.append(h[at + 2:at + 2 + ln].decode("latin-1"))
            at += 2 + ln
        (ln,) = struct.unpack_from(">h", h, at)
        name = h[at + 2:at + 2 + ln].decode("latin-1")
        at += 2 + ln
        (lc,) = struct.unpack_from(">h", h, at)
        klass = h[at + 2:at + 2 + lc].decode("latin-1")
        return nvert, ivsize, list(zip(names, types, offsets, orders)), name, klass

    def vdata_field(self, ref: int, nvert: int, ivsize: int, ntype: int, offset: int, order: int) -> np.ndarray:
        """One field of every record of a Vdata, shape ``(records, order)``."""
        kind = _NT.get(ntype & 0x3FFF)
        if kind is None:
            raise Broken(f"a Vdata field of number type {ntype}")
        dt = np.dtype(("<" if ntype & 0x4000 else ">") + kind) if kind[-1] != "1" else np.dtype(kind)
        data = self.data(VS, ref, nvert * ivsize) if nvert else None
        if data is None:
            return np.zeros((0, order), dt)
        if len(data) < nvert * ivsize or offset + order * dt.itemsize > ivsize:
            raise Broken(f"a Vdata of {len(data)} bytes for {nvert} records of {ivsize}")
        raw = np.frombuffer(data, np.uint8).reshape(nvert, ivsize)
        cols = raw[:, offset:offset + order * dt.itemsize].copy()
        return cols.view(dt).reshape(nvert, order)

    def vdata(self, ref: int) -> tuple[str, str, Any]:
        """``(name, class, value)`` of a one-field Vdata (an attribute)."""
        nvert, ivsize, fields, name, klass = self.vdata_header(ref)
        if len(fields) != 1 or _NT.get(fields[0][1] & 0x3FFF) is None:
            return name, klass, None
        values = self.vdata_field(ref, nvert, ivsize, *fields[0][1:]).reshape(-1)
        if not values.size:
            return name, klass, None
        if values.dtype.kind == "S":
            return name, klass, values.tobytes().rstrip(b"\0").decode("utf-8", "replace")
        out = [v.item() for v in values]
        return name, klass, out[0] if len(out) == 1 else out


def _dtype(nt: bytes, name: str) -> np.dtype[Any]:
    if len(nt) < 4:
        raise Broken(f"dataset {name!r}: a number type of {len(nt)} bytes")
    code = nt[1]
    kind = _NT.get(code)
    if kind is None or kind == "S1":
        raise cannot(name, f"HDF4 number type {code} is not referenced (integers and floats are)")
    little = nt[3] == 4  # DFNTF_PC / DFNTI_IBO: little-endian class
    return np.dtype(("|" if kind[-1] == "1" else "<" if little else ">") + kind)


class Hdf4Scanner(FlatScanner):
    """HDF4 files: the scientific datasets (SD interface)."""

    name: ClassVar[str] = "hdf4"
    title: ClassVar[str] = "HDF4"

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return is_hdf4(head)

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        # docstring inherited: every structure read is metadata (the datasets' data is not read)
        try:
            self._write(_File(file), out, drop)
        except struct.error as e:  # a structure's fields run past the bytes its descriptor gives it
            raise Broken(f"a structure is cut ({e})") from None

    def _write(self, h: _File, out: SetWriter, drop: DropList) -> None:
        groups = {ref: h.vgroup(ref) for tag, ref in h.dds if tag == VG}
        root: dict[str, Any] = {}
        for elems, _name, klass in groups.values():
            if klass == "CDF0.0":
                root.update(_attrs(h, elems))
        out.group("", root)
        names: set[str] = set()
        for elems, name, klass in groups.values():
            if klass != "Var0.0" or name in drop:
                continue
            ndg = next((r for t, r in elems if t == NDG), None)
            if ndg is None:
                continue  # a dataset created and never defined
            if name in names:
                raise cannot(name, "two datasets of one name")
            names.add(name)
            dims = [groups[r][1] for t, r in elems if t == VG and r in groups and groups[r][2] in ("Dim0.0", "UDim0.0")]
            self._sds(h, out, name, ndg, dims, _attrs(h, elems))

    def _sds(self, h: _File, out: SetWriter, name: str, ndg: int, dims: list[str], attrs: dict[str, Any]) -> None:
        group = h.element(NDG, ndg)
        members = [struct.unpack_from(">HH", group, i) for i in range(0, len(group) - 3, 4)]
        sdd_ref = next((r for t, r in members if t == SDD), None)
        sd_ref = next((r for t, r in members if t == SD), None)
        if sdd_ref is None:
            raise Broken(f"dataset {name!r}: its data group has no dimension record")
        sdd = h.element(SDD, sdd_ref)
        (rank,) = struct.unpack_from(">h", sdd, 0)
        if not 0 < rank <= 32:
            raise Broken(f"dataset {name!r}: rank {rank}")
        shape = tuple(struct.unpack_from(f">{rank}i", sdd, 2))
        if any(n < 0 for n in shape):
            raise Broken(f"dataset {name!r}: shape {shape}")
        nt_tag, nt_ref = struct.unpack_from(">HH", sdd, 2 + 4 * rank)
        dtype = _dtype(h.element(nt_tag, nt_ref), name)
        fill = attrs.pop("_FillValue", None)
        if isinstance(fill, list):
            fill = fill[0] if fill else None
        if fill is None:
            fill = _DEFAULT_FILL.get(dtype.str[1:])
        if len(dims) != rank:
            dims = [f"{name}_dim{i}" for i in range(rank)]
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        chunks = tuple(max(n, 1) for n in shape)
        grid = tuple(-(-n // c) for n, c in zip(shape, chunks))  # one chunk; none for an empty dataset
        filters = None
        offset = length = np.zeros(grid, np.int64)
        if sd_ref is not None and (SD, sd_ref) in h.dds:
            off, ln = h.dds[(SD, sd_ref)]
            if off >= 0 and ln > 0:
                if ln != nbytes:
                    raise Broken(f"dataset {name!r}: {ln} bytes of data for {nbytes}")
                offset, length = np.full(grid, off, np.int64), np.full(grid, ln, np.int64)
        elif sd_ref is not None and (SD | SPECIAL, sd_ref) in h.dds:
            head = h.element(SD | SPECIAL, sd_ref)
            (kind,) = struct.unpack_from(">H", head, 0)
            if kind == 5:
                self._chunked(h, out, name, head, shape, dtype, dims, attrs, fill)
                return
            if kind != 3:
                what = {1: "linked blocks", 2: "an external file", 6: "buffered"}.get(kind, str(kind))
                raise cannot(name, f"its data is stored in {what} (contiguous, compressed and chunked data are "
                                   "referenced)")
            _version, total, comp_ref, _model, comp = struct.unpack_from(">HiHHH", head, 2)
            if comp != 4:
                raise cannot(name, f"compression {comp} (deflate, 4, is referenced)")
            if total != nbytes:
                raise Broken(f"dataset {name!r}: {total} bytes compressed for {nbytes}")
            off, ln = h.dds.get((COMPRESSED, comp_ref), (-1, -1))
            if off < 0 or ln <= 0 or off + ln > h.f.size:
                raise Broken(f"dataset {name!r}: its compressed data lies outside the file")
            offset, length = np.full(grid, off, np.int64), np.full(grid, ln, np.int64)
            filters = [{"id": "zlib", "level": 6}]
        out.array(name, shape=shape, chunks=chunks, dtype=dtype, fill_value=_fill_if_missing(fill, length),
                  filters=filters, attrs=attrs, dims=dims, offset=offset, length=length)


    def _chunked(self, h: _File, out: SetWriter, name: str, head: bytes, shape: tuple[int, ...],
                 dtype: np.dtype[Any], dims: list[str], attrs: dict[str, Any], fill: Any) -> None:
        """A chunked SDS: its chunk table (a Vdata of origin, tag, ref) gives each chunk's element,
        raw or deflate-compressed (HDF4 Developer's Guide, chunked element description record)."""
        _version, flag, _total, chunk_size, nt_size, tbl_tag, tbl_ref = struct.unpack_from(">BiiiiHH", head, 6)
        at = 6 + 1 + 16 + 4 + 4  # past the fields above and the unused special tag/ref
        (ndims,) = struct.unpack_from(">i", head, at)
        at += 4
        if ndims != len(shape) or tbl_tag != VH:
            raise Broken(f"dataset {name!r}: a chunk record of {ndims} dims for {len(shape)}")
        chunks = []
        for _ in range(ndims):
            _distrib, _length, clen = struct.unpack_from(">iii", head, at)
            at += 12
            chunks.append(clen)
        if any(c <= 0 for c in chunks) or int(np.prod(chunks)) != chunk_size or nt_size != dtype.itemsize:
            raise Broken(f"dataset {name!r}: chunks {chunks} of {chunk_size} values of {nt_size} bytes")
        chunk_bytes = chunk_size * nt_size
        filters = None
        (clen,) = struct.unpack_from(">i", head, at)
        if clen == dtype.itemsize and fill == _DEFAULT_FILL.get(dtype.str[1:]) and "_FillValue" not in attrs:
            fill = np.frombuffer(head[at + 4:at + 4 + clen], dtype.newbyteorder(">") if dtype.itemsize > 1
                                 else dtype)[0].item()  # the fill value the chunk record holds
        at += 4 + clen
        if flag & 1:  # chunks are special elements: compressed
            sp, _n = struct.unpack_from(">Hi", head, at)
            _model, comp = struct.unpack_from(">HH", head, at + 6)
            if sp != 3 or comp != 4:
                raise cannot(name, f"chunks compressed with {comp} (deflate, 4, is referenced)")
            filters = [{"id": "zlib", "level": 6}]
        nvert, ivsize, fields, _n2, _c = h.vdata_header(tbl_ref)
        if len(fields) != 3:
            raise Broken(f"dataset {name!r}: a chunk table of {len(fields)} fields")
        origin = h.vdata_field(tbl_ref, nvert, ivsize, *fields[0][1:]).astype(np.int64)
        tags = h.vdata_field(tbl_ref, nvert, ivsize, *fields[1][1:]).reshape(-1)
        refs = h.vdata_field(tbl_ref, nvert, ivsize, *fields[2][1:]).reshape(-1)
        grid = tuple(-(-n // c) for n, c in zip(shape, chunks))
        if int(np.prod(grid, dtype=np.float64)) > MAX_CHUNKS:
            raise Broken(f"dataset {name!r}: a grid of {grid} chunks")
        if origin.shape[1] != ndims or (origin < 0).any() or (origin >= np.asarray(grid)).any():
            raise Broken(f"dataset {name!r}: chunk origins off its grid {grid}")
        offset = np.zeros(grid, np.int64)
        length = np.zeros(grid, np.int64)
        for o, t, r in zip(origin.tolist(), tags.tolist(), refs.tolist()):
            if (t, r) in h.dds and not t & SPECIAL:
                off, ln = h.dds[(t, r)]
                if filters is not None or ln != chunk_bytes:
                    raise Broken(f"dataset {name!r}: a raw chunk of {ln} bytes")
            else:
                sub = h.element(t | SPECIAL, r)
                kind, _v, n, comp_ref = struct.unpack_from(">HHiH", sub, 0)
                if kind != 3 or n != chunk_bytes or filters is None:
                    raise Broken(f"dataset {name!r}: chunk {o} is a special element of kind {kind}")
                off, ln = h.dds.get((COMPRESSED, comp_ref), (-1, -1))
            if off < 0 or ln <= 0 or off + ln > h.f.size:
                raise Broken(f"dataset {name!r}: chunk {o} lies outside the file")
            offset[tuple(o)], length[tuple(o)] = off, ln
        out.array(name, shape=shape, chunks=tuple(chunks), dtype=dtype, fill_value=_fill_if_missing(fill, length),
                  filters=filters, attrs=attrs, dims=dims, offset=offset, length=length)


def _fill_if_missing(fill: Any, length: np.ndarray) -> Any:
    """The fill value when a chunk was never written (what it reads as), else None: xarray masks a
    zarr fill value, and a value equal to a default fill is data where every chunk was written."""
    return fill if length.size and bool((length == 0).any()) else None


def _attrs(h: _File, elems: list[tuple[int, int]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t, r in elems:
        if t == VH and (VH, r) in h.dds:
            name, klass, value = h.vdata(r)
            if klass == "Attr0.0" and value is not None:
                out[name] = value
    return out
