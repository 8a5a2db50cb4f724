"""``refset.ZarrStore``: a read-only zarr-python 3 store over a reference set.

A thin adapter over :class:`~refset.serve.engine.ReadEngine` (bytes) and :class:`~refset.serve.listing.KeyIndex`
(listing). Chunk reads are batched: every ``get`` arriving in the same few event-loop iterations (zarr
issues its chunk reads concurrently) joins one plan, whose ranges are grouped by target, merged and
fetched concurrently (:mod:`refset.io.fetch`). Lookups that may read run in a worker thread. The store
pickles as its :class:`~refset.ReferenceFileSystem`, which reopens the set lazily.
Zarr v2 metadata (``.zarray``/``.zattrs``/``.zgroup``, what kerchunk writes) and zarr v3
``zarr.json`` are served as stored; zarr reads them.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)

from refset.errors import ReferenceNotReachable, Unsupported
from refset.io.bridge import on_io_loop
from refset.io.fetch import DEFAULT_MAX_INFLIGHT
from refset.model.codecs import ensure_codecs
from refset.options import Limits
from refset.serve.engine import EngineRef, ReadEngine, clamp, off_loop

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer, BufferPrototype

__all__ = ["ZarrStore"]

_SETTLE_TICKS = 3  # event-loop iterations a batch may wait for more requests to join


def _bounds(byte_range: ByteRequest | None) -> tuple[int | None, int | None]:
    """A zarr byte request as slice bounds (``end`` exclusive, negatives count from the end)."""
    if byte_range is None:
        return None, None
    if isinstance(byte_range, RangeByteRequest):
        return byte_range.start, byte_range.end
    if isinstance(byte_range, OffsetByteRequest):
        return byte_range.offset, None
    if isinstance(byte_range, SuffixByteRequest):
        return (-byte_range.suffix, None) if byte_range.suffix else (0, 0)
    raise TypeError(f"unexpected byte range {byte_range!r}")


class _Batch:
    """Range reads collected on one event loop, flushed as one plan when no more arrive."""

    def __init__(self, engine: ReadEngine) -> None:
        self.engine = engine
        self.items: list[tuple[str, str, int, int, asyncio.Future[bytes]]] = []
        self.scheduled = False
        self.seen = 0
        self.ticks = 0
        self.tasks: set[asyncio.Task[None]] = set()

    def add(self, key: str, url: str, start: int, end: int) -> asyncio.Future[bytes]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes] = loop.create_future()
        self.items.append((key, url, start, end, fut))
        if not self.scheduled:
            self.scheduled = True
            self.seen = 0
            self.ticks = 0
            loop.call_soon(self._tick, loop)
        return fut

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        if len(self.items) != self.seen and self.ticks < _SETTLE_TICKS:
            self.seen = len(self.items)
            self.ticks += 1
            loop.call_soon(self._tick, loop)
            return
        items, self.items, self.scheduled = self.items, [], False
        task = loop.create_task(self._run(items))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run(self, items: list[tuple[str, str, int, int, asyncio.Future[bytes]]]) -> None:
        try:
            uid: dict[str, int] = {}
            pid = np.fromiter((uid.setdefault(it[1], len(uid)) for it in items), np.int64, len(items))
            start = np.fromiter((it[2] for it in items), np.int64, len(items))
            end = np.fromiter((it[3] for it in items), np.int64, len(items))
            got = await on_io_loop(self.engine.reader.read(list(uid), pid, start, end))
        except BaseException as e:  # planning failed or we were cancelled: fail every waiter
            for it in items:
                if not it[4].done():
                    it[4].set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
            if not isinstance(e, Exception):
                raise
            return
        for (key, url, _, _, fut), d in zip(items, got, strict=True):
            if fut.done():
                continue
            if isinstance(d, BaseException):
                fut.set_exception(ReferenceNotReachable.wrap(key, url, d))
            else:
                fut.set_result(d)


class ZarrStore(Store):
    """A read-only zarr v3 store over a reference set.

    Parameters
    ----------
    refs
        Anything :func:`refset.load` takes, a :class:`~refset.ReferenceSet`, or a
        :class:`~refset.ReferenceFileSystem` (whose set, targets and options are then used).
    storage_options
        Options for loading ``refs`` when it is a path/URL.
    remote_protocol, remote_options, fs, max_gap, max_block, max_inflight, limits, verify_sources
        As for :class:`~refset.ReferenceFileSystem`.
    """

    supports_writes: bool = False
    supports_deletes: bool = False
    supports_listing: bool = True
    supports_partial_writes = False

    def __init__(
        self,
        refs: Any,
        *,
        storage_options: Mapping[str, Any] | None = None,
        remote_protocol: str | None = None,
        remote_options: Mapping[str, Any] | None = None,
        fs: Any = None,
        template_overrides: Mapping[str, str] | None = None,
        max_gap: int | None = None,
        max_block: int | None = None,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        read_only: bool = True,
        limits: Limits | None = None,
        verify_sources: bool = True,
    ) -> None:
        if not read_only:
            raise Unsupported("refset.ZarrStore is read-only; read_only=False is not supported")
        super().__init__(read_only=True)
        if isinstance(refs, EngineRef):
            self.source = refs
        else:  # a refset.ReferenceFileSystem or a ReadEngine: its set, targets and options
            self.source = EngineRef.open(
                refs, storage_options=storage_options, remote_protocol=remote_protocol,
                remote_options=remote_options, fs=fs, template_overrides=template_overrides, max_gap=max_gap,
                max_block=max_block, max_inflight=max_inflight, limits=limits,
                verify_sources=verify_sources)
        self.engine = self.source.engine()
        self.refs = self.engine.refs
        ensure_codecs(self.refs.metadata.values())  # imagecodecs' (TIFF sets) are registered on demand
        self.index = self.engine.index
        self._batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batch] = weakref.WeakKeyDictionary()

    # -- identity -------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, ZarrStore) and other.refs is self.refs

    def __hash__(self) -> int:
        return id(self.refs)

    def __str__(self) -> str:
        return f"refset://{id(self.refs):x}"

    def __repr__(self) -> str:
        return f"ZarrStore({self.refs!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ZarrStore, (self.source,))  # the set pickles by what reopens it

    def with_read_only(self, read_only: bool = False) -> ZarrStore:
        # docstring inherited
        if not read_only:
            raise Unsupported("refset.ZarrStore is read-only; read_only=False is not supported")
        return ZarrStore(self.source)

    @property
    def requests(self) -> int:
        """Requests sent to targets so far (merged blocks count once)."""
        return self.engine.reader.requests

    # -- reading --------------------------------------------------------------------------------
    def _batch(self) -> _Batch:
        loop = asyncio.get_running_loop()
        b = self._batches.get(loop)
        if b is None:
            b = self._batches[loop] = _Batch(self.engine)
        return b

    async def _read(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        ref = await self.engine.ref(key)
        if ref is None:
            return None
        start, end = _bounds(byte_range)
        if isinstance(ref, bytes):
            return ref[start:end]
        url = ref[0]
        if len(ref) == 3:
            s, e = clamp(ref[2], start, end)
            if s == e:
                return b""
            return await self._batch().add(key, url, s + ref[1], e + ref[1])
        return await on_io_loop(self.engine.read_whole(key, url, start, end))

    async def get(
        self,
        key: str,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        # docstring inherited
        data = await self._read(key, byte_range)
        return None if data is None else prototype.buffer.from_bytes(data)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        # docstring inherited
        got = await asyncio.gather(*(self._read(k, r) for k, r in key_ranges))
        return [None if d is None else prototype.buffer.from_bytes(d) for d in got]

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> Any:
        reqs = list(requests)
        got = await asyncio.gather(*(self.get(*r) for r in reqs))
        for r, g in zip(reqs, got, strict=True):
            yield r[0], g

    async def exists(self, key: str) -> bool:
        # docstring inherited
        return await self.engine.ref(key) is not None

    async def getsize(self, key: str) -> int:
        # docstring inherited
        ref = await self.engine.ref(key)
        if ref is None:
            raise FileNotFoundError(key)
        return await self.engine.size(key, ref)

    # -- writing: not supported -----------------------------------------------------------------
    async def set(self, key: str, value: Buffer) -> None:
        # docstring inherited
        self._check_writable()

    async def delete(self, key: str) -> None:
        # docstring inherited
        self._check_writable()

    # -- listing --------------------------------------------------------------------------------
    async def list(self) -> AsyncIterator[str]:
        # docstring inherited
        for k in await off_loop(lambda: list(self.index.iter_prefix(""))):
            yield k

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        # docstring inherited
        for k in await off_loop(lambda: list(self.index.iter_prefix(prefix))):
            yield k

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        # docstring inherited
        path = prefix.rstrip("/")
        got = await off_loop(self.index.entries, path)
        if got is None:
            return
        files, dirs = got
        cut = len(path) + 1 if path else 0
        seen: set[str] = set()
        for name in [f[0] for f in files] + dirs:
            child = name[cut:]
            if child not in seen:
                seen.add(child)
                yield child

