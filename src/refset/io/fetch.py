"""Range planning and concurrent fetching.

Many reads of byte ranges are served as few requests: group by target URL, sort by offset, merge
ranges whose gap is at most ``max_gap`` while the merged block stays within ``max_block``, fetch the
blocks concurrently with a bounded number in flight, then slice every requested range back out.
Planning is vectorised over numpy columns; only the blocks and the results are Python objects.

Target filesystems are reached through :class:`Targets`, which creates them lazily per protocol and
calls them from any event loop: sync filesystems run in a worker thread, async ones are awaited on the
loop they are bound to (hopping loops when needed), so the asynchronous flags of the reference
filesystem and its targets never have to agree.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from refset.errors import ShortRead, SourceChanged
from refset.io.fingerprint import Fingerprint, changed, conditions, from_headers, http_date, local_fingerprint

__all__ = [
    "Plan",
    "plan_ranges",
    "Targets",
    "ShortRead",
    "RangeReader",
    "read_range",
    "read_range_sized",
    "read_range_fingerprinted",
    "acall",
    "DEFAULT_MAX_GAP",
    "DEFAULT_MAX_BLOCK",
    "DEFAULT_MAX_INFLIGHT",
    "DEFAULT_TIMEOUT",
    "RETRIES",
]

DEFAULT_MAX_GAP = 64_000  # bytes; as fsspec's ReferenceFileSystem
DEFAULT_MAX_BLOCK = 256_000_000  # bytes; as fsspec's ReferenceFileSystem
DEFAULT_MAX_INFLIGHT = 256  # requests in flight at once per read: as many as a pool holds (io/pool.py)
RETRIES = 2  # extra attempts after a transient failure
DEFAULT_TIMEOUT = 30.0  # seconds per attempt (connect + answer); with retries a silent server fails in ~91 s
_GAP_CAP = 1 << 40  # max_gap beyond this merges everything in a file anyway; keeps int64 arithmetic safe


@dataclass(frozen=True, slots=True)
class Plan:
    """Blocks to fetch and, per request, the block that holds it.

    ``block_pid``, ``block_start``, ``block_end`` (end exclusive, bytes): one row per block.
    ``req_block``: for every request (in the caller's order), its row in the block columns.
    """

    block_pid: np.ndarray
    block_start: np.ndarray
    block_end: np.ndarray
    req_block: np.ndarray

    @property
    def nblocks(self) -> int:
        return len(self.block_pid)


def plan_ranges(
    pid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    max_gap: int = DEFAULT_MAX_GAP,
    max_block: int = DEFAULT_MAX_BLOCK,
) -> Plan:
    """Merge byte ranges ``[start, end)`` of targets ``pid`` into blocks.

    Ranges of one target merge when the gap between them is ``<= max_gap`` (a negative ``max_gap``
    disables merging, even of adjacent ranges) and the merged block is ``<= max_block`` bytes; a single
    range longer than ``max_block`` stays one block.
    """
    pid = np.asarray(pid, np.int64)
    start = np.asarray(start, np.int64)
    end = np.asarray(end, np.int64)
    n = len(pid)
    if n == 0:
        z = np.zeros(0, np.int64)
        return Plan(z, z, z, z)
    order = np.lexsort((start, pid))
    p, s, e = pid[order], start[order], end[order]
    newgrp = np.empty(n, bool)
    newgrp[0] = True
    np.not_equal(p[1:], p[:-1], out=newgrp[1:])
    if max_gap < 0:
        new = np.ones(n, bool)
    else:
        gap = min(int(max_gap), _GAP_CAP)
        # shift each target's ranges into its own disjoint stretch of one axis, so that one running
        # maximum of ends serves every target
        gid = np.cumsum(newgrp) - 1
        first = np.flatnonzero(newgrp)
        gmin = s[first]
        gspan = np.maximum.reduceat(e, first) - gmin
        base = np.concatenate(([0], np.cumsum(gspan + gap + 2)[:-1]))
        shift = base[gid] - gmin[gid]
        ss, ee = s + shift, e + shift
        cm = np.maximum.accumulate(ee)
        new = np.empty(n, bool)
        new[0] = True
        np.greater(ss[1:], cm[:-1] + gap, out=new[1:])
        new |= newgrp
    bid = np.cumsum(new) - 1
    heads = np.flatnonzero(new)
    bstart = s[heads]
    bend = np.maximum.reduceat(e, heads)
    big = np.flatnonzero((bend - bstart > max_block) & (np.diff(np.append(heads, n)) > 1))
    if big.size:
        # split oversized blocks greedily, in offset order (rare: only with a small max_block)
        tails = np.append(heads[1:], n)
        for b in big.tolist():
            lo, hi = int(heads[b]), int(tails[b])
            cur_s, cur_e = int(s[lo]), int(e[lo])
            for i in range(lo + 1, hi):
                si, ei = int(s[i]), int(e[i])
                if max(cur_e, ei) - cur_s > max_block:
                    new[i] = True
                    cur_s, cur_e = si, ei
                else:
                    cur_e = max(cur_e, ei)
        bid = np.cumsum(new) - 1
        heads = np.flatnonzero(new)
        bstart = s[heads]
        bend = np.maximum.reduceat(e, heads)
    req_block = np.empty(n, np.int64)
    req_block[order] = bid
    return Plan(p[heads], bstart, bend, req_block)


# -- reaching target filesystems -----------------------------------------------------------------


def _is_in_memory(fs: Any) -> bool:
    from fsspec.implementations.memory import MemoryFileSystem

    return isinstance(fs, MemoryFileSystem)


async def acall(fs: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    """Call method ``name`` of filesystem ``fs`` from the running event loop, whatever ``fs`` is.

    Sync filesystems run in a worker thread (in-memory ones directly); async ones are awaited on
    their own loop: directly when it is the running loop or unbound, else through
    ``run_coroutine_threadsafe`` on the loop they belong to.
    """
    if not getattr(fs, "async_impl", False):
        meth = getattr(fs, name)
        if _is_in_memory(fs):
            return meth(*args, **kwargs)
        return await asyncio.to_thread(meth, *args, **kwargs)
    return await on_loop(fs, getattr(fs, "_" + name), *args, **kwargs)


async def on_loop(fs: Any, coro_fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Await ``coro_fn(*args, **kwargs)`` on the loop async filesystem ``fs`` belongs to: its public
    ``loop`` (fsspec binds the filesystems it makes to its IO loop, where refset's reads run:
    :mod:`refset.io.bridge`); one made with ``asynchronous=True`` where it is called."""
    own = None
    if not getattr(fs, "asynchronous", False):
        try:
            own = fs.loop
        except RuntimeError:  # made before a fork: fsspec refuses its loop in the child
            own = None
    running = asyncio.get_running_loop()
    if own is None or own is running or not own.is_running() or own.is_closed():
        return await coro_fn(*args, **kwargs)
    fut = asyncio.run_coroutine_threadsafe(coro_fn(*args, **kwargs), own)
    return await asyncio.wrap_future(fut)


def split_protocol(url: str) -> tuple[str | None, str]:
    """``"s3://b/k"`` -> ``("s3", "b/k")``; a local path (no ``://``) -> ``(None, path)``."""
    head, sep, rest = url.partition("://")
    if sep and head and "/" not in head and ":" not in head:
        return head, rest
    return None, url


class Targets:
    """Target filesystems by protocol, created on first use.

    ``fs``: one filesystem instance (used for its protocols and for URLs without one), or a dict
    ``{protocol: instance | options dict}``. ``remote_options`` configure the filesystem of
    ``remote_protocol`` (or, when that is not given, every filesystem created here). URLs without a
    protocol are local paths, unless ``remote_protocol`` (or a single ``fs``) says otherwise.
    ``timeout``: seconds one attempt of a read may take (None: no limit); ``retries``: further
    attempts after a transient failure or a timeout, with exponential backoff. ``recorded(url)``: what
    the file at ``url`` was when its set was made (a :class:`~refset.io.fingerprint.Fingerprint`-shaped
    tuple, or None): reads of a file that differs raise :class:`~refset.errors.SourceChanged` (a local
    file is looked at once, with one ``stat``; HTTP and S3 reads are made conditional on it, at no
    extra request); None: nothing is checked.
    """

    def __init__(
        self,
        *,
        remote_protocol: str | None = None,
        remote_options: Mapping[str, Any] | None = None,
        fs: Any = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        retries: int = RETRIES,
        recorded: Callable[[str], tuple[Any, ...] | None] | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout: expected a positive number of seconds or None, got {timeout!r}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries: expected a non-negative integer, got {retries!r}")
        self.timeout = timeout
        self.retries = retries
        self.remote_protocol = remote_protocol
        # we manage event loops ourselves: an "asynchronous" flag given for fsspec's sake is dropped
        self.remote_options = {
            k: v for k, v in (remote_options or {}).items() if k not in ("asynchronous", "loop")
        }
        self.recorded = recorded
        self._checked: dict[str, SourceChanged | None] = {}  # files looked at: None when unchanged
        self._fss: dict[str | None, Any] = {}
        self._opts: dict[str | None, dict[str, Any]] = {}
        self._lock = threading.RLock()  # _create may call get() for the remote protocol
        self._default: Any = None
        if isinstance(fs, Mapping):
            for k, v in fs.items():
                proto = k.split(":", 1)[0] if k else None
                if isinstance(v, Mapping):
                    self._opts[proto] = {
                        a: b for a, b in v.items() if a not in ("asynchronous", "loop")
                    }
                else:
                    self._register(proto, v)
        elif fs is not None:
            protos = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
            for p in protos:
                self._register(p, fs)
            self._default = fs

    def _register(self, proto: str | None, fs: Any) -> None:
        self._fss[proto] = fs
        if proto is not None:
            # "file" and "local" name the same filesystem; so do "s3" and "s3a" etc.
            for p in fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,):
                self._fss.setdefault(p, fs)

    def get(self, proto: str | None) -> Any:
        """The filesystem serving URLs of protocol ``proto`` (None: URLs without a protocol)."""
        fs = self._fss.get(proto)
        if fs is not None:
            return fs
        with self._lock:
            fs = self._fss.get(proto)
            if fs is not None:
                return fs
            fs = self._create(proto)
            self._fss[proto] = fs
            return fs

    def _create(self, proto: str | None) -> Any:
        import fsspec

        from refset.io.pool import pooled

        if proto is None:
            if self._default is not None:
                return self._default
            if None in self._opts:
                return fsspec.filesystem("file", **self._opts[None])
            if self.remote_protocol:
                return self.get(self.remote_protocol)
            return fsspec.filesystem("file")
        if proto in self._opts:
            opts = self._opts[proto]
        elif self.remote_protocol is None or proto == self.remote_protocol:
            opts = self.remote_options
        else:
            opts = {}
        return fsspec.filesystem(proto, **pooled(proto, opts))

    def for_url(self, url: str) -> Any:
        return self.get(split_protocol(url)[0])

    def instances(self) -> dict[str | None, Any]:
        """The filesystems created or given so far."""
        return dict(self._fss)

    # -- what the files were -----------------------------------------------------------------------
    def expected(self, url: str) -> tuple[Any, ...] | None:
        """What ``url`` must still be for its bytes to be read (None: not checked). A file found
        changed before raises its :class:`~refset.errors.SourceChanged` again, without a request."""
        if self.recorded is None:
            return None
        got = self._checked.get(url)
        if got is not None:
            raise got.again()
        rec = self.recorded(url)
        return rec if rec is not None and Fingerprint(*rec).known else None

    def found(self, url: str, recorded: tuple[Any, ...], now: tuple[Any, ...] | None) -> None:
        """What a read saw of ``url``: :class:`~refset.errors.SourceChanged` (remembered, so later reads
        fail the same way) when it is not what was ``recorded``."""
        if now is not None and not changed(recorded, now):
            return
        err = self._checked[url] = SourceChanged(url, recorded, now)
        raise err

    async def check_local(self, fs: Any, url: str, recorded: tuple[Any, ...]) -> None:
        """Compare a local file with ``recorded``: one ``stat`` per file for the life of these targets."""
        if url in self._checked:
            return
        path = fs._strip_protocol(url)
        try:
            now: tuple[Any, ...] | None = await asyncio.to_thread(local_fingerprint, path)
        except FileNotFoundError:
            now = None
        self.found(url, recorded, now)
        self._checked[url] = None


def _transient(e: BaseException) -> bool:
    """Worth another attempt: network trouble, not a missing file or a bad argument."""
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError,
                      ShortRead, ValueError, TypeError, KeyError, NotImplementedError)):
        return False
    if isinstance(e, (TimeoutError, ConnectionError, asyncio.TimeoutError)):
        return True
    mod = type(e).__module__ or ""
    return mod.startswith(("aiohttp", "botocore", "aiobotocore", "requests", "urllib3"))


