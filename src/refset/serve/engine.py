"""The read engine under :class:`~refset.ReferenceFileSystem` and :class:`~refset.ZarrStore`: from keys
(or rows of a chunk table) to bytes.

Lookups that may read or decode (a parquet record, a packed segment, a lazily read JSON table) run in
a worker thread, never on the event loop; lookups answered from memory stay on it. Byte ranges are
grouped by target, merged and fetched concurrently (:mod:`refset.io.fetch`). Failures become
:class:`~refset.errors.ReferenceNotReachable` naming the key and URL.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import numpy as np

from refset.abc.source import NOT_LOADED
from refset.errors import ReferenceNotReachable, ShortRead
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
from refset.model.keys import chunk_keys
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, RANGE, WHOLE, ChunkTable, Ref
from refset.options import Limits

__all__ = ["ReadEngine", "clamp", "off_loop"]

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

    async def chunk_ranges(self, path: str, flat: np.ndarray
                           ) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, np.ndarray]:
        """The byte-range chunks among ``flat``: (their flat indices, URL table, path ids, starts,
        ends), looked up without reading the whole table when a few blocks hold them."""
        flat = np.asarray(flat, np.int64)
        if self._by_blocks(path, len(flat)):
            refs = await off_loop(self.refs.chunk_refs, path, flat)
            picked = [(i, r) for i, r in enumerate(refs) if isinstance(r, tuple) and len(r) == 3]
            rows = [i for i, _ in picked]
            uid: dict[str, int] = {}
            pid = np.array([uid.setdefault(r[0], len(uid)) for _, r in picked], np.int64)
            start = np.array([r[1] for _, r in picked], np.int64)
            end = start + np.array([r[2] for _, r in picked], np.int64)
            return flat[rows], list(uid), pid, start, end
        t = await self.table(path)
        kind, pid, off, ln = t.take(flat)
        keep = kind == RANGE
        o = off[keep].astype(np.int64)
        return flat[keep], list(self.refs.urls), pid[keep].astype(np.int64), o, o + ln[keep].astype(np.int64)

    async def read_chunks(self, path: str, flat: np.ndarray) -> list[bytes | None]:
        """Stored bytes of chunks ``flat`` of array ``path`` (None where absent), ranges fetched in one
        coalesced plan. Raises ReferenceNotReachable naming the first chunk that failed."""
        flat = np.asarray(flat, np.int64)
        if self._by_blocks(path, len(flat)):
            refs = await off_loop(self.refs.chunk_refs, path, flat)
            rows = [i for i, r in enumerate(refs) if r is not None]
            present = [r for r in refs if r is not None]  # refs[i] for i in rows
            keys = chunk_keys(path, self.refs.grids[path], flat[rows]).tolist()
            got = await self.read_many(keys, present, [None] * len(rows), [None] * len(rows))
            out: list[bytes | None] = [None] * len(flat)
            for i, d in zip(rows, got, strict=True):
                if isinstance(d, BaseException):
                    raise d
                out[i] = d
            return out
        t = await self.table(path)
        urls = self.refs.urls  # after the table: every id it holds is in it
        kind, pid, off, ln = t.take(flat)
        out = [None] * len(flat)
        ranged = np.flatnonzero(kind == RANGE)
        if len(ranged):
            o = off[ranged].astype(np.int64)
            got = await self.reader.read(urls, pid[ranged].astype(np.int64), o, o + ln[ranged].astype(np.int64))
            for i, d in zip(ranged.tolist(), got, strict=True):
                if isinstance(d, BaseException):
                    key = chunk_keys(path, t.grid, flat[i:i + 1]).tolist()[0]
                    raise ReferenceNotReachable.wrap(key, urls[int(pid[i])], d) from d
                out[i] = d
        inl = np.flatnonzero(kind == INLINE)
        for i, value in zip(inl.tolist(), t.inline.get_many(flat[inl]), strict=True):
            out[i] = value
        whole = np.flatnonzero(kind == WHOLE).tolist()
        keys = chunk_keys(path, t.grid, flat[whole]).tolist()
        got_whole = await asyncio.gather(*(self.read_whole(k, urls[int(pid[i])], None, None)
                                           for k, i in zip(keys, whole, strict=True)))
        for i, d in zip(whole, got_whole, strict=True):
            out[i] = d
        return out
