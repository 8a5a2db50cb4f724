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
from refset.model.array import Array
from refset.model.builder import Builder
from refset.model.fingerprints import Fingerprints, spelled
from refset.model.keys import ChunkGrid, KeyRouter, array_key, chunk_keys
from refset.model.memory import MemorySource
from refset.model.metadata import ArrayMetadata
from refset.model.producer import assemble
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
from refset.options import DEFAULT_LIMITS

__all__ = ["ReferenceSet", "ABSENT", "RANGE", "WHOLE", "INLINE", "Ref", "NOT_LOADED"]


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
        self._metadata: Mapping[str, ArrayMetadata] = MappingProxyType(dict(source.metadata))
        self._grids: Mapping[str, ChunkGrid] = MappingProxyType({p: m.grid for p, m in self._metadata.items()})
        self.router = KeyRouter(self._grids)
        self._docs: dict[str, bytes] = {key: text for path, m in self._metadata.items()
                                        for name, text in m.documents().items()
                                        for key in (array_key(path, name),)}
        self._tables: dict[str, ChunkTable] = {}
        self._other: KeyTable | None = None
        self._key_table: KeyTable | None = None
        if isinstance(source, MemorySource):
            self._tables = dict(source.tables)
            self._other = source.other()
        self._lock = threading.RLock()  # every call into the source but lookup_other and block
        self._blocks: OrderedDict[tuple[str, int], Block] = OrderedDict()
        self._block_locks: dict[tuple[str, int], threading.Lock] = {}
        self._block_guard = threading.Lock()
        self._block_sizes: dict[str, int] = {}
        self._block_bytes: dict[tuple[str, int], int] = {}  # what each cached block holds
        self._cached_bytes = 0
        #: bytes of decoded blocks kept (``Limits.block_cache``), and at most this many blocks (None: no
        #: bound on their number; ``load(cache_size=N)``)
        self.block_cache_bytes = DEFAULT_LIMITS.block_cache
        self.block_cache_size: int | None = None
        self._located: dict[str, tuple[str, int] | None] = {}  # parsed keys, bounded (LOCATE_CACHE)
        self._fingerprints: Fingerprints | None = None

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def from_arrays(
        cls,
        metadata: Mapping[str, Any],
        arrays: Mapping[str, Any],
        urls: Sequence[str],
        *,
        other: KeyTable | None = None,
        validate: bool = True,
        info: Mapping[str, object] | None = None,
        fingerprints: Fingerprints | None = None,
    ) -> ReferenceSet:
        """The one constructor of sets in memory, for every producer (readers, scanners, combine).

        ``metadata`` maps keys (``.zgroup``, ``v/.zarray``, ``v/.zattrs``, ``v/zarr.json``) to dicts,
        JSON text or bytes. ``arrays`` maps an array path to ``{"path_id", "offset", "length"}``
        integer arrays of its grid's shape (``path_id == -1``: absent) and optionally ``"inline"``:
        ``{chunk index: bytes}`` — or to a built :class:`~refset.model.table.ChunkTable`. ``path_id``
        indexes ``urls``. ``other``: further keys (a :class:`~refset.model.table.KeyTable`, which may
        hold the metadata documents too). Every array a document describes gets a table (empty when
        none is given). Column arrays are always checked, once, vectorised; ``validate=False`` trusts
        built tables and ``other`` (columns the caller made itself). A problem raises
        :class:`~refset.errors.InvalidReferences` naming the array and chunk index. ``fingerprints``:
        what the files the set was made from were when scanned (:mod:`refset.model.fingerprints`),
        also those none of its references reads now (chunks inlined from them: ``refset verify``
        tells when they change).
        """
        url_t, meta, tables, rest = assemble(metadata, arrays, urls, other, validate)
        return cls(MemorySource(url_t, meta, tables, rest, info or {"format": "memory"}, fingerprints=fingerprints))

    @classmethod
    def from_items(cls, items: Iterable[tuple[str, Ref]]) -> ReferenceSet:
        """Build from ``(key, ref)`` pairs in the Mapping's value forms; a later duplicate key wins."""
        b = Builder()
        for k, v in items:
            b.add(k, v)
        urls, tables, other = b.build_parts()
        return cls.from_arrays({}, tables, urls, other=other)

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
    def fingerprints(self) -> Fingerprints:
        """What the set's data files (and sidecars) were when they were scanned, by URL (empty when the
        set records nothing: a kerchunk set, an older refset set): see :mod:`refset.model.fingerprints`."""
        f = self._fingerprints
        if f is None:
            get = getattr(self._source, "fingerprints", None)  # optional for a plugin form's source
            f = self._fingerprints = get() if get is not None else Fingerprints.empty()
        return f

    def with_fingerprints(self, fingerprints: Fingerprints) -> ReferenceSet:
        """This set in memory (its columns shared) recording ``fingerprints`` instead."""
        m = self.loaded()
        src = m._source
        assert isinstance(src, MemorySource)
        return ReferenceSet(MemorySource(src.urls(), src.metadata, src.tables, src.other(), src.info(),
                                         src.fetched, fingerprints=fingerprints))

    def stored_key_table(self) -> KeyTable:
        """:meth:`key_table` with the fingerprints spelled where key/value forms (JSON) keep them:
        what those writers store."""
        return spelled(self.key_table(), self.fingerprints)

    @property
    def grids(self) -> Mapping[str, ChunkGrid]:
        """``{array path: ChunkGrid}`` of every array."""
        return self._grids

    @property
    def metadata(self) -> Mapping[str, ArrayMetadata]:
        """``{array path: ArrayMetadata}`` of every array (known at open)."""
        return self._metadata

    def array(self, path: str) -> Array:
        """The array at ``path``: its metadata and its chunk table (read now if the format is lazy)."""
        return Array(self._metadata[path], self.table(path))

    @property
    def documents(self) -> Mapping[str, bytes]:
        """``{key: text}`` of every array's metadata documents, derived from its metadata."""
        return MappingProxyType(self._docs)

    @property
    def other(self) -> KeyTable:
        """Keys outside the arrays (group metadata, plain key/value sets, non-canonical chunk keys)."""
        o = self._other
        if o is None:
            with self._lock:
                o = self._other
                if o is None:
                    o = self._other = self._source.other()
        return o

    def key_table(self) -> KeyTable:
        """Every key that is not a chunk key: the arrays' documents and the other keys, sorted (what
        writers store beside the chunk tables, and what listings show)."""
        t = self._key_table
        if t is None:
            other = self.other
            docs = {k: (INLINE, 0, 0, 0, v) for k, v in self._docs.items()}
            t = self._key_table = KeyTable.merged_rows(other, docs) if docs else other
        return t

    def other_under(self, path: str) -> KeyTable:
        """A table holding every key of :meth:`key_table` at or below directory ``path`` (cheaper than
        it when the stored form can answer before reading everything)."""
        if self._other is None:
            with self._lock:
                if self._other is None:
                    t = self._source.other_under(path)
                    if t is not None:
                        head = f"{path}/" if path else ""
                        docs = {k: (INLINE, 0, 0, 0, v) for k, v in self._docs.items() if k.startswith(head)}
                        return KeyTable.merged_rows(t, docs)
        return self.key_table()

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
    def arrays(self) -> Mapping[str, Array]:
        """``{array path: Array}``, reading lazily stored tables on access."""
        return _Arrays(self)

    @property
    def fetched(self) -> Mapping[tuple[str, int, int], bytes]:
        """Bytes of some of this set's range references that were read when it was made, by
        ``(url, offset, length)``: a remote scan keeps its small arrays' (coordinates), so that
        combine does not ask the server for them again. Empty for sets read from a stored form."""
        src = self._source
        return src.fetched if isinstance(src, MemorySource) else {}

    def with_fetched(self, fetched: Mapping[tuple[str, int, int], bytes]) -> ReferenceSet:
        """This in-memory set (its columns shared) remembering ``fetched`` (see :attr:`fetched`)."""
        m = self.loaded()
        src = m._source
        assert isinstance(src, MemorySource)
        return ReferenceSet(MemorySource(src.urls(), src.metadata, src.tables, src.other(), src.info(),
                                         {**src.fetched, **fetched}, src.fingerprints()), origin=self._origin)

    def loaded(self) -> ReferenceSet:
        """This set with every table read: an in-memory set sharing the columns, whose URL table is
        final (what writers work from)."""
        if isinstance(self._source, MemorySource):
            return self
        tables = {p: self.table(p) for p in self._grids}
        other = self.other
        src = MemorySource(self.urls, self._metadata, tables, other, self.format_info(),
                           fingerprints=self.fingerprints)
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
            size = int(getattr(b, "nbytes", 0))  # a block may grow once decoded (a packed segment)
            with self._block_guard:
                old = self._block_bytes.get(k)
                if old is not None and old != size:
                    self._block_bytes[k] = size
                    self._cached_bytes += size - old
            return b
        with self._block_guard:
            lock = self._block_locks.setdefault(k, threading.Lock())
        with lock:  # one thread decodes a block; others wait for it, other blocks go on in parallel
            try:
                b = self._blocks.get(k)
                if b is None:
                    b = self._source.block(path, i)
                    size = int(getattr(b, "nbytes", 0))
                    with self._block_guard:
                        self._blocks[k] = b
                        self._block_bytes[k] = size
                        self._cached_bytes += size
                        most = self.block_cache_size
                        while len(self._blocks) > 1 and (self._cached_bytes > self.block_cache_bytes
                                                         or (most is not None and len(self._blocks) > most)):
                            gone, _ = self._blocks.popitem(last=False)
                            self._cached_bytes -= self._block_bytes.pop(gone, 0)
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
        doc = self._docs.get(key)
        if doc is not None:
            return doc
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
        doc = self._docs.get(key)
        if doc is not None:
            return doc
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
            n = len(self.other) + len(self._docs) + sum(self.table(p).count() for p in self._grids)
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
        yield from self.key_table().keys.tolist()
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
        o = self.key_table()
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
        for path in self._grids:
            _, kind, _, _, ln = self.table(path).entries()
            total += int(ln[kind == RANGE].sum(dtype=np.uint64))
        return total

    def nbytes(self) -> int:
        """Approximate resident size of the columns read so far."""
        n = sum(t.nbytes() for t in list(self._tables.values()))
        if self._other is not None:
            n += self._other.nbytes()
        return n + sum(len(u) for u in self.urls) + sum(len(d) for d in self._docs.values())

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
        return (_from_memory, (src.urls(), src.metadata, src.tables, src.other(), src.info(), src.fetched,
                               src.fingerprints()))


def _reopen(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ReferenceSet:
    return fn(*args, **kwargs)  # type: ignore[no-any-return]


def _from_memory(urls: tuple[str, ...], metadata: dict[str, ArrayMetadata], tables: dict[str, ChunkTable],
                 other: KeyTable, info: dict[str, object],
                 fetched: dict[tuple[str, int, int], bytes] | None = None,
                 fingerprints: Fingerprints | None = None) -> ReferenceSet:
    return ReferenceSet(MemorySource(urls, metadata, tables, other, info, fetched, fingerprints))


class _Arrays(Mapping[str, Array]):
    def __init__(self, rs: ReferenceSet) -> None:
        self._rs = rs

    def __getitem__(self, path: str) -> Array:
        return self._rs.array(path)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rs.grids)

    def __len__(self) -> int:
        return len(self._rs.grids)
