"""A set's files against what it recorded (:func:`verify`), and the set brought up to date with its
changed files rescanned (:func:`refresh`).

A set records each file it was made from (:mod:`refset.model.fingerprints`). :func:`verify` looks at
every one, concurrently (:mod:`refset.io.verify`). :func:`refresh` rescans the files that changed (a
data file, or the data file of a sidecar that changed) and puts each one's rows in place of those its
old scan gave: along the set's concat dim, the rows whose coordinate values the new scan holds (the
coordinate itself is unchanged by construction). A variable the new scan stores and decodes as the
set does keeps being one array, the file's cells replaced and every other cell (and every other
array) kept as it was; one that the file now stores or decodes otherwise (a new ``scale_factor``,
other chunks, another dtype) becomes a variable made of parts (:mod:`refset.model.parts`): the set's
rows before the file's, the file's, the set's after. A file whose old rows cannot be told, or whose
rows would need a part where a set holds none (along a new dim), is refused naming the file, the
variable and why. A set of one file is that file's new scan.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from refset.combine.parts import _shown_attrs
from refset.errors import Unsupported
from refset.io.verify import CHANGED, MISSING, UNREADABLE, Check, check_files
from refset.model.array import Array
from refset.model.decoding import absent_reads_missing, decoding_attrs, decoding_codecs, missing_fill
from refset.model.keys import ChunkGrid
from refset.model.metadata import ArrayMetadata
from refset.model.parts import Parts, bounds_of, find_parts, group_documents, part_name
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, RANGE, WHOLE, ChunkTable, KeyTable, concat_tables, union_urls

__all__ = ["verify", "refresh", "Verification", "Refreshed"]


@dataclass(frozen=True)
class Verification:
    """What :func:`verify` found: a :class:`~refset.io.verify.Check` per recorded file (data files
    and sidecars), and the URLs the set references that it records nothing for."""

    checks: list[Check]
    unrecorded: list[str] = field(default_factory=list)

    def of(self, *status: str) -> list[Check]:
        return [c for c in self.checks if c.status in status]

    @property
    def ok(self) -> bool:
        """Whether every recorded file is what the set recorded."""
        return not self.of(CHANGED, MISSING, UNREADABLE)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.checks:
            out[c.status] = out.get(c.status, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "counts": self.counts(), "unrecorded": self.unrecorded,
                "files": [c.to_json() for c in self.checks]}


def _loaded(source: Any, storage_options: Mapping[str, Any] | None) -> ReferenceSet:
    from refset.formats import load

    return load(source, storage_options=storage_options)


def verify(source: Any, *, storage_options: Mapping[str, Any] | None = None,
           remote_options: Mapping[str, Any] | None = None, concurrency: int = 64,
           progress: Callable[[int], None] | None = None) -> Verification:
    """Look at every file the set ``source`` (anything :func:`refset.load` takes) records, ``concurrency``
    at a time (a ``stat`` per local file; a ``HEAD`` per HTTP file; a ``HeadObject`` per S3 object),
    and say which changed, went missing or could not be looked at. ``storage_options``: for reading
    the set; ``remote_options``: for its files."""
    rs = _loaded(source, storage_options)
    fps = rs.fingerprints
    checks = check_files(fps.records(), remote_options=remote_options, concurrency=concurrency, progress=progress)
    return Verification(checks, _unrecorded(rs))


def _unrecorded(rs: ReferenceSet) -> list[str]:
    """The URLs the set's references read that it records nothing of."""
    rs = rs.loaded()
    used = np.zeros(len(rs.urls), bool)
    cols = [rs.table(p).entries()[1:3] for p in rs.grids] + [(rs.other.kind, rs.other.path_id)]
    for kind, pid in cols:
        used[np.asarray(pid[(kind == RANGE) | (kind == WHOLE)], np.int64)] = True
    fps = rs.fingerprints
    return [u for u, x in zip(rs.urls, used.tolist(), strict=True) if x and fps.find(u) < 0]


