"""The scanners refset knows: the built-in ones (HDF5/NetCDF4, NetCDF3, TIFF, GRIB, FITS, DMR++, HDF4, and
zarr stores) and those installed under the ``refset.scanners`` entry-point group (each a
:class:`~refset.abc.scanner.Scanner` subclass). A file's kind is told by its content
(:meth:`Scanner.probe`), a directory's by what it holds (:meth:`Scanner.probe_directory`), never a
name; scanners are imported on first use.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable

from refset.abc.bytestore import ByteStore
from refset.abc.scanner import Scanner

__all__ = ["scanners", "scanner_for", "scanner_for_directory", "ENTRY_POINTS"]

#: The entry-point group other packages add scanners to (``name = "package.module:ScannerClass"``).
ENTRY_POINTS = "refset.scanners"

_BUILTIN = (  # asked in this order: HDF5's probe, which looks for a superblock past a user block at
    # 512, 1024, 2048... bytes (a request each for a remote file), after the kinds told by their head
    ("netcdf3", "refset.scan.netcdf3.scanner:NetCDF3Scanner"),
    ("tiff", "refset.scan.tiff.scanner:TiffScanner"),
    ("grib", "refset.scan.grib.scanner:GribScanner"),
    ("fits", "refset.scan.fits.scanner:FitsScanner"),
    ("dmrpp", "refset.scan.dmrpp.scanner:DmrppScanner"),
    ("hdf4", "refset.scan.hdf4.scanner:Hdf4Scanner"),
    ("hdf5", "refset.scan.hdf5.scanner:HDF5Scanner"),
    ("zarr", "refset.scan.zarrstore:ZarrScanner"),  # directories
)


def _load(ref: str) -> type[Scanner]:
    mod, _, name = ref.partition(":")
    cls = getattr(importlib.import_module(mod), name)
    if not (isinstance(cls, type) and issubclass(cls, Scanner)):
        raise TypeError(f"{ref} is not a refset.abc.scanner.Scanner subclass")
    return cls


@functools.cache
def scanners() -> tuple[type[Scanner], ...]:
    """Every scanner class, the built-in ones first; an installed one that fails to load is left
    out with a warning (as xarray treats its backends)."""
    out = [_load(ref) for _, ref in _BUILTIN]
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        try:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, Scanner)):
                raise TypeError("not a refset.abc.scanner.Scanner subclass")
        except Exception as e:
            warnings.warn(f"refset: scanner {ep.name!r} ({ep.value}) could not be loaded: {e}", RuntimeWarning,
                          stacklevel=2)
            continue
        if cls not in out:
            out.append(cls)
    return tuple(out)


def scanner_for(read_at: Callable[[int, int], bytes], size: int) -> type[Scanner] | None:
    """The class of the scanner whose kind the file is (``read_at(offset, n)``: its bytes), or None."""
    for cls in scanners():
        if not cls.directory and cls.probe(read_at, size):
            return cls
    return None


def scanner_for_directory(store: ByteStore) -> type[Scanner] | None:
    """The class of the scanner whose kind the directory at ``store`` is (a zarr store), or None."""
    for cls in scanners():
        if cls.directory and cls.probe_directory(store):
            return cls
    return None
