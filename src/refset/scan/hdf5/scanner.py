"""HDF5 / NetCDF4 files -> reference sets: the :class:`HDF5Scanner`.

The file's structure is read by refset's own reader of the HDF5 format (:mod:`.meta`, :mod:`.native`):
the metadata only, a few reads per file. A file it declines (a structure it does not cover) is read
through h5py instead, whose answer (set or error) is the one given. Chunk indexes go into numpy columns;
filters map to numcodecs codecs that decode the stored bytes exactly (:mod:`.filters`); data whose
filters have none, compact datasets and variable-length strings are read and stored in the set, up to
``max_inline`` bytes.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import Scanner
from refset.errors import InvalidFile, ReferenceNotReachable, Unsupported
from refset.io.magic import HDF5_MAGIC, hdf5_superblock
from refset.io.scanfile import ScanFile
from refset.model.refset import ReferenceSet
from refset.scan.hdf5.base import Broken, NotNative, intact
from refset.scan.hdf5.isolated import H5PY_TIMEOUT
from refset.scan.hdf5.walk import MAX_INLINE, Walker
from refset.scan.held import held, numpy_warning, release
from refset.scan.writer import INLINE_THRESHOLD, DropList, SetWriter, common_options

__all__ = ["HDF5Scanner", "MAX_INLINE"]


class HDF5Scanner(Scanner):
    """NetCDF4 and HDF5 files, variables and dimensions as netCDF-C presents them.

    Options: ``group`` (scan only this group; it becomes the root), ``max_inline`` (bytes of data
    read and stored for one variable whose chunks no codec decodes exactly), ``native`` (False: read
    every file through h5py), ``h5py_timeout`` (seconds the h5py walk of a local file may take, in a
    child process: a file libhdf5 hangs or crashes on is refused; None: in this process, no limit;
    remote files, and every file where there is no POSIX ``select`` on pipes (Windows), are walked in
    this process, remote reads under the byte layer's timeouts). An instance keeps the object
    headers it parsed, so that the next file of a product repeating them byte for byte (but for data
    addresses) reuses the parse; ``fallbacks`` counts the files the native reader declined,
    ``last_fallback`` says why.
    """

    name: ClassVar[str] = "hdf5"
    options: ClassVar[frozenset[str]] = frozenset({"group", "max_inline", "native", "h5py_timeout"})

    def __init__(self, *, inline_threshold: int = INLINE_THRESHOLD, drop_variables: Any = (),
                 subchunk: int | None = None, group: str | None = None, max_inline: int = MAX_INLINE,
                 native: bool = True, h5py_timeout: float | None = H5PY_TIMEOUT) -> None:
        self.inline_threshold, self.drop, self.subchunk = common_options(inline_threshold, drop_variables,
                                                                         subchunk)
        if h5py_timeout is not None and (isinstance(h5py_timeout, bool) or not isinstance(h5py_timeout, int | float)
                                         or not h5py_timeout > 0):
            raise ValueError(f"h5py_timeout: must be a positive number of seconds or None, got {h5py_timeout!r}")
        self.group, self.max_inline, self.native, self.h5py_timeout = group, max_inline, native, h5py_timeout
        self.config = {"inline_threshold": inline_threshold, "drop_variables": self.drop, "subchunk": subchunk,
                       "group": group, "max_inline": max_inline, "native": native, "h5py_timeout": h5py_timeout}
        self.templates: dict[Any, Any] = {}  # parsed object headers (meta.read_header): this run's memo
        self.fallbacks = 0
        self.last_fallback = ""

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return hdf5_superblock(lambda o, n: head[o:o + n], len(head)) is not None

    @classmethod
    def probe(cls, read_at: Any, size: int) -> bool:
        # docstring inherited: the superblock may follow a user block of any power of two from 512
        return read_at(0, 8) == HDF5_MAGIC or hdf5_superblock(read_at, size) is not None

    def __call__(self, file: ScanFile) -> ReferenceSet:
        # docstring inherited
        drop = DropList(self.drop)
        writer = self.walk(file.file, file.url, drop)
        out = writer.build(file.read_ranges)
        drop.warn_unused(file.url)
        return out

    def walk(self, f: Any, url: str, drop: DropList) -> SetWriter:
        """The file's groups and datasets walked into a :class:`SetWriter`: natively, else through h5py."""
        if self.native:
            # its warnings (numpy's floating-point ones too) held back until it succeeds, so that a
            # fallback to h5py does not repeat them; per thread (catch_warnings would swap the
            # process's state under Scan.many's threads)
            with held() as box, np.errstate(over="call", divide="call", invalid="call", call=numpy_warning):
                try:
                    out: SetWriter | None = self.walk_native(f, url, drop)
                except Broken as e:  # never handed to libhdf5, which fails on it or crashes
                    raise InvalidFile(f"{url}: not a valid HDF5 file: {e}") from None
                except ReferenceNotReachable:
                    raise
                except Exception as e:  # NotNative, or anything else: h5py's answer (set or error) is the one given
                    self.fallbacks += 1
                    self.last_fallback = f"{type(e).__name__}: {e}"
                    f.seek(0)
                    out = None
            if out is not None:
                release(box)
                return out
        path = getattr(f, "name", None)
        if self.h5py_timeout is not None and os.name == "posix" and isinstance(path, str) and os.path.isfile(path):
            from refset.scan.hdf5.isolated import usable, walk_in_child

            got = walk_in_child(path, url, self.config, self.h5py_timeout) if usable() else None
            if got is not None:
                drop.found |= got[1]
                return got[0]  # type: ignore[no-any-return]
        import h5py  # not imported while the native reader suffices (~30 ms in each Dask worker)

        from refset.scan.hdf5.h5py_node import H5Node

        _load_plugins()
        out = SetWriter(url, self.inline_threshold)
        with h5py.File(f, "r") as h5:
            raw = (f, f.seek(0, 2), h5.userblock_size)  # for what libhdf5 reports wrong (H5Node)
            f.seek(0)
            root = h5
            if self.group not in (None, "", "/"):
                obj = h5.get(self.group)
                if not isinstance(obj, h5py.Group):
                    raise Unsupported(f"group={self.group!r}: no such group in {url}")
                root = obj
            Walker(out, drop, self.subchunk, self.max_inline).walk(H5Node(root, raw))
        return out

    def walk_native(self, f: Any, url: str, drop: DropList) -> SetWriter:
        """The walk over the native metadata reader; ``NotNative`` (raised before anything is
        returned) sends the whole file to h5py (:meth:`walk` holds the warnings until it succeeds)."""
        from refset.io.magic import file_reader
        from refset.scan.hdf5.native import open_native

        f.seek(0, 2)
        size = f.tell()
        start = hdf5_superblock(file_reader(f), size)  # at 0 or after a user block
        if start is None:
            raise NotNative("no superblock")
        out = SetWriter(url, self.inline_threshold)
        root = open_native(f, size, start, self.group, self.templates)
        Walker(out, drop, self.subchunk, self.max_inline).walk(root)
        intact(not root.h5.overlaps_metadata(*out.ranges()), "data overlaps the file's metadata")
        return out


def _load_plugins() -> None:
    """Make HDF5 filter plugins (blosc, zstd, lz4, bitshuffle, lzf...) readable by h5py if the
    ``hdf5plugin`` package is installed."""
    try:
        import hdf5plugin  # noqa: F401
    except ImportError:
        pass
