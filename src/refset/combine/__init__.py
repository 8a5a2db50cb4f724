"""Combine many reference sets (or data files, scanned) into one along concat dims.

Each input's chunk table of a variable is placed into the combined grid by array arithmetic on its
columns (no per-chunk Python): its position along each concat dim comes from its coordinate values
(see ``_coords``), all URL tables become one, the coordinates of the concat dims are written inline.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidReferences, Unsupported
from ..keys import ChunkGrid
from ..model import ReferenceSet
from ..producer import metadata_bytes
from ..scan import UnusedDropWarning
from ..tables import INLINE, RANGE, WHOLE, ChunkTable, KeyTable, union_urls
from ._coords import Coordinate, coordinates
from ._values import read_arrays, zarray, zattrs

__all__ = ["combine", "open_input"]

Selector = Any  # list of values | re.Pattern | "INDEX" | "attr:N" | "vattr:V:N" | "data:V" | "cf:V" | callable
_LAYOUT = ("chunks", "dtype", "compressor", "filters", "fill_value", "order", "dimension_separator")


def combine(
    inputs: Iterable[Any],
    *,
    concat_dims: str | Sequence[str],
    identical_dims: Sequence[str] = (),
    coo_map: Mapping[str, Selector] | None = None,
    coo_dtypes: Mapping[str, Any] | None = None,
    preprocess: Callable[[ReferenceSet], ReferenceSet] | None = None,
    postprocess: Callable[[ReferenceSet], ReferenceSet] | None = None,
    check: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    scan_options: Mapping[str, Any] | None = None,
    client: Any = None,
    batch_size: int = 64,
    progress: Callable[[int], Any] | None = None,
) -> ReferenceSet:
    """One set from ``inputs`` (sets, dicts, reference files in any format, or NetCDF/HDF5 files,
    which are scanned) concatenated along ``concat_dims``, in the order of their coordinates.

    ``coo_map[dim]`` says where an input's coordinate comes from (kerchunk's vocabulary): a list
    (one value per input), a compiled regex on the input's name (its path or single URL; group 1 if
    any), ``"attr:NAME"``, ``"vattr:VAR:NAME"``, ``"data:VAR"``, ``"cf:VAR"``, ``"INDEX"`` or
    ``fn(index, set, name)``. Default: the values of the variable named like the dim, CF-aware (times
    in other units are re-encoded in the first input's). A dim no input has is new: data variables
    gain it as their first dim. ``identical_dims``: variables taken from the first input, checked
    equal in every input unless ``check=False``. ``client``: a ``distributed.Client`` on whose
    workers the inputs are opened (scanned) and combined as a tree of ``batch_size`` sets per task
    (see ``_dask``). ``storage_options``: fsspec options for opening (scanning) the inputs;
    ``remote_options``: for the data files their references point into, read for coordinate values
    (default: ``storage_options``). ``scan_options``: keywords of :func:`refset.scan` for the inputs
    that are data files (``inline_threshold``, ``group``, ``drop_variables``, ``subchunk``). ``progress(n)`` is called as each input has been opened (scanned), with 1.
    """
    dims = [concat_dims] if isinstance(concat_dims, str) else list(concat_dims)
    if not dims:
        raise InvalidReferences("combine: concat_dims is empty")
    items = expand_lists(list(inputs))
    if not items:
        raise InvalidReferences("combine: no inputs")
    so = dict(storage_options or {})
    ro = so if remote_options is None else dict(remote_options)
    sc = dict(scan_options or {})
    if client is not None:
        from ._dask import combine_on_cluster

        out = combine_on_cluster(client, items, dims=dims, identical=list(identical_dims),
                                 coo_map=dict(coo_map or {}), coo_dtypes=dict(coo_dtypes or {}),
                                 preprocess=preprocess, check=check, so=so, ro=ro, batch=batch_size,
                                 progress=progress, scan_options=sc)
        _check_identical(identical_dims, [out])
        return postprocess(out) if postprocess is not None else out
    opened, unused = [], []
    for i, x in enumerate(items):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnusedDropWarning)
            opened.append(open_input(x, i, storage_options=so, scan_options=sc))
        unused.append(set().union(*(w.message.names for w in caught if isinstance(w.message, UnusedDropWarning))))
        for w in caught:
            if not isinstance(w.message, UnusedDropWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if progress is not None:
            progress(1)
    _warn_unused(unused)
    sets = [rs for rs, _ in opened]
    names = [n for _, n in opened]
    if preprocess is not None:
        sets = [preprocess(rs) for rs in sets]
    _check_identical(identical_dims, sets)
    coords = coordinates(sets, names, dims, dict(coo_map or {}), dict(coo_dtypes or {}), ro)
    out = _Combiner(sets, names, coords, set(identical_dims), check, ro).build()
    return postprocess(out) if postprocess is not None else out


@dataclass(frozen=True)
class ListItem:
    """One set of a JSON list of sets (kerchunk writes them) given as an input: its document and its
    name, ``list.json[0]``."""

    doc: Mapping[str, Any]
    name: str


def expand_lists(items: list[Any]) -> list[Any]:
    """Each local JSON file holding a list of sets (plain, ``.gz`` or ``.zst``) becomes its items
    (:class:`ListItem`); other inputs stay as they are."""
    out: list[Any] = []
    for x in items:
        doc = _json_list(os.fspath(x)) if isinstance(x, str | os.PathLike) else None
        if doc is None:
            out.append(x)
            continue
        for i, d in enumerate(doc):
            if not isinstance(d, Mapping):
                raise InvalidReferences(f"{os.fspath(x)}[{i}]: must be a JSON object (a reference set), "
                                        f"got {type(d).__name__}")
            out.append(ListItem(d, f"{os.fspath(x)}[{i}]"))
    return out


def _json_list(url: str) -> list[Any] | None:
    """The list a local JSON file holds, when it holds one (its first bytes tell, read through its
    compression), else None."""
    from ..formats._io import decompress, is_local, local_path
    from ..formats.registry import GZIP_MAGIC, ZSTD_MAGIC

    if not is_local(url):
        return None
    path = local_path(url)
    try:  # the common case (a set or a data file) costs one open and one small read
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # missing, unreadable: open_input says so
        return None
    try:
        head = os.read(fd, 64)
    except OSError:  # a directory (a parquet set, a zarr store)
        return None
    finally:
        os.close(fd)
    if head[:2] == GZIP_MAGIC or head[:4] == ZSTD_MAGIC:
        try:
            with open(path, "rb") as f:
                if head[:2] == GZIP_MAGIC:
                    import gzip

                    head = gzip.GzipFile(fileobj=f).read(64)
                else:
                    import zstandard

                    head = zstandard.ZstdDecompressor().stream_reader(f).read(64)
        except Exception:  # corrupt: open_input's reader names the problem
            return None
    if head.lstrip()[:1] != b"[":
        return None
    import json

    with open(path, "rb") as f:
        text = decompress(f.read(), path)
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidReferences(f"{path}: invalid JSON ({e})") from None
    if isinstance(doc, list) and not doc:
        raise InvalidReferences(f"{path}: an empty list, not a reference set or a list of them")
    return doc if isinstance(doc, list) else None


def _check_identical(names: Sequence[str], sets: Sequence[ReferenceSet]) -> None:
    """Every name in ``identical_dims`` is a variable of some input (a typo would check nothing)."""
    have = {p for rs in sets for p in rs.grids}
    missing = [n for n in names if n.strip("/") not in have]
    if missing:
        raise InvalidReferences(f"combine: identical_dims names {', '.join(map(repr, missing))}, which no input "
                                f"has (its variables: {', '.join(sorted(have)) or 'none'})")


def _warn_unused(unused: list[set[str]]) -> None:
    """One warning for the names to drop that no input had (each input's own warning is dropped: a list
    meant for heterogeneous files names variables that only some of them have)."""
    never = set.intersection(*unused) if unused else set()
    if never:
        warnings.warn(UnusedDropWarning(sorted(never), f"any of the {len(unused)} inputs"), stacklevel=3)


def open_input(x: Any, index: int = 0, *, storage_options: Mapping[str, Any] | None = None,
               scan_options: Mapping[str, Any] | None = None) -> tuple[ReferenceSet, str]:
    """``(set, name)`` of one input: a set or dict as it is, a path/URL to a NetCDF/HDF5 file scanned
    (with ``scan_options``), any other path loaded as a reference set."""
    from ..formats import load

    if isinstance(x, ReferenceSet | Mapping | ListItem):
        rs = load(x.doc if isinstance(x, ListItem) else x)
        if len(rs.urls) == 1:
            return rs, rs.urls[0]
        return rs, x.name if isinstance(x, ListItem) else f"input {index}"
    if not isinstance(x, str | os.PathLike):
        raise InvalidReferences(f"combine: input {index} is a {type(x).__name__}, not a set, a dict or a path")
    url = os.fspath(x)
    if _is_data_file(url, storage_options or {}):
        from ..scan import scan

        return scan(url, storage_options=storage_options, **dict(scan_options or {})), url
    return load(url, storage_options=storage_options), url


def _is_data_file(url: str, so: Mapping[str, Any]) -> bool:
    """NetCDF/HDF5 by magic bytes (an HDF5 user block too)."""
    from ..formats.registry import data_format, file_reader, is_data_file, starts_like_refs

    local = url.removeprefix("file://") if not so and ("://" not in url or url.startswith("file://")) else None
    if local is not None:  # the common case, without fsspec's per-call cost
        if os.path.isdir(local):
            return False
        with open(local, "rb") as fh:
            return is_data_file(file_reader(fh), os.fstat(fh.fileno()).st_size)
    import fsspec.core  # not imported for local files: it costs ~0.15 s

    fs, path = fsspec.core.url_to_fs(url, **so)
    if fs.isdir(path):
        return False
    head = bytes(fs.cat_file(path, start=0, end=16))
    if data_format(lambda offset, n: head[offset:offset + n], len(head)) is not None:
        return True
    if len(head) < 16 or starts_like_refs(head):
        return False
    with fs.open(path, "rb") as f:  # perhaps an HDF5 user block: the superblock at 512, 1024, ...
        return is_data_file(file_reader(f), fs.size(path))


class _Combiner:
    def __init__(self, sets: list[ReferenceSet], names: list[str], coords: list[Coordinate],
                 identical: set[str], check: bool, so: Mapping[str, Any]) -> None:
        # so: fsspec options for the data files the sets' references point into. Every table read
        # first: a lazily read set (parquet) knows its URL table only after its tables
        sets = [rs.loaded() for rs in sets]
        self.sets, self.names, self.coords = sets, names, coords
        self.identical, self.check, self.so = identical, check, so
        self.urls, remaps = union_urls([rs.urls for rs in sets])
        self.remaps = [np.concatenate([r, [0]]) for r in remaps]  # [-1]: anything not a file
        self.dim_names = {c.dim for c in coords}
        self.new = [c for c in coords if c.new]
        self.meta: dict[str, bytes] = {}
        self.tables: dict[str, ChunkTable] = {}
        self.maps: dict[tuple[int, str, int, int], np.ndarray] = {}  # chunk_map's, per input and dim

    def build(self) -> ReferenceSet:
        first = self.sets[0]
        for key in _group_keys(first):
            self.meta[key] = first[key]
        paths: dict[str, None] = {}
        for rs in self.sets:
            paths.update(dict.fromkeys(p for p in rs.grids if p not in self.dim_names))
        for path in paths:
            self.variable(path)
        for c in self.coords:
            self.coordinate(c)
        other = KeyTable.from_items({k: (INLINE, 0, 0, 0, v) for k, v in self.meta.items()})
        return ReferenceSet.from_tables(self.urls, self.tables, other, {"format": "memory"})

    # -- one variable -------------------------------------------------------------------------------
    def variable(self, path: str) -> None:
        have = [i for i, rs in enumerate(self.sets) if path in rs.grids and f"{path}/.zarray" in rs]
        if not have:
            return
        i0 = have[0]
        meta = zarray(self.sets[i0], path)
        attrs = zattrs(self.sets[i0], path)
        dims = list(attrs.get("_ARRAY_DIMENSIONS") or [])
        axes = {d: dims.index(d) for d in self.dim_names if d in dims}
        leaf = path.rsplit("/", 1)[-1]
        gains = [c for c in self.new if leaf not in self.identical and dims != [leaf]]  # not a dim coordinate
        if not axes and not gains:
            return self.copy(path, i0, have, meta)
        for i in have[1:]:
            self.same_layout(path, i0, i, meta, axes)
        shape = [len(c.values) for c in gains] + [
            len(self.coord(d).values) if d in axes else s for d, s in zip(dims, meta["shape"])]
        chunks = [1] * len(gains) + list(meta["chunks"])
        grid0 = self.sets[i0].grids[path]
        grid = ChunkGrid(tuple(shape), tuple(chunks), grid0.separator, grid0.prefix, 2)
        parts, inline = [], {}
        for i in have:
            table = self.sets[i].table(path)
            maps: list[np.ndarray | None] = [np.searchsorted(c.values, c.per_input[i][:1]) for c in gains]
            maps += [self.chunk_map(path, i, d, a, table.grid) if d in axes else None
                     for a, d in enumerate(dims)]
            f, k, p, o, n = table.entries()
            dst = _place(f, table.grid.grid_shape, grid.grid_shape, maps)
            pid = np.where((k == RANGE) | (k == WHOLE), self.remaps[i][np.asarray(p, np.int64)], 0)
            parts.append((dst, k, pid, o.astype(np.uint64), n.astype(np.uint64)))
            if table.inline:
                src = np.fromiter(table.inline, np.int64, len(table.inline))
                moved = _place(src, table.grid.grid_shape, grid.grid_shape, maps)
                for k, v in zip(moved.tolist(), table.inline.values(), strict=True):
                    inline.setdefault(k, v)  # the first input holding a chunk gives it (see overlaps)
        cols = [np.concatenate([p[j] for p in parts]) for j in range(5)]
        owners = np.repeat(np.asarray(have), [len(p[0]) for p in parts])
        first = self.overlaps(path, grid, cols[0], owners, strict=len(axes) + len(gains) == len(self.coords))
        if first is not None:  # a variable off some concat dims: the first input holding a chunk gives it
            cols = [c[first] for c in cols]
        self.tables[path] = ChunkTable.from_entries(grid, *cols, inline=inline)
        new_dims = [c.dim for c in gains]
        self.meta[f"{path}/.zarray"] = metadata_bytes({**meta, "shape": shape, "chunks": chunks},
                                                      f"{path}/.zarray")
        self.meta[f"{path}/.zattrs"] = metadata_bytes({**attrs, "_ARRAY_DIMENSIONS": new_dims + dims},
                                                      f"{path}/.zattrs")

    def overlaps(self, path: str, grid: ChunkGrid, dst: np.ndarray, owners: np.ndarray,
                 strict: bool) -> np.ndarray | None:
        """Inputs placed on the same chunk: an error naming them when the variable has every concat
        dim (the inputs' coordinates are the same), else the rows to keep (the first of each)."""
        order = np.argsort(dst, kind="stable")
        same = np.flatnonzero(dst[order][1:] == dst[order][:-1])
        if not same.size:
            return None
        if not strict:
            return np.sort(order[np.concatenate(([True], dst[order][1:] != dst[order][:-1]))])
        a, b = order[same[0]], order[same[0] + 1]
        key = grid.chunk_key(np.unravel_index(int(dst[a]), grid.grid_shape))
        raise InvalidReferences(f"variable {path!r}: inputs {self.names[owners[a]]!r} and "
                                f"{self.names[owners[b]]!r} both hold chunk {key!r}: their "
                                "coordinates along the concat dims are the same")

    def coord(self, dim: str) -> Coordinate:
        return next(c for c in self.coords if c.dim == dim)

    def chunk_map(self, path: str, i: int, dim: str, axis: int, grid: ChunkGrid) -> np.ndarray:
        """Where input ``i``'s chunks along ``axis`` go in the combined grid: each chunk's values
        must fill one combined chunk (a short last chunk: the end of the combined coordinate)."""
        n, chunk = grid.shape[axis], grid.chunks[axis]
        known = self.maps.get((i, dim, n, chunk))  # the same for every variable of the input
        if known is not None:
            return known
        c = self.coord(dim)
        vals = c.per_input[i]
        if vals.size != n:
            raise InvalidReferences(f"variable {path!r} of input {self.names[i]!r}: {n} steps along "
                                    f"{dim!r} but {vals.size} coordinate values")
        pos = np.searchsorted(c.values, vals)
        if n > 1 and not (np.diff(pos) > 0).all():
            raise InvalidReferences(f"concat dim {dim!r}: the values of input {self.names[i]!r} are not "
                                    "increasing")
        starts = pos[::chunk]
        want = np.repeat(starts, chunk)[:n] + np.tile(np.arange(chunk), len(starts))[:n]
        short = n % chunk and starts[-1] + n % chunk != len(c.values)
        if not np.array_equal(pos, want) or (starts % chunk).any() or short:
            bad = int(np.argmax((pos != want) | np.repeat(starts % chunk != 0, chunk)[:n])) if not short else n - 1
            raise Unsupported(
                f"variable {path!r}: input {self.names[i]!r} has {n} steps along {dim!r} in chunks of "
                f"{chunk}; its step {bad} is step {int(pos[bad])} of the combined {len(c.values)}: its "
                "chunks do not fall on the combined chunk grid")
        out = self.maps[(i, dim, n, chunk)] = starts // chunk
        return out

    def same_layout(self, path: str, i0: int, i: int, meta: Mapping[str, Any], axes: Mapping[str, int]) -> None:
        other = zarray(self.sets[i], path)
        for field in _LAYOUT:
            if other.get(field) != meta.get(field) and not (
                    field == "fill_value" and _same_nan(other.get(field), meta.get(field))):
                raise Unsupported(f"variable {path!r}: {field} {other.get(field)!r} in input "
                                  f"{self.names[i]!r} differs from {meta.get(field)!r} in input "
                                  f"{self.names[i0]!r}")
        off = [a for a in range(len(meta["shape"])) if a not in axes.values()]
        if [other["shape"][a] for a in off] != [meta["shape"][a] for a in off] or len(
                other["shape"]) != len(meta["shape"]):
            raise Unsupported(f"variable {path!r}: shape {other['shape']} in input {self.names[i]!r} "
                              f"differs from {meta['shape']} in input {self.names[i0]!r} off the concat dims")

    def copy(self, path: str, i0: int, have: list[int], meta: Mapping[str, Any]) -> None:
        """A variable without concat dims: the first input's, checked when it is an identical dim."""
        leaf = path.rsplit("/", 1)[-1]
        if self.check and (leaf in self.identical or path in self.identical) and len(have) > 1:
            for i in have[1:]:
                if zarray(self.sets[i], path)["shape"] != meta["shape"]:
                    raise InvalidReferences(f"identical dim {path!r}: shape {zarray(self.sets[i], path)['shape']} "
                                            f"in input {self.names[i]!r}, {meta['shape']} in {self.names[i0]!r}")
            values = read_arrays([(self.sets[i], path) for i in have], self.so)
            for i, v in zip(have[1:], values[1:]):
                if not np.array_equal(v, values[0], equal_nan=v.dtype.kind in "fc"):
                    raise InvalidReferences(f"identical dim {path!r}: values in input {self.names[i]!r} "
                                            f"differ from input {self.names[i0]!r}")
        rs = self.sets[i0]
        self.tables[path] = rs.table(path).remap_paths(self.remaps[i0][:-1])
        for suffix in (".zarray", ".zattrs"):
            if f"{path}/{suffix}" in rs:
                self.meta[f"{path}/{suffix}"] = rs[f"{path}/{suffix}"]

    def coordinate(self, c: Coordinate) -> None:
        """The concat dim's coordinate, written inline in one chunk."""
        values = c.values
        if values.dtype.kind == "O":
            raise Unsupported(f"concat dim {c.dim!r}: coordinate values of Python type "
                              f"{type(values[0]).__name__} have no zarr dtype; give coo_dtypes")
        base = {}
        for rs in self.sets:
            if f"{c.dim}/.zarray" in rs:
                base = zarray(rs, c.dim)
                break
        n = len(values)
        from ..scan._zarr import dtype_json, fill_json

        self.meta[f"{c.dim}/.zarray"] = metadata_bytes({
            "chunks": [n], "compressor": None, "dtype": dtype_json(values.dtype),
            "fill_value": fill_json(None, values.dtype) if not base else base.get("fill_value"),
            "filters": None, "order": "C", "shape": [n], "zarr_format": 2,
        }, f"{c.dim}/.zarray")
        self.meta[f"{c.dim}/.zattrs"] = metadata_bytes({**c.attrs, "_ARRAY_DIMENSIONS": [c.dim]},
                                                       f"{c.dim}/.zattrs")
        grid = ChunkGrid((n,), (n,))
        one = np.zeros(1, np.int64)
        self.tables[c.dim] = ChunkTable.from_entries(
            grid, one, np.array([INLINE], np.uint8), one, one, one,
            inline={0: np.ascontiguousarray(values).tobytes()})


def _group_keys(rs: ReferenceSet) -> list[str]:
    """Group-level metadata keys (``.zgroup``, a group's ``.zattrs``) of ``rs``."""
    arrays = set(rs.grids)
    out = []
    for key in rs.other.keys.tolist():
        head, _, name = key.rpartition("/")
        if name in (".zgroup", ".zattrs") and head not in arrays:
            out.append(key)
    return out


def _same_nan(a: Any, b: Any) -> bool:
    return a == b or (a == "NaN" and b == "NaN")


def _place(flat: np.ndarray, src: tuple[int, ...], dst: tuple[int, ...],
           maps: Sequence[np.ndarray | None]) -> np.ndarray:
    """Flat indices of grid ``src`` (its axes the last of ``dst``) moved into grid ``dst``: along
    each axis of ``dst``, chunk ``j`` goes to ``maps[axis][j]`` (``None``: stays ``j``)."""
    flat = np.asarray(flat, np.int64)
    if not flat.size:
        return flat
    lead = len(dst) - len(src)
    idx = [np.zeros_like(flat)] * lead + (list(np.unravel_index(flat, src)) if src else [])
    idx = [ix if m is None else np.asarray(m, np.int64)[ix] for ix, m in zip(idx, maps, strict=True)]
    return np.ravel_multi_index(tuple(idx), dst).astype(np.int64)
