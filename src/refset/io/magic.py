"""What a file or a directory is, from its first bytes or what it holds: the one :func:`describe` (and
:func:`describe_directory`) behind every message that names a mistaken input ("is a GRIB file, not a
reference set: make one with `refset scan`"), and the signatures it reads: those of reference sets
(JSON, gzip/zstd, packed, parquet) and of the data files refset scans (HDF5, NetCDF3, GRIB, TIFF,
FITS, HDF4, DMR++ sidecars; the built-in scanners' ``sniff`` are these), for the readers, the
scanners and the command line alike. Imports nothing of refset."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["PACKED_MAGIC", "GZIP_MAGIC", "ZSTD_MAGIC", "HDF5_MAGIC", "NETCDF3_MAGIC", "PARQUET_MAGIC", "TIFF_MAGIC",
           "HDF4_MAGIC", "ZARR_STORE_FILES", "HEAD_SIZE", "Kind", "describe", "describe_directory", "not_a_set",
           "zarr_store_problem", "file_reader", "starts_like_refs", "hdf5_superblock", "is_netcdf3", "is_tiff",
           "is_grib", "is_fits", "is_hdf4", "is_dmrpp"]

PACKED_MAGIC = b"\x89RFSPK\r\n"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"  # at 0, or at 512, 1024, 2048, ... after a user block
NETCDF3_MAGIC = (b"CDF\x01", b"CDF\x02", b"CDF\x05")
PARQUET_MAGIC = b"PAR1"
TIFF_MAGIC = (b"II*\0", b"MM\0*", b"II+\0", b"MM\0+")  # TIFF and BigTIFF, little- and big-endian
HDF4_MAGIC = b"\x0e\x03\x13\x01"
ZARR_STORE_FILES = (".zgroup", ".zarray", "zarr.json")
#: Bytes read to tell a remote set's format; its reader starts from them (all of a shorter file).
HEAD_SIZE = 1 << 16
_IDX_LINE = re.compile(rb"1:0:d=\d{10}:")  # wgrib2's inventory: its first message's line


def file_reader(f: Any) -> Callable[[int, int], bytes]:
    """``read_at(offset, n)`` over the open binary file ``f``."""
    def read_at(offset: int, n: int) -> bytes:
        f.seek(offset)
        return bytes(f.read(n))
    return read_at


def hdf5_superblock(read_at: Callable[[int, int], bytes], size: int) -> int | None:
    """Where an HDF5 file's superblock is: at 0, or after a user block at 512, 1024, 2048, ...; None
    when the file is no HDF5 file."""
    if read_at(0, 8) == HDF5_MAGIC:
        return 0
    at = 512
    while at + 8 <= size:
        if read_at(at, 8) == HDF5_MAGIC:
            return at
        at *= 2
    return None


# -- the data files' signatures (each a scanner's sniff) -------------------------------------------------
def is_netcdf3(head: bytes) -> bool:
    """NetCDF3: classic, 64-bit offset or 64-bit data (CDF-1, 2, 5)."""
    return head[:4] in NETCDF3_MAGIC


def is_tiff(head: bytes) -> bool:
    """TIFF or BigTIFF (GeoTIFF and COG included)."""
    return head[:4] in TIFF_MAGIC


def is_grib(head: bytes) -> bool:
    """GRIB, edition 1 or 2."""
    return head[:4] == b"GRIB" and len(head) > 7 and head[7] in (1, 2)


def is_fits(head: bytes) -> bool:
    """FITS: a primary header saying ``SIMPLE = T``."""
    return head[:9] == b"SIMPLE  =" and head[9:30].strip() == b"T"


def is_hdf4(head: bytes) -> bool:
    """HDF4 (the HDF magic number)."""
    return head[:4] == HDF4_MAGIC


def is_dmrpp(head: bytes) -> bool:
    """A DMR++ sidecar: an XML document in OPeNDAP's dmrpp namespace."""
    return head.lstrip()[:5] in (b"<?xml", b"<Data") and b"xml.opendap.org/dap/dmrpp" in head


def starts_like_refs(head: bytes) -> bool:
    """Whether a file starting with ``head`` may be a reference set (JSON, compressed or packed)."""
    return head.lstrip()[:1] in (b"{", b"[", b"") or head.startswith((GZIP_MAGIC, ZSTD_MAGIC, PACKED_MAGIC))


# -- what a file or a directory is -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Kind:
    """What a file or directory is: ``name`` (``"hdf5"``, ``"grib"``, ``"json"``, ``"directory"``...),
    ``text`` to say it with (``"a GRIB file"``), whether ``refset scan`` reads it (``scanned``) and
    whether it is a reference set ``refset.load`` reads (``refs``)."""

    name: str
    text: str
    scanned: bool = False
    refs: bool = False


