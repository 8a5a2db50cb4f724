"""``refset.ReferenceFileSystem``: an fsspec AsyncFileSystem (protocol ``refset``) over a ReferenceSet.

It takes the constructor arguments of fsspec's ``ReferenceFileSystem``, so switching is one word. All
reads go through :mod:`refset.fetch`: references are grouped by target URL, nearby ranges merged and
fetched concurrently, whatever the target filesystems are (sync ones run in threads, async ones on
their own loops). Listing (``ls``, ``find``, ``isdir``) is answered from the columnar model; no dict of
all keys is ever built.
"""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
from fsspec.asyn import AsyncFileSystem
from fsspec.spec import AbstractBufferedFile

from .errors import ReferenceNotReachable
from .fetch import (
    DEFAULT_MAX_BLOCK,
    DEFAULT_MAX_GAP,
    DEFAULT_MAX_INFLIGHT,
    RangeReader,
    ShortRead,
    Targets,
    acall,
    read_range,
)
from .keys import ChunkGrid
from .model import INLINE, RANGE, KeyTable, Ref, ReferenceSet

__all__ = ["ReferenceFileSystem", "KeyIndex", "clamp"]

_TOP = "\U0010ffff"  # sorts after every character a key can continue with


def clamp(length: int, start: int | None, end: int | None) -> tuple[int, int]:
    """``[start, end)`` relative to a block of ``length`` bytes, resolved like a slice (negative counts
    from the end) and clamped to the block: ``0 <= s <= e <= length``."""
    s = 0 if start is None else (start if start >= 0 else max(length + start, 0))
    e = length if end is None else (end if end >= 0 else max(length + end, 0))
    s = min(s, length)
    e = min(max(e, s), length)
    return s, e


def chunk_key_array(path: str, grid: ChunkGrid, flat: np.ndarray) -> np.ndarray:
    """Keys (numpy str array) of chunks ``flat`` of array ``path``, built without a Python loop."""
    head = f"{path}/" if path else ""
    if not grid.shape:
        return np.full(len(flat), head + grid.chunk_key(()), dtype=object).astype(str)
    idx = np.unravel_index(flat, grid.grid_shape)
    out = idx[0].astype(str)
    for i in idx[1:]:
        out = np.strings.add(np.strings.add(out, grid.separator), i.astype(str))
    pre = head + (grid.prefix + grid.separator if grid.prefix else "")
    return np.strings.add(pre, out) if pre else out


