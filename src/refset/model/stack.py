"""Many sets held as columns (a :class:`SetStack`): per set its arrays' metadata and its group-level
keys, per array path the chunk references of every set in one set of columns (set after set) over one
URL table.

Built from sets (:meth:`SetStack.from_sets`) or straight from many JSON documents by the JSON reader's
batch entry (:func:`refset.formats.json.read_batch`), without a set per document. Combine works on
these columns, so its cost per input is a few Python steps, not a few numpy calls per variable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from refset.model.fingerprints import Fingerprints
from refset.model.inline import InlineBytes, concat_inline
from refset.model.metadata import ArrayMetadata
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, RANGE, WHOLE, Ref, resolve, union_urls

__all__ = ["SetStack", "Rows", "META_NAMES", "inline_rows"]

#: The keys combine reads besides chunk references: array and group metadata.
META_NAMES = (".zarray", ".zattrs", ".zgroup", "zarr.json")


@dataclass(frozen=True)
class Rows:
    """The chunk references of one variable in every input that has it. Row ``r`` belongs to input
    ``owner[r]`` (ascending); ``flat`` indexes that input's own grid; ``path_id`` indexes
    :attr:`SetStack.urls` (0 for inline rows); ``inline`` holds the bytes of inline rows, by row."""

    owner: np.ndarray
    flat: np.ndarray
    kind: np.ndarray
    path_id: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    inline: InlineBytes
    bounds: np.ndarray  # rows of input i: bounds[i]:bounds[i + 1]

    @classmethod
    def of_parts(cls, n: int, parts: Sequence[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                    np.ndarray]], inline: InlineBytes) -> Rows:
        """From ``(input, flat, kind, path_id, offset, length)`` parts in input order."""
        counts = np.zeros(n, np.int64)
        for p in parts:
            counts[p[0]] += len(p[1])
        owner = np.repeat(np.arange(n, dtype=np.int64), counts)
        cols = [np.concatenate([p[j] for p in parts]) if parts else np.zeros(0, np.int64) for j in range(1, 6)]
        bounds = np.concatenate(([0], np.cumsum(counts)))
        return cls(owner, cols[0].astype(np.int64, copy=False), cols[1].astype(np.uint8, copy=False),
                   cols[2].astype(np.int64, copy=False), cols[3].astype(np.uint64, copy=False),
                   cols[4].astype(np.uint64, copy=False), inline, bounds)

    def of(self, i: int) -> slice:
        return slice(int(self.bounds[i]), int(self.bounds[i + 1]))


class SetStack:
    """``n`` sets: ``names``, per set its arrays' ``metadata`` and its group-level keys ``meta`` (group
    documents, and array documents stored as references to files: bytes, or a reference), one URL table
    ``urls``; :meth:`rows` per array path, :meth:`set` per set (built on demand)."""

    def __init__(self, names: Sequence[str], urls: Sequence[str], metadata: Sequence[Mapping[str, ArrayMetadata]],
                 meta: Sequence[Mapping[str, Ref]], rows: Callable[[str], Rows],
                 sets: Callable[[int], ReferenceSet],
                 fetched: Mapping[tuple[str, int, int], bytes] | None = None,
                 fingerprints: Sequence[Fingerprints] | None = None) -> None:
        self.names = list(names)
        self.urls = tuple(urls)
        self.metadata = [dict(m) for m in metadata]
        self.meta = list(meta)
        self.grids = [{p: m.grid for p, m in md.items()} for md in self.metadata]
        self._rows_of = rows
        self._set_of = sets
        self._rows: dict[str, Rows] = {}
        #: bytes of range references already read, by (url, offset, length) (see ReferenceSet.fetched)
        self.fetched = fetched or {}
        #: per set, what its files were when scanned
        self.fingerprints = list(fingerprints) if fingerprints is not None else [Fingerprints.empty()] * len(names)
        self._union: Fingerprints | None = None
        #: whether reads of the sets' files (coordinate values, attributes stored in files) check them
        #: against the sets' fingerprints
        self.verify = True

    @property
    def n(self) -> int:
        return len(self.names)

    def rows(self, path: str) -> Rows:
        got = self._rows.get(path)
        if got is None:
            got = self._rows[path] = self._rows_of(path)
        return got

    def set(self, i: int) -> ReferenceSet:
        return self._set_of(i)

    def lifted(self, path: str, dim: str) -> SetStack:
        """These sets with array ``path`` given a new first dim ``dim`` of length 1 (chunk 1) in each
        set that holds it: its cells keep their flat indices, so its rows are shared. Combining along a
        new dim is then combining along an existing one (variables made of parts, rows no input holds)."""
        metadata = []
        for md in self.metadata:
            m = md.get(path)
            if m is not None:
                dims = [dim, *(str(d) for d in m.dimension_names or ())]
                md = {**md, path: m.replace(shape=[1, *m.shape], chunks=[1, *m.chunks], dimension_names=dims)}
            metadata.append(md)
        out = SetStack(self.names, self.urls, metadata, self.meta, self.rows, self._set_of, self.fetched,
                       self.fingerprints)
        out.verify = self.verify
        out._union = self._union
        return out

    def recorded(self) -> Callable[[str], tuple[int | None, int | None, str | None, str | None] | None] | None:
        """What the sets' reads of their files check a file against (None: nothing checked)."""
        if not self.verify:
            return None
        fps = self.all_fingerprints()
        return fps.get if len(fps) else None

    def all_fingerprints(self) -> Fingerprints:
        """The union of the sets' fingerprints (a file recorded differently by two sets is
        :class:`~refset.errors.SourceChanged`, naming both)."""
        if self._union is None:
            self._union = Fingerprints.union(self.fingerprints, self.names)
        return self._union

    def paths(self) -> list[str]:
        """Every input's arrays, in the order they first appear."""
        out: dict[str, None] = {}
        for g in self.grids:
            out.update(dict.fromkeys(g))
        return list(out)

    def group_keys(self, i: int) -> list[str]:
        """Group-level metadata keys (``.zgroup``, ``zarr.json`` and ``.zattrs`` of groups) of set ``i``."""
        arrays = self.grids[i]
        out = []
        for key in self.meta[i]:
            head, _, name = key.rpartition("/")
            if name in (".zgroup", ".zattrs", "zarr.json") and head not in arrays:
                out.append(key)
        return sorted(out)

    @classmethod
    def from_sets(cls, sets: Sequence[ReferenceSet], names: Sequence[str]) -> SetStack:
        # every table read first: a lazily read set (parquet) knows its URL table only after its tables
        sets = [rs.loaded() for rs in sets]
        urls, remaps = union_urls([rs.urls for rs in sets])
        remaps = [np.concatenate([r, [0]]) for r in remaps]  # [-1]: anything not a file
        meta = [_metadata(rs) for rs in sets]

        def rows(path: str) -> Rows:
            parts, stores, at = [], [], []
            base = 0
            for i, rs in enumerate(sets):
                if path not in rs.grids:
                    continue
                table = rs.table(path)
                f, k, p, o, n = table.entries()
                pid = np.where((k == RANGE) | (k == WHOLE), remaps[i][np.asarray(p, np.int64)], 0)
                parts.append((i, f, k, pid, o, n))
                if table.inline:
                    stores.append(table.inline)
                    at.append(base + np.searchsorted(f, table.inline.flat))
                base += len(f)
            return Rows.of_parts(len(sets), parts, concat_inline(stores, at))

        fetched: dict[tuple[str, int, int], bytes] = {}
        for rs in sets:
            fetched.update(rs.fetched)
        return cls(names, urls, [rs.metadata for rs in sets], meta, rows, sets.__getitem__, fetched,
                   [rs.fingerprints for rs in sets])


def _metadata(rs: ReferenceSet) -> dict[str, Ref]:
    """The metadata keys of ``rs`` outside its arrays' metadata, and their values."""
    other, urls = rs.other, rs.urls
    return {k: resolve(other.row(i), urls, k) for i, k in enumerate(other.keys.tolist())
            if k.endswith(META_NAMES)}


def inline_rows(rows: Rows, sel: slice | np.ndarray) -> InlineBytes:
    """``rows.inline`` of the rows ``sel`` selects (ascending), keyed by their position in the
    selection."""
    if not rows.inline or (isinstance(sel, slice) and sel == slice(None)):
        return rows.inline
    idx = np.arange(len(rows.flat))[sel]
    pos = np.flatnonzero(rows.kind[sel] == INLINE)
    return rows.inline.take(rows.inline.positions(idx[pos])).moved(pos)