_DATA = (  # (name, text, sniff) of the data files refset scans, told by their head
    ("netcdf3", "a NetCDF/HDF5 file", is_netcdf3),
    ("tiff", "a TIFF file", is_tiff),
    ("grib", "a GRIB file", is_grib),
    ("fits", "a FITS file", is_fits),
    ("dmrpp", "a DMR++ sidecar", is_dmrpp),
    ("hdf4", "an HDF4 file", is_hdf4),
)


def describe(read_at: Callable[[int, int], bytes], size: int) -> Kind:
    """What the file is (``read_at(offset, n)``: its bytes, fewer at its end; ``size``: how many it
    has): a data file refset scans, a reference set (JSON, a list of them, compressed, packed), a
    parquet set's record file, a GRIB inventory, text, or nothing refset knows."""
    head = read_at(0, 1 << 10)
    for name, text, sniff in _DATA:
        if sniff(head):
            return Kind(name, text, scanned=True)
    if hdf5_superblock(read_at, size) is not None:
        return Kind("hdf5", "a NetCDF/HDF5 file", scanned=True)
    if head.startswith(PACKED_MAGIC):
        return Kind("packed", "a reference set (packed)", refs=True)
    if head.startswith((GZIP_MAGIC, ZSTD_MAGIC)):
        return Kind("compressed", f"a {'gzip' if head.startswith(GZIP_MAGIC) else 'zstd'}-compressed reference set "
                                  "(JSON)", refs=True)
    if head.startswith(PARQUET_MAGIC):
        return Kind("parquet-record", "one record file of a parquet reference set")
    first = head.lstrip()[:1]
    if not first:
        return Kind("empty", "an empty file" if not head else "a file of blanks")
    if first == b"{":
        return Kind("json", "a reference set (JSON)", refs=True)
    if first == b"[":
        return Kind("json-list", "a list of reference sets (JSON)", refs=True)
    if _IDX_LINE.match(head):
        return Kind("idx", "a GRIB inventory (a .idx sidecar)")
    if _is_text(head):
        return Kind("text", "a text file")
    return Kind("unknown", f"a file of no kind refset knows (first bytes {head[:8]!r})")


def _is_text(head: bytes) -> bool:
    """Whether ``head`` is printable UTF-8 text (a character cut at its end allowed)."""
    for cut in range(4):
        try:
            text = head[:len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return all(c.isprintable() or c.isspace() for c in text)
    return False


def describe_directory(has: Callable[[str], bool], read: Callable[[str], bytes]) -> Kind:
    """What a directory is (``has(name)``: whether it holds ``name``; ``read(name)``: the first bytes
    of a file in it): a parquet reference set, a zarr store, or just a directory."""
    if has(".zmetadata"):
        try:
            if b"record_size" in read(".zmetadata"):
                return Kind("parquet", "a parquet reference set", refs=True)
        except OSError:
            pass
    found = [n for n in ZARR_STORE_FILES if has(n)]
    if found:
        return Kind("zarr", f"a zarr store ({found[0]})", scanned=True)
    return Kind("directory", "a directory")


def not_a_set(source: str, kind: Kind) -> str | None:
    """What to say when ``source``, given where a reference set was expected, is ``kind`` (and what to
    do instead); None when it may be a set (its reader then says what is wrong)."""
    if kind.refs or kind.name in ("empty", "unknown", "text"):
        return None
    if kind.scanned:
        out = source.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[0] + ".json"
        make = f"make one with `refset scan {source} -o {out}` (in Python: refset.scan)"
        if kind.name == "zarr":
            return (f"{source}: is {kind.text}, not a reference set: open it with zarr or xarray.open_zarr, or "
                    f"{make} (refset reads reference sets: JSON, a parquet directory with .zmetadata holding "
                    "record_size, or packed)")
        return f"{source}: is {kind.text}, not a reference set: {make}"
    if kind.name == "parquet-record":
        base = source.rstrip("/")
        parent = base.rsplit("/", 2)[0] if base.count("/") >= 2 else "the directory two levels up"
        return (f"{source}: is {kind.text}, not a set: load the set's directory (the one holding .zmetadata), "
                f"{parent}")
    if kind.name == "idx":
        return f"{source}: is {kind.text}, not a reference set: `refset scan` its GRIB file, which reads it"
    return f"{source}: is {kind.text}, not a reference set"


def zarr_store_problem(source: str, has: Callable[[str], bool]) -> str | None:
    """The message for a zarr store given where a reference set was expected (``has(name)``: whether
    the directory holds ``name``), else None."""
    kind = describe_directory(has, lambda name: b"")
    return not_a_set(source, kind) if kind.name == "zarr" else None