@dataclass
class Refreshed:
    """What :func:`refresh` did: the set, the files rescanned, those missing (left as they were, or
    dropped), and the checks it made."""

    set: ReferenceSet
    rescanned: list[str]
    missing: list[str]
    dropped: list[str]
    verification: Verification
    parts: list[str] = field(default_factory=list)  # variables that became (or gained) parts


def refresh(source: Any, *, dest: str | os.PathLike[str] | None = None, concat_dim: str | None = None,
            drop_missing: bool = False, storage_options: Mapping[str, Any] | None = None,
            remote_options: Mapping[str, Any] | None = None, scan_options: Mapping[str, Any] | None = None,
            concurrency: int = 64) -> ReferenceSet:
    """The set ``source`` with the files that changed since it was made rescanned and their rows
    replaced (see the module's text); written back, atomically and in its format, when ``source`` is a
    path (or to ``dest``). Files gone missing are left as they are (their reads fail) unless
    ``drop_missing``: their rows then read as missing values. ``concat_dim``: the dim the set was
    combined along, when it cannot be told from the references. ``scan_options``: for the rescans
    (:func:`refset.scan`'s keywords). Nothing changed: the set as it was (nothing written)."""
    return refresh_report(source, dest=dest, concat_dim=concat_dim, drop_missing=drop_missing,
                          storage_options=storage_options, remote_options=remote_options,
                          scan_options=scan_options, concurrency=concurrency).set


def refresh_report(source: Any, *, dest: str | os.PathLike[str] | None = None, concat_dim: str | None = None,
                   drop_missing: bool = False, storage_options: Mapping[str, Any] | None = None,
                   remote_options: Mapping[str, Any] | None = None, scan_options: Mapping[str, Any] | None = None,
                   concurrency: int = 64, progress: Callable[[int], None] | None = None) -> Refreshed:
    """:func:`refresh`, and what it did (:class:`Refreshed`)."""
    from refset.scan import Scan

    rs = _loaded(source, storage_options).loaded()
    fps = rs.fingerprints
    if not len(fps):
        raise Unsupported("refresh: the set records no fingerprints of its files (a set made by kerchunk or "
                          "an older refset): scan its files again to make one that does")
    ver = Verification(check_files(fps.records(), remote_options=remote_options, concurrency=concurrency,
                                   progress=progress), _unrecorded(rs))
    bad = ver.of(UNREADABLE)
    if bad:
        raise Unsupported(f"refresh: {len(bad)} file(s) could not be looked at, e.g. {bad[0].url}: {bad[0].error}")
    side = dict(zip(fps.url.tolist(), fps.via.tolist(), strict=True))
    stale = sorted({side[c.url] or c.url for c in ver.of(CHANGED)}
                   | {side[c.url] for c in ver.of(MISSING) if side[c.url]})  # a sidecar gone: rescan its file
    missing = sorted(c.url for c in ver.of(MISSING) if not side[c.url] and c.url not in stale)
    out = Refreshed(rs, stale, missing, [], ver)
    if not stale and not (missing and drop_missing):
        return out
    run = Scan(**dict(scan_options or {}))
    so = remote_options if remote_options is not None else None
    new = list(run.many(stale, so, concurrency=concurrency)) if stale else []
    single = fps.scanned()
    for url, scanned in zip(stale, new, strict=True):
        if len(single) == 1 and single == [url]:
            rs = scanned  # a set of one file is its scan
            continue
        rs = _Replace(rs, url, scanned, concat_dim, dict(so or {}), out.parts).run()
    if missing and drop_missing:
        rs = _drop(rs, missing, concat_dim, dict(so or {}), out.parts)
        out.dropped = missing
    kept = rs.fingerprints.without(missing if drop_missing else [])
    for scanned in new:
        kept = kept.updated(scanned.fingerprints)
    rs = rs.with_fingerprints(kept)
    out.set = rs
    target = dest if dest is not None else (source if isinstance(source, str | os.PathLike) else None)
    if target is not None:
        from refset.formats import save
        from refset.formats.registry import detect

        fmt = None
        if dest is None:
            fmt = detect(os.fspath(target), storage_options).name
        import warnings

        from refset.model.parts import PartsWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PartsWarning)  # reported by the caller (the CLI's summary)
            save(rs, target, format=fmt, storage_options=storage_options)
    return out


