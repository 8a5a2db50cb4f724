"""What a file is, from its first bytes: the signatures of reference sets (JSON, gzip/zstd, packed,
parquet) and of the data files refset scans (HDF5, NetCDF3), for the readers, the scanners and the
messages that name a mistaken input. Imports nothing of refset."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PACKED_MAGIC", "GZIP_MAGIC", "ZSTD_MAGIC", "HDF5_MAGIC", "NETCDF3_MAGIC", "PARQUET_MAGIC",
           "ZARR_STORE_FILES", "HEAD_SIZE", "zarr_store_problem", "file_reader", "data_format", "starts_like_refs", "is_data_file",
           "hdf5_superblock"]

PACKED_MAGIC = b"\x89RFSPK\r\n"
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# what a reference set is not, told apart so that a mistaken input is named
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"  # at 0, or at 512, 1024, 2048, ... after a user block
NETCDF3_MAGIC = (b"CDF\x01", b"CDF\x02", b"CDF\x05")
PARQUET_MAGIC = b"PAR1"
ZARR_STORE_FILES = (".zgroup", ".zarray", "zarr.json")
#: Bytes read to tell a remote set's format; its reader starts from them (all of a shorter file).
HEAD_SIZE = 1 << 16


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


def data_format(read_at: Callable[[int, int], bytes], size: int) -> tuple[str, int] | None:
    """``("hdf5", superblock offset)`` or ``("netcdf3", 0)`` for a data file, else None.

    ``read_at(offset, n)`` returns ``n`` bytes of the file from ``offset`` (fewer at its end); ``size``
    bounds the user-block offsets tried (512, 1024, ...).
    """
    if read_at(0, 4) in NETCDF3_MAGIC:
        return "netcdf3", 0
    at = hdf5_superblock(read_at, size)
    return None if at is None else ("hdf5", at)


def starts_like_refs(head: bytes) -> bool:
    """Whether a file starting with ``head`` may be a reference set (JSON, compressed or packed)."""
    return head.lstrip()[:1] in (b"{", b"[", b"") or head.startswith((GZIP_MAGIC, ZSTD_MAGIC, PACKED_MAGIC))


def is_data_file(read_at: Callable[[int, int], bytes], size: int) -> bool:
    """Whether a file is NetCDF/HDF5 (an HDF5 user block too); one that starts like a reference set is
    not probed further."""
    return not starts_like_refs(read_at(0, 16)) and data_format(read_at, size) is not None


def zarr_store_problem(source: str, has: Callable[[str], bool]) -> str | None:
    """The message for a zarr store given where a reference set was expected (``has(name)``: whether
    the directory holds ``name``), else None."""
    found = [n for n in ZARR_STORE_FILES if has(n)]
    if not found:
        return None
    return (f"{source}: is a zarr store ({found[0]}), not a reference set: open it with zarr or "
            "xarray.open_zarr (refset reads reference sets: JSON, a parquet directory with "
            ".zmetadata holding record_size, or packed)")
