"""One small thread pool for numpy passes that release the GIL (shared by the readers and the
xarray backend). A forked child gets a new one: the parent's worker threads do not exist there."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_POOL: ThreadPoolExecutor | None = None
_PREFIX = "refset-pool"
_LOCK = threading.Lock()


def pool() -> ThreadPoolExecutor:
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2)), thread_name_prefix=_PREFIX)
        return _POOL


def parallel_map(fn: Callable[[Any], T], items: Iterable[Any]) -> list[T]:
    """``[fn(x) for x in items]``, on the pool when there is more than one item. Called from one of
    the pool's own threads (a map inside a map) it runs in that thread: a worker waiting for tasks
    queued behind it would wait forever once every worker does."""
    items = list(items)
    if len(items) < 2 or threading.current_thread().name.startswith(_PREFIX):
        return [fn(x) for x in items]
    return list(pool().map(fn, items))


def ahead() -> ThreadPoolExecutor:
    """Threads for work done ahead of the pool's (fetching the next batch while one decodes; one a
    read at a time, several reads at once)."""
    global _AHEAD
    with _LOCK:
        if _AHEAD is None:
            _AHEAD = ThreadPoolExecutor(4, thread_name_prefix="refset-ahead")
        return _AHEAD


_AHEAD: ThreadPoolExecutor | None = None


def _forget() -> None:
    global _POOL, _LOCK, _AHEAD
    _POOL, _LOCK, _AHEAD = None, threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)