def _is_http(fs: Any) -> bool:
    mod = type(fs).__module__ or ""
    return mod.startswith("fsspec.implementations.http") and hasattr(fs, "set_session")


def _is_s3(fs: Any) -> bool:
    return (type(fs).__module__ or "").startswith("s3fs") and hasattr(fs, "_call_s3") and hasattr(fs, "split_path")


def _is_local_fs(fs: Any) -> bool:
    return (type(fs).__module__ or "").startswith("fsspec.implementations.local")


def checked_range(url: str, start: int, end: int, status: int, content_range: str | None,
                  data: bytes) -> tuple[bytes, int | None]:
    """The bytes ``[start, end)`` of an HTTP answer to ``Range: bytes=start-(end-1)``, and the file's
    size when the answer tells it (the total of ``Content-Range``, the length of a 200's whole file):
    a 206 must say in ``Content-Range`` that it holds exactly the bytes it carries, starting at
    ``start``; a 200 (the server ignored the range) holds the whole file. Anything else is a
    ShortRead naming the mismatch."""
    import re

    if status == 200:
        return data[start:end], len(data)
    if status != 206:
        raise ShortRead(f"{url}: HTTP {status} to a range request for bytes {start}-{end - 1}")
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", content_range or "")
    if m is None:
        raise ShortRead(f"{url}: 206 answer to bytes {start}-{end - 1} without a valid Content-Range "
                        f"({content_range!r})")
    a, b = int(m.group(1)), int(m.group(2))
    total = int(m.group(3)) if m.group(3) != "*" else None
    if a != start or b < a or b >= end or b - a + 1 != len(data) or (total is not None and b >= total):
        raise ShortRead(f"{url}: asked for bytes {start}-{end - 1}, the server answered Content-Range "
                        f"{content_range!r} with {len(data)} bytes")
    return data, total


