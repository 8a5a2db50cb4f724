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
import struct
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import INLINE_THRESHOLD, DropList, Scanner
from refset.errors import Unsupported
from refset.io.magic import HDF5_MAGIC, hdf5_superblock
from refset.io.scanfile import ScanFile
from refset.model.setwriter import SetWriter
from refset.scan.hdf5.base import NotNative
from refset.scan.hdf5.h5py_node import library_error
from refset.scan.hdf5.isolated import H5PY_TIMEOUT
from refset.scan.hdf5.walk import MAX_INLINE, Walker
from refset.scan.held import held, numpy_warning, release

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
    title: ClassVar[str] = "HDF5"
    options: ClassVar[frozenset[str]] = frozenset({"group", "max_inline", "native", "h5py_timeout"})

    def __init__(self, *, inline_threshold: int = INLINE_THRESHOLD, drop_variables: Any = (),
                 subchunk: int | None = None, group: str | None = None, max_inline: int = MAX_INLINE,
                 native: bool = True, h5py_timeout: float | None = H5PY_TIMEOUT) -> None:
        super().__init__(inline_threshold=inline_threshold, drop_variables=drop_variables, subchunk=subchunk,
                         group=group, max_inline=max_inline, native=native, h5py_timeout=h5py_timeout)
        if h5py_timeout is not None and (isinstance(h5py_timeout, bool) or not isinstance(h5py_timeout, int | float)
                                         or not h5py_timeout > 0):
            raise ValueError(f"h5py_timeout: must be a positive number of seconds or None, got {h5py_timeout!r}")
        self.group, self.max_inline, self.native, self.h5py_timeout = group, max_inline, native, h5py_timeout
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

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        """The file's groups and datasets walked into ``out``: natively, else through h5py (where the
        native reader declines the file: :class:`~.base.NotNative`, counted in :attr:`fallbacks`)."""
        if self.native:
            # its warnings (numpy's floating-point ones too) held back until it succeeds, so that a
            # fallback to h5py does not repeat them; per thread (catch_warnings would swap the
            # process's state under Scan.many's threads)
            with held() as box, np.errstate(over="call", divide="call", invalid="call", call=numpy_warning):
                aside = SetWriter(out.url, out.inline_threshold)
                try:
                    self.walk_native(file, aside, drop)
                except NotNative as e:  # the one fallback: h5py's answer (set or error) is the one given
                    self.fallbacks += 1
                    self.last_fallback = f"{type(e).__name__}: {e}"
                    file.forget_metadata()  # h5py reads it again: its answer is not checked against ours
                else:
                    release(box)
                    out.take(aside)
                    return
        self.walk_h5py(file, out, drop)

    def walk_native(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        """The walk over the native metadata reader; ``NotNative`` (raised before anything is
        written to ``out``'s set) sends the whole file to h5py (:meth:`walk` holds the warnings until
        it succeeds); a broken structure raises the scan's ``Broken``."""
        from refset.scan.hdf5.native import open_native

        start = hdf5_superblock(file.read_at, file.size)  # at 0 or after a user block
        if start is None:
            raise NotNative("no superblock")
        try:
            root = open_native(file, start, self.group, self.templates)
            Walker(out, drop, self.subchunk, self.max_inline).walk(root)
        except struct.error as e:  # a message shorter than its fields says: declined, as need() declines
            raise NotNative(f"a structure is cut ({e})") from None

    def walk_h5py(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        """The walk through h5py: of a local file in a child process under :attr:`h5py_timeout`
        (see :mod:`.isolated`), else here. libhdf5's errors are the file's fault (``Broken``)."""
        if self.h5py_timeout is not None and os.name == "posix" and file.path is not None:
            from refset.scan.hdf5.isolated import usable, walk_in_child

            got = walk_in_child(file.path, file.url, self.config, self.h5py_timeout) if usable() else None
            if got is not None:
                out.take(got[0])
                drop.found |= got[1]
                return
        import h5py  # not imported while the native reader suffices (~30 ms in each Dask worker)

        from refset.scan.hdf5.h5py_node import H5Node

        _load_plugins()
        f = file.file
        f.seek(0)
        try:
            h5 = h5py.File(f, "r")
        except Exception as e:  # libhdf5 refuses the file
            err = library_error(file, e)
            if err is None:
                raise
            raise err from e
        with h5:
            try:
                userblock = h5.userblock_size
                f.seek(0)
                root = h5 if self.group in (None, "", "/") else h5.get(self.group)
            except Exception as e:
                err = library_error(file, e)
                if err is None:
                    raise
                raise err from e
            if not isinstance(root, h5py.Group):
                raise Unsupported(f"group={self.group!r}: no such group in {file.url}")
            Walker(out, drop, self.subchunk, self.max_inline).walk(H5Node(root, (file, userblock)))


def _load_plugins() -> None:
    """Make HDF5 filter plugins (blosc, zstd, lz4, bitshuffle, lzf...) readable by h5py if the
    ``hdf5plugin`` package is installed."""
    try:
        import hdf5plugin  # noqa: F401
    except ImportError:
        pass
