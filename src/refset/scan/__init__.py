"""Scan NetCDF4/HDF5 and NetCDF3 files into reference sets (``refset.scan``).

The format is told by magic bytes, not the name: HDF5's signature at 0 or at a power of two from 512
(a user block), ``CDF\\x01``/``\\x02``/``\\x05`` for NetCDF3. Local files are read directly, others
through fsspec (HTTP and S3 files scan the same way), reading only the bytes the metadata needs.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from refset.errors import Unsupported
from refset.formats.registry import ZARR_STORE_FILES, data_format, file_reader, starts_like_refs
from refset.io.local import is_local, local_path
from refset.model.refset import ReferenceSet
from refset.scan.file import HEAD_BYTES, ScanFile, is_local_fs

__all__ = ["scan", "INLINE_THRESHOLD", "detect_format", "UnusedDropWarning"]


class UnusedDropWarning(UserWarning):
    """A name in ``drop_variables`` that is no variable of the scanned file (a typo, or a list meant
    for other files). ``names``: those names; ``url``: the file."""

    def __init__(self, names: list[str], url: str) -> None:
        self.names, self.url = names, url
        super().__init__(f"drop_variables: no variable {', '.join(map(repr, names))} in {url}")


class _Drop(set[str]):
    """The names to drop, remembering which of them the scanner asked about and found."""

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__(names)
        self.found: set[str] = set()

    def __contains__(self, name: object) -> bool:
        hit = super().__contains__(name)
        if hit:
            self.found.add(str(name))
        return hit

#: Chunks smaller than this many bytes are stored in the set (see docs/scan.md for the measurement).
INLINE_THRESHOLD = 500

# Options passed on to the format scanners (every scanner accepts all, so one call scans any file).
_OPTIONS = frozenset({"max_inline"})

def _refuse_directory(fs: Any, path: str, url: str) -> None:
    raise Unsupported(f"{url}: {_what_directory(fs, path)}, not a NetCDF/HDF5 file: scan takes data files")


def _is_dir(fs: Any, path: str) -> bool:
    try:
        return bool(fs.isdir(path))
    except Exception:  # the server failing again: the first error is the one to report
        return False


def _what_directory(fs: Any, path: str) -> str:
    """What a directory given to scan is: a parquet reference set, a zarr store, or just a directory."""
    if fs.exists(f"{path}/.zmetadata"):
        try:
            if b"record_size" in fs.cat_file(f"{path}/.zmetadata", start=0, end=4096):
                return "is a parquet reference set (`refset convert` rewrites it, `refset combine` joins sets)"
        except OSError:
            pass
    found = [n for n in ZARR_STORE_FILES if fs.exists(f"{path}/{n}")]
    if found:
        return f"is a zarr store ({found[0]})"
    return "is a directory (a glob such as DIR/*.nc scans its files)"


def detect_format(f: Any, size: int) -> tuple[str, int]:
    """``("hdf5", superblock offset)`` or ``("netcdf3", 0)`` from the bytes of the open file ``f``."""
    read_at = file_reader(f)
    found = data_format(read_at, size)
    if found is None:
        head = read_at(0, 16)
        if starts_like_refs(head) and head.strip():
            raise Unsupported("is a reference set (JSON or packed), not a NetCDF/HDF5 file: scan takes data "
                              "files; `refset convert` rewrites a set, `refset combine` joins sets")
        raise Unsupported(f"not a NetCDF3, NetCDF4 or HDF5 file (first bytes {head[:8]!r})")
    return found


def scan(
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    inline_threshold: int = INLINE_THRESHOLD,
    group: str | None = None,
    drop_variables: Iterable[str] | str = (),
    subchunk: int | None = None,
    head_bytes: int = HEAD_BYTES,
    **options: Any,
) -> ReferenceSet:
    """Reference every variable of a NetCDF4/HDF5 or NetCDF3 file as zarr v2 (as kerchunk writes it).

    ``inline_threshold``: chunks (and whole small variables) below this many bytes are stored in the
    set. ``group``: scan only this HDF5 group (it becomes the root). ``drop_variables``: names or
    paths left out. ``subchunk``: split uncompressed chunks bigger than this many bytes along their
    first axis so that parallel reads work. ``head_bytes``: a remote file is read with one GET of
    its first bytes (the whole file when smaller), then in blocks. ``options`` go to the format scanner (HDF5:
    ``max_inline`` bytes of data read through h5py and stored for filters no codec decodes exactly).
    A variable that cannot be referenced exactly raises :class:`~refset.errors.Unsupported` naming it;
    a name to drop that the file lacks warns (:class:`UnusedDropWarning`).
    """
    url = os.fspath(url)
    so = dict(storage_options or {})
    if is_local(url, so):  # opened directly: no fsspec import (~0.1 s in each Dask worker)
        fs, path = None, os.path.abspath(local_path(url))
    else:
        import fsspec

        fs, path = fsspec.core.url_to_fs(url, **so)
    drop = _Drop([drop_variables] if isinstance(drop_variables, str) else drop_variables)
    if inline_threshold < 0:
        raise ValueError(f"inline_threshold: must be >= 0, got {inline_threshold}")
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise ValueError(f"scan: unknown option(s) {', '.join(map(repr, unknown))}; "
                         f"format options are {', '.join(sorted(_OPTIONS))}")
    if subchunk is not None and subchunk <= 0:
        raise ValueError(f"subchunk: must be a positive number of bytes, got {subchunk}")
    if is_local_fs(fs) and os.path.isdir(path):
        if fs is None:
            from fsspec.implementations.local import LocalFileSystem

            fs = LocalFileSystem()
        _refuse_directory(fs, path, url)
    try:
        sf = ScanFile(fs, path, head_bytes)
    except (FileNotFoundError, IsADirectoryError):
        if not is_local_fs(fs) and _is_dir(fs, path):  # asked only when there is no such file: a request
            _refuse_directory(fs, path, url)
        raise
    ref = path if is_local_fs(fs) else url  # what the references name: local files by absolute path
    with sf:
        f = sf.file
        try:
            kind, _ = detect_format(f, sf.size)
        except Unsupported as e:
            raise Unsupported(f"{url}: {e}") from None
        f.seek(0)
        if kind == "hdf5":
            from refset.scan.hdf5.scanner import scan_hdf5

            writer = scan_hdf5(f, ref, inline_threshold=inline_threshold, group=group,
                               drop=drop, subchunk=subchunk, **options)
        else:
            if group not in (None, "", "/"):
                raise Unsupported(f"group={group!r}: NetCDF3 files have no groups")
            from refset.scan.netcdf3.scanner import scan_netcdf3

            writer = scan_netcdf3(f, ref, sf.size, inline_threshold=inline_threshold,
                                  drop=drop, subchunk=subchunk, **options)
        out = writer.build(sf.read_ranges)
    if drop - drop.found:
        warnings.warn(UnusedDropWarning(sorted(drop - drop.found), url), stacklevel=2)
    return out