# -- replacing one file's rows ---------------------------------------------------------------------
class _Replace:
    """One file's rows of ``rs`` replaced by its new scan ``new`` (None: the file is gone, its rows
    become missing values)."""

    def __init__(self, rs: ReferenceSet, url: str, new: ReferenceSet | None, dim: str | None,
                 so: dict[str, Any], parts_log: list[str]) -> None:
        self.rs, self.url, self.new, self.so, self.parts_log = rs, url, new, so, parts_log
        if url not in rs.urls:  # a sidecar (a DMR++ file): its references name the file it describes
            url = next((u for u in rs.fingerprints.recorded_via(url) if u in rs.urls), url)
            self.url = url
        self.pid = rs.urls.index(url) if url in rs.urls else -1
        self.layouts = find_parts(rs)
        self.of_parts = {p: (v, k) for v, lay in self.layouts.items() for k, p in enumerate(lay.paths())}
        self.dim = dim if dim is not None else self._concat_dim()
        self.new_dim = new is not None and not any(self.dim in (m.dimension_names or ())
                                                   for m in new.metadata.values())

    # -- where the file's rows are --------------------------------------------------------------------
    def _concat_dim(self) -> str:
        """The dim along which the file's cells cover part of the set's rows (a combined set's concat
        dim); else the only coordinate the set holds more values of than the file."""
        found = _dims_of(self.rs, self.pid)
        if not found and self.new is not None:
            for d, m in self.rs.metadata.items():
                if list(m.dimension_names or ()) == [d] and (
                        d not in self.new.metadata or self.new.metadata[d].shape[0] < m.shape[0]):
                    found.add(d)
        if len(found) != 1:
            raise Unsupported(f"refresh: {self.url}: cannot tell which dim the set was combined along "
                              f"({'candidates ' + ', '.join(sorted(found)) if found else 'no candidate'}); "
                              "give concat_dim (--concat-dim)")
        return found.pop()

    def _rows(self) -> tuple[int, int]:
        """``[a, b)``: the set's rows along its concat dim that the file holds: where the new scan's
        coordinate values are in the set's, else where the file's references are."""
        d = self.dim
        if self.new is not None and not self.new_dim:
            from refset.combine.coords import _data
            from refset.model.stack import SetStack

            if d not in self.rs.metadata or d not in self.new.metadata:
                raise Unsupported(f"refresh: {self.url}: no coordinate {d!r} to place its rows by")
            stack = SetStack.from_sets([self.rs, self.new], ["set", self.url])
            stack.verify = False  # the set's record of the file is the old one, by construction
            per, _ = _data(stack, d, d, None, self.so)
            have, got = per[0], per[1]
            at = np.searchsorted(have, got)
            ok = (at < len(have)) & (have[np.minimum(at, len(have) - 1)] == got)
            if not got.size or not ok.all() or not (np.diff(at) == 1).all():
                raise Unsupported(f"refresh: {self.url}: its {d!r} values are not a run of the set's "
                                  "(a file whose coordinate changed is a new input: combine it)")
            return int(at[0]), int(at[-1]) + 1
        rows = _rows_of(self.rs, self.pid, d)
        if rows is None:
            raise Unsupported(f"refresh: {self.url}: cannot tell its rows along {d!r} from the set's "
                              "references (none of them reads it)")
        return rows

    # -- the set anew ---------------------------------------------------------------------------------
    def run(self) -> ReferenceSet:
        a, b = self._rows()
        rs = self.rs
        urls, (keep, add) = union_urls([rs.urls, self.new.urls if self.new is not None else ()])
        arrays: dict[str, Array] = {}
        meta: dict[str, bytes] = {}
        drop_keys: set[str] = set()
        done: set[str] = set()
        for path in rs.grids:
            if path in done:
                continue
            if path in self.of_parts:
                var, _ = self.of_parts[path]
                lay = self.layouts[var]
                done.update(lay.paths())
                self._variable_parts(var, lay, a, b, keep, add, arrays, meta, drop_keys)
                continue
            done.add(path)
            m = rs.metadata[path]
            names = list(m.dimension_names or ())
            t = rs.table(path).remap_paths(keep)
            if self.dim not in names:
                arrays[path] = self._off_dim(path, m, t, add)
                continue
            if path == self.dim and names == [self.dim]:  # the coordinate: the file's values are its own
                arrays[path] = Array(m, t)
                continue
            arrays.update(self._regular(path, m, t, a, b, add, meta, drop_keys))
        other = rs.other
        rows = {k: (INLINE, 0, 0, 0, v) for k, v in meta.items()}
        gone = np.array([other.find(k) for k in drop_keys], np.int64)
        other = KeyTable.merged_rows(other.without_rows(gone), rows).remap_paths(keep)
        return ReferenceSet.from_arrays({}, arrays, urls, other=other, validate=False, info=rs.format_info(),
                                        fingerprints=rs.fingerprints)

    def _off_dim(self, path: str, m: ArrayMetadata, t: ChunkTable, add: np.ndarray) -> Array:
        """An array without the concat dim: the set's, or the new scan's where the set's came from
        the file (the first input gives such arrays)."""
        if path not in _cells(self.rs, self.pid):
            return Array(m, t)
        nm = self.new.metadata.get(path) if self.new is not None else None
        if self.new is None or nm is None or nm.grid != m.grid:
            raise Unsupported(f"refresh: {self.url}: variable {path!r} (without {self.dim!r}) is read from it, "
                              + ("and it is gone: rescan the set's files" if self.new is None
                                 else "and its new scan does not hold it as the set does"))
        return Array(m, self.new.table(path).remap_paths(add))

    def _new_array(self, path: str, add: np.ndarray) -> Array | None:
        """The file's new array of ``path`` with the set's dims (a new dim added) and URL ids, or None."""
        nm = self.new.metadata.get(path) if self.new is not None else None
        if self.new is None or nm is None:
            return None
        t = self.new.table(path).remap_paths(add)
        if self.new_dim:
            dims = [self.dim, *(str(x) for x in nm.dimension_names or ())]
            nm = nm.replace(shape=[1, *nm.shape], chunks=[1, *nm.chunks], dimension_names=dims)
            t = t.with_grid(nm.grid)
        return Array(nm, t)

    def _regular(self, path: str, m: ArrayMetadata, t: ChunkTable, a: int, b: int, add: np.ndarray,
                 meta: dict[str, bytes], drop_keys: set[str]) -> dict[str, Array]:
        axis = list(m.dimension_names or ()).index(self.dim)
        got = self._piece(path, m, t, axis, a, b, 0, add)
        if isinstance(got, Array):
            return {path: got}
        self.parts_log.append(path)
        for name in m.documents():  # the array's documents give way to the group's
            drop_keys.add(f"{path}/{name}" if path else name)
        dims = tuple(str(x) for x in (m.dimension_names or ()))
        return self._as_parts(path, dims, tuple(m.shape), m.zarr_format, _shown_attrs(dict(m.attributes)),
                              got, meta)

    def _piece(self, path: str, m: ArrayMetadata, t: ChunkTable, axis: int, a: int, b: int, lo: int,
               add: np.ndarray) -> Array | list[tuple[Array, int, int]]:
        """The array ``m``/``t`` (rows ``lo:`` of its variable) with the file's rows ``[a, b)`` of the
        variable replaced: one array when the file stores and decodes as it does (or its rows can read
        as missing), else the pieces of parts (the array's rows before, the file's, after)."""
        la, lb = a - lo, b - lo
        c = m.chunks[axis]
        new = self._new_array(path, add)
        if new is not None and new.metadata.shape[axis] != lb - la:
            raise Unsupported(f"refresh: {self.url}: variable {path!r} has {new.metadata.shape[axis]} rows along "
                              f"{self.dim!r} in its new scan, the set {lb - la}")
        if la % c or (lb < m.shape[axis] and lb % c):
            raise Unsupported(f"refresh: {self.url}: variable {path!r}: the file's rows {a}:{b} do not fall on "
                              "the set's chunk grid")
        if new is not None and _alike(m, new.metadata, axis):
            return Array(m, _spliced(t, axis, la, lb, new.table, m))
        if new is None:  # the file gone (or the variable gone from it): its rows read as missing
            if absent_reads_missing(m, m.attributes):
                return Array(m, _spliced(t, axis, la, lb, None, m))
            fill = missing_fill(m, m.attributes)
            if fill is not None and self._complete_but(t, axis, la, lb, m):
                m2 = m.replace(fill_value=fill)
                return Array(m2, _spliced(t, axis, la, lb, None, m).with_grid(m2.grid))
            new = _missing_array(m, axis, lb - la)
        if self.new_dim:
            raise Unsupported(f"refresh: {self.url}: variable {path!r}: {_difference(m, new.metadata, axis)}: "
                              "its rows would be a part of their own, and parts are along an existing dim only")
        n = m.shape[axis]
        pieces = [(Array(m.replace(shape=_with(m.shape, axis, la)), _cut(t, axis, 0, la, m)), lo, a)] if la else []
        pieces.append((new, a, b))
        if lb < n:
            pieces.append((Array(m.replace(shape=_with(m.shape, axis, n - lb)), _cut(t, axis, lb, n, m)), b, lo + n))
        return pieces

    @staticmethod
    def _complete_but(t: ChunkTable, axis: int, la: int, lb: int, m: ArrayMetadata) -> bool:
        """Whether every chunk of ``t`` outside rows ``[la, lb)`` has a reference (a new fill value then
        changes no value read)."""
        f = t.present()
        idx = np.unravel_index(f, m.grid.grid_shape)[axis] * m.chunks[axis]
        inside = int(((idx >= la) & (idx < lb)).sum())
        c = m.chunks[axis]
        rows_cells = m.grid.nchunks // m.grid.grid_shape[axis] * (-(-lb // c) - la // c)
        return len(f) - inside == m.grid.nchunks - rows_cells

    def _as_parts(self, path: str, dims: tuple[str, ...], shape: tuple[int, ...], zarr_format: int,
                  shown: Mapping[str, Any], pieces: Sequence[tuple[Array, int, int]],
                  meta: dict[str, bytes]) -> dict[str, Array]:
        """Variable ``path`` as the parts ``pieces`` (each an array and the rows it covers): the arrays,
        and its group's documents put in ``meta``."""
        layout = Parts(path, self.dim, dims, shape, tuple(part_name(k) for k in range(len(pieces))),
                       bounds_of([s - r for _, r, s in pieces]))
        out: dict[str, Array] = {}
        for name, (arr, _, _) in zip(layout.paths(), pieces, strict=True):
            am = arr.metadata.replace(dimension_names=list(dims))
            out[name] = Array(am, arr.table.with_grid(am.grid))
        meta.update(group_documents(layout, shown, zarr_format))
        return out

    def _variable_parts(self, var: str, lay: Parts, a: int, b: int, keep: np.ndarray, add: np.ndarray,
                        arrays: dict[str, Array], meta: dict[str, bytes], drop_keys: set[str]) -> None:
        """A variable made of parts: the file's rows lie within one part (each input's rows are one
        piece of one part), whose cells are replaced when the file decodes as it does; else that part
        is split in three, the file's rows a part of their own."""
        rs = self.rs
        k = next((j for j in range(len(lay.names)) if lay.bounds[j] <= a and b <= lay.bounds[j + 1]), None)
        if k is None:
            raise Unsupported(f"refresh: {self.url}: variable {var!r}: its rows {a}:{b} straddle two of its parts")
        pieces: list[tuple[Array, int, int]] = []
        for j, p in enumerate(lay.paths()):
            m, t = rs.metadata[p], rs.table(p).remap_paths(keep)
            lo, hi = lay.bounds[j], lay.bounds[j + 1]
            got = self._piece(var, m, t, lay.axis, a, b, lo, add) if j == k else Array(m, t)
            if isinstance(got, Array):
                pieces.append((got, lo, hi))
            else:
                pieces.extend(got)
                self.parts_log.append(var)
        head = f"{var}/" if var else ""
        drop_keys.update((f"{head}.zgroup", f"{head}.zattrs", f"{head}zarr.json"))
        for p in lay.paths():
            drop_keys.update(f"{p}/{name}" for name in rs.metadata[p].documents())
        zf = rs.metadata[lay.paths()[0]].zarr_format
        arrays.update(self._as_parts(var, lay.dims, lay.shape, zf, _group_attrs(rs, var), pieces, meta))


