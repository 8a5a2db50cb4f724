"""What every module of refset's native HDF5 metadata reader shares: :class:`NotNative`, raised for
anything the reader does not support or that does not hold (the scan then reads the file through
h5py), :func:`need`, which raises it; :func:`intact`, which raises the scan's one
:class:`~refset.io.scanfile.Broken` for a structure no valid file has (the scan refuses the file:
libhdf5 fails on it, or crashes, so it is never handed to h5py); and :data:`UNDEF`, the format's
undefined address (HDF5 File Format Specification v3, II.A: all bits set)."""

from __future__ import annotations

from refset.io.scanfile import Broken

__all__ = ["NotNative", "need", "intact", "UNDEF"]

UNDEF = 0xFFFFFFFFFFFFFFFF


class NotNative(Exception):
    """The file uses something this reader does not support (or is not what it claims): the scan
    reads it through h5py instead (the native path's one declared fallback)."""


def need(cond: bool, why: str) -> None:
    if not cond:
        raise NotNative(why)


def intact(cond: bool, why: str) -> None:
    """:class:`~refset.io.scanfile.Broken` unless ``cond``: a cycle, an address past the end, a bad
    checksum or signature, metadata read over and over. No valid file has it; libhdf5 refuses such a
    file or crashes on it, so it is not handed to h5py (the scan raises ``InvalidFile``)."""
    if not cond:
        raise Broken(why)
