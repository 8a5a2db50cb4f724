"""The walk of an HDF5 file as netCDF-C presents it, over either reader of its structure (the native one,
:mod:`.native`, or h5py's, :mod:`.h5py_node`): variables, dimensions, attributes and fill values into a
:class:`~refset.model.setwriter.SetWriter`."""

from __future__ import annotations

import math
import posixpath
from typing import Any

import numpy as np

from refset.errors import Unsupported
from refset.io.scanfile import Broken
from refset.model.setwriter import SetWriter
from refset.scan.hdf5.base import NotNative
from refset.scan.hdf5.filters import encode_chunk, hdf5_filters
from refset.scan.held import warn
from refset.scan.writer import cannot, json_attrs, json_value, split_rows

__all__ = ["Walker", "MAX_INLINE"]

#: Bytes of data read through h5py and stored in the set for one variable (compact layout,
#: variable-length strings, filters no codec decodes exactly, chunks with a filter skipped).
MAX_INLINE = 64 * 2**20
MAX_DEPTH = 200  # groups nested deeper are refused (a recursive walk; real files nest a few levels)
_FILL_CHUNKS = 65536  # unwritten chunks stored as fill chunks at most (more: zarr's fill_value, warned)

# Attributes that describe HDF5/netCDF-4 structure, not the data (netCDF4-python hides them too).
_HIDDEN = frozenset({
    "DIMENSION_LIST", "REFERENCE_LIST", "CLASS", "NAME", "_Netcdf4Dimid", "_Netcdf4Coordinates",
    "_nc3_strict", "_NCProperties", "_FillValue", "_SuperblockVersion", "_IsNetcdf4",
})
# Hidden attributes the scan never consults: not read at all (each read costs ~20 us).
UNREAD = _HIDDEN - {"DIMENSION_LIST", "CLASS", "NAME", "_FillValue"}
_NOT_A_VARIABLE = "This is a netCDF dimension but not a netCDF variable"


