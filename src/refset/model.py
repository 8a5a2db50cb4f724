"""The columnar in-memory model: :class:`ReferenceSet`, its per-array :class:`ChunkTable` and the
generic :class:`KeyTable` for keys outside any chunk grid.

A reference is one of: inline bytes, a whole file ``(url,)``, or a byte range ``(url, offset, length)``.
Chunk references are stored per zarr array as dense numpy columns in C order of chunk index; URLs are
stored once in a table shared by the whole set and referred to by ``path_id``.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np

from .keys import ChunkGrid, grid_from_metadata, split_metadata_key

__all__ = [
    "ABSENT",
    "RANGE",
    "WHOLE",
    "INLINE",
    "Ref",
    "ChunkTable",
    "KeyTable",
    "ReferenceSet",
    "KeyRouter",
    "Builder",
    "array_key",
    "min_uint",
    "encode_inline",
]

# kind codes of the `kind` column
ABSENT, RANGE, WHOLE, INLINE = 0, 1, 2, 3

Ref = bytes | tuple[str] | tuple[str, int, int]

# A grid is indexed densely only while it is not much larger than what it holds.
DENSE_MIN_CHUNKS = 1 << 20
DENSE_FACTOR = 16


def min_uint(maxval: int) -> np.dtype:
    """Smallest unsigned dtype (uint16/32/64) holding ``maxval``."""
    if maxval < 1 << 16:
        return np.dtype(np.uint16)
    if maxval < 1 << 32:
        return np.dtype(np.uint32)
    return np.dtype(np.uint64)


def _compact(a: np.ndarray, floor: type = np.uint32) -> np.ndarray:
    """``a`` (non-negative ints) in the smallest of ``floor``/uint64 that holds it."""
    top = int(a.max()) if a.size else 0
    dt = np.dtype(floor) if top <= np.iinfo(floor).max else np.dtype(np.uint64)
    return a.astype(dt, copy=False)


def encode_inline(data: bytes) -> str:
    """Version 0 spelling of inline data: the text when it is ASCII, else ``base64:...``."""
    if data.isascii() and not data.startswith(b"base64:"):
        return data.decode("ascii")
    return "base64:" + base64.b64encode(data).decode("ascii")


class ChunkTable:
    """References of one zarr array's chunks: dense columns in C order of chunk index.

    ``kind`` (uint8: ABSENT/RANGE/WHOLE/INLINE), ``path_id`` (into the set's URL table), ``offset`` and
    ``length`` (bytes), and ``inline``: a sparse ``{flat index: bytes}``. Immutable once built.
    """

    __slots__ = ("grid", "inline", "kind", "length", "offset", "path_id")

    def __init__(
        self,
        grid: ChunkGrid,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        inline: Mapping[int, bytes] | None = None,
    ) -> None:
        n = grid.nchunks
        for name, col in (("kind", kind), ("path_id", path_id), ("offset", offset), ("length", length)):
            if col.ndim != 1 or col.shape[0] != n:
                raise ValueError(f"ChunkTable.{name} must have shape ({n},), got {col.shape}")
        self.grid = grid
        self.kind = kind.astype(np.uint8, copy=False)
        self.path_id = _compact(path_id, np.uint16)
        self.offset = _compact(offset)
        self.length = _compact(length)
        self.inline: dict[int, bytes] = dict(inline or {})
        for a in (self.kind, self.path_id, self.offset, self.length):
            a.flags.writeable = False

    @classmethod
    def from_entries(
        cls,
        grid: ChunkGrid,
        flat: np.ndarray,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        inline: Mapping[int, bytes] | None = None,
    ) -> ChunkTable:
        """Scatter entries at flat chunk indices ``flat`` into a dense table; a later duplicate wins."""
        n = grid.nchunks
        flat = np.asarray(flat, dtype=np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= n):
            raise ValueError("chunk index outside the grid")
        if flat.size and np.bincount(flat, minlength=n).max() > 1:
            # keep the last occurrence of each index, like a JSON object with repeated keys
            rev = flat[::-1]
            _, first = np.unique(rev, return_index=True)
            keep = np.sort(flat.size - 1 - first)
            flat, kind, path_id, offset, length = (
                flat[keep], kind[keep], path_id[keep], offset[keep], length[keep]
            )
        k = np.zeros(n, np.uint8)
        p = np.zeros(n, min_uint(int(path_id.max()) if path_id.size else 0))
        o = np.zeros(n, offset.dtype if offset.size else np.uint32)
        ln = np.zeros(n, length.dtype if length.size else np.uint32)
        k[flat] = kind
        p[flat] = path_id
        o[flat] = offset
        ln[flat] = length
        live = {i: b for i, b in (inline or {}).items() if k[i] == INLINE}
        return cls(grid, k, p, o, ln, live)

    @classmethod
    def empty(cls, grid: ChunkGrid) -> ChunkTable:
        n = grid.nchunks
        z = np.zeros(n, np.uint16)
        return cls(grid, np.zeros(n, np.uint8), z, z, z, {})

    @property
    def nchunks(self) -> int:
        return self.grid.nchunks

    @property
    def present(self) -> np.ndarray:
        """Boolean mask of chunks that have a reference."""
        return self.kind != ABSENT

    def count(self) -> int:
        """Number of chunks with a reference."""
        return int(np.count_nonzero(self.kind))

    def flat_index(self, index: Sequence[int]) -> int:
        return int(np.ravel_multi_index(tuple(index), self.grid.grid_shape)) if index else 0

    def nbytes(self) -> int:
        cols = (self.kind, self.path_id, self.offset, self.length)
        return sum(a.nbytes for a in cols) + sum(len(b) for b in self.inline.values())


class KeyTable:
    """Keys outside any chunk grid: sorted keys with the same columns as a :class:`ChunkTable`
    (``data`` holds the inline bytes, None elsewhere)."""

    __slots__ = ("data", "keys", "kind", "length", "offset", "path_id")

    def __init__(
        self,
        keys: np.ndarray,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        data: np.ndarray,
    ) -> None:
        self.keys = keys
        self.kind = kind.astype(np.uint8, copy=False)
        self.path_id = _compact(path_id, np.uint16)
        self.offset = _compact(offset)
        self.length = _compact(length)
        self.data = data

    @classmethod
    def from_items(cls, items: Mapping[str, tuple[int, int, int, int, bytes | None]]) -> KeyTable:
        """From ``{key: (kind, path_id, offset, length, data)}``."""
        names = sorted(items)
        n = len(names)
        keys = np.empty(n, object)
        keys[:] = names
        kind = np.zeros(n, np.uint8)
        pid = np.zeros(n, np.uint64)
        off = np.zeros(n, np.uint64)
        ln = np.zeros(n, np.uint64)
        data = np.empty(n, object)
        for i, k in enumerate(names):
            kind[i], pid[i], off[i], ln[i], data[i] = items[k]
        return cls(keys, kind, pid, off, ln, data)

    @classmethod
    def merged(cls, first: KeyTable, batches: Sequence[tuple[np.ndarray, ...]]) -> KeyTable:
        """``first`` plus batches of (string keys, kind, path_id, offset, length); a key in a later
        batch replaces the same key earlier (and in ``first``)."""
        from numpy.dtypes import StringDType

        keys = np.concatenate([first.keys.astype(StringDType())]
                              + [np.asarray(b[0]).astype(StringDType()) for b in batches])
        cols = [np.concatenate([getattr(first, name).astype(np.uint64)]
                               + [np.asarray(b[j + 1]).astype(np.uint64) for b in batches])
                for j, name in enumerate(("kind", "path_id", "offset", "length"))]
        data = np.concatenate([first.data, np.full(len(keys) - len(first), None, object)])
        order = np.argsort(keys, kind="stable")
        sk = np.empty(len(keys), object)
        sk[:] = keys[order].tolist()
        last = np.ones(len(sk), bool)
        last[:-1] = sk[1:] != sk[:-1]  # equal keys keep input order: the last one wins
        order = order[last]
        return cls(sk[last], *(c[order] for c in cols), data[order])

    def __len__(self) -> int:
        return len(self.keys)

    def find(self, key: str) -> int:
        """Row of ``key``, or -1."""
        i = int(np.searchsorted(self.keys, key))
        return i if i < len(self.keys) and self.keys[i] == key else -1


class KeyRouter:
    """Maps a key to (array path, flat chunk index) for a set of chunk grids."""

    def __init__(self, grids: Mapping[str, ChunkGrid]) -> None:
        self.grids = dict(grids)
        # how many trailing "/"-separated components a chunk key suffix has
        self._depths: dict[int, None] = {}
        self._depth_of: dict[str, int] = {}
        for path, g in self.grids.items():
            d = 1 if (g.separator == "." or not g.shape) else g.ndim + (1 if g.prefix else 0)
            self._depth_of[path] = d
            self._depths[d] = None

    def locate(self, key: str) -> tuple[str, int] | None:
        """(array path, flat C-order chunk index) of a chunk key, else None."""
        for d in self._depths:
            if d == 1:
                head, _, suffix = key.rpartition("/")
            else:
                parts = key.rsplit("/", d)
                if len(parts) == d + 1:
                    head, suffix = parts[0], "/".join(parts[1:])
                elif len(parts) == d:
                    head, suffix = "", key
                else:
                    continue
            g = self.grids.get(head)
            if g is None or self._depth_of[head] != d:
                continue
            if g.separator == "." and not g.prefix and g.shape:
                # the common spelling, inlined: canonical decimals inside the grid
                parts = suffix.split(".")
                if len(parts) != len(g.grid_shape):
                    continue
                flat = 0
                for p, n in zip(parts, g.grid_shape):
                    if not (p.isdigit() and p.isascii()) or (p[0] == "0" and len(p) > 1):
                        break
                    i = int(p)
                    if i >= n:
                        break
                    flat = flat * n + i
                else:
                    return head, flat
                continue
            idx = g.parse(suffix)
            if idx is not None:
                flat = 0
                for i, n in zip(idx, g.grid_shape):
                    flat = flat * n + i
                return head, flat
        return None


def sparse_grid(grid: ChunkGrid, entries: int) -> bool:
    """Whether a grid with (at most) ``entries`` chunk references is too sparse to index densely."""
    return grid.nchunks > max(DENSE_MIN_CHUNKS, DENSE_FACTOR * entries)


def array_key(path: str, suffix: str) -> str:
    return f"{path}/{suffix}" if path else suffix


class ReferenceSet(Mapping[str, Ref]):
    """A read-only mapping from key to reference, stored column-wise.

    ``rs[key]`` is ``bytes`` (inline data), ``(url,)`` (a whole file) or ``(url, offset, length)``.

    ``grids`` names every array whose chunks are indexed; :meth:`table` gives its :class:`ChunkTable`.
    Readers of lazy formats subclass this and override :meth:`_load_table` (decode one array on first
    use) and, for finer laziness, :meth:`_chunk_ref` (one chunk). ``urls`` only ever grows, so a
    ``path_id`` stays valid once handed out.
    """

    def __init__(
        self,
        urls: Sequence[str],
        arrays: Mapping[str, ChunkTable],
        other: KeyTable,
        grids: Mapping[str, ChunkGrid] | None = None,
    ) -> None:
        self.urls: list[str] = list(urls)
        self._tables: dict[str, ChunkTable] = dict(arrays)
        self.grids: dict[str, ChunkGrid] = dict(grids) if grids is not None else {
            p: t.grid for p, t in self._tables.items()
        }
        self.other = other
        self.router = KeyRouter(self.grids)
        self.stored: dict[str, object] = {}  # how the set was stored, filled in by its reader

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def from_items(cls, items: Iterable[tuple[str, Ref]]) -> ReferenceSet:
        """Build from ``(key, ref)`` pairs in the Mapping's value forms; a later duplicate key wins."""
        b = Builder()
        for k, v in items:
            b.add(k, v)
        return b.build()

    # -- per-array tables ---------------------------------------------------------------------------
    def table(self, path: str) -> ChunkTable:
        """The chunk table of array ``path`` (decoded now if the format is lazy)."""
        t = self._tables.get(path)
        if t is None:
            if path not in self.grids:
                raise KeyError(path)
            t = self._tables[path] = self._load_table(path)
        return t

    def _load_table(self, path: str) -> ChunkTable:
        raise KeyError(path)

    @property
    def arrays(self) -> Mapping[str, ChunkTable]:
        """``{array path: ChunkTable}``, decoding lazily stored arrays on access."""
        return _Tables(self)

    # -- lookup -------------------------------------------------------------------------------------
    def _resolve(self, kind: int, pid: int, off: int, ln: int, data: bytes | None, key: str) -> Ref:
        if kind == RANGE:
            return (self.urls[pid], off, ln)
        if kind == WHOLE:
            return (self.urls[pid],)
        if kind == INLINE:
            assert data is not None
            return data
        raise KeyError(key)

    def locate(self, key: str) -> tuple[str, int] | None:
        """(array path, flat chunk index) when ``key`` is a chunk key of an indexed array."""
        return self.router.locate(key) if self.grids else None

    def _chunk_ref(self, path: str, flat: int, key: str) -> Ref:
        """The reference of chunk ``flat`` of ``path``; KeyError when absent."""
        t = self._tables.get(path) or self.table(path)
        kind = t.kind.item(flat)
        if kind == RANGE:
            return (self.urls[t.path_id.item(flat)], t.offset.item(flat), t.length.item(flat))
        if kind == WHOLE:
            return (self.urls[t.path_id.item(flat)],)
        if kind == INLINE:
            return t.inline[flat]
        raise KeyError(key)

    def __getitem__(self, key: str) -> Ref:
        if not isinstance(key, str):
            raise KeyError(key)
        loc = self.locate(key)
        if loc is not None:
            return self._chunk_ref(loc[0], loc[1], key)
        return self._generic_ref(self.other, key)

    def _generic_ref(self, o: KeyTable, key: str) -> Ref:
        i = o.find(key)
        if i < 0:
            raise KeyError(key)
        return self._resolve(
            int(o.kind[i]), int(o.path_id[i]), int(o.offset[i]), int(o.length[i]), o.data[i], key
        )

    def other_under(self, path: str) -> KeyTable:
        """A table holding every key of :attr:`other` below directory ``path`` (lazy readers may
        answer with a smaller table before they have read everything)."""
        return self.other

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __len__(self) -> int:
        return len(self.other) + sum(self.table(p).count() for p in self.grids)

    def keys_at(self, path: str, flat: np.ndarray) -> list[str]:
        """Keys of the chunks of array ``path`` at flat indices ``flat``."""
        g = self.grids[path]
        if not g.shape:
            return [array_key(path, g.chunk_key(()))] * len(flat)
        idx = np.unravel_index(np.asarray(flat, np.int64), g.grid_shape)
        head = array_key(path, g.prefix + g.separator if g.prefix else "")
        sep = g.separator
        return [head + sep.join(map(str, row)) for row in zip(*(i.tolist() for i in idx))]

    def chunk_keys(self, path: str) -> Iterator[str]:
        """Keys of the present chunks of array ``path``, in C order."""
        yield from self.keys_at(path, np.flatnonzero(self.table(path).kind))

    def __iter__(self) -> Iterator[str]:
        yield from self.other.keys.tolist()
        for path in self.grids:
            yield from self.chunk_keys(path)

    def items_of(self, path: str) -> Iterator[tuple[str, Ref]]:
        """``(key, ref)`` of the present chunks of array ``path``, in C order."""
        t = self.table(path)
        flat = np.flatnonzero(t.kind)
        cols = zip(t.kind[flat].tolist(), t.path_id[flat].tolist(), t.offset[flat].tolist(),
                   t.length[flat].tolist(), flat.tolist())
        for key, (k, p, o, n, f) in zip(self.chunk_keys(path), cols):
            yield key, self._resolve(k, p, o, n, t.inline.get(f), key)

    def items(self) -> Iterator[tuple[str, Ref]]:  # type: ignore[override]
        o = self.other
        cols = zip(o.keys.tolist(), o.kind.tolist(), o.path_id.tolist(), o.offset.tolist(),
                   o.length.tolist(), o.data.tolist())
        for key, k, p, off, n, d in cols:
            yield key, self._resolve(k, p, off, n, d, key)
        for path in self.grids:
            yield from self.items_of(path)

    # -- export -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, str | list[object]]:
        """The Version 0 dict: inline data as text (ASCII) or ``"base64:..."``, ``[url]``,
        ``[url, offset, length]``."""
        return {key: _v0_value(ref) for key, ref in self.items()}

    def referenced_bytes(self) -> int:
        """Total length of byte-range references."""
        total = int(self.other.length[self.other.kind == RANGE].sum(dtype=np.uint64))
        for t in self.arrays.values():
            total += int(t.length[t.kind == RANGE].sum(dtype=np.uint64))
        return total

    def nbytes(self) -> int:
        """Approximate resident size of the columns."""
        o = self.other
        n = sum(t.nbytes() for t in self._tables.values())
        n += sum(a.nbytes for a in (o.kind, o.path_id, o.offset, o.length))
        n += sum(len(k) for k in o.keys.tolist()) + sum(len(d) for d in o.data.tolist() if d)
        return n + sum(len(u) for u in self.urls)

    def format_info(self) -> dict[str, object]:
        """Facts about the stored form that ``refset info`` prints (lazy formats add more)."""
        return dict(self.stored)

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__}: {len(self.other)} other keys, {len(self.grids)} chunk grids, "
            f"{len(self.urls)} urls>"
        )


