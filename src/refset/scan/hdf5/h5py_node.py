"""h5py's view of an HDF5 file, as :class:`~refset.scan.hdf5.walk.Walker` asks for it (the fallback of the
native reader: files it declines are read through libhdf5).

What libhdf5 raises for the file (through h5py) is the file's fault: each question h5py answers here
turns its error into the scan's :class:`~refset.io.scanfile.Broken` ("cannot be scanned: OSError:
..."), raised from it, unless a read of the file failed under it (then that failure is the error).
Reading data (:meth:`H5Node.read`) is left to the walk, which names the variable h5py cannot read."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import PurePath
from typing import Any, TypeVar

import numpy as np

from refset.errors import RefsetError, Unsupported
from refset.io.scanfile import Broken, ScanFile
from refset.scan.hdf5.base import NotNative

__all__ = ["H5Node", "library_error"]

T = TypeVar("T")


def library_error(file: ScanFile | None, e: Exception) -> Exception | None:
    """The error to raise (``from e``) for ``e``, when h5py raised it reading ``file``: the read that
    failed under it, else the file's fault (:class:`Broken`); None for an error h5py did not raise
    (refset's own, a bug: raised as it is)."""
    if not _from_h5py(e):
        return None
    if file is not None and file.failure is not None:
        return file.failure
    return Broken(f"cannot be scanned: {type(e).__name__}: {e}", titled=False)


def _from_h5py(e: BaseException) -> bool:
    """Whether h5py raised ``e`` (or libhdf5 under it): the innermost frame of its traceback is h5py's."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and "h5py" in PurePath(tb.tb_frame.f_code.co_filename).parts


def _h5py(method: Callable[..., T]) -> Callable[..., T]:
    """``method`` (asking h5py) with h5py's errors as :func:`library_error`."""
    @functools.wraps(method)
    def asking(self: H5Node, *args: Any) -> T:
        try:
            return method(self, *args)
        except (RefsetError, Broken, NotNative):
            raise
        except Exception as e:
            err = library_error(self.file, e)
            if err is None:
                raise
            raise err from e
    return asking


class H5Node:
    """A group or dataset as the scanner asks for it, through h5py (the native reader's
    ``refset.scan.hdf5.native.NativeNode`` answers the same questions from the file's bytes)."""

    def __init__(self, obj: Any, raw: tuple[ScanFile, int] | None = None) -> None:
        import h5py

        self.obj = obj
        self.raw = raw  # (the scanned file, the superblock's offset)
        self.file = raw[0] if raw is not None else None
        self.key = obj.id
        self.is_group = isinstance(obj, h5py.Group)
        self.is_dataset = isinstance(obj, h5py.Dataset)

    @_h5py
    def links(self) -> list[tuple[str, str, Any, str]]:
        """(name, "hard"/"soft"/"external", node or None, external target) per link."""
        import h5py

        grp = self.obj
        links = grp.id.links
        out: list[tuple[str, str, H5Node | None, str]] = []
        for name in grp:
            if isinstance(name, bytes):  # h5py's answer for a name that is not UTF-8
                raise Unsupported(f"{self.obj.name}: a link named {name!r}, which is not UTF-8 text: no zarr key "
                                  "can name it")
            bname = name.encode()
            kind = links.get_info(bname).type
            if kind == h5py.h5l.TYPE_EXTERNAL:
                link = grp.get(name, getlink=True)
                out.append((name, "external", None, f"{link.filename}:{link.path}"))
                continue
            if kind == h5py.h5l.TYPE_HARD:  # opened below h5py's high level (3x faster)
                oid = h5py.h5o.open(grp.id, bname)
                obj = (h5py.Dataset(oid) if isinstance(oid, h5py.h5d.DatasetID) else
                       h5py.Group(oid) if isinstance(oid, h5py.h5g.GroupID) else None)
            else:
                obj = grp.get(name)
            node = H5Node(obj, self.raw) if isinstance(obj, h5py.Group | h5py.Dataset) else None
            out.append((name, "hard" if kind == h5py.h5l.TYPE_HARD else "soft", node, ""))
        return out

    @_h5py
    def attrs(self, skip: frozenset[str]) -> dict[str, Any]:
        """The attributes but those in ``skip`` (not read), an unreadable one as its exception."""
        a = self.obj.attrs
        d: dict[str, Any] = {}
        for name in a:
            if name in skip:
                continue
            try:
                d[name] = a[name]
            except Exception as e:  # e.g. an attribute of a type h5py cannot read
                d[name] = e
        return d

    # -- datasets ---------------------------------------------------------------------------------
    @property
    @_h5py
    def shape(self) -> tuple[int, ...]:
        shape: tuple[int, ...] = self.obj.shape
        return shape

    @property
    @_h5py
    def maxshape(self) -> tuple[int | None, ...]:
        maxshape: tuple[int | None, ...] = self.obj.maxshape
        return maxshape

    @property
    @_h5py
    def dtype(self) -> np.dtype:
        dtype: np.dtype = self.obj.dtype
        return dtype

    @property
    @_h5py
    def chunks(self) -> tuple[int, ...] | None:
        chunks: tuple[int, ...] | None = self.obj.chunks
        return chunks

    @property
    @_h5py
    def fillvalue(self) -> Any:
        return self.obj.fillvalue

    @property
    @_h5py
    def offset(self) -> int | None:
        offset: int | None = self.obj.id.get_offset()
        return offset

    def _plist(self) -> Any:
        p = getattr(self, "_pl", None)
        if p is None:
            p = self._pl = self.obj.id.get_create_plist()
        return p

    @property
    @_h5py
    def external(self) -> bool:
        return bool(self._plist().get_external_count())

    @property
    @_h5py
    def layout(self) -> str:
        import h5py

        lay = self._plist().get_layout()
        return {h5py.h5d.COMPACT: "compact", h5py.h5d.CONTIGUOUS: "contiguous",
                h5py.h5d.CHUNKED: "chunked", h5py.h5d.VIRTUAL: "virtual"}.get(lay, str(lay))

    @property
    @_h5py
    def filters(self) -> list[tuple[int, tuple[int, ...], str]]:
        p = self._plist()
        out = []
        for i in range(p.get_nfilters()):
            code, _flags, values, name = p.get_filter(i)
            out.append((int(code), tuple(int(v) for v in values),
                        name.decode(errors="replace") if name else ""))
        return out

    @_h5py
    def chunk_index(self, grid: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(flat indices in ``grid``, filter masks, byte offsets, sizes) of the stored chunks (a
        chunk outside the grid, which HDF5 keeps after a dataset shrinks, is left out)."""
        unlimited = [k for k, m in enumerate(self.obj.maxshape or ()) if m is None]
        if len(unlimited) == 1 and unlimited[0] > 0:
            return self._chunks_natively(grid, unlimited[0])
        pos_l: list[tuple[int, ...]] = []
        mask_l: list[int] = []
        off_l: list[int] = []
        len_l: list[int] = []

        def one(s: Any, p: Any = pos_l.append, m: Any = mask_l.append, o: Any = off_l.append,
                n: Any = len_l.append) -> None:
            p(s.chunk_offset)
            m(s.filter_mask)
            o(s.byte_offset)
            n(s.size)

        self.obj.id.chunk_iter(one)
        if max(max(off_l, default=0), max((i for t in pos_l for i in t), default=0)) >= 1 << 63:
            raise Broken(f"{self.obj.name}: libhdf5 lists a chunk at a position or an address past 2**63")
        rank = len(grid)
        pos = np.fromiter((i for t in pos_l for i in t), np.int64, len(pos_l) * rank).reshape(len(pos_l), rank)
        idx = pos // np.array(self.obj.chunks, np.int64)
        inside = (idx < np.array(grid, np.int64)).all(axis=1)
        flat = np.ravel_multi_index(tuple(idx[inside].T), grid) if inside.any() else np.zeros(0, np.int64)
        return (flat, np.array(mask_l, np.int64)[inside], np.array(off_l, np.int64)[inside],
                np.array(len_l, np.int64)[inside])

    def _chunks_natively(self, grid: tuple[int, ...], dim: int,
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`chunk_index` of a dataset with one unlimited dimension, not the first, read by the
        native reader: libhdf5 (2.0) indexes such chunks with an extensible array in "swizzled"
        order (that dimension first) and its chunk iteration reports their positions unswizzled
        wrong (kerchunk's references then name the wrong chunks); the native reader decodes the
        index itself. Where it cannot, the dataset is refused rather than given wrong."""
        import h5py

        from refset.scan.hdf5.meta import H5File
        from refset.scan.hdf5.native import NativeNode

        if self.raw is None:
            raise Unsupported(f"{self.obj.name}: chunks along an unlimited dimension {dim} that is not the first "
                              "need the file's bytes to be read right")
        file, start = self.raw
        try:
            node = NativeNode(H5File(file, start), h5py.h5o.get_info(self.obj.id).addr)
            return node.chunk_index(grid)
        except Exception as e:
            raise Unsupported(f"{self.obj.name}: its chunks, along an unlimited dimension {dim} that is not the "
                              f"first, are indexed in an order libhdf5 reports wrong, and the native reader "
                              f"cannot read the index ({e})") from None

    def memo_key(self) -> None:
        """Files read through h5py keep nothing for the next (see ``NativeNode.memo_key``)."""
        return None

    @_h5py
    def deref(self, ref: Any) -> Any:
        import h5py

        return h5py.h5r.dereference(ref, self.obj.id)

    @_h5py
    def ref_name(self, ref: Any) -> str:
        return self.obj.file[ref].name or ""

    def read(self, sel: Any) -> Any:
        return self.obj[sel]

    def read_strings(self) -> Any:
        return self.obj.asstr()[()]


