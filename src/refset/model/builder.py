"""The readers' builder: references added key by key (parsed JSON) or column-wise (batches of chunk
references), then built into tables once."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from refset.errors import InvalidReferences
from refset.model.inline import InlineBytes, concat_inline
from refset.model.keys import (
    METADATA_NAMES,
    ChunkGrid,
    KeyRouter,
    flat_indices,
    grid_from_metadata,
    split_metadata_key,
)
from refset.model.table import (
    INLINE,
    MAX_END,
    RANGE,
    WHOLE,
    ChunkTable,
    KeyTable,
    Ref,
    Row,
    _compact,
    min_uint,
)

__all__ = ["Builder", "check_ends", "route"]


def check_ends(kind: np.ndarray, offset: np.ndarray, length: np.ndarray) -> int:
    """Index of the first range reference with ``offset + length >= 2**63`` (or either beyond), or -1.
    One vectorised pass (negative values count as huge); columns of less than 64 bits cannot reach
    the bound."""
    offset, length = np.asarray(offset), np.asarray(length)
    if offset.dtype.itemsize < 8 and length.dtype.itemsize < 8:
        return -1
    o, n = offset.astype(np.uint64, copy=False), length.astype(np.uint64, copy=False)
    top = np.uint64(MAX_END)
    bad = (o >= top) | (n >= top) | (o + n >= top)
    bad &= np.asarray(kind) == RANGE
    return int(np.argmax(bad)) if bad.any() else -1


class Builder:
    """Collects references, then builds the tables of a set (:meth:`build_parts`).

    Single keys go through :meth:`add`; whole batches of chunk references of one array through
    :meth:`add_chunks` (columnar, no per-chunk Python work). Batches take precedence over single keys
    and later batches over earlier ones, matching "the later duplicate wins" when all single keys are
    added first (as the readers do). ``url_ids`` is the URL table being built: readers may register
    URLs in it and pass ids that index it, or hand in one that another builder shares.
    """

    def __init__(self, grids: Mapping[str, ChunkGrid] | None = None,
                 url_ids: dict[str, int] | None = None) -> None:
        self.items: dict[str, Ref] = {}
        self.batches: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                 InlineBytes]] = []
        self.extra_grids: dict[str, ChunkGrid] = dict(grids or {})
        self.url_ids: dict[str, int] = {} if url_ids is None else url_ids
        self.key_batches: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, key: str, ref: Ref) -> None:
        self.items[key] = ref

    def url_id(self, url: str) -> int:
        """The id of ``url`` in this builder's URL table (added when new)."""
        return self.url_ids.setdefault(url, len(self.url_ids))

    def add_chunks(
        self,
        path: str,
        flat: np.ndarray,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        inline: Mapping[int, bytes] | None = None,
        urls: Sequence[str] | None = None,
    ) -> None:
        """Chunk references of array ``path`` at flat indices ``flat``.

        ``path_id`` indexes ``urls`` when given, else this builder's ``url_ids``.
        """
        kind = np.asarray(kind, np.uint8)
        if urls is not None:
            path_id = self._own_ids(path_id, urls)
        path_id = np.where(kind == INLINE, 0, np.asarray(path_id, np.int64))
        flat = np.asarray(flat, np.int64)
        bad = check_ends(kind, offset, length)
        if bad >= 0:
            raise InvalidReferences(f"array {path!r}, chunk {int(flat[bad])} (flat index): offset "
                                    f"{int(offset[bad])} + length {int(length[bad])} must be below 2**63")
        self.batches.append((
            path,
            flat.astype(np.int32) if flat.size and flat.max() < 2**31 else flat,
            kind,
            path_id.astype(min_uint(len(self.url_ids))),
            _compact(np.asarray(offset, np.uint64)),
            _compact(np.asarray(length, np.uint64)),
            InlineBytes.of(inline),
        ))

    def add_keys(
        self,
        keys: np.ndarray,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        urls: Sequence[str] | None = None,
    ) -> None:
        """Range or whole-file references of many keys at once (``keys``: a numpy string array).

        Keys that turn out to be chunk keys of a grid are routed to its table; the others go to the
        generic table without a Python object per key until it is built.
        """
        bad = check_ends(kind, offset, length)
        if bad >= 0:
            raise InvalidReferences(f"refs[{str(keys[bad])!r}]: offset {int(offset[bad])} + length "
                                    f"{int(length[bad])} must be below 2**63")
        if urls is not None:
            path_id = self._own_ids(path_id, urls)
        self.key_batches.append((keys, np.asarray(kind, np.uint8), np.asarray(path_id, np.int64),
                                 np.asarray(offset, np.uint64), np.asarray(length, np.uint64)))

    def _own_ids(self, path_id: np.ndarray, urls: Sequence[str]) -> np.ndarray:
        """``path_id`` indexing ``urls``, as ids of this builder's URL table."""
        remap = np.array([self.url_id(u) for u in urls] or [0], np.int64)
        return remap[np.asarray(path_id, np.int64)]

    def key_batch_hits(self, router: KeyRouter) -> Iterator[tuple[int, int, str, int]]:
        """(batch, row, array path, flat index) of every key of the key batches that is a chunk key
        of ``router``'s grids (keys not under any array path are skipped without a Python step)."""
        for b, (keys, *_) in enumerate(self.key_batches):
            maybe = np.zeros(len(keys), bool)
            for path in router.grids:
                maybe |= np.strings.startswith(keys, path + "/") if path else True
            for i in np.flatnonzero(maybe).tolist():
                hit = router.locate(str(keys[i]))
                if hit is not None:
                    yield b, i, hit[0], hit[1]

    def _route_key_batches(self, router: KeyRouter) -> list[tuple[np.ndarray, ...]]:
        """Move chunk keys of key batches into single items; the rest stays columnar."""
        urls = list(self.url_ids)
        moved = [np.zeros(len(kb[0]), bool) for kb in self.key_batches]
        for b, i, _path, _flat in self.key_batch_hits(router):
            keys, kind, pid, off, ln = self.key_batches[b]
            ref: Ref = (urls[pid[i]], int(off[i]), int(ln[i])) if kind[i] == RANGE else (urls[pid[i]],)
            self.items.pop(str(keys[i]), None)
            self.items[str(keys[i])] = ref
            moved[b][i] = True
        return [(keys[~m], kind[~m], pid[~m], off[~m], ln[~m])
                for (keys, kind, pid, off, ln), m in zip(self.key_batches, moved, strict=True)]

    def grids(self) -> dict[str, ChunkGrid]:
        """Chunk grids described by the metadata added so far."""
        grids = dict(self.extra_grids)
        v2: set[str] = set()  # a path with both documents: .zarray's grid, as lookups find it first
        items = self.items
        for k in [k for k in items if k.endswith(METADATA_NAMES)]:  # cheaply, past the chunk keys
            v = items[k]
            meta = split_metadata_key(k)
            if meta is None or not isinstance(v, bytes) or meta[0] in v2:
                continue
            g = grid_from_metadata(meta[1], v)
            if meta[1] == ".zarray":
                v2.add(meta[0])
                if g is None:
                    grids.pop(meta[0], None)
            if g is not None:
                grids[meta[0]] = g
        return grids

    def _row(self, ref: Ref) -> Row:
        if isinstance(ref, bytes):
            return INLINE, 0, 0, 0, ref
        pid = self.url_id(ref[0])
        if len(ref) == 1:
            return WHOLE, pid, 0, 0, None
        return RANGE, pid, ref[1], ref[2], None

    def _columns(self, flat: np.ndarray, refs: list[Ref], inline: dict[int, bytes],
                 ) -> tuple[np.ndarray, ...]:
        """``(flat, kind, path_id, offset, length)`` of chunk references ``refs`` at ``flat``; their
        inline bytes go to ``inline``. Range references, the common case, are taken apart in C."""
        inl = np.zeros(0, np.int64)
        if set(map(type, refs)) - {tuple}:
            is_bytes = np.fromiter((isinstance(r, bytes) for r in refs), bool, len(refs))
            pos = np.flatnonzero(is_bytes).tolist()
            inl = flat[is_bytes]
            inline.update(zip(inl.tolist(), (refs[i] for i in pos)))  # type: ignore[misc]
            refs = [r for r, b in zip(refs, is_bytes.tolist()) if not b]
            flat = flat[~is_bytes]
        n = len(refs)
        urls: tuple[Any, ...]
        off: Sequence[Any]
        ln: Sequence[Any]
        if set(map(len, refs)) <= {3}:
            urls, off, ln = zip(*refs) if n else ((), (), ())
            kind = np.full(n, RANGE, np.uint64)
        else:  # whole-file references among them
            urls = tuple(r[0] for r in refs)
            off = [r[1] if len(r) == 3 else 0 for r in refs]
            ln = [r[2] if len(r) == 3 else 0 for r in refs]
            kind = np.array([RANGE if len(r) == 3 else WHOLE for r in refs], np.uint64)
        ids = self.url_ids
        for u in dict.fromkeys(urls):
            if u not in ids:
                ids[u] = len(ids)
        pid = np.fromiter(map(ids.__getitem__, urls), np.uint64, n)
        if not len(inl):
            return flat, kind, pid, np.array(off, np.uint64), np.array(ln, np.uint64)
        z = np.zeros(len(inl), np.uint64)
        return (np.concatenate((flat, inl)),
                np.concatenate((kind, np.full(len(inl), INLINE, np.uint64))),
                np.concatenate((pid, z)), np.concatenate((np.array(off, np.uint64), z)),
                np.concatenate((np.array(ln, np.uint64), z)))

    def build_other(self, grids: Mapping[str, ChunkGrid]) -> KeyTable:
        """The generic table of the single keys added so far that are not chunk keys of ``grids``
        (for readers that build the chunk tables later)."""
        _, rest = route(self.items, grids)
        return KeyTable.from_items({k: self._row(v) for k, v in rest.items()})

    def build_parts(self) -> tuple[tuple[str, ...], dict[str, ChunkTable], KeyTable]:
        """``(urls, tables, other)`` of everything added."""
        row = self._row
        grids = self.grids()
        router = KeyRouter(grids)
        key_batches = self._route_key_batches(router) if grids else self.key_batches
        routed, rest = route(self.items, grids)
        generic: dict[str, Row] = {k: row(v) for k, v in rest.items()}
        parts: dict[str, list[tuple[np.ndarray, ...]]] = {p: [] for p in grids}
        inlines: dict[str, list[InlineBytes]] = {p: [] for p in grids}
        for path, (flat, refs) in routed.items():
            one: dict[int, bytes] = {}
            parts[path].append(self._columns(flat, refs, one))
            inlines[path].append(InlineBytes.of(one))
        for path, flat, kind, pid, off, ln, inl in self.batches:
            if path not in grids:
                raise InvalidReferences(f"no chunk grid for array {path!r}")
            parts[path].append((flat, kind, pid, off, ln))
            inlines[path].append(inl)
        tables: dict[str, ChunkTable] = {}
        for path, g in grids.items():
            chunks = parts.pop(path)
            if len(chunks) == 1:
                cols = list(chunks[0])
            else:
                cols = [np.concatenate([c[j] for c in chunks]) if chunks else np.zeros(0, np.uint64)
                        for j in range(5)]
            del chunks
            got = inlines.pop(path)
            inline = concat_inline(got, [i.flat for i in got])
            tables[path] = ChunkTable.from_entries(g, cols[0], cols[1], cols[2], cols[3], cols[4], inline=inline)
        other = KeyTable.from_items(generic)
        if key_batches:
            other = KeyTable.merged(other, key_batches)
        return tuple(self.url_ids), tables, other