class KeyIndex:
    """Listing over a ReferenceSet: the sorted table of other keys plus the chunk grids."""

    def __init__(self, rs: ReferenceSet) -> None:
        self.rs = rs

    # -- single keys ----------------------------------------------------------------------------
    def ref(self, key: str) -> Ref | None:
        try:
            return self.rs[key]
        except KeyError:
            return None

    def _other_range(self, prefix: str, o: KeyTable | None = None) -> tuple[int, int]:
        keys = (self.rs.other if o is None else o).keys
        if not prefix:
            return 0, len(keys)
        return int(np.searchsorted(keys, prefix)), int(np.searchsorted(keys, prefix + _TOP))

    def _inside(self, path: str, a: str, g: ChunkGrid) -> tuple[int, ...] | None:
        """When ``path`` is a directory inside the chunk key tree of array ``a``: the chunk index
        prefix it names (possibly empty, for ``a/c`` of zarr v3). None otherwise."""
        head = f"{a}/" if a else ""
        if not path.startswith(head) or path == a or g.separator != "/" or not g.shape:
            return None
        parts = path[len(head):].split("/")
        if g.prefix:
            if parts[0] != g.prefix:
                return None
            parts = parts[1:]
        if len(parts) >= g.ndim:
            return None
        out = []
        for p, n in zip(parts, g.grid_shape, strict=False):
            if not p.isascii() or not p.isdigit() or (len(p) > 1 and p[0] == "0") or int(p) >= n:
                return None
            out.append(int(p))
        return tuple(out)

    def _present(self, a: str, lead: tuple[int, ...]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        t = self.rs.table(a)
        flat = np.flatnonzero(t.kind)
        if not t.grid.shape:  # a scalar array: its one chunk, no index
            return flat, ()
        idx = np.unravel_index(flat, t.grid.grid_shape)
        if lead:
            m = np.ones(len(flat), bool)
            for j, v in enumerate(lead):
                m &= idx[j] == v
            flat = flat[m]
            idx = tuple(i[m] for i in idx)
        return flat, idx

    def isdir(self, path: str) -> bool:
        if not path:
            return True
        lo, hi = self._other_range(path + "/", self.rs.other_under(path))
        if hi > lo:
            return True
        for a, g in self.rs.grids.items():
            if a == path or a.startswith(path + "/"):
                return True
            lead = self._inside(path, a, g)
            if lead is not None and len(self._present(a, lead)[0]):
                return True
        return False

    # -- listing --------------------------------------------------------------------------------
    def entries(self, path: str) -> tuple[list[tuple[str, int, int, int]], list[str]] | None:
        """Direct children of directory ``path``: files as ``(name, kind, length, inline size)`` and
        directory names (full keys). None when ``path`` is not a directory."""
        prefix = f"{path}/" if path else ""
        files: list[tuple[str, int, int, int]] = []
        dirs: dict[str, None] = {}
        o = self.rs.other_under(path)
        lo, hi = self._other_range(prefix, o)
        i = lo
        while i < hi:
            k = o.keys[i]
            slash = k.find("/", len(prefix))
            if slash < 0:
                d = o.data[i]
                files.append((k, int(o.kind[i]), int(o.length[i]), len(d) if d is not None else 0))
                i += 1
            else:
                d = k[:slash]
                dirs[d] = None
                i = int(np.searchsorted(o.keys, d + "0", side="left"))  # "0" follows "/"
        for a, g in self.rs.grids.items():
            lead: tuple[int, ...] | None
            if a == path:
                if g.prefix and g.separator == "/" and g.shape:
                    if len(self._present(a, ())[0]):
                        dirs[prefix + g.prefix] = None
                    continue
                lead = ()
            elif a and (not path or a.startswith(prefix)):
                dirs[prefix + a[len(prefix):].split("/", 1)[0]] = None
                continue
            else:
                lead = self._inside(path, a, g)
                if lead is None:
                    continue
            flat, idx = self._present(a, lead)
            depth = len(lead)
            if g.separator == "/" and g.shape and depth + 1 < g.ndim:
                for v in np.unique(idx[depth]).tolist():
                    dirs[f"{prefix}{v}"] = None
                continue
            t = self.rs.table(a)
            names = chunk_key_array(a, g, flat).tolist()
            kinds = t.kind[flat].tolist()
            lens = t.length[flat].tolist()
            for name, k, n, f in zip(names, kinds, lens, flat.tolist(), strict=False):
                files.append((name, k, n, len(t.inline[f]) if k == INLINE else 0))
        if not files and not dirs and path and not self.isdir(path):
            return None
        return files, list(dirs)

    def iter_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with the string ``prefix`` (no path-boundary rule: zarr's
        ``list_prefix``); unordered across arrays."""
        lo, hi = self._other_range(prefix)
        yield from self.rs.other.keys[lo:hi].tolist()
        for a, g in self.rs.grids.items():
            head = f"{a}/" if a else ""
            if head.startswith(prefix):
                keys = chunk_key_array(a, g, np.flatnonzero(self.rs.table(a).kind))
            elif prefix.startswith(head):
                keys = chunk_key_array(a, g, np.flatnonzero(self.rs.table(a).kind))
                keys = keys[np.strings.startswith(keys, prefix)]
            else:
                continue
            yield from keys.tolist()

    def find(self, path: str) -> list[str]:
        """Sorted keys at or below ``path``, respecting path boundaries (``x`` never finds ``xy/0``)."""
        out = [] if not path or self.ref(path) is None else [path]
        out.extend(self.iter_prefix(f"{path}/" if path else ""))
        out.sort()
        return out

    def info_of(self, key: str, ref: Ref) -> dict[str, Any]:
        if isinstance(ref, bytes):
            return {"name": key, "type": "file", "size": len(ref)}
        if len(ref) == 3:
            return {"name": key, "type": "file", "size": ref[2]}  # type: ignore[misc]
        return {"name": key, "type": "file", "size": None}


def _entry(name: str, kind: int, length: int, inline: int) -> dict[str, Any]:
    size: int | None = length if kind == RANGE else inline if kind == INLINE else None
    return {"name": name, "type": "file", "size": size}


def _load_fo(
    fo: Any,
    target_protocol: str | None,
    storage_options: Mapping[str, Any] | None,
    template_overrides: Mapping[str, str] | None,
) -> ReferenceSet:
    from .formats import load

    if isinstance(fo, ReferenceSet):
        return fo
    opts: dict[str, Any] = {}
    if template_overrides:
        opts["template_overrides"] = dict(template_overrides)
    if isinstance(fo, (str, os.PathLike)):
        fo = os.fspath(fo)
        if target_protocol and "://" not in fo and target_protocol not in ("file", "local"):
            fo = f"{target_protocol}://{fo}"
    # chunk tables of a large JSON set are read on first use: opening needs only the metadata
    return load(fo, storage_options=dict(storage_options or {}) or None, lazy=True, **opts)


class ReferenceFileSystem(AsyncFileSystem):
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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.target = target
        self.refs = _load_fo(fo, target_protocol, target_options or ref_storage_args, template_overrides)
        self.index = KeyIndex(self.refs)
        self.targets = Targets(remote_protocol=remote_protocol, remote_options=remote_options, fs=fs)
        self.reader = RangeReader(
            self.targets,
            max_gap=DEFAULT_MAX_GAP if max_gap is None else max_gap,
            max_block=DEFAULT_MAX_BLOCK if max_block is None else max_block,
            max_inflight=max_inflight,
        )

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
    def _ref(self, path: str) -> tuple[str, Ref]:
        key = self._strip_protocol(path)
        ref = self.index.ref(key)
        if ref is None:
            raise FileNotFoundError(key)
        return key, ref

    def _unreachable(self, key: str, url: str, e: BaseException) -> ReferenceNotReachable:
        err = ReferenceNotReachable(key, url, f"{type(e).__name__}: {e}")
        err.__cause__ = e
        return err

    # -- reading --------------------------------------------------------------------------------
    async def _cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        key, ref = self._ref(path)
        if isinstance(ref, bytes):
            return ref[start:end]
        url = ref[0]
        if len(ref) == 1:
            return await self._whole_slice(key, url, start, end)
        s, e = clamp(ref[2], start, end)  # type: ignore[misc]
        if s == e:
            return b""
        s, e = s + ref[1], e + ref[1]  # type: ignore[misc]
        self.reader.requests += 1
        try:
            data = await read_range(self.targets, url, s, e)
        except Exception as err:
            raise self._unreachable(key, url, err) from err
        if s is not None and e is not None and s >= 0 and e >= 0 and len(ref) == 3 and len(data) != e - s:
            short = ShortRead(f"{url}: asked for bytes {s}-{e} ({e - s}), got {len(data)} bytes")
            raise self._unreachable(key, url, short) from short
        return data

    async def _whole_slice(self, key: str, url: str, start: int | None, end: int | None) -> bytes:
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
            raise self._unreachable(key, url, err) from err
        return data[start:end]

    async def _read_many(
        self, keys: list[str], refs: list[Ref], starts: list[int | None], ends: list[int | None]
    ) -> list[bytes | BaseException]:
        """Bytes of every (key, ref, start, end), batching range reads; failures as
        ReferenceNotReachable in place."""
        n = len(keys)
        out: list[bytes | BaseException | None] = [None] * n
        uid: dict[str, int] = {}
        rows: list[int] = []
        pid: list[int] = []
        bs: list[int] = []
        be: list[int] = []
        whole: list[int] = []
        for i, (ref, st, en) in enumerate(zip(refs, starts, ends, strict=False)):
            if isinstance(ref, bytes):
                out[i] = ref[st:en]
                continue
            if len(ref) == 1:
                whole.append(i)
                continue
            s, e = clamp(ref[2], st, en)  # type: ignore[misc]
            if s == e:
                out[i] = b""
                continue
            rows.append(i)
            pid.append(uid.setdefault(ref[0], len(uid)))
            bs.append(s + ref[1])  # type: ignore[misc]
            be.append(e + ref[1])  # type: ignore[misc]

        async def read_whole(i: int) -> bytes:
            return await self._whole_slice(keys[i], refs[i][0], starts[i], ends[i])  # type: ignore[index]

        urls = list(uid)
        got, wgot = await asyncio.gather(
            self.reader.read(urls, np.array(pid, np.int64), np.array(bs, np.int64), np.array(be, np.int64)),
            asyncio.gather(*(read_whole(i) for i in whole), return_exceptions=True),
        )
        for i, d in zip(rows + whole, list(got) + list(wgot), strict=False):
            if isinstance(d, ReferenceNotReachable):
                out[i] = d
            elif isinstance(d, BaseException):
                out[i] = self._unreachable(keys[i], refs[i][0], d)  # type: ignore[index]
            else:
                out[i] = d
        return out  # type: ignore[return-value]

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
        for i, p in enumerate(paths):
            key = self._strip_protocol(p)
            ref = self.index.ref(key)
            if ref is None:
                if on_error == "raise":
                    raise FileNotFoundError(key)
                out[i] = FileNotFoundError(key)
                continue
            keys.append(key)
            refs.append(ref)
            rows.append(i)
        got = await self._read_many(keys, refs, [starts[i] for i in rows], [ends[i] for i in rows])
        for i, d in zip(rows, got, strict=False):
            if isinstance(d, BaseException) and on_error == "raise":
                raise d
            out[i] = d
        return out  # type: ignore[return-value]

    async def _cat(
        self,
        path: str | list[str],
        recursive: bool = False,
        on_error: str = "raise",
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> bytes | dict[str, bytes | BaseException]:
        single = isinstance(path, str) and not recursive and not _has_magic(path)
        if isinstance(path, str) and single:
            return await self._cat_file(path)
        if recursive or (isinstance(path, str) and _has_magic(path)) or any(map(_has_magic, path)):
            paths = await self._expand_path(path, recursive=recursive)
            paths = [p for p in paths if self.index.ref(self._strip_protocol(p)) is not None]
        else:
            paths = list(path)
        got = await self._cat_ranges(paths, None, None, on_error="return")
        out: dict[str, bytes | BaseException] = {}
        for p, d in zip(paths, got, strict=False):
            if isinstance(d, BaseException):
                if on_error == "raise":
                    raise d
                if on_error == "omit":
                    continue
            out[p] = d
        return out

    async def _get_file(self, rpath: str, lpath: str, **kwargs: Any) -> None:
        if self.index.isdir(self._strip_protocol(rpath)):
            os.makedirs(lpath, exist_ok=True)
            return
        data = await self._cat_file(rpath)
        with open(lpath, "wb") as f:
            f.write(data)

    # -- metadata -------------------------------------------------------------------------------
    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        key = self._strip_protocol(path)
        ref = self.index.ref(key)
        if ref is not None:
            info = self.index.info_of(key, ref)
            if info["size"] is None:
                url = ref[0]  # type: ignore[index]
                try:
                    remote = await acall(self.targets.for_url(url), "info", url)
                except Exception as e:
                    raise self._unreachable(key, url, e) from e
                info["size"] = remote.get("size")
            return info
        if self.index.isdir(key):
            return {"name": key, "type": "directory", "size": 0}
        raise FileNotFoundError(key)

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        key = self._strip_protocol(path)
        ref = self.index.ref(key)
        if ref is not None and not (isinstance(ref, tuple) and len(ref) == 1):
            return self.index.info_of(key, ref)
        if ref is None:
            if self.index.isdir(key):
                return {"name": key, "type": "directory", "size": 0}
            raise FileNotFoundError(key)
        return self._sync(self._info(key))

    def _sync(self, coro: Any) -> Any:
        from fsspec.asyn import get_loop, sync

        return sync(get_loop() if self.asynchronous else self.loop, lambda: coro)

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        key = self._strip_protocol(path)
        got = self.index.entries(key)
        if got is None:
            ref = self.index.ref(key)
            if ref is None:
                raise FileNotFoundError(key)
            info = self.index.info_of(key, ref)
            return [info] if detail else [key]
        files, dirs = got
        if not detail:
            return sorted({f[0] for f in files}.union(dirs))
        out = [_entry(*f) for f in files]
        out.extend({"name": d, "type": "directory", "size": 0} for d in dirs)
        out.sort(key=lambda e: e["name"])
        return out

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        return self.ls(path, detail=detail, **kwargs)

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        if maxdepth is not None or withdirs:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        key = self._strip_protocol(path)
        names = self.index.find(key)
        if not detail:
            return names
        return {k: self.index.info_of(k, self.refs[k]) for k in names}

    async def _find(self, path: str, maxdepth: int | None = None, withdirs: bool = False,
                    **kwargs: Any) -> Any:
        if maxdepth is not None or withdirs:
            return await super()._find(path, maxdepth=maxdepth, withdirs=withdirs, **kwargs)
        return self.find(path, **kwargs)

    def isdir(self, path: str) -> bool:
        return self.index.isdir(self._strip_protocol(path))

    def isfile(self, path: str) -> bool:
        return self.index.ref(self._strip_protocol(path)) is not None

    def exists(self, path: str, **kwargs: Any) -> bool:
        key = self._strip_protocol(path)
        return self.index.ref(key) is not None or self.index.isdir(key)

    async def _isdir(self, path: str) -> bool:
        return self.isdir(path)

    async def _isfile(self, path: str) -> bool:
        return self.isfile(path)

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        return self.exists(path)

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
        key, ref = self._ref(path)
        if isinstance(ref, bytes):
            return io.BytesIO(ref)
        size = self.info(key)["size"]
        return ReferenceFile(self, key, size=size, block_size=block_size or "default",
                             cache_options=cache_options, **kwargs)


def _has_magic(p: str) -> bool:
    return any(c in p for c in "*?[")


class ReferenceFile(AbstractBufferedFile):
    """A seekable read-only file over one reference; reads are clamped to the referenced block."""

    def __init__(self, fs: ReferenceFileSystem, path: str, *, size: int, block_size: Any = "default",
                 cache_type: str = "readahead", cache_options: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(fs, path, mode="rb", block_size=block_size, cache_type=cache_type,
                         cache_options=cache_options, size=size, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes:
        fs: ReferenceFileSystem = self.fs
        return fs._sync(fs._cat_file(self.path, start=start, end=end))