async def _http_range(fs: Any, url: str, start: int | None, end: int | None,
                      recorded: tuple[Any, ...] | None = None) -> tuple[bytes, int | None, Fingerprint]:
    """fsspec's HTTP read of ``[start, end)`` (the whole file when ``start`` is None), the answer
    checked against ``Content-Range``: its bytes, the file's size when the answer tells it, and the
    fingerprint the answer tells. ``recorded``: what the file must still be, asked of the server
    (``If-Match``/``If-Unmodified-Since``: 412 when it is not) and checked in the answer's headers."""
    kw = dict(fs.kwargs)
    headers = dict(kw.pop("headers", None) or {})
    if start is not None and end is not None:
        headers["Range"] = f"bytes={start}-{end - 1}"
    if recorded is not None:
        headers.update(conditions(recorded))
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **kw) as r:
        if r.status == 412 and recorded is not None:
            raise _changed_answer(url, recorded, from_headers(r.headers, None))
        data = await r.read()
        if (r.status == 416 and start == 0
                and (r.headers.get("Content-Range") or "").replace(" ", "") == "bytes*/0"):
            return b"", 0, from_headers(r.headers, 0)  # an empty file has no range to give (RFC 9110 15.5.17)
        fs._raise_not_found_for_status(r, url)
        status, content_range, answer = r.status, r.headers.get("Content-Range"), r.headers
    if start is None or end is None:
        got: tuple[bytes, int | None] = (data, len(data)) if status == 200 else checked_range(
            url, 0, len(data), status, content_range, data)
    else:
        got = checked_range(url, start, end, status, content_range, data)
    return got[0], got[1], from_headers(answer, got[1])


