"""``refset.ReferenceFileSystem``: an fsspec AsyncFileSystem (protocol ``refset``) over a ReferenceSet.

It takes the constructor arguments of fsspec's ``ReferenceFileSystem``, so switching is one word. It
is a thin adapter: bytes come from :class:`~refset.serve.engine.ReadEngine` (references grouped by target
URL, nearby ranges merged and fetched concurrently, lookups that may read run off the event loop) and
listings from :class:`~refset.serve.listing.KeyIndex` (answered from the columnar model; no dict of all keys
is ever built). It pickles by its constructor arguments, so Dask workers reopen the set lazily.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping
from typing import Any, cast

from fsspec.asyn import AsyncFileSystem
from fsspec.spec import AbstractBufferedFile

from refset.abc.source import NOT_LOADED
from refset.io.fetch import (
    DEFAULT_MAX_BLOCK,
    DEFAULT_MAX_GAP,
    DEFAULT_MAX_INFLIGHT,
    DEFAULT_TIMEOUT,
    RETRIES,
)
from refset.model.refset import ReferenceSet
from refset.model.table import Ref
from refset.options import Limits
from refset.serve.engine import ReadEngine, off_loop
from refset.serve.listing import entry, info_of

__all__ = ["ReferenceFileSystem", "FsspecReferences"]


class FsspecReferences(Mapping[str, bytes | list[Any]]):
    """A read-only view of a :class:`~refset.ReferenceSet` with fsspec's value forms: lists where the
    set has tuples. Lookups, ``len``, ``in`` and iteration go to the set, so nothing is copied."""

    __slots__ = ("_rs",)

    def __init__(self, rs: ReferenceSet) -> None:
        self._rs = rs

    def __getitem__(self, key: str) -> bytes | list[Any]:
        return _fsspec_form(self._rs[key])

    def __contains__(self, key: object) -> bool:
        return key in self._rs

    def __len__(self) -> int:
        return len(self._rs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._rs)

    def items(self) -> Iterator[tuple[str, bytes | list[Any]]]:  # type: ignore[override]
        """``(key, value)`` pairs, read array by array (faster than a lookup per key)."""
        return ((k, _fsspec_form(v)) for k, v in self._rs.items())

    def __repr__(self) -> str:
        return f"<references of {self._rs!r}>"


def _fsspec_form(ref: Ref) -> bytes | list[Any]:
    return ref if isinstance(ref, bytes) else list(ref)


class ReferenceFileSystem(AsyncFileSystem):  # type: ignore[misc]  # fsspec has no type information: Any
    """View the references of a reference set as files (read-only).

    Parameters
    ----------
    fo
        Anything :func:`refset.load` takes (dict, path/URL to JSON, parquet directory, packed file)
        or a :class:`~refset.ReferenceSet`.
    target_protocol, target_options
        Protocol and storage options for loading ``fo`` when it is a path
        (``ref_storage_args`` is the deprecated fsspec spelling of ``target_options``).
    remote_protocol, remote_options
        Filesystem for target URLs of that protocol (and for URLs without one), and its options.
        Without ``remote_protocol``, ``remote_options`` go to every target filesystem created.
    fs
        A filesystem instance for targets, or ``{protocol: instance | options dict}``.
    template_overrides
        Replacement templates for Version 1 JSON.
    max_gap, max_block
        Merge ranges of one target when the gap is ``<= max_gap`` bytes (negative: never merge) and the
        block stays ``<= max_block`` bytes.
    max_inflight
        Requests in flight at once per batched read.
    limits
        Bounds on what reading the set may spend (:class:`refset.Limits`).
    timeout, retries
        Seconds one attempt to read a target may take (default 30; None: no limit) and further
        attempts after a timeout or a transient failure (default 2, backoff 0.1 s doubling): a
        silent server gives ``ReferenceNotReachable`` after about 91 s by default. HTTP range
        answers are checked against their ``Content-Range``.
    verify_sources
        Refuse to read a file that is not what the set recorded of it when it was made (its fingerprint:
        size and modification time of a local file, ETag or Last-Modified of a remote one), with
        :class:`refset.errors.SourceChanged` naming the file and what changed (default True; at no
        extra request: a ``stat`` per local file, conditional HTTP/S3 reads). Sets that record nothing
        (kerchunk's) are read as before.
    target, simple_templates, cache_size
        Accepted for compatibility with fsspec; refset does not need them.
    """

    protocol = ("refset",)
    root_marker = ""
    cachable = False
    async_impl = True

    def __init__(
        self,
        fo: Any,
        target: str | None = None,
        ref_storage_args: Mapping[str, Any] | None = None,
        target_protocol: str | None = None,
        target_options: Mapping[str, Any] | None = None,
        remote_protocol: str | None = None,
        remote_options: Mapping[str, Any] | None = None,
        fs: Any = None,
        template_overrides: Mapping[str, str] | None = None,
        simple_templates: bool = True,
        max_gap: int | None = DEFAULT_MAX_GAP,
        max_block: int | None = DEFAULT_MAX_BLOCK,
        cache_size: int = 128,
        *,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        timeout: float | None = DEFAULT_TIMEOUT,
        retries: int = RETRIES,
        limits: Limits | None = None,
        verify_sources: bool = True,
        **kwargs: Any,
    ) -> None:
        if isinstance(remote_options, str):  # what a JSON-configured caller may pass: parsed here
            remote_options = _parsed_options(remote_options, "remote_options")
        if isinstance(target_options, str):
            target_options = _parsed_options(target_options, "target_options")
        super().__init__(**kwargs)
        self.target = target
        self.engine = ReadEngine.open(
            fo, target_protocol=target_protocol, storage_options=target_options or ref_storage_args,
            template_overrides=template_overrides, limits=limits, remote_protocol=remote_protocol,
            remote_options=remote_options, fs=fs, max_gap=max_gap, max_block=max_block,
            max_inflight=max_inflight, timeout=timeout, retries=retries, verify_sources=verify_sources)
        self.refs = self.engine.refs
        self.index = self.engine.index
        self.targets = self.engine.targets
        self.reader = self.engine.reader

    @property
    def loop(self) -> Any:
        """The event loop sync calls run on: the instance's own, or, for an ``asynchronous=True``
        instance called synchronously (as kerchunk's ``refs_as_fs`` does), refset's IO loop."""
        from refset.io.bridge import io_loop

        try:
            own = AsyncFileSystem.loop.fget(self)  # fsspec's property: the loop it was made with, or None
        except RuntimeError:  # made before a fork: fsspec refuses its loop in the child
            own = None
        return io_loop() if own is None or own.is_closed() else own

    @property
    def references(self) -> Mapping[str, bytes | list[Any]]:
        """The references as fsspec's attribute of that name gives them: a read-only mapping, key ->
        ``[url, offset, length]``, ``[url]`` or inline bytes, looked up key by key (no dict is built).
        ``fs.refs`` is the :class:`~refset.ReferenceSet` itself."""
        return FsspecReferences(self.refs)

    @property
    def fss(self) -> dict[str | None, Any]:
        """Target filesystems created so far, by protocol (as fsspec's attribute of that name)."""
        return self.targets.instances()

    @property
    def max_gap(self) -> int:
        return self.reader.max_gap

    @property
    def max_block(self) -> int:
        return self.reader.max_block

    # -- lookups --------------------------------------------------------------------------------
    async def _refs(self, keys: list[str]) -> list[Ref | None]:
        """References of ``keys`` (None when absent); those that need reading are looked up together in
        one worker thread."""
        out = [self.refs.get_now(k) for k in keys]
        todo = [i for i, r in enumerate(out) if r is NOT_LOADED]
        if todo:
            got = await off_loop(lambda: [self.refs.get(keys[i]) for i in todo])
            for i, r in zip(todo, got, strict=True):
                out[i] = r
        return cast("list[Ref | None]", out)  # no NOT_LOADED sentinel left

    # -- reading --------------------------------------------------------------------------------
    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        key = self._strip_protocol(path)
        ref = await self.engine.ref(key)
        if ref is None:
            raise FileNotFoundError(key)
        return await self.engine.read_ref(key, ref, start, end)

    async def _cat_ranges(
        self,
        paths: list[str],
        starts: int | list[int | None] | None,
        ends: int | list[int | None] | None,
        max_gap: int | None = None,
        batch_size: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[bytes | BaseException]:
        n = len(paths)
        starts = starts if isinstance(starts, list) else [starts] * n
        ends = ends if isinstance(ends, list) else [ends] * n
        if len(starts) != n or len(ends) != n:
            raise ValueError(f"cat_ranges: {n} paths but {len(starts)} starts and {len(ends)} ends")
        keys: list[str] = []
        refs: list[Ref] = []
        rows: list[int] = []
        out: list[bytes | BaseException | None] = [None] * n
        all_keys = [self._strip_protocol(p) for p in paths]
        for i, (key, ref) in enumerate(zip(all_keys, await self._refs(all_keys), strict=True)):
            if ref is None:
                if on_error == "raise":
                    raise FileNotFoundError(key)
                out[i] = FileNotFoundError(key)
                continue
            keys.append(key)
            refs.append(ref)
            rows.append(i)
        got = await self.engine.read_many(keys, refs, [starts[i] for i in rows], [ends[i] for i in rows])
        for i, d in zip(rows, got, strict=False):
            if isinstance(d, BaseException) and on_error == "raise":
                raise d
            out[i] = d
        return cast("list[bytes | BaseException]", out)  # every slot filled: no None left

    async def _cat(
        self,
        path: str | list[str],
        recursive: bool = False,
        on_error: str = "raise",
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> bytes | BaseException | dict[str, bytes | BaseException]:
        single = isinstance(path, str) and not recursive and not _has_magic(path)
        if isinstance(path, str) and single:
            if on_error == "raise":
                return await self._cat_file(path)
            got = await self._cat([path], on_error=on_error)  # the error in its place, or nothing
            return got.get(path, {}) if isinstance(got, dict) else got
        if recursive or (isinstance(path, str) and _has_magic(path)) or any(map(_has_magic, path)):
            paths = await self._expand_path(path, recursive=recursive)
            found = await self._refs([self._strip_protocol(p) for p in paths])
            paths = [p for p, r in zip(paths, found, strict=True) if r is not None]
        else:
            paths = list(path)
        parts = await self._cat_ranges(paths, None, None, on_error="return")
        out: dict[str, bytes | BaseException] = {}
        for p, d in zip(paths, parts, strict=False):
            if isinstance(d, BaseException):
                if on_error == "raise":
                    raise d
                if on_error == "omit":
                    continue
            out[p] = d
        return out

    def cat(self, path: str | list[str], recursive: bool = False, on_error: str = "raise",
            **kwargs: Any) -> Any:
        """fsspec's ``cat``. One key that cannot be read, with ``on_error="return"``, gives its error
        (as fsspec's reference filesystem does; fsspec's sync bridge would raise an error returned by
        :meth:`_cat`), with ``"omit"`` an empty dict."""
        if isinstance(path, str) and on_error != "raise" and not recursive and not _has_magic(path):
            got = self._sync(self._cat([path], on_error=on_error, **kwargs))
            return got.get(path, {})
        return self._sync(self._cat(path, recursive=recursive, on_error=on_error, **kwargs))

    async def _get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        if await off_loop(self.index.isdir, self._strip_protocol(rpath)):
            os.makedirs(lpath, exist_ok=True)
            return
        data = await self._cat_file(rpath)
        from refset.io.atomic import write_bytes

        write_bytes(lpath, data)  # a temporary beside it, then rename: no half-written file

    # -- metadata -------------------------------------------------------------------------------
    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        key = self._strip_protocol(path)
        ref = await self.engine.ref(key)
        if ref is not None:
            info = info_of(key, ref)
            if info["size"] is None:
                info["size"] = await self.engine.size(key, ref)
            return info
        if await off_loop(self.index.isdir, key):
            return {"name": key, "type": "directory", "size": 0}
        raise FileNotFoundError(key)

    def _sync(self, coro: Any) -> Any:
        from fsspec.asyn import sync

        return sync(self.loop, lambda: coro)

    def _entries(self, path: str, detail: bool) -> list[Any]:
        key = self._strip_protocol(path)
        got = self.index.entries(key)
        if got is None:
            ref = self.index.ref(key)
            if ref is None:
                raise FileNotFoundError(key)
            info = info_of(key, ref)
            return [info] if detail else [key]
        files, dirs = got
        if not detail:
            return sorted({f[0] for f in files}.union(dirs))
        out = [entry(*f) for f in files]
        out.extend({"name": d, "type": "directory", "size": 0} for d in dirs)
        out.sort(key=lambda e: e["name"])
        return out

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        return await off_loop(self._entries, path, detail)

    async def _find(self, path: str, maxdepth: int | None = None, withdirs: bool = False,
                    **kwargs: Any) -> Any:
        if maxdepth is not None or withdirs:
            return await super()._find(path, maxdepth=maxdepth, withdirs=withdirs, **kwargs)
        key = self._strip_protocol(path)
        names = await off_loop(self.index.find, key)
        if not kwargs.get("detail"):
            return names
        # the keys found are in the set: none of their references is None
        return {k: info_of(k, cast(Ref, r)) for k, r in zip(names, await self._refs(names), strict=True)}

    async def _isdir(self, path: str) -> bool:
        return await off_loop(self.index.isdir, self._strip_protocol(path))

    async def _isfile(self, path: str) -> bool:
        return await self.engine.ref(self._strip_protocol(path)) is not None

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        key = self._strip_protocol(path)
        return await self.engine.ref(key) is not None or await off_loop(self.index.isdir, key)

    # -- files ----------------------------------------------------------------------------------
    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | str | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        if mode != "rb":
            raise NotImplementedError(f"refset.ReferenceFileSystem is read-only; cannot open with {mode!r}")
        key = self._strip_protocol(path)
        ref = self.index.ref(key)
        if ref is None:
            raise FileNotFoundError(key)
        if isinstance(ref, bytes):
            return io.BytesIO(ref)
        size = self._sync(self.engine.size(key, ref))
        return ReferenceFile(self, key, size=size, block_size=block_size or "default",
                             cache_options=cache_options, **kwargs)


def _parsed_options(text: str, name: str) -> dict[str, Any]:
    import json

    from refset.errors import InvalidOption

    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidOption(f"{name}: a JSON object of options, got {text[:80]!r} ({e})") from None
    if not isinstance(value, dict):
        raise InvalidOption(f"{name}: a JSON object of options, got {type(value).__name__}")
    return value


def _has_magic(p: str) -> bool:
    return any(c in p for c in "*?[")


class ReferenceFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec has no type information: Any
    """A seekable read-only file over one reference; reads are clamped to the referenced block."""

    def __init__(self, fs: ReferenceFileSystem, path: str, *, size: int, block_size: Any = "default",
                 cache_type: str = "readahead", cache_options: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(fs, path, mode="rb", block_size=block_size, cache_type=cache_type,
                         cache_options=cache_options, size=size, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        fs: ReferenceFileSystem = self.fs
        data: bytes = fs._sync(fs._cat_file(self.path, start=start, end=end))
        return data