class Walker:
    """Walks the file as netCDF-C presents it: every link to a dataset is a variable, a dimension
    scale names its dimension by its last link, ``_nc4_non_coord_`` prefixes are dropped, and axes
    without dimension scales take a dimension of the same length (and unlimitedness) visible from
    their group, else a new ``phony_dim_N`` (groups numbered children first, as netCDF-C does)."""

    def __init__(self, out: SetWriter, drop: set[str], subchunk: int | None,
                 max_inline: int) -> None:
        self.out = out
        self.drop = drop
        self.subchunk = subchunk
        self.max_inline = max_inline
        self.names: dict[Any, str] = {}  # object id -> its (last) path below the root
        self.groups: list[tuple[str, Any]] = []
        self.dims: dict[str, list[tuple[str, int, bool]]] = {}  # group -> [(name, length, unlimited)]
        self.nphony = 0
        self._attrs: dict[Any, dict[str, Any]] = {}  # object id -> its attributes, read once

    def raw(self, obj: Any) -> dict[str, Any]:
        """``obj``'s attributes, each read once (an unreadable one as its exception); netCDF-4
        bookkeeping nobody consults is not read at all."""
        d = self._attrs.get(obj.key)
        if d is None:
            d = self._attrs[obj.key] = obj.attrs(UNREAD)
        return d

    def walk(self, root: Any) -> None:
        datasets: dict[str, list[tuple[str, Any]]] = {}
        self.collect(root, "", datasets)
        scales = {self.names[ds.key]: ds for group in datasets.values() for _, ds in group if _is_scale(self.raw(ds))}
        for path, ds in scales.items():
            grp, name = posixpath.split(path)
            self.dims.setdefault(grp, []).append((_var_name(name), *_extent(ds, 0)))
        for grp, g in self.groups:
            self.out.group(grp, _attrs(self.raw(g), grp))
        ahead = getattr(root, "prefetch_chunk_indexes", None)  # the native reader's: remote files
        if ahead is not None:
            ahead([ds for group in datasets.values() for _, ds in group])
        for grp, _g in reversed(self.groups):  # children before their parents, as netCDF-C
            for path, ds in datasets.get(grp, []):
                name = _var_name(posixpath.basename(path))
                out = posixpath.join(grp, name)
                if _not_a_variable(self.raw(ds)) or name in self.drop or out in self.drop:
                    continue
                self.dataset(ds, out, self.dim_names(ds, grp, self.names[ds.key] in scales))

    def collect(self, grp: Any, path: str, datasets: dict[str, list[Any]], depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            shown = path if len(path) <= 80 else path[:80] + "..."
            raise Unsupported(f"groups nested more than {MAX_DEPTH} deep ({shown}): refused, as a walk "
                              "that deep is no real file's")
        self.groups.append((path, grp))
        for name, kind, obj, target in grp.links():
            sub = f"{path}/{name}" if path else name
            if kind == "external":
                if name in self.drop or sub in self.drop:
                    continue
                raise cannot(sub, f"it is an external link to {target}; scan that file")
            if kind == "soft" and obj is None:
                warn(f"{sub}: dangling soft link, left out", stacklevel=4)
            if obj is None:
                continue
            if obj.is_group:
                if obj.key not in self.names and name not in self.drop and sub not in self.drop:
                    self.names[obj.key] = sub
                    self.collect(obj, sub, datasets, depth + 1)
            elif obj.is_dataset:  # every link is a variable; dims take the last name
                self.names[obj.key] = sub
                datasets.setdefault(path, []).append((sub, obj))

    def dim_names(self, ds: Any, grp: str, is_scale: bool) -> list[str]:
        names: list[str] = []
        dim_list = self.raw(ds).get("DIMENSION_LIST")
        if isinstance(dim_list, Exception):  # h5py could not read it (attrs keeps the error)
            raise cannot(self.names.get(ds.key, "?"), f"its DIMENSION_LIST attribute cannot be read "
                                                        f"({type(dim_list).__name__}: {dim_list})")
        for axis in range(len(ds.shape)):
            name = None
            if is_scale and axis == 0:
                name = _var_name(posixpath.basename(self.names[ds.key]))
            elif dim_list is not None and axis < len(dim_list) and len(dim_list[axis]):
                ref = dim_list[axis][-1]  # netCDF-C takes the last scale attached
                known = self.names.get(ds.deref(ref))
                if known is None:  # a scale outside the scanned group
                    known = ds.ref_name(ref)
                name = _var_name(posixpath.basename(known))
            names.append(name or self.visible_dim(grp, _extent(ds, axis), names))
        return names

    def visible_dim(self, grp: str, extent: tuple[int, bool], taken: list[str]) -> str:
        """A dimension of this length (and unlimited or not) seen from ``grp`` (its own, then its
        parents'), else a new ``phony_dim_N`` in ``grp``."""
        g: str | None = grp
        while g is not None:
            for name, *ext in self.dims.get(g, []):
                if tuple(ext) == extent and name not in taken:
                    return name
            g = None if g == "" else posixpath.dirname(g)
        name = f"phony_dim_{self.nphony}"
        self.nphony += 1
        self.dims.setdefault(grp, []).append((name, *extent))
        return name

    # -- one dataset --------------------------------------------------------------------------------
    def dataset(self, ds: Any, path: str, dims: list[str]) -> None:
        dt = ds.dtype
        _check_dtype(dt, path)
        attrs = _attrs(self.raw(ds), path)
        memo = ds.memo_key()
        if ds.external:
            raise cannot(path, "its data is in external files (HDF5 external storage)")
        layout = ds.layout
        fill = _fill(self.raw(ds), path)
        shape = tuple(int(s) for s in ds.shape)
        if _is_vlen_str(dt):
            return self.vlen_strings(ds, path, shape, attrs, dims)
        if layout == "virtual":
            raise cannot(path, "it is an HDF5 virtual dataset; scan its source files instead")
        zdt = _zarr_dtype(dt)
        if zdt.itemsize != dt.itemsize:  # a compound with padding: zarr v2 types are packed
            chunks = tuple(int(c) for c in ds.chunks) if ds.chunks else None
            return self.read_whole(ds, path, shape, zdt, fill, attrs, dims, chunks,
                                   why="its compound type has padding, which zarr v2 types cannot express")
        if layout == "compact":
            return self.read_whole(ds, path, shape, zdt, fill, attrs, dims, None)
        if layout == "contiguous":
            return self.contiguous(ds, path, shape, zdt, fill, attrs, dims, memo)
        if layout == "chunked":
            return self.chunked(ds, path, shape, zdt, fill, attrs, dims, memo)
        raise cannot(path, f"unknown HDF5 layout {layout}")

    def contiguous(self, ds: Any, path: str, shape: tuple[int, ...], dt: np.dtype, fill: Any,
                   attrs: dict[str, Any], dims: list[str], memo: tuple[dict[Any, Any], Any] | None) -> None:
        offset = ds.offset
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if offset is None or nbytes == 0:  # never written: every value is the fill value
            # rows of up to 4 MiB (a last chunk may be partial: there are no bytes to divide)
            row = math.prod(shape[1:]) * dt.itemsize
            rows = min(shape[0], max(1, (4 * 2**20) // max(row, 1))) if shape else 1
            chunks = (rows, *shape[1:]) if shape else ()
            chunks = tuple(max(c, 1) for c in chunks)
            grid = tuple(-(-s // c) for s, c in zip(shape, chunks))
            filters = [{"id": "zlib", "level": 1}]
            count = math.prod(grid)  # claimed by the file, not held by it: counted, not allocated
            flats = np.arange(count) if count <= _FILL_CHUNKS else np.arange(_FILL_CHUNKS + 1)
            inline = self.fill_chunks(ds, path, fill, flats, chunks, dt, filters, count)
            self.out.array(path, shape=shape, chunks=chunks, dtype=dt,
                           fill_value=fill if inline else _fill_or_default(fill, ds),
                           filters=filters, attrs=attrs, dims=dims, inline=inline, memo=memo)
            return
        rows = split_rows(shape, dt.itemsize, self.subchunk)
        chunks = (rows, *shape[1:]) if shape else ()
        n = shape[0] // rows if shape else 1
        step = nbytes // n
        offs = int(offset) + step * np.arange(n, dtype=np.int64)
        grid = (n, *([1] * (len(shape) - 1))) if shape else ()
        self.out.array(path, shape=shape, chunks=chunks, dtype=dt, fill_value=fill, filters=None,
                       attrs=attrs, dims=dims, offset=offs.reshape(grid),
                       length=np.full(grid, step, np.int64), memo=memo)

    def chunked(self, ds: Any, path: str, shape: tuple[int, ...], dt: np.dtype, fill: Any,
                attrs: dict[str, Any], dims: list[str], memo: tuple[dict[Any, Any], Any] | None) -> None:
        chunks = tuple(int(c) for c in ds.chunks)
        filters, inexact = hdf5_filters(ds.filters, dt, path)
        if inexact:
            return self.read_whole(ds, path, shape, dt, fill, attrs, dims, chunks, why=inexact)
        grid = tuple(-(-s // c) for s, c in zip(shape, chunks))
        flat, mask_c, off_c, len_c = ds.chunk_index(grid)
        n = int(np.prod(grid, dtype=np.int64))
        offset = np.zeros(n, np.int64)
        length = np.zeros(n, np.int64)
        inline: dict[int, bytes] = {}
        if flat.size > 1 and not bool((flat[1:] > flat[:-1]).all()) and np.unique(flat).size != flat.size:
            # listed twice: libhdf5's reads look keys up and find one of them, its listing gives both
            raise Broken(f"variable {path!r}: a chunk is listed twice in its chunk index: the file is corrupt",
                         titled=False)
        if flat.size and not filters and dt.kind != "O":
            wrong = np.flatnonzero(len_c != math.prod(chunks) * dt.itemsize)
            if wrong.size:  # libhdf5 reads that many bytes into the chunk: the rest is whatever memory held
                raise Broken(f"variable {path!r}: chunk {int(flat[wrong[0]])} (of {wrong.size} such) is listed "
                             f"with {int(len_c[wrong[0]])} bytes, not the {math.prod(chunks) * dt.itemsize} of its "
                             "shape and type: the file is corrupt", titled=False)
        if flat.size:
            offset[flat] = off_c
            length[flat] = len_c
            masked = np.flatnonzero(mask_c)
            skipped = int(mask_c[0]) if masked.size == flat.size and (mask_c == mask_c[0]).all() else 0
            if skipped:  # every chunk skipped the same optional filters (Blosc on noise): not in the codecs
                filters = [f for i, f in enumerate(filters) if not (skipped >> i) & 1]
            elif masked.size:  # a filter was skipped for some chunks: re-encode what h5py reads
                inline = self.reencode(ds, path, flat[masked], grid, chunks, dt, filters)
        missing = np.flatnonzero(length == 0)
        if missing.size:
            filled = self.fill_chunks(ds, path, fill, missing, chunks, dt, filters)
            inline.update(filled)
            if not filled:
                fill = _fill_or_default(fill, ds)
        self.out.array(path, shape=shape, chunks=chunks, dtype=dt, fill_value=fill, filters=filters,
                       attrs=attrs, dims=dims, offset=offset, length=length, inline=inline, memo=memo)

    def fill_chunks(self, ds: Any, path: str, fill: Any, flats: np.ndarray, chunks: tuple[int, ...],
                    dt: np.dtype, filters: list[dict[str, Any]], count: int | None = None) -> dict[int, bytes]:
        """Unwritten chunks of a variable without ``_FillValue``, as stored chunks of the HDF5 fill
        value: a zarr ``fill_value`` would make xarray mask values netCDF does not. Empty when the
        variable has ``_FillValue`` (zarr's fill value is then the mask) or the chunks would take
        more than ``max_inline`` bytes (then the fill value is used, with a warning)."""
        if fill is not None or ds.dtype.kind == "O" or not flats.size:
            return {}
        count = flats.size if count is None else count
        # the chunk is made only when the claimed count and size could be stored
        fits = count <= _FILL_CHUNKS and math.prod(chunks) * dt.itemsize <= self.max_inline
        data = encode_chunk(np.full(chunks, ds.fillvalue, dt), filters) if fits else b""
        if not fits or len(data) * count > self.max_inline:
            warn(f"{path}: {count} unwritten chunks are left to zarr's fill_value, which xarray uses as a "
                 "mask (the variable has no _FillValue)", stacklevel=4)
            return {}
        return dict.fromkeys(flats.tolist(), data)

    def reencode(self, ds: Any, path: str, flats: np.ndarray, grid: tuple[int, ...],
                 chunks: tuple[int, ...], dt: np.dtype, filters: list[dict[str, Any]]) -> dict[int, bytes]:
        if len(flats) * int(np.prod(chunks)) * dt.itemsize > self.max_inline:
            raise cannot(path, f"{len(flats)} chunks were stored with a filter skipped and re-encoding "
                               f"them exceeds max_inline={self.max_inline} bytes")
        out = {}
        for flat in flats.tolist():
            idx = np.unravel_index(flat, grid)
            sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks))
            block = np.zeros(chunks, dt)
            try:
                data = ds.read(sel)
            except (NotNative, Broken):  # the native reader's: it declines, or the file is broken
                raise
            except Exception as e:  # h5py lacks the filter plugin, or the data is unreadable
                raise cannot(path, f"chunks stored with a filter skipped are re-encoded from what h5py "
                                   f"reads, and h5py cannot read them ({type(e).__name__}: {e})") from e
            block[tuple(slice(0, s) for s in data.shape)] = data
            out[flat] = encode_chunk(block, filters)
        return out

    def read_whole(self, ds: Any, path: str, shape: tuple[int, ...], dt: np.dtype, fill: Any,
                   attrs: dict[str, Any], dims: list[str], chunks: tuple[int, ...] | None,
                   why: str | None = None) -> None:
        """Data read through h5py and stored compressed in the set, in the dataset's chunks."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if nbytes > self.max_inline:
            reason = why or "its layout has no byte ranges to reference"
            raise cannot(path, f"{reason}, and its {nbytes} bytes exceed max_inline={self.max_inline}")
        try:
            data = np.asarray(ds.read(()), dtype=dt)
        except (NotNative, Broken):  # the native reader's: it declines, or the file is broken
            raise
        except Exception as e:  # h5py lacks the filter plugin, or the data is unreadable
            reason = f"{why}; h5py" if why else "h5py"
            raise cannot(path, f"{reason} cannot read it ({type(e).__name__}: {e})") from e
        if chunks is None or not shape:
            chunks = shape
        chunks = tuple(max(c, 1) for c in chunks)
        grid = tuple(-(-s // c) for s, c in zip(shape, chunks))
        filters: list[dict[str, Any]] | None = [{"id": "zlib", "level": 1}] if nbytes > 64 else None
        inline = {}
        for flat in range(int(np.prod(grid, dtype=np.int64))):
            idx = np.unravel_index(flat, grid)
            sel = tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks))
            block = np.zeros(chunks, dt) if shape else data
            if shape:
                part = data[sel]
                block[tuple(slice(0, s) for s in part.shape)] = part
            inline[flat] = encode_chunk(block, filters or [])
        self.out.array(path, shape=shape, chunks=chunks, dtype=dt, fill_value=fill, filters=filters,
                       attrs=attrs, dims=dims, inline=inline)

    def vlen_strings(self, ds: Any, path: str, shape: tuple[int, ...], attrs: dict[str, Any],
                     dims: list[str]) -> None:
        try:
            data = ds.read_strings() if shape else np.asarray(ds.read_strings(), dtype=object)
        except (NotNative, Broken):  # the native reader's: it declines, or the file is broken
            raise
        except Exception as e:
            raise cannot(path, f"its variable-length strings cannot be read ({type(e).__name__}: {e})") from e
        data = np.asarray(data, dtype=object)
        nbytes = sum(len(s) for s in data.reshape(-1)) + 4 * data.size
        if nbytes > self.max_inline:
            raise cannot(path, f"variable-length strings are stored in the set and its {nbytes} bytes "
                               f"exceed max_inline={self.max_inline}")
        filters = [{"id": "vlen-utf8"}]
        self.out.array(path, shape=shape, chunks=shape, dtype=np.dtype(object), fill_value=None,
                       filters=filters, attrs=attrs, dims=dims,
                       inline={0: encode_chunk(data, filters)})


def _is_vlen_str(dt: np.dtype) -> bool:
    """Whether ``dt`` is h5py's variable-length string dtype (object, ``vlen`` ``str`` for UTF-8 or
    ``bytes`` for ASCII in its metadata)."""
    meta: Any = dt.metadata or {}
    return dt.kind == "O" and meta.get("vlen") in (str, bytes)


def _extent(ds: Any, axis: int) -> tuple[int, bool]:
    """An axis's length and whether it is unlimited, what netCDF-C matches dimensions by."""
    if not ds.shape:
        return 0, False
    return int(ds.shape[axis]), ds.maxshape[axis] is None


def _var_name(name: str) -> str:
    """netCDF-4 stores a variable named like a dimension it does not index with this prefix."""
    return name.removeprefix("_nc4_non_coord_")


def _is_scale(raw: dict[str, Any]) -> bool:
    return _attr_text(raw, "CLASS") == "DIMENSION_SCALE"


def _not_a_variable(raw: dict[str, Any]) -> bool:
    name = _attr_text(raw, "NAME")
    return isinstance(name, str) and name.startswith(_NOT_A_VARIABLE)


def _attr_text(raw: dict[str, Any], name: str) -> str | None:
    v = raw.get(name)
    return json_value(v) if v is not None and not isinstance(v, Exception) else None


def _attrs(raw: dict[str, Any], path: str) -> dict[str, Any]:
    out = {}
    for name, value in raw.items():
        if name in _HIDDEN:
            continue
        if isinstance(value, Exception):  # e.g. an attribute of a type h5py cannot read
            e = value
            warn(f"{path or '/'}: attribute {name!r} cannot be read and is left out "
                 f"({type(e).__name__}: {e})", stacklevel=3)
            continue
        out.update(json_attrs([(name, value)]))
    return out


def _check_dtype(dt: np.dtype, path: str) -> None:
    if dt.metadata is not None or dt.kind == "O":  # h5py's special types (the native reader has none)
        import h5py

        if h5py.check_dtype(ref=dt) is not None:
            raise cannot(path, "it holds HDF5 object or region references, which have no zarr equivalent")
        if dt.kind == "O" and h5py.check_string_dtype(dt) is None:
            raise cannot(path, "it holds variable-length sequences, which have no exact zarr v2 equivalent")
    if dt.names is not None:
        fields = dt.fields
        assert fields is not None  # a structured dtype has both names and fields
        for name in dt.names:
            sub = fields[name][0].base
            if sub.hasobject:
                raise cannot(path, f"its compound member {name!r} is variable-length")
            if sub.names is not None:
                raise cannot(path, f"its compound member {name!r} is itself a compound, which zarr "
                                   "v2 data types in zarr-python 3 cannot express")


def _zarr_dtype(dt: np.dtype) -> np.dtype:
    """The stored dtype without h5py's metadata (enum/bool mappings)."""
    if dt.names is not None:
        fields = dt.fields
        assert fields is not None  # a structured dtype has both names and fields
        return np.dtype([(n, _zarr_dtype(fields[n][0])) for n in dt.names])
    if dt.subdtype is not None:
        return np.dtype((_zarr_dtype(dt.subdtype[0]), dt.subdtype[1]))
    return np.dtype(dt.str)


def _fill(raw: dict[str, Any], path: str) -> Any:
    """The zarr fill value: the netCDF ``_FillValue`` attribute where there is one, else None (set
    where chunks are missing, see ``_fill_or_default``)."""
    if "_FillValue" not in raw:
        return None
    v = np.asarray(raw["_FillValue"]).reshape(-1)
    if v.size != 1:
        raise cannot(path, f"its _FillValue has {v.size} values, expected one")
    return v[0]


def _fill_or_default(fill: Any, ds: Any) -> Any:
    """What unwritten chunks hold: ``_FillValue``, else the dataset's HDF5 fill value."""
    if fill is not None:
        return fill
    if ds.dtype.kind == "O":
        return None
    return ds.fillvalue
