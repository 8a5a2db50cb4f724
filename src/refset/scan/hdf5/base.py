"""What every module of refset's native HDF5 metadata reader shares: :class:`NotNative`, raised for
anything the reader does not support or that does not hold (the scan then reads the file through
h5py), :func:`need`, which raises it; :class:`Broken` and :func:`intact` for a structure no valid
file has (the scan refuses the file: libhdf5 fails on it, or crashes); and :data:`UNDEF`, the
format's undefined address (HDF5 File Format Specification v3, II.A: all bits set)."""

from __future__ import annotations

__all__ = ["NotNative", "Broken", "need", "intact", "UNDEF"]

UNDEF = 0xFFFFFFFFFFFFFFFF


class NotNative(Exception):
    """The file uses something this reader does not support (or is not what it claims)."""


def need(cond: bool, why: str) -> None:
    if not cond:
        raise NotNative(why)


class Broken(NotNative):
    """The file's structure is broken: a cycle, an address past its end, a bad checksum or
    signature, metadata read over and over. No valid file has it; libhdf5 refuses such a file or
    crashes on it, so it is not handed to h5py (the scan raises ``InvalidFile``)."""


def intact(cond: bool, why: str) -> None:
    if not cond:
        raise Broken(why)