def _missing_array(m: ArrayMetadata, axis: int, rows: int) -> Array:
    """A part of ``rows`` missing values along ``axis`` beside the array ``m``: float32 NaN (promoting as
    xarray's fill does), no chunks, as combine makes one for rows no input holds."""
    from refset.combine.parts import _shown_attrs as shown

    chunks = list(m.chunks)
    chunks[axis] = rows
    missing = ArrayMetadata.from_v2({
        "chunks": chunks, "compressor": None, "dtype": "<f4", "fill_value": "NaN", "filters": None, "order": "C",
        "shape": _with(m.shape, axis, rows), "zarr_format": 2},
        {**shown(dict(m.attributes), times=False), "_ARRAY_DIMENSIONS": list(m.dimension_names or ())})
    meta = missing.to_v3() if m.zarr_format == 3 else missing
    return Array(meta, ChunkTable.empty(meta.grid))


def _cells(rs: ReferenceSet, pid: int) -> dict[str, np.ndarray]:
    """Per array, the flat indices of its cells that reference file ``pid`` (a byte range or the file)."""
    out = {}
    for path in rs.grids:
        f, kind, p, _, _ = rs.table(path).entries()
        mine = f[((kind == RANGE) | (kind == WHOLE)) & (p == pid)] if pid >= 0 else f[:0]
        if mine.size:
            out[path] = mine
    return out


