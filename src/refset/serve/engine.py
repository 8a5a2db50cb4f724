"""The read engine under :class:`~refset.ReferenceFileSystem` and :class:`~refset.ZarrStore`: from keys
(or rows of a chunk table) to bytes.

Lookups that may read or decode (a parquet record, a packed segment, a lazily read JSON table) run in
a worker thread, never on the event loop; lookups answered from memory stay on it. Byte ranges are
grouped by target, merged and fetched concurrently (:mod:`refset.io.fetch`). Failures become
:class:`~refset.errors.ReferenceNotReachable` naming the key and URL.

:meth:`ReadEngine.read_values` reads values: the chunks of one or several selections (of one array or
of several: the parts of a variable) fetched in one plan, each block decoded in a worker thread as
soon as it arrives (:mod:`refset.model.decoder`), its values placed in the caller's arrays. Every I/O
coroutine runs on refset's IO loop (:mod:`refset.io.bridge`), whatever loop awaits it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from refset.abc.source import NOT_LOADED
from refset.errors import InvalidFile, ReferenceNotReachable, ShortRead, error_name
from refset.io.bridge import on_io_loop
from refset.io.fetch import (
    DEFAULT_MAX_BLOCK,
    DEFAULT_MAX_GAP,
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_TIMEOUT,
    RETRIES,
    RangeReader,
    Targets,
    acall,
    read_range,
)
from refset.model.decoder import ChunkDecoder
from refset.model.keys import chunk_keys
from refset.model.refset import ReferenceSet
from refset.model.table import ABSENT, INLINE, RANGE, WHOLE, ChunkTable, Ref
from refset.options import Limits
from refset.parallel import pool
from refset.serve.selection import Selection

__all__ = ["ReadEngine", "EngineRef", "ValuesJob", "clamp", "off_loop", "READ_BUDGET"]

#: Bytes of stored (compressed) chunks one read holds at most: a larger read fetches in batches.
READ_BUDGET = 1 << 30

T = TypeVar("T")


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread: sync work that may block, called from async code."""
    return await asyncio.to_thread(fn, *args)


def _load(fo: Any, target_protocol: str | None, storage_options: Mapping[str, Any] | None,
          template_overrides: Mapping[str, str] | None, limits: Limits | None) -> ReferenceSet:
    if isinstance(fo, ReferenceSet):
        return fo
    from refset.formats import load

    opts: dict[str, Any] = {}
    if template_overrides:
        opts["template_overrides"] = dict(template_overrides)
    if isinstance(fo, str | os.PathLike):
        fo = os.fspath(fo)
        if target_protocol and "://" not in fo and target_protocol not in ("file", "local"):
            fo = f"{target_protocol}://{fo}"
    # chunk tables of a large JSON set are read on first use: opening needs only the metadata
    return load(fo, storage_options=dict(storage_options or {}) or None, lazy=True, limits=limits, **opts)


def clamp(length: int, start: int | None, end: int | None) -> tuple[int, int]:
    """``[start, end)`` relative to a block of ``length`` bytes, resolved like a slice (negative counts
    from the end) and clamped to the block: ``0 <= s <= e <= length``."""
    s = 0 if start is None else (start if start >= 0 else max(length + start, 0))
    e = length if end is None else (end if end >= 0 else max(length + end, 0))
    s = min(s, length)
    e = min(max(e, s), length)
    return s, e


@dataclass(frozen=True, slots=True)
class ValuesJob:
    """Values to read: ``selection`` of array ``path``, decoded by ``decoder``, absent chunks holding
    ``fill``, placed in ``out`` (an array shaped like ``selection.shape``, written in place)."""

    path: str
    selection: Selection
    decoder: ChunkDecoder
    fill: Any
    out: np.ndarray


