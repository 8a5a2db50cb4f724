"""What every module of refset's native HDF5 metadata reader shares: :class:`NotNative`, raised for
anything the reader does not support or that does not hold (the scan then reads the file through
h5py), :func:`need`, which raises it, and :data:`UNDEF`, the format's undefined address (HDF5 File
Format Specification v3, II.A: all bits set)."""

from __future__ import annotations

__all__ = ["NotNative", "need", "UNDEF"]

UNDEF = 0xFFFFFFFFFFFFFFFF


class NotNative(Exception):
    """The file uses something this reader does not support (or is not what it claims)."""


def need(cond: bool, why: str) -> None:
    if not cond:
        raise NotNative(why)
