""":class:`ReferenceSet`: a read-only ``Mapping[str, Ref]`` over one :class:`~refset.abc.source.Source`.

The set owns what every stored form shares: routing keys to chunk tables, caching tables and blocks,
locking (one call into the source at a time, blocks decoded once even under concurrent lookups),
iteration, export and pickling. Chunk references live column-wise in :class:`~refset.model.table.ChunkTable`
objects (numpy arrays per chunk grid); nothing is expanded per key unless asked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from refset.abc.source import NOT_LOADED, Block, Reopen, Source
from refset.errors import InvalidReferences
from refset.model.builder import Builder, check_ends
from refset.model.keys import METADATA_NAMES, ChunkGrid, KeyRouter, array_key, chunk_keys, grid_from_metadata
from refset.model.memory import MemorySource
from refset.model.producer import tables_from_arrays
from refset.model.table import (
    ABSENT,
    INLINE,
    RANGE,
    WHOLE,
    ChunkTable,
    KeyTable,
    Ref,
    resolve,
    v0_value,
)

__all__ = ["ReferenceSet", "ABSENT", "RANGE", "WHOLE", "INLINE", "Ref", "NOT_LOADED"]

DEFAULT_BLOCK_CACHE = 128  # decoded blocks kept (parquet records, packed segments), as fsspec's cache
LOCATE_CACHE = 1 << 16  # keys whose parse is remembered (a dict: cleared when full)
KEY_BLOCK = 1 << 16  # chunk keys made at a time when iterating
_UNSEEN = object()


class ReferenceSet(Mapping[str, Ref]):
    """A read-only mapping from key to reference, stored column-wise.

    ``rs[key]`` is ``bytes`` (inline data), ``(url,)`` (a whole file) or ``(url, offset, length)``.
    ``grids`` names every array whose chunks are indexed; :meth:`table` gives its
    :class:`~refset.model.table.ChunkTable`, ``other`` the keys outside any grid. Sets read lazily (parquet,
    packed, large JSON) decode a table or a block of chunks on first use; every set is safe to use from
    several threads and pickles by what reopens it.
    """

    def __init__(self, source: Source, *, origin: Reopen | None = None) -> None:
        self._source = source
        self._origin = origin  # (callable, args, kwargs) that opens the same set again
        self._grids: Mapping[str, ChunkGrid] = MappingProxyType(dict(source.grids))
        self.router = KeyRouter(self._grids)
        self._tables: dict[str, ChunkTable] = {}
        self._other: KeyTable | None = None
        if isinstance(source, MemorySource):
            self._tables = dict(source.tables)
            self._other = source.other()
        self._lock = threading.RLock()  # every call into the source but lookup_other and block
        self._blocks: OrderedDict[tuple[str, int], Block] = OrderedDict()
        self._block_locks: dict[tuple[str, int], threading.Lock] = {}
        self._block_guard = threading.Lock()
        self._block_sizes: dict[str, int] = {}
        self.block_cache_size = DEFAULT_BLOCK_CACHE
        self._located: dict[str, tuple[str, int] | None] = {}  # parsed keys, bounded (LOCATE_CACHE)

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        metadata: Mapping[str, Any],
        arrays: Mapping[str, Mapping[str, Any]],
        urls: Sequence[str],
    ) -> ReferenceSet:
        """The producers' constructor: chunk references as numpy arrays shaped like each chunk grid.

        ``metadata`` maps keys (``.zgroup``, ``v/.zarray``, ``v/.zattrs``, ``v/zarr.json``) to dicts,
        JSON text or bytes. ``arrays`` maps an array path to ``{"path_id", "offset", "length"}``
        integer arrays of its grid's shape (``path_id == -1``: absent) and optionally ``"inline"``:
        ``{chunk index: bytes}``. ``path_id`` indexes ``urls``. Checked once, vectorised; a problem
        raises :class:`~refset.errors.InvalidReferences` naming the array and chunk index.
        """
        url_t, tables, other = tables_from_arrays(metadata, arrays, urls)
        return cls(MemorySource(url_t, tables, other, {"format": "memory"}))

    @classmethod
    def from_tables(
        cls,
        urls: Sequence[str],
        tables: Mapping[str, ChunkTable],
        other: KeyTable | None = None,
        info: Mapping[str, object] | None = None,
    ) -> ReferenceSet:
        """A set from built tables sharing the URL table ``urls`` (readers, combine), checked: every
        path id lies in ``urls``, every table's grid is the one its metadata in ``other`` describes,
        and no key of ``other`` is a chunk key of a table."""
        url_t = tuple(urls)
        other = other if other is not None else KeyTable.empty()
        check_tables(url_t, tables, other)
        return cls(MemorySource(url_t, tables, other, info or {"format": "memory"}))

    @classmethod
    def from_items(cls, items: Iterable[tuple[str, Ref]]) -> ReferenceSet:
        """Build from ``(key, ref)`` pairs in the Mapping's value forms; a later duplicate key wins."""
        b = Builder()
        for k, v in items:
            b.add(k, v)
        return cls.from_tables(*b.build_parts())

    # -- what is stored -----------------------------------------------------------------------------
    @property
    def source(self) -> Source:
        """The stored form this set reads from."""
        return self._source

    @property
    def urls(self) -> tuple[str, ...]:
        """The URL table that ``path_id`` columns index (read after the tables you index with it:
        a lazily read set adds URLs as it decodes)."""
        return self._source.urls()

    @property
    def grids(self) -> Mapping[str, ChunkGrid]:
        """``{array path: ChunkGrid}`` of every array with a chunk table."""
        return self._grids

    @property
    def other(self) -> KeyTable:
        """Keys outside any chunk grid (metadata, plain key/value sets, non-canonical chunk keys)."""
        o = self._other
        if o is None:
            with self._lock:
                o = self._other
                if o is None:
                    o = self._other = self._source.other()
        return o

    def other_under(self, path: str) -> KeyTable:
        """A table holding every key of :attr:`other` at or below directory ``path`` (cheaper than
        :attr:`other` when the stored form can answer before reading everything)."""
        if self._other is None:
            with self._lock:
                if self._other is None:
                    t = self._source.other_under(path)
                    if t is not None:
                        return t
        return self.other

    def table(self, path: str) -> ChunkTable:
        """The chunk table of array ``path`` (read now if the format is lazy)."""
        t = self._tables.get(path)
        if t is None:
            if path not in self._grids:
                raise KeyError(path)
            with self._lock:
                t = self._tables.get(path)
                if t is None:
                    t = self._tables[path] = self._source.table(path)
        return t

    def block_size(self, path: str) -> int:
        """Chunks per block (parquet record, packed segment) read on its own for single lookups of
        array ``path``; 0 when single chunks are read through the whole table."""
        size = self._block_sizes.get(path)
        if size is None:
            size = self._block_sizes[path] = self._source.block_size(path)
        return size

    def chunk_refs(self, path: str, flat: np.ndarray) -> list[Ref | None]:
        """References of chunks ``flat`` of array ``path`` (None where absent): from the table when it
        is read, else block by block, without reading the whole table."""
        flat = np.asarray(flat, np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= self._grids[path].nchunks):
            raise InvalidReferences(f"array {path!r}: chunk index outside the grid of "
                                    f"{self._grids[path].nchunks} chunks")
        t = self._tables.get(path)
        if t is None and self.block_size(path):
            return [self._chunk_or_none(path, f) for f in flat.tolist()]
        t = t if t is not None else self.table(path)
        kind, pid, off, ln = t.take(flat)
        urls = self.urls
        data = t.inline.get_many(flat) if t.inline else [None] * len(flat)
        return [None if k == ABSENT else resolve((k, p, o, n, d), urls, "")
                for k, p, o, n, d in zip(kind.tolist(), pid.tolist(), off.tolist(), ln.tolist(),
                                         data, strict=True)]

    def _chunk_or_none(self, path: str, flat: int) -> Ref | None:
        try:
            return self._chunk_ref(path, flat, "")
        except KeyError:
            return None

    def cached_table(self, path: str) -> ChunkTable | None:
        """The chunk table of ``path`` if it is read already, else None (never reads)."""
        return self._tables.get(path)

    @property
    def arrays(self) -> Mapping[str, ChunkTable]:
        """``{array path: ChunkTable}``, reading lazily stored tables on access."""
        return _Tables(self)

    def loaded(self) -> ReferenceSet:
        """This set with every table read: an in-memory set sharing the columns, whose URL table is
        final (what writers work from)."""
        if isinstance(self._source, MemorySource):
            return self
        tables = {p: self.table(p) for p in self._grids}
        other = self.other
        src = MemorySource(self.urls, tables, other, self.format_info())
        return ReferenceSet(src, origin=self._origin)

    # -- lookup -------------------------------------------------------------------------------------
    def locate(self, key: str) -> tuple[str, int] | None:
        """(array path, flat chunk index) when ``key`` is a chunk key of an indexed array."""
        loc = self._located.get(key, _UNSEEN)
        if loc is _UNSEEN:
            loc = self.router.locate(key) if self._grids else None
            if len(self._located) >= LOCATE_CACHE:
                self._located.clear()
            self._located[key] = loc
        return loc  # type: ignore[return-value]

    def _block(self, path: str, i: int) -> Block:
        k = (path, i)
        b = self._blocks.get(k)
        if b is not None:
            try:
                self._blocks.move_to_end(k)
            except KeyError:  # evicted meanwhile by another thread
                pass
            return b
        with self._block_guard:
            lock = self._block_locks.setdefault(k, threading.Lock())
        with lock:  # one thread decodes a block; others wait for it, other blocks go on in parallel
            try:
                b = self._blocks.get(k)
                if b is None:
                    b = self._source.block(path, i)
                    with self._block_guard:
                        self._blocks[k] = b
                        while len(self._blocks) > self.block_cache_size:
                            self._blocks.popitem(last=False)
            finally:
                with self._block_guard:
                    if self._block_locks.get(k) is lock:
                        del self._block_locks[k]
        return b

    def _chunk_ref(self, path: str, flat: int, key: str) -> Ref:
        t = self._tables.get(path)
        if t is None:
            size = self.block_size(path)
            if size:
                r = self._block(path, flat // size).ref(flat % size)
                if r is None:
                    raise KeyError(key)
                return r
            t = self.table(path)
        return resolve(t.row(flat), self._source.urls(), key)

    def __getitem__(self, key: str) -> Ref:
        if not isinstance(key, str):
            raise KeyError(key)
        loc = self.locate(key)
        if loc is not None:
            return self._chunk_ref(loc[0], loc[1], key)
        o = self._other
        if o is None:
            r = self._source.lookup_other(key)
            if r is not NOT_LOADED:
                if r is None:
                    raise KeyError(key)
                return r  # type: ignore[return-value]
            o = self.other
        i = o.find(key)
        if i < 0:
            raise KeyError(key)
        return resolve(o.row(i), self._source.urls(), key)

    def get_now(self, key: str) -> Ref | object | None:
        """``rs.get(key)`` when it can be answered without reading or decoding, else
        :data:`~refset.abc.source.NOT_LOADED` (async callers then look up in a worker thread)."""
        loc = self.locate(key)
        if loc is not None:
            path, flat = loc
            t = self._tables.get(path)
            if t is None:
                size = self.block_size(path)
                if not size:
                    return NOT_LOADED
                b = self._blocks.get((path, flat // size))
                return b.ref(flat % size) if b is not None and b.decoded else NOT_LOADED
            row = t.row(flat)
            return None if row[0] == ABSENT else resolve(row, self._source.urls(), key)
        o = self._other
        if o is None:
            return self._source.lookup_other(key)
        i = o.find(key)
        return None if i < 0 else resolve(o.row(i), self._source.urls(), key)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            self[key]
        except KeyError:
            return False
        return True

    def __len__(self) -> int:
        n = self._source.count()
        if n is None:
            n = len(self.other) + sum(self.table(p).count() for p in self._grids)
        return n

    # -- iteration ----------------------------------------------------------------------------------
    def keys_at(self, path: str, flat: np.ndarray) -> list[str]:
        """Keys of the chunks of array ``path`` at flat indices ``flat``."""
        return chunk_keys(path, self._grids[path], np.asarray(flat, np.int64)).tolist()  # type: ignore[no-any-return]

    def chunk_keys(self, path: str) -> Iterator[str]:
        """Keys of the present chunks of array ``path``, in C order, made a block at a time (the keys
        of a large grid are never all held as strings)."""
        present = self.table(path).present()
        for start in range(0, len(present), KEY_BLOCK):
            yield from self.keys_at(path, present[start:start + KEY_BLOCK])

    def __iter__(self) -> Iterator[str]:
        yield from self.other.keys.tolist()
        for path in self._grids:
            yield from self.chunk_keys(path)

    def items_of(self, path: str) -> Iterator[tuple[str, Ref]]:
        """``(key, ref)`` of the present chunks of array ``path``, in C order."""
        t = self.table(path)
        f, kind, pid, off, ln = t.entries()
        urls = self.urls
        inline = iter(t.inline.value_list())  # the inline chunks' bytes, in the same (C) order
        cols = zip(self.keys_at(path, f), kind.tolist(), pid.tolist(), off.tolist(), ln.tolist(), strict=True)
        for key, k, p, o, n in cols:
            if k == RANGE:
                yield key, (urls[p], o, n)
            elif k == WHOLE:
                yield key, (urls[p],)
            else:
                yield key, next(inline)

    def items(self) -> Iterator[tuple[str, Ref]]:  # type: ignore[override]
        o = self.other
        urls = self.urls
        cols = zip(o.keys.tolist(), o.kind.tolist(), o.path_id.tolist(), o.offset.tolist(),
                   o.length.tolist(), o.data.tolist(), strict=True)
        for key, k, p, off, n, d in cols:
            yield key, resolve((k, p, off, n, d), urls, key)
        for path in self._grids:
            yield from self.items_of(path)

    # -- export -------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, str | list[object]]:
        """The Version 0 dict: inline data as text (ASCII) or ``"base64:..."``, ``[url]``,
        ``[url, offset, length]``."""
        return {key: v0_value(ref) for key, ref in self.items()}

    def referenced_bytes(self) -> int:
        """Total length of byte-range references."""
        o = self.other
        total = int(o.length[o.kind == RANGE].sum(dtype=np.uint64))
        for t in self.arrays.values():
            _, kind, _, _, ln = t.entries()
            total += int(ln[kind == RANGE].sum(dtype=np.uint64))
        return total

    def nbytes(self) -> int:
        """Approximate resident size of the columns read so far."""
        n = sum(t.nbytes() for t in list(self._tables.values()))
        if self._other is not None:
            n += self._other.nbytes()
        return n + sum(len(u) for u in self.urls)

    def format_info(self) -> dict[str, object]:
        """Facts about the stored form that ``refset info`` prints."""
        return self._source.info()

    def __repr__(self) -> str:
        other = f"{len(self._other)} other keys" if self._other is not None else "other keys not read"
        return f"<ReferenceSet ({self.format_info().get('format', '?')}): {other}, {len(self._grids)} chunk grids>"

    # -- pickling -----------------------------------------------------------------------------------
    def __reduce__(self) -> tuple[Any, ...]:
        if self._origin is not None:
            return (_reopen, self._origin)
        m = self.loaded()
        src = m._source
        assert isinstance(src, MemorySource)
        return (_from_memory, (src.urls(), src.tables, src.other(), src.info()))


def check_bounds(tables: Mapping[str, ChunkTable], other: KeyTable) -> None:
    """InvalidReferences naming the first range reference whose ``offset + length`` is not below
    2**63 (one vectorised pass per table)."""
    for path, t in tables.items():
        flat, kind, _, off, ln = t.entries() if t.is_sparse else (None, t.kind, None, t.offset, t.length)
        bad = check_ends(kind, off, ln)
        if bad >= 0:
            i = bad if flat is None else int(flat[bad])
            raise InvalidReferences(f"array {path!r}, chunk {i} (flat index): offset {int(off[bad])} + "
                                    f"length {int(ln[bad])} must be below 2**63")
    bad = check_ends(other.kind, other.offset, other.length)
    if bad >= 0:
        raise InvalidReferences(f"refs[{other.keys[bad]!r}]: offset {int(other.offset[bad])} + length "
                                f"{int(other.length[bad])} must be below 2**63")


def check_tables(urls: tuple[str, ...], tables: Mapping[str, ChunkTable], other: KeyTable) -> None:
    """The checks of :meth:`ReferenceSet.from_tables`; InvalidReferences naming what is wrong."""
    located = [(f"array {p!r}", t.max_path_id(), int(t.kind_counts()[[RANGE, WHOLE]].sum()))
               for p, t in tables.items()]
    loc = (other.kind == RANGE) | (other.kind == WHOLE)
    located.append(("other keys", int(other.path_id[loc].max(initial=0)), int(np.count_nonzero(loc))))
    for name, top, n in located:
        if n and top >= len(urls):
            raise InvalidReferences(f"{name}: path id {top} outside the URL table of {len(urls)}")
    check_bounds(tables, other)
    for path, t in tables.items():
        found = None
        for name in METADATA_NAMES:
            i = other.find(array_key(path, name))
            if i >= 0 and other.kind[i] == INLINE:
                found = grid_from_metadata(name, other.data[i])
                break
        if found != t.grid:
            raise InvalidReferences(
                f"array {path!r}: its table's grid (shape {t.grid.shape}, chunks {t.grid.chunks}) is not the "
                f"one its metadata describes ({'none' if found is None else f'shape {found.shape}, chunks {found.chunks}'})")
    if tables and len(other):
        router = KeyRouter({p: t.grid for p, t in tables.items()})
        keys = other.keys
        for path in tables:
            cand = keys if not path else keys[np.searchsorted(keys, path + "/"):np.searchsorted(keys, path + "0")]
            for k in cand.tolist():
                hit = router.locate(k)
                if hit is not None:
                    raise InvalidReferences(f"other keys: {k!r} is a chunk key of array {hit[0]!r}; "
                                            "give it in that array's table")


def _reopen(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ReferenceSet:
    return fn(*args, **kwargs)  # type: ignore[no-any-return]


def _from_memory(urls: tuple[str, ...], tables: dict[str, ChunkTable], other: KeyTable,
                 info: dict[str, object]) -> ReferenceSet:
    return ReferenceSet(MemorySource(urls, tables, other, info))


class _Tables(Mapping[str, ChunkTable]):
    def __init__(self, rs: ReferenceSet) -> None:
        self._rs = rs

    def __getitem__(self, path: str) -> ChunkTable:
        return self._rs.table(path)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rs.grids)

    def __len__(self) -> int:
        return len(self._rs.grids)
