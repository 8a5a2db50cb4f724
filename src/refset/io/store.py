"""The one byte layer: :func:`open_store` gives the :class:`~refset.abc.bytestore.ByteStore` of any
URL refset reads — a local path or ``file://`` URL read directly (no fsspec import), anything else
through fsspec (chained URLs such as ``simplecache::s3://...`` too), its reads checked by the read
path's reader (:mod:`refset.io.fetch`: HTTP ``Content-Range``, lengths, retries, timeouts)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from refset.abc.bytestore import ByteStore
from refset.errors import ReferenceNotReachable, SourceChanged
from refset.io.fingerprint import Fingerprint
from refset.io.local import is_local, local_path

__all__ = ["glob", "open_store", "LocalStore", "FsspecStore", "read_bytes", "read_many", "reading_options"]

#: From this size a whole local file is memory-mapped rather than read.
MMAP_FROM = 1 << 22


def reading_options(url: str, storage_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """fsspec options to read a reference set at ``url``: over HTTP without the client's own
    decompression (``Content-Encoding: gzip`` bodies reach :func:`decompress`, which bounds them),
    connection pools sized for many requests at once (:func:`refset.io.pool.pooled`), unless the
    caller chose otherwise."""
    from refset.io.fetch import split_protocol
    from refset.io.pool import pooled

    so = dict(storage_options or {})
    if url.startswith(("http://", "https://")):
        ck = dict(so.get("client_kwargs") or {})
        ck.setdefault("auto_decompress", False)
        so["client_kwargs"] = ck
    return pooled(split_protocol(url)[0], so)


def open_store(url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> ByteStore:
    """The store of ``url``: a :class:`LocalStore` for a local path or ``file://`` URL without storage
    options, else an :class:`FsspecStore`."""
    url = os.fspath(url)
    if is_local(url, storage_options):
        return LocalStore(url)
    return FsspecStore(url, storage_options)


def glob(pattern: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The paths or URLs matching ``pattern`` (``*``, ``?``, ``[...]``), sorted: local ones by the
    file system, others by their fsspec file system's listing (S3, GCS, Azure; HTTP where the server
    lists its directories), as URLs with their protocol."""
    import glob as _glob

    if is_local(pattern, storage_options):
        return sorted(_glob.glob(os.path.expanduser(pattern.removeprefix("file://"))))
    import fsspec

    fs, path = fsspec.core.url_to_fs(pattern, **dict(storage_options or {}))
    return sorted(fs.unstrip_protocol(p) for p in fs.glob(path))


def read_bytes(url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None) -> bytes:
    """The whole content at ``url``; a large local file is memory-mapped (no copy, read on demand)."""
    return open_store(url, storage_options).read()