def route(items: Mapping[str, Ref], grids: Mapping[str, ChunkGrid],
          ) -> tuple[dict[str, tuple[np.ndarray, list[Ref]]], dict[str, Ref]]:
    """``items`` split into chunk references of ``grids`` (per array: flat indices and refs, in the
    order of ``items``) and the other keys, as ``KeyRouter.locate`` decides key by key."""
    routed: dict[str, tuple[list[int], list[Ref]]] = {}
    rest: dict[str, Ref] = {}
    if not grids:
        return {}, dict(items)
    if not all(g.separator == "." and not g.prefix for g in grids.values()):
        router = KeyRouter(grids)
        for k, v in items.items():
            hit = router.locate(k)
            if hit is None:
                rest[k] = v
            else:
                r = routed.setdefault(hit[0], ([], []))
                r[0].append(hit[1])
                r[1].append(v)
        return {p: (np.array(f, np.int64), refs) for p, (f, refs) in routed.items()}, rest
    return _route_dotted(items, grids)


def _route_dotted(items: Mapping[str, Ref], grids: Mapping[str, ChunkGrid],
                  ) -> tuple[dict[str, tuple[np.ndarray, list[Ref]]], dict[str, Ref]]:
    """:func:`route` where every grid's chunk keys are "path/i.j.k" (or "path/0" for a scalar):
    grouped by path, then parsed per array."""
    rest: dict[str, Ref] = {}
    cand: dict[str, tuple[list[str], list[str], list[Ref]]] = {p: ([], [], []) for p in grids}
    for k, v in items.items():
        head, _, tail = k.rpartition("/")
        c = cand.get(head)
        if c is None or not tail[:1].isdigit():
            rest[k] = v
        else:
            c[0].append(k)
            c[1].append(tail)
            c[2].append(v)
    out: dict[str, tuple[np.ndarray, list[Ref]]] = {}
    for path, (keys, tails, refs) in cand.items():
        if not keys:
            continue
        flat = flat_indices(tails, grids[path].grid_shape)
        good = flat >= 0
        if not good.all():
            for i in np.flatnonzero(~good).tolist():  # not a chunk key of the grid: a generic key
                rest[keys[i]] = refs[i]
            refs = [refs[i] for i in np.flatnonzero(good).tolist()]
            flat = flat[good]
        if flat.size:
            out[path] = (flat, refs)
    return out, rest