def _dims_of(rs: ReferenceSet, pid: int) -> set[str]:
    """The dims along which file ``pid``'s cells cover part of an array's chunks."""
    found: set[str] = set()
    for path, mine in _cells(rs, pid).items():
        m = rs.metadata[path]
        names = list(m.dimension_names or ())
        if len(names) != m.ndim:
            continue
        idx = np.unravel_index(mine, m.grid.grid_shape)
        found.update(str(names[a]) for a, n in enumerate(m.grid.grid_shape) if np.unique(idx[a]).size < n)
    return found


def _rows_of(rs: ReferenceSet, pid: int, dim: str) -> tuple[int, int] | None:
    """``[a, b)``: the rows along ``dim`` that file ``pid``'s cells cover (one run), or None when its
    cells say nothing of them (they do not vary along ``dim``, or cover several runs)."""
    lo, hi = None, None
    for path, mine in _cells(rs, pid).items():
        m = rs.metadata[path]
        names = list(m.dimension_names or ())
        if dim not in names:
            continue
        a = names.index(dim)
        c = m.chunks[a]
        at = np.unique(np.unravel_index(mine, m.grid.grid_shape)[a])
        if not (np.diff(at) == 1).all():
            return None
        start = int(at[0]) * c
        stop = min((int(at[-1]) + 1) * c, m.shape[a])
        if path in _layout_rows(rs):
            off = _layout_rows(rs)[path]
            start, stop = start + off, stop + off
        lo = start if lo is None else min(lo, start)
        hi = stop if hi is None else max(hi, stop)
    return None if lo is None or hi is None else (lo, hi)