class LocalStore(ByteStore):
    """Files of the local filesystem, read with ``open``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.root = local_path(url)

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path) if path else self.root

    def read(self, path: str = "", start: int | None = None, end: int | None = None) -> bytes:
        # docstring inherited
        with open(self._path(path), "rb") as f:
            if start is None and end is None:
                size = os.fstat(f.fileno()).st_size
                if size >= MMAP_FROM:
                    import mmap

                    # MAP_POPULATE: map the whole file at once instead of one page fault per 4 KiB
                    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
                    return mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ)  # type: ignore[return-value]
                return f.read()
            s = start or 0
            f.seek(s)
            return f.read() if end is None else f.read(max(0, end - s))

    def size(self, path: str = "") -> int:
        # docstring inherited
        return os.path.getsize(self._path(path))

    def exists(self, path: str = "") -> bool:
        # docstring inherited
        return os.path.lexists(self._path(path))

    def isdir(self, path: str = "") -> bool:
        # docstring inherited
        return os.path.isdir(self._path(path))

    def list(self, path: str = "") -> set[str] | None:
        # docstring inherited
        try:
            return set(os.listdir(self._path(path)))
        except (FileNotFoundError, NotADirectoryError):
            return set()


class FsspecStore(ByteStore):
    """Files of any fsspec filesystem (HTTP, S3, GCS, chained URLs...). Reads go through the read path's
    checked reader (:func:`refset.io.fetch.read_range`), run on refset's IO loop (:mod:`refset.io.bridge`)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None, fs: Any = None) -> None:
        import fsspec

        from refset.io.fetch import Targets

        self.url = url
        if fs is None:
            fs, self.root = fsspec.core.url_to_fs(url, **reading_options(url, storage_options))
        else:
            self.root = fs._strip_protocol(url)
        self.fs = fs
        self.root = self.root.rstrip("/") if self.root.rstrip("/") else self.root
        self.targets = Targets(fs=fs)

    def _path(self, path: str) -> str:
        return f"{self.root}/{path}" if path else self.root

    def _run(self, coro: Any, path: str) -> Any:
        from refset.io.bridge import run

        try:
            return run(coro)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
            raise  # they name the path already
        except Exception as e:
            raise ReferenceNotReachable.wrap("", self.join(path), e) from e

    def read(self, path: str = "", start: int | None = None, end: int | None = None) -> bytes:
        # docstring inherited
        from refset.io.fetch import read_range

        return self._run(read_range(self.targets, self._path(path), start, end), path)  # type: ignore[no-any-return]

    def read_sized(self, path: str = "", start: int = 0, end: int | None = None) -> tuple[bytes, int | None]:
        # docstring inherited
        data, size, _ = self.read_fingerprinted(path, start, end)
        return data, size

    def read_fingerprinted(self, path: str = "", start: int = 0, end: int | None = None,
                           ) -> tuple[bytes, int | None, Fingerprint | None]:
        # docstring inherited
        from refset.io.fetch import read_range_fingerprinted

        data, size, fp = self._run(read_range_fingerprinted(self.targets, self._path(path), start, end), path)
        if size is None and (end is None or len(data) < end - start) and not _is_http(self.fs):
            size = start + len(data)  # an object store's short answer is the end of the object
        if fp is not None and fp.size is None and size is not None:
            fp = fp._replace(size=size)
        return data, size, fp

    def read_ranges(self, path: str, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        # docstring inherited: one concurrent round of requests
        import numpy as np

        from refset.io.fetch import RangeReader

        n = len(starts)
        from refset.io.pool import POOL

        reader = RangeReader(self.targets, max_gap=0, max_inflight=POOL)  # as many as the pool holds
        got = self._run(reader.read([self._path(path)], np.zeros(n, np.int64), np.asarray(starts, np.int64),
                                    np.asarray(ends, np.int64)), path)
        out = []
        for s, e, d in zip(starts, ends, got, strict=True):
            if isinstance(d, BaseException):
                raise ReferenceNotReachable.wrap("", self.join(path), d) from d
            if len(d) != e - s:
                raise ReferenceNotReachable("", self.join(path), f"short read at byte {s} ({len(d)} of {e - s} bytes)")
            out.append(d)
        return out

    def size(self, path: str = "") -> int:
        # docstring inherited
        return int(self.fs.size(self._path(path)))

    def stat(self, path: str = "") -> tuple[int, Fingerprint | None]:
        # docstring inherited: one HEAD (HTTP), HeadObject (S3) or info
        from refset.io.verify import current

        fp = self._run(current(self.targets, self._path(path)), path)
        if fp is None:
            raise FileNotFoundError(self.join(path))
        if fp.size is None:
            return self.size(path), fp
        return fp.size, fp

    def exists(self, path: str = "") -> bool:
        # docstring inherited
        return bool(self.fs.exists(self._path(path)))

    def isdir(self, path: str = "") -> bool:
        # docstring inherited
        return bool(self.fs.isdir(self._path(path)))

    def list(self, path: str = "") -> set[str] | None:
        # docstring inherited
        try:
            return {p.rstrip("/").rpartition("/")[2] for p in self.fs.ls(self._path(path), detail=False)}
        except FileNotFoundError:
            return set()
        except Exception:
            return None


def _is_http(fs: Any) -> bool:
    return (type(fs).__module__ or "").startswith("fsspec.implementations.http")


def _check_local(url: str, recorded: tuple[Any, ...]) -> None:
    """SourceChanged when the local file at ``url`` is not what ``recorded`` says it was."""
    from refset.io.fingerprint import changed, local_fingerprint

    try:
        now: tuple[Any, ...] | None = local_fingerprint(local_path(url))
    except FileNotFoundError:
        now = None
    if now is None or changed(recorded, now):
        raise SourceChanged(url, recorded, now)


def read_many(items: Sequence[tuple[str, int, int]], storage_options: Mapping[str, Any] | None = None,
              *, recorded: Callable[[str], tuple[Any, ...] | None] | None = None) -> list[bytes]:
    """The bytes of each ``(url, start, end)`` (``end < 0``: the whole file), each exactly as long as
    asked: local files read directly, the rest through the checked reader, all concurrently. A
    failure is a :class:`~refset.errors.ReferenceNotReachable` naming the file. ``recorded(url)``: what
    a file must still be (its fingerprint; None: not checked): a local file is looked at once, remote
    reads are conditional (:class:`~refset.io.fetch.Targets`); a changed one is
    :class:`~refset.errors.SourceChanged`."""
    out: list[bytes] = [b""] * len(items)
    remote: list[int] = []
    seen: set[str] = set()
    for i, (url, start, end) in enumerate(items):
        if is_local(url, storage_options):  # plain reads: no fsspec import or per-call cost
            rec = recorded(url) if recorded is not None and url not in seen else None
            seen.add(url)
            if rec is not None:
                _check_local(url, rec)
            try:
                data = LocalStore(url).read("", start if end >= 0 else None, end if end >= 0 else None)
            except OSError as e:
                raise ReferenceNotReachable.wrap("", url, e) from e
            if end >= 0 and len(data) != end - start:
                raise ReferenceNotReachable("", url, f"short read at byte {start}: {len(data)} of {end - start} bytes")
            out[i] = bytes(data)
        else:
            remote.append(i)
    if not remote:
        return out
    from refset.io.bridge import run
    from refset.io.fetch import Targets, read_range

    targets = Targets(remote_options=storage_options, recorded=recorded)
    sem = asyncio.Semaphore(64)

    async def one(url: str, start: int, end: int) -> bytes:
        async with sem:
            try:
                data = await read_range(targets, url, start if end >= 0 else None, end if end >= 0 else None)
            except SourceChanged:
                raise
            except Exception as e:
                raise ReferenceNotReachable.wrap("", url, e) from e
        if end >= 0 and len(data) != end - start:
            raise ReferenceNotReachable("", url, f"short read at byte {start}: {len(data)} of {end - start} bytes")
        return data

    async def every() -> list[bytes]:
        return list(await asyncio.gather(*(one(*items[i]) for i in remote)))

    for i, data in zip(remote, run(every()), strict=True):
        out[i] = data
    return out
