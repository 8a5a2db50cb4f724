"""Whether a set's files are still what it recorded: each looked at once, concurrently (``refset
verify``). A local file costs a ``stat``; a remote one a ``HEAD`` (HTTP) or ``HeadObject`` (S3); other
file systems their ``info``. What is found is compared with the record as reads compare it
(:func:`refset.io.fingerprint.changed`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from refset.io.fetch import DEFAULT_TIMEOUT, Targets, _is_http, _is_local_fs, _is_s3, on_loop
from refset.io.fingerprint import Fingerprint, changed, from_headers, http_date, local_fingerprint

__all__ = ["Check", "check_files", "current", "CONCURRENCY", "UNCHANGED", "CHANGED", "MISSING", "UNREADABLE"]

#: Files looked at at once.
CONCURRENCY = 64
UNCHANGED, CHANGED, MISSING, UNREADABLE = "unchanged", "changed", "missing", "unreadable"


@dataclass(frozen=True)
class Check:
    """What was found of one file: ``status`` (unchanged, changed, missing, unreadable), the
    ``recorded`` and ``now`` fingerprints (``now`` None when missing or unreadable), ``error`` (why
    it could not be looked at)."""

    url: str
    status: str
    recorded: tuple[Any, ...]
    now: tuple[Any, ...] | None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        from refset.io.fingerprint import Fingerprint

        out: dict[str, Any] = {"url": self.url, "status": self.status,
                               "recorded": Fingerprint(*self.recorded)._asdict()}
        out["now"] = Fingerprint(*self.now)._asdict() if self.now is not None else None
        if self.error:
            out["error"] = self.error
        return out


async def current(targets: Targets, url: str) -> Fingerprint | None:
    """What the file at ``url`` is now (None: there is no such file): one ``stat``, ``HEAD`` or
    ``HeadObject``."""
    fs = targets.for_url(url)
    try:
        if _is_local_fs(fs):
            return await asyncio.to_thread(local_fingerprint, fs._strip_protocol(url))
        if _is_http(fs):
            return await asyncio.wait_for(on_loop(fs, _http_head, fs, url), targets.timeout)
        if _is_s3(fs):
            return await asyncio.wait_for(on_loop(fs, _s3_head, fs, url), targets.timeout)
        from refset.io.fetch import acall

        info = await asyncio.wait_for(acall(fs, "info", url), targets.timeout)
    except FileNotFoundError:
        return None
    size = info.get("size")
    mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
    etag = info.get("ETag") or info.get("etag")
    return Fingerprint(int(size) if isinstance(size, int) else None, None, etag if isinstance(etag, str) else None,
                       http_date(mtime) if hasattr(mtime, "astimezone") else None)


async def _http_head(fs: Any, url: str) -> Fingerprint:
    kw = dict(fs.kwargs)
    headers = dict(kw.pop("headers", None) or {})
    session = await fs.set_session()
    async with session.head(fs.encode_url(url), headers=headers, allow_redirects=True, **kw) as r:
        if r.status == 404:
            raise FileNotFoundError(url)
        fs._raise_not_found_for_status(r, url)
        size = r.headers.get("Content-Length")
        return from_headers(r.headers, int(size) if size and size.isdigit() else None)


async def _s3_head(fs: Any, url: str) -> Fingerprint:
    bucket, key, version = fs.split_path(url)
    kw: dict[str, Any] = {"Bucket": bucket, "Key": key}
    if version:
        kw["VersionId"] = version
    resp = await fs._call_s3("head_object", **kw)
    lm = resp.get("LastModified")
    size = resp.get("ContentLength")
    return Fingerprint(int(size) if size is not None else None, None, resp.get("ETag"),
                       http_date(lm) if lm is not None else None)


def check_files(records: Mapping[str, tuple[Any, ...]], *, remote_options: Mapping[str, Any] | None = None,
                concurrency: int = CONCURRENCY, timeout: float | None = DEFAULT_TIMEOUT,
                progress: Callable[[int], None] | None = None) -> list[Check]:
    """Each file of ``records`` (``{url: fingerprint}``) looked at, ``concurrency`` at a time:
    a :class:`Check` each, in the order given. ``remote_options``: fsspec options of the file
    systems they are on; ``progress(1)`` is called as each file is done."""
    from fsspec.asyn import get_loop, sync

    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency: must be a positive integer, got {concurrency!r}")
    targets = Targets(remote_options=remote_options, timeout=timeout)
    sem = asyncio.Semaphore(concurrency)

    async def one(url: str, rec: tuple[Any, ...]) -> Check:
        async with sem:
            try:
                now = await current(targets, url)
            except Exception as e:  # the file could not be looked at: said, and the others go on
                out = Check(url, UNREADABLE, rec, None, f"{type(e).__name__}: {e}")
            else:
                if now is None:
                    out = Check(url, MISSING, rec, None)
                else:
                    out = Check(url, CHANGED if changed(rec, now) else UNCHANGED, rec, tuple(now))
        if progress is not None:
            progress(1)
        return out

    async def every() -> list[Check]:
        return list(await asyncio.gather(*(one(u, r) for u, r in records.items())))

    return sync(get_loop(), every)  # type: ignore[no-any-return]