def _layout_rows(rs: ReferenceSet) -> dict[str, int]:
    """Per part of a variable made of parts, the row of the whole its first row is."""
    return {p: lay.bounds[k] for lay in find_parts(rs).values() for k, p in enumerate(lay.paths())}


def _group_attrs(rs: ReferenceSet, var: str) -> dict[str, Any]:
    import json

    from refset.model.parts import PARTS_ATTR

    head = f"{var}/" if var else ""
    for key in (f"{head}.zattrs", f"{head}zarr.json"):
        i = rs.other.find(key)
        if i >= 0 and rs.other.data[i] is not None:
            doc = json.loads(rs.other.data[i])
            attrs = doc.get("attributes", {}) if key.endswith("zarr.json") else doc
            return {k: v for k, v in attrs.items() if k != PARTS_ATTR}
    return {}



def _alike(m: ArrayMetadata, n: ArrayMetadata, axis: int) -> bool:
    """Whether the file's new array ``n`` stores and decodes as the set's ``m`` (all but its length
    along ``axis``)."""
    return _difference(m, n, axis) == ""


def _difference(m: ArrayMetadata, n: ArrayMetadata, axis: int) -> str:
    off = [i for i in range(m.ndim) if i != axis]
    checks = {
        "zarr format": (m.zarr_format, n.zarr_format),
        "dims": (list(m.dimension_names or ()), list(n.dimension_names or ())),
        "shape": ([m.shape[i] for i in off], [n.shape[i] for i in off] if n.ndim == m.ndim else list(n.shape)),
        "chunks": (list(m.chunks), list(n.chunks)),
        "dtype": (m.dtype_json, n.dtype_json),
        "codecs": (decoding_codecs(m), decoding_codecs(n)),
        "fill_value": (m.fill_value, n.fill_value),
        "order": (m.order, n.order),
    }
    for name, (x, y) in checks.items():
        if x != y and not (name == "fill_value" and x != x and y != y):
            return f"{name} {y!r} in its new scan differ from {x!r} in the set"
    da, db = decoding_attrs(m.attributes), decoding_attrs(n.attributes)
    for name in sorted(set(da) | set(db)):
        x, y = da.get(name), db.get(name)
        if x != y and not (x != x and y != y):
            return f"{name} {y!r} in its new scan differs from {x!r} in the set"
    return ""


