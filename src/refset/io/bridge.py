"""The one bridge between sync and async code: every read of refset's byte layer runs on one event loop,
fsspec's IO loop (:func:`io_loop`, a daemon thread that fsspec starts once per process and again in a
forked child), which is also the loop fsspec binds the target filesystems it creates to.

- Sync callers (xarray's ``__getitem__``, a Dask task, ``refset.io.store``) wait on it with :func:`run`.
- Async callers on another loop (zarr's, a user's ``asyncio.run``) hop onto it with :func:`on_io_loop`,
  so a target filesystem is never awaited on a loop it does not belong to.

Both go through public APIs only (``fsspec.asyn.sync``/``get_loop``, ``asyncio.run_coroutine_threadsafe``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["io_loop", "run", "on_io_loop"]

T = TypeVar("T")


def io_loop() -> asyncio.AbstractEventLoop:
    """The event loop refset's reads run on (fsspec's IO loop, started on first use)."""
    from fsspec.asyn import get_loop

    loop: asyncio.AbstractEventLoop = get_loop()
    return loop


def run(coro: Coroutine[Any, Any, T]) -> T:
    """The result of ``coro``, run on :func:`io_loop`, from sync code (any thread but that loop's;
    there it raises ``NotImplementedError`` rather than wait forever)."""
    from fsspec.asyn import sync

    async def wrapped() -> T:
        return await coro

    try:
        got: T = sync(io_loop(), wrapped)
    except BaseException:
        coro.close()  # never started (the loop refused it): no "never awaited" warning
        raise
    return got


async def on_io_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on :func:`io_loop` from any running loop (directly when it is that loop)."""
    loop = io_loop()
    if asyncio.get_running_loop() is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))