class _Tables(Mapping[str, ChunkTable]):
    def __init__(self, rs: ReferenceSet) -> None:
        self._rs = rs

    def __getitem__(self, path: str) -> ChunkTable:
        return self._rs.table(path)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rs.grids)

    def __len__(self) -> int:
        return len(self._rs.grids)


def _v0_value(ref: Ref) -> str | list[object]:
    if isinstance(ref, bytes):
        return encode_inline(ref)
    return list(ref)


Row = tuple[int, int, int, int, bytes | None]


class Builder:
    """Collects references, then builds a :class:`ReferenceSet`.

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
                                 dict[int, bytes]]] = []
        self.extra_grids: dict[str, ChunkGrid] = dict(grids or {})
        self.url_ids: dict[str, int] = {} if url_ids is None else url_ids
        self.key_batches: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, key: str, ref: Ref) -> None:
        self.items[key] = ref

    def add_chunks(
        self,
        path: str,
        flat: np.ndarray,
        kind: np.ndarray,
        path_id: np.ndarray,
        offset: np.ndarray,
        length: np.ndarray,
        inline: dict[int, bytes] | None = None,
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
        self.batches.append((
            path,
            flat.astype(np.int32) if flat.size and flat.max() < 2**31 else flat,
            kind,
            path_id.astype(min_uint(len(self.url_ids))),
            _compact(np.asarray(offset, np.uint64)),
            _compact(np.asarray(length, np.uint64)),
            dict(inline or {}),
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
        if urls is not None:
            path_id = self._own_ids(path_id, urls)
        self.key_batches.append((keys, np.asarray(kind, np.uint8), np.asarray(path_id, np.int64),
                                 np.asarray(offset, np.uint64), np.asarray(length, np.uint64)))

    def _own_ids(self, path_id: np.ndarray, urls: Sequence[str]) -> np.ndarray:
        """``path_id`` indexing ``urls``, as ids of this builder's URL table."""
        remap = np.array([self.url_ids.setdefault(u, len(self.url_ids)) for u in urls] or [0], np.int64)
        return remap[np.asarray(path_id, np.int64)]

    def _route_key_batches(self, router: KeyRouter) -> list[tuple[np.ndarray, ...]]:
        """Move chunk keys of key batches into single items; the rest stays columnar."""
        out = []
        urls = list(self.url_ids)
        for keys, kind, pid, off, ln in self.key_batches:
            maybe = np.zeros(len(keys), bool)
            for path in router.grids:
                maybe |= np.strings.startswith(keys, path + "/") if path else True
            for i in np.flatnonzero(maybe).tolist():
                hit = router.locate(str(keys[i]))
                if hit is not None:
                    ref: Ref = ((urls[pid[i]], int(off[i]), int(ln[i])) if kind[i] == RANGE
                                else (urls[pid[i]],))
                    self.items.pop(str(keys[i]), None)
                    self.items[str(keys[i])] = ref
                    maybe[i] = True
                else:
                    maybe[i] = False
            keep = ~maybe
            out.append((keys[keep], kind[keep], pid[keep], off[keep], ln[keep]))
        return out

    def grids(self) -> dict[str, ChunkGrid]:
        """Chunk grids described by the metadata added so far."""
        grids = dict(self.extra_grids)
        for k, v in self.items.items():
            meta = split_metadata_key(k)
            if meta is not None and isinstance(v, bytes):
                g = grid_from_metadata(meta[1], v)
                if g is not None:
                    grids[meta[0]] = g
        return grids

    def _row(self, ref: Ref) -> Row:
        if isinstance(ref, bytes):
            return INLINE, 0, 0, 0, ref
        pid = self.url_ids.setdefault(ref[0], len(self.url_ids))
        if len(ref) == 1:
            return WHOLE, pid, 0, 0, None
        return RANGE, pid, ref[1], ref[2], None  # type: ignore[misc]

    def build_other(self, grids: Mapping[str, ChunkGrid]) -> KeyTable:
        """The generic table of the single keys added so far that are not chunk keys of ``grids``
        (for readers that build the chunk tables later)."""
        router = KeyRouter(grids)
        generic = {k: self._row(v) for k, v in self.items.items()
                   if not grids or router.locate(k) is None}
        return KeyTable.from_items(generic)

    def build(self, dense: Collection[str] | None = None) -> ReferenceSet:
        """The set; arrays too sparse for a dense table keep their chunk keys as generic keys,
        except those named in ``dense``."""
        url_ids = self.url_ids
        row = self._row

        grids = self.grids()
        router = KeyRouter(grids)
        routed: dict[str, list[tuple[int, Row]]] = {p: [] for p in grids}
        generic: dict[str, Row] = {}
        key_batches = self._route_key_batches(router) if grids else self.key_batches
        for k, v in self.items.items():
            hit = router.locate(k) if grids else None
            if hit is None:
                generic[k] = row(v)
            else:
                routed[hit[0]].append((hit[1], row(v)))
        parts: dict[str, list[tuple[np.ndarray, ...]]] = {p: [] for p in grids}
        inlines: dict[str, dict[int, bytes]] = {p: {} for p in grids}
        for path, rows in routed.items():
            if rows:
                parts[path].append((
                    np.array([f for f, _ in rows], np.int64),
                    *(np.array([r[j] for _, r in rows], np.uint64) for j in range(4)),
                ))
                inlines[path].update({f: r[4] for f, r in rows if r[4] is not None})
        for path, flat, kind, pid, off, ln, inl in self.batches:
            if path not in grids:
                raise ValueError(f"no chunk grid for array {path!r}")
            parts[path].append((flat, kind, pid, off, ln))
            inlines[path].update(inl)
        arrays: dict[str, ChunkTable] = {}
        for path, g in grids.items():
            chunks = parts.pop(path)
            n = sum(len(c[0]) for c in chunks)
            if (dense is None or path not in dense) and sparse_grid(g, n):
                # too sparse to index densely: keep its chunk keys as generic keys
                for c in chunks:
                    for f, k, p, o, ln in zip(*(a.tolist() for a in c)):
                        idx = np.unravel_index(f, g.grid_shape) if g.shape else ()
                        key = array_key(path, g.chunk_key([int(i) for i in idx]))
                        generic[key] = (k, p, o, ln, inlines[path].get(f) if k == INLINE else None)
                continue
            if len(chunks) == 1:
                cols = list(chunks[0])
            else:
                cols = [np.concatenate([c[j] for c in chunks]) if chunks else np.zeros(0, np.uint64)
                        for j in range(5)]
            del chunks
            arrays[path] = ChunkTable.from_entries(g, *cols, inline=inlines[path])
        other = KeyTable.from_items(generic)
        if key_batches:
            other = KeyTable.merged(other, key_batches)
        return ReferenceSet(list(url_ids), arrays, other)