class ReadEngine:
    """Bytes of the references of one set, read through ``targets`` with ``reader``'s plan, and its keys
    as a tree (``index``). The fsspec, zarr and xarray adapters stand side by side over one."""

    def __init__(self, refs: ReferenceSet, targets: Targets, reader: RangeReader) -> None:
        from refset.serve.listing import KeyIndex

        self.refs = refs
        self.targets = targets
        self.reader = reader
        self.index = KeyIndex(refs)

    @classmethod
    def open(
        cls,
        fo: Any,
        *,
        target_protocol: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        template_overrides: Mapping[str, str] | None = None,
        limits: Limits | None = None,
        remote_protocol: str | None = None,
        remote_options: Mapping[str, Any] | None = None,
        fs: Any = None,
        max_gap: int | None = None,
        max_block: int | None = None,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        timeout: float | None = DEFAULT_TIMEOUT,
        retries: int = RETRIES,
        verify_sources: bool = True,
    ) -> ReadEngine:
        """The engine of the set ``fo`` (anything :func:`refset.load` takes; a path is loaded lazily,
        with ``storage_options``, prefixed by ``target_protocol`` when it has none), reading its
        targets with these options (see :class:`refset.ReferenceFileSystem`). ``verify_sources``:
        refuse to read a file that is not what the set recorded when it was made
        (:class:`~refset.errors.SourceChanged`; docs/reliability.md)."""
        refs = _load(fo, target_protocol, storage_options, template_overrides, limits)
        fps = refs.fingerprints
        if not isinstance(verify_sources, bool):
            raise ValueError(f"verify_sources: expected true or false, got {verify_sources!r}")
        targets = Targets(remote_protocol=remote_protocol, remote_options=remote_options, fs=fs,
                          timeout=timeout, retries=retries, recorded=fps.get if verify_sources and len(fps) else None)
        reader = RangeReader(targets, max_gap=DEFAULT_MAX_GAP if max_gap is None else max_gap,
                             max_block=DEFAULT_MAX_BLOCK if max_block is None else max_block,
                             max_inflight=max_inflight)
        return cls(refs, targets, reader)

    async def size(self, key: str, ref: Ref) -> int:
        """The size of the bytes of ``key`` (its reference ``ref``); a whole file's is asked of its
        filesystem."""
        if isinstance(ref, bytes):
            return len(ref)
        if len(ref) == 3:
            return int(ref[2])
        url = ref[0]
        try:
            remote = await acall(self.targets.for_url(url), "info", url)
        except Exception as e:
            raise ReferenceNotReachable.wrap(key, url, e) from e
        return int(remote["size"])

    # -- lookups ------------------------------------------------------------------------------------
    async def ref(self, key: str) -> Ref | None:
        """The reference of ``key`` (None when absent), looked up off the loop when it may read."""
        r = self.refs.get_now(key)
        if r is NOT_LOADED:
            r = await off_loop(self.refs.get, key)
        return cast("Ref | None", r)  # not the NOT_LOADED sentinel any more

    async def table(self, path: str) -> ChunkTable:
        """The chunk table of ``path``, read off the loop when it is not read yet."""
        t = self.refs.cached_table(path)
        return t if t is not None else await off_loop(self.refs.table, path)

    # -- bytes --------------------------------------------------------------------------------------
    async def read_ref(self, key: str, ref: Ref, start: int | None = None, end: int | None = None) -> bytes:
        """``[start:end]`` (slice rules) of the bytes of ``ref``."""
        if isinstance(ref, bytes):
            return ref[start:end]
        url = ref[0]
        if len(ref) == 1:
            return await self.read_whole(key, url, start, end)
        s, e = clamp(ref[2], start, end)
        if s == e:
            return b""
        s, e = s + ref[1], e + ref[1]
        self.reader.requests += 1
        try:
            data = await read_range(self.targets, url, s, e)
        except Exception as err:
            raise ReferenceNotReachable.wrap(key, url, err) from err
        if len(data) != e - s:
            short = ShortRead(f"{url}: asked for bytes {s}-{e} ({e - s}), got {len(data)} bytes")
            raise ReferenceNotReachable.wrap(key, url, short) from short
        return data

    async def read_whole(self, key: str, url: str, start: int | None, end: int | None) -> bytes:
        """``file[start:end]`` (Python slice rules) of a whole-file reference."""
        self.reader.requests += 1
        try:
            if start is not None and end is not None and start >= 0 and end >= 0:
                # a read past the end of the file is short, as a slice is
                return b"" if end <= start else await read_range(self.targets, url, start, end)
            if (start or 0) >= 0 and end is None:
                return await read_range(self.targets, url, start, None)
            data = await read_range(self.targets, url, None, None)  # negative bounds need the size
        except Exception as err:
            raise ReferenceNotReachable.wrap(key, url, err) from err
        return data[start:end]

    async def read_many(
        self, keys: list[str], refs: list[Ref], starts: list[int | None], ends: list[int | None]
    ) -> list[bytes | BaseException]:
        """Bytes of every (key, ref, start, end), range reads planned together; a failure is the
        ReferenceNotReachable in its place."""
        n = len(keys)
        out: list[bytes | BaseException | None] = [None] * n
        uid: dict[str, int] = {}
        rows: list[int] = []
        pid: list[int] = []
        bs: list[int] = []
        be: list[int] = []
        whole: list[int] = []
        for i, (ref, st, en) in enumerate(zip(refs, starts, ends, strict=True)):
            if isinstance(ref, bytes):
                out[i] = ref[st:en]
                continue
            if len(ref) == 1:
                whole.append(i)
                continue
            s, e = clamp(ref[2], st, en)
            if s == e:
                out[i] = b""
                continue
            rows.append(i)
            pid.append(uid.setdefault(ref[0], len(uid)))
            bs.append(s + ref[1])
            be.append(e + ref[1])

        async def one_whole(i: int) -> bytes:
            url = cast("tuple[str]", refs[i])[0]  # i is in whole: a whole-file reference
            return await self.read_whole(keys[i], url, starts[i], ends[i])

        got, wgot = await asyncio.gather(
            self.reader.read(list(uid), np.array(pid, np.int64), np.array(bs, np.int64),
                             np.array(be, np.int64)),
            asyncio.gather(*(one_whole(i) for i in whole), return_exceptions=True),
        )
        for i, d in zip(rows + whole, list(got) + list(wgot), strict=True):
            if isinstance(d, BaseException):
                url = cast("tuple[str] | tuple[str, int, int]", refs[i])[0]  # rows and whole: not inline
                out[i] = ReferenceNotReachable.wrap(keys[i], url, d)
            else:
                out[i] = d
        return cast("list[bytes | BaseException]", out)  # every slot filled: no None left

    def _by_blocks(self, path: str, nflat: int) -> bool:
        """Whether a selection of ``nflat`` chunks is better read block by block (a parquet record, a
        packed segment each) than by reading the array's whole table first."""
        return (self.refs.cached_table(path) is None and self.refs.block_size(path) > 0
                and 4 * nflat < self.refs.grids[path].nchunks)

    # -- values -------------------------------------------------------------------------------------
    async def read_values(self, jobs: list[ValuesJob], *, budget: int = READ_BUDGET) -> None:
        """Fill every job's ``out``: the chunks of all jobs fetched in one coalesced plan (on the IO
        loop, whatever loop awaits), each block decoded in a worker thread as soon as it arrives, no
        more than ``budget`` bytes of stored chunks held at once (larger reads go in batches).
        Raises ReferenceNotReachable naming a chunk whose bytes could not be read, InvalidFile
        naming a chunk whose bytes do not decode."""
        await on_io_loop(self._read_values(jobs, budget))

    async def _read_values(self, jobs: list[ValuesJob], budget: int) -> None:
        loop = asyncio.get_running_loop()
        rows = await asyncio.gather(*(self._rows(j.path, j.selection.flat(self.refs.grids[j.path].grid_shape))
                                      for j in jobs))
        uid: dict[str, int] = {}
        cols: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        waits: list[asyncio.Future[None]] = []
        for jn, (job, (kind, urls, pid, off, ln, inline)) in enumerate(zip(jobs, rows, strict=True)):
            if (kind == ABSENT).any():
                job.out[...] = job.fill  # the present chunks overwrite their parts of it
            for m, raw in inline.items():
                waits.append(loop.run_in_executor(pool(), self._place, job, m, raw, None))
            for m in np.flatnonzero(kind == WHOLE).tolist():
                waits.append(asyncio.ensure_future(self._whole(job, m, urls[int(pid[m])])))
            ranged = np.flatnonzero(kind == RANGE)
            if len(ranged):
                remap = np.array([uid.setdefault(u, len(uid)) for u in urls] or [0], np.int64)
                o = off[ranged].astype(np.int64)
                cols.append((np.full(len(ranged), jn, np.int64), ranged, remap[pid[ranged].astype(np.int64)], o,
                             o + ln[ranged].astype(np.int64)))
        try:
            if cols:
                job_of, m_of, p_of, s_of, e_of = (np.concatenate(c) for c in zip(*cols, strict=True))
                await self._fetch_and_place(jobs, list(uid), job_of, m_of, p_of, s_of, e_of, budget, waits)
            await asyncio.gather(*waits)
        except BaseException:
            for w in waits:
                w.cancel()
            raise

    async def _fetch_and_place(self, jobs: list[ValuesJob], urls: list[str], job_of: np.ndarray, m_of: np.ndarray,
                               p_of: np.ndarray, s_of: np.ndarray, e_of: np.ndarray, budget: int,
                               waits: list[asyncio.Future[None]]) -> None:
        """Fetch the ranges (in batches of at most ``budget`` bytes, a file's ranges together) and
        decode each block as it arrives."""
        loop = asyncio.get_running_loop()
        order = np.lexsort((s_of, p_of))
        ends = np.cumsum((e_of - s_of)[order])
        cut = np.searchsorted(ends, np.arange(budget, int(ends[-1]), budget), side="right")
        for part in np.split(order, np.unique(cut)) if len(cut) else [order]:
            if not len(part):
                continue
            batch: list[asyncio.Future[None]] = []

            def arrived(rows: np.ndarray, pieces: list[bytes | BaseException], part: np.ndarray = part,
                        batch: list[asyncio.Future[None]] = batch) -> None:
                items = []
                for r, d in zip(part[rows].tolist(), pieces, strict=True):
                    job, m, url = jobs[int(job_of[r])], int(m_of[r]), urls[int(p_of[r])]
                    if isinstance(d, BaseException):
                        raise ReferenceNotReachable.wrap(self._key(job, m), url, d) from d
                    items.append((job, m, d, url))
                step = max(1, -(-len(items) // 4))  # a block of many chunks: decoded by several threads
                for i in range(0, len(items), step):
                    batch.append(loop.run_in_executor(pool(), self._place_many, items[i:i + step]))

            await self.reader.read_each(urls, p_of[part], s_of[part], e_of[part], arrived)
            await asyncio.gather(*batch)  # this batch decoded before the next is fetched: memory bounded

    async def _whole(self, job: ValuesJob, m: int, url: str) -> None:
        raw = await self.read_whole(self._key(job, m), url, None, None)
        await asyncio.get_running_loop().run_in_executor(pool(), self._place, job, m, raw, url)

    def _place_many(self, items: list[tuple[ValuesJob, int, bytes, str]]) -> None:
        for job, m, raw, url in items:
            self._place(job, m, raw, url)

    def _place(self, job: ValuesJob, m: int, raw: bytes, url: str | None) -> None:
        """Decode chunk ``m`` of ``job``'s selection from ``raw`` (stored in ``url``; None: inline in
        the set) and put its values where they go."""
        try:
            block = job.decoder.decode(raw)
        except Exception as e:  # the codec's own error (zlib.error, RuntimeError...): named
            where = f" in {url!r}" if url is not None else self._files(job.path)
            raise InvalidFile(f"chunk {self._key(job, m)!r}{where}: its bytes do not decode with the array's "
                              f"codecs ({error_name(e)}: {e}): the file is corrupt or changed since its scan") from e
        src, dst = job.selection.where(m)
        job.out[dst] = block[src]

    def _files(self, path: str) -> str:
        """`` in 'URL'``: the files array ``path``'s chunks come from (an inline chunk's array: what
        it was read from when the set was made; three named at most), for an error."""
        t = self.refs.cached_table(path)
        urls = self.refs.urls
        ids = [] if t is None else [i for i in np.unique(t.path_id).tolist() if 0 <= i < len(urls)]
        if not ids:
            return " (inline in the set)"
        if len(ids) == 1:
            return f" in {urls[ids[0]]!r}"
        named = ", ".join(repr(urls[i]) for i in ids[:3])
        return f" in one of {len(ids)} files ({named}{', ...' if len(ids) > 3 else ''})"

    def _key(self, job: ValuesJob, m: int) -> str:
        """The key of chunk ``m`` of ``job``'s selection."""
        grid = self.refs.grids[job.path]
        flat = np.ravel_multi_index(job.selection.grid_index(m), grid.grid_shape) if grid.shape else 0
        return str(chunk_keys(job.path, grid, np.array([flat], np.int64))[0])

    async def _rows(self, path: str, flat: np.ndarray
                    ) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, np.ndarray, dict[int, bytes]]:
        """The references of chunks ``flat`` of ``path`` as columns: (kind, URL table, path ids, offsets,
        lengths, {position: inline bytes}); a few chunks of a large table stored in blocks (parquet,
        packed) are looked up block by block, the table is not read whole for them."""
        if self._by_blocks(path, len(flat)):
            refs = await off_loop(self.refs.chunk_refs, path, flat)
            n = len(refs)
            kind = np.full(n, ABSENT, np.uint8)
            pid = np.zeros(n, np.int64)
            off = np.zeros(n, np.int64)
            ln = np.zeros(n, np.int64)
            uid: dict[str, int] = {}
            inline: dict[int, bytes] = {}
            for i, r in enumerate(refs):
                if r is None:
                    continue
                if isinstance(r, bytes):
                    kind[i] = INLINE
                    inline[i] = r
                    continue
                kind[i] = RANGE if len(r) == 3 else WHOLE
                pid[i] = uid.setdefault(r[0], len(uid))
                if len(r) == 3:
                    off[i], ln[i] = r[1], r[2]
            return kind, list(uid), pid, off, ln, inline
        t = await self.table(path)
        kind, pid, off, ln = t.take(flat)
        inl = np.flatnonzero(kind == INLINE)
        inline = {}
        if len(inl):
            inline = dict(zip(inl.tolist(), t.inline.get_many(flat[inl]), strict=True))  # type: ignore[arg-type]
        return kind, list(self.refs.urls), pid, off, ln, inline


class EngineRef:
    """A :class:`ReadEngine` by what opens it, for what a user may hand to Dask: it pickles as the set
    (by what reopens it: a path and options, or an in-memory set's columns) and the engine's options,
    never as the engine, and opens the engine again on first use after unpickling (a worker)."""

    __slots__ = ("_engine", "_lock", "fo", "options")

    def __init__(self, fo: Any, options: Mapping[str, Any] | None = None, engine: ReadEngine | None = None) -> None:
        self.fo = fo  # a ReferenceSet, or an object holding an engine (a refset.ReferenceFileSystem)
        self.options = {k: v for k, v in (options or {}).items() if v is not None}
        self._engine = engine
        self._lock = threading.Lock()

    @classmethod
    def open(cls, fo: Any, **options: Any) -> EngineRef:
        """The engine of ``fo`` (anything :meth:`ReadEngine.open` takes, a ReadEngine, or an object
        with an ``engine``: a refset.ReferenceFileSystem), opened now."""
        if isinstance(fo, ReadEngine):
            return cls(fo.refs, {}, fo)
        held = getattr(fo, "engine", None)
        if isinstance(held, ReadEngine):
            return cls(fo, {}, held)
        engine = ReadEngine.open(fo, **options)
        return cls(engine.refs, options, engine)

    def engine(self) -> ReadEngine:
        got = self._engine
        if got is None:
            with self._lock:
                got = self._engine
                if got is None:
                    held = getattr(self.fo, "engine", None)
                    got = self._engine = held if isinstance(held, ReadEngine) else ReadEngine.open(
                        self.fo, **self.options)
        return got

    def __reduce__(self) -> tuple[Any, ...]:
        import pickle

        return (_reopened, (pickle.dumps((self.fo, self.options), protocol=pickle.HIGHEST_PROTOCOL),))


#: EngineRefs a process unpickled, by what they pickle as (most recently used last): on a Dask worker
#: the tasks of a computation, and of the next ones, share one engine instead of reopening the set
#: each time. A few are kept; a set held in memory only (its columns pickled) is not.
_REOPENED: dict[bytes, EngineRef] = {}
_KEEP = 4
_KEY_BYTES = 1 << 16
_REOPENED_LOCK = threading.Lock()


def _reopened(blob: bytes) -> EngineRef:
    import pickle

    if len(blob) > _KEY_BYTES:
        return EngineRef(*pickle.loads(blob))
    with _REOPENED_LOCK:
        got = _REOPENED.pop(blob, None)
        if got is not None:
            _REOPENED[blob] = got  # the most recent last
            return got
    got = EngineRef(*pickle.loads(blob))
    with _REOPENED_LOCK:
        got = _REOPENED.setdefault(blob, got)
        while len(_REOPENED) > _KEEP:
            del _REOPENED[next(iter(_REOPENED))]
    return got


def _forget() -> None:  # a forked child: its parent's engines hold the parent's connections and loop
    _REOPENED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