def _changed_answer(url: str, recorded: tuple[Any, ...], now: Fingerprint) -> SourceChanged:
    """The error of a 412 answer: what the server says the file is now, where it says it."""
    return SourceChanged(url, recorded, now if now.known else None,
                         "the server refused the read (412 Precondition Failed: the file is not the one "
                         "scanned): rescan it (`refset refresh SET`), or read with verify_sources=False")


def _s3_conditions(recorded: tuple[Any, ...]) -> dict[str, Any]:
    """:func:`~refset.io.fingerprint.conditions` as boto's ``get_object`` takes them."""
    from email.utils import parsedate_to_datetime

    out: dict[str, Any] = {}
    for k, v in conditions(recorded).items():
        if k == "If-Match":
            out["IfMatch"] = v
        else:
            try:
                out["IfUnmodifiedSince"] = parsedate_to_datetime(v)
            except (TypeError, ValueError):
                pass
    return out


async def _s3_range(fs: Any, url: str, start: int | None, end: int | None,
                    recorded: tuple[Any, ...] | None = None) -> tuple[bytes, int | None, Fingerprint]:
    """An S3 read of ``[start, end)`` (the whole object when ``start`` is None) through s3fs's client:
    its bytes, the object's size (``Content-Range``'s total) and fingerprint (``ETag``,
    ``Last-Modified``), from the one ``GetObject``; conditional on ``recorded`` as for HTTP."""
    bucket, key, version = fs.split_path(url)
    kw: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version:
        kw["VersionId"] = version
    if start is not None and end is not None:
        kw["Range"] = f"bytes={start}-{end - 1}"
    if recorded is not None:
        kw.update(_s3_conditions(recorded))
    try:
        resp = await fs._call_s3("get_object", **kw)
    except OSError as e:
        cause = getattr(e.__cause__, "response", None) or {}
        code = (cause.get("Error") or {}).get("Code")
        status = (cause.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        if recorded is not None and (code == "PreconditionFailed" or status == 412):
            raise _changed_answer(url, recorded, Fingerprint()) from None
        if code == "InvalidRange" and start == 0:
            return b"", 0, Fingerprint(0)
        raise
    try:
        data = await resp["Body"].read()
    finally:
        resp["Body"].close()
    size = None
    cr = resp.get("ContentRange")
    if cr and "/" in cr and cr.rsplit("/", 1)[1].strip().isdigit():
        size = int(cr.rsplit("/", 1)[1])
    elif start is None:
        size = len(data)
    lm = resp.get("LastModified")
    now = Fingerprint(size, None, resp.get("ETag"), http_date(lm) if lm is not None else None)
    if start is not None and end is not None:
        if len(data) > end - start:
            raise ShortRead(f"{url}: asked for bytes {start}-{end - 1} ({end - start}), got {len(data)} bytes")
    return data, size, now


async def read_range(
    targets: Targets, url: str, start: int | None, end: int | None, *, retries: int | None = None
) -> bytes:
    """Bytes ``[start, end)`` of ``url`` (None: from the beginning / to the end), retrying transient
    failures and timeouts (``targets.timeout`` per attempt, ``targets.retries`` more attempts, backoff
    0.1 s doubling). Never longer than asked; a shorter answer is left for the caller to judge."""
    return (await read_range_sized(targets, url, start, end, retries=retries))[0]


async def read_range_sized(
    targets: Targets, url: str, start: int | None, end: int | None, *, retries: int | None = None
) -> tuple[bytes, int | None]:
    """:func:`read_range` and the file's size when the answer tells it (HTTP's ``Content-Range``:
    no HEAD request needed), else None."""
    got = await read_range_fingerprinted(targets, url, start, end, retries=retries)
    return got[0], got[1]


async def read_range_fingerprinted(
    targets: Targets, url: str, start: int | None, end: int | None, *, retries: int | None = None
) -> tuple[bytes, int | None, Fingerprint | None]:
    """:func:`read_range_sized` and the fingerprint the answer tells (HTTP and S3: ``ETag``,
    ``Last-Modified``, the size), else None. When ``targets`` record what the file was, the read is
    checked against it (:meth:`Targets.expected`): :class:`~refset.errors.SourceChanged` when it
    differs."""
    fs = targets.for_url(url)
    retries = getattr(targets, "retries", RETRIES) if retries is None else retries
    timeout = getattr(targets, "timeout", DEFAULT_TIMEOUT)
    ranged = start is not None and end is not None and 0 <= start < end
    whole = start is None and end is None
    expect = targets.expected(url) if isinstance(targets, Targets) else None
    if expect is not None and _is_local_fs(fs):
        await targets.check_local(fs, url, expect)
        expect = None
    attempt = 0
    size: int | None = None
    now: Fingerprint | None = None
    while True:
        try:
            async with asyncio.timeout(timeout):  # no task of its own per attempt, as wait_for makes
                if (ranged or whole) and _is_http(fs):
                    data, size, now = await on_loop(fs, _http_range, fs, url, start, end, expect)
                elif (ranged or whole) and _is_s3(fs):
                    data, size, now = await on_loop(fs, _s3_range, fs, url, start, end, expect)
                else:
                    data = await acall(fs, "cat_file", url, start=start, end=end)
            break
        except Exception as e:
            if isinstance(e, TimeoutError | asyncio.TimeoutError):
                e = TimeoutError(f"no answer from {url} within {timeout} s (attempt {attempt + 1} of "
                                 f"{retries + 1})")
            if isinstance(e, SourceChanged):
                targets._checked[url] = e
                raise
            if attempt >= retries or not _transient(e):
                raise e from None
            attempt += 1
            await asyncio.sleep(0.05 * 2**attempt)
    if expect is not None and now is not None:  # a server that ignored the condition: its own headers
        targets.found(url, expect, now)
    if start is not None and end is not None and start >= 0 and end >= 0 and len(data) > end - start:
        raise ShortRead(f"{url}: asked for bytes {start}-{end} ({end - start}), got {len(data)} bytes")
    return (bytes(data) if not isinstance(data, bytes) else data), size, now


class RangeReader:
    """Reads many byte ranges with few requests (see :func:`plan_ranges`).

    ``max_inflight`` bounds the number of block requests running at once.
    """

    def __init__(
        self,
        targets: Targets,
        *,
        max_gap: int = DEFAULT_MAX_GAP,
        max_block: int = DEFAULT_MAX_BLOCK,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
    ) -> None:
        self.targets = targets
        self.max_gap = max_gap
        self.max_block = max_block
        self.max_inflight = max_inflight
        self.requests = 0  # block requests sent (for benchmarks and tests)

    async def read(
        self, urls: Sequence[str], pid: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> list[bytes | BaseException]:
        """Bytes ``[start[i], end[i])`` of ``urls[pid[i]]`` for every i, in order; a failed read is
        the exception instead (a :class:`ShortRead` when the target ended early)."""
        out: list[bytes | BaseException] = [b""] * len(pid)

        def keep(rows: np.ndarray, pieces: list[bytes | BaseException]) -> None:
            for i, d in zip(rows.tolist(), pieces, strict=True):
                out[i] = d

        await self.read_each(urls, pid, start, end, keep)
        return out

    async def read_each(
        self, urls: Sequence[str], pid: np.ndarray, start: np.ndarray, end: np.ndarray,
        each: Callable[[np.ndarray, list[bytes | BaseException]], None],
    ) -> None:
        """Fetch what :meth:`read` fetches, handing each block's ranges to ``each(rows, pieces)`` as
        soon as the block arrives (``rows``: their positions in the columns; ``pieces``: their bytes,
        or the exception), on the running loop: a caller decodes a block while the others are in
        flight, and holds only what it keeps. An exception from ``each`` cancels the blocks still in
        flight and is raised."""
        n = len(pid)
        if n == 0:
            return
        start = np.asarray(start, np.int64)
        end = np.asarray(end, np.int64)
        plan = plan_ranges(pid, start, end, self.max_gap, self.max_block)
        bp, bs, be = plan.block_pid.tolist(), plan.block_start.tolist(), plan.block_end.tolist()
        order = np.argsort(plan.req_block, kind="stable")
        cuts = np.searchsorted(plan.req_block[order], np.arange(plan.nblocks + 1))
        sem = asyncio.Semaphore(self.max_inflight)

        async def one(b: int) -> None:
            rows = order[cuts[b]:cuts[b + 1]]
            async with sem:
                self.requests += 1
                try:
                    data: bytes | BaseException = await read_range(self.targets, urls[bp[b]], bs[b], be[b])
                except Exception as e:
                    data = e
            each(rows, _pieces(urls[bp[b]], data, bs[b], be[b], start[rows].tolist(), end[rows].tolist()))

        tasks = [asyncio.ensure_future(one(b)) for b in range(len(bp))]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


def _pieces(url: str, data: bytes | BaseException, b0: int, b1: int, starts: list[int], ends: list[int],
            ) -> list[bytes | BaseException]:
    """The ranges ``[starts[i], ends[i])`` cut from ``data``, the bytes ``[b0, b1)`` of ``url`` (or the
    exception that stood for them)."""
    if isinstance(data, BaseException):
        return [data] * len(starts)
    out: list[bytes | BaseException] = []
    for s, e in zip(starts, ends, strict=True):
        if s == b0 and e == b1 and len(data) == e - s:
            out.append(data)
            continue
        piece = data[s - b0:e - b0]
        if len(piece) != e - s:
            out.append(ShortRead(f"{url}: asked for bytes {s}-{e} ({e - s}), got {len(piece)} bytes"))
        else:
            out.append(piece)
    return out