def _with(shape: Sequence[int], axis: int, n: int) -> list[int]:
    out = list(shape)
    out[axis] = n
    return out


def _cut(t: ChunkTable, axis: int, a: int, b: int, m: ArrayMetadata) -> ChunkTable:
    """The cells of rows ``[a, b)`` (``a`` on the chunk grid) of table ``t``, as a table of their own."""
    c = m.chunks[axis]
    grid = ChunkGrid(tuple(_with(m.shape, axis, b - a)), m.grid.chunks, m.grid.separator, m.grid.prefix,
                     m.grid.zarr_format)
    lo, hi = a // c, -(-b // c)
    f, kind, pid, off, ln = t.entries()
    idx = list(np.unravel_index(f, m.grid.grid_shape))
    sel = (idx[axis] >= lo) & (idx[axis] < hi)
    idx = [i[sel] for i in idx]
    idx[axis] = idx[axis] - lo
    flat = np.ravel_multi_index(tuple(idx), grid.grid_shape) if f.size else f
    inline = {int(nf): t.inline[int(of)] for nf, of, k in zip(flat.tolist(), f[sel].tolist(), kind[sel].tolist(),
                                                          strict=True) if k == INLINE}
    return ChunkTable.from_entries(grid, flat, kind[sel], pid[sel], off[sel], ln[sel], inline=inline)


def _spliced(t: ChunkTable, axis: int, a: int, b: int, new: ChunkTable | None, m: ArrayMetadata) -> ChunkTable:
    """Table ``t`` with the cells of rows ``[a, b)`` replaced by ``new``'s (None: none, absent)."""
    n = m.shape[axis]
    pieces = []
    if a:
        pieces.append(_cut(t, axis, 0, a, m))
    grid = ChunkGrid(tuple(_with(m.shape, axis, b - a)), m.grid.chunks, m.grid.separator, m.grid.prefix,
                     m.grid.zarr_format)  # the set's spelling of chunk keys
    pieces.append(ChunkTable.empty(grid) if new is None else new.with_grid(grid))
    if b < n:
        pieces.append(_cut(t, axis, b, n, m))
    return concat_tables(pieces, axis) if len(pieces) > 1 else pieces[0].with_grid(m.grid)


def _drop(rs: ReferenceSet, urls: Sequence[str], dim: str | None, so: dict[str, Any],
          parts_log: list[str]) -> ReferenceSet:
    """``rs`` without the rows of the files ``urls`` (missing): they read as missing values."""
    for url in urls:
        if url in rs.urls and _cells(rs, rs.urls.index(url)):
            rs = _Replace(rs, url, None, dim, so, parts_log).run()
    return rs
