"""What a file is, to tell later whether it changed: a :class:`Fingerprint`, taken when a scan reads the
file and compared when a reader reads it again.

A local file's is its size and modification time in nanoseconds (one ``stat``); a remote one's comes
from the answers a read gets anyway: the ``ETag`` and ``Last-Modified`` headers and the size that
``Content-Range`` tells (HTTP and S3). Reads of a remote file are made conditional on it
(:func:`conditions`: ``If-Match`` with a strong ETag, else ``If-Unmodified-Since``), so that a server
answers a changed file with 412 at no extra request; an answer whose own headers differ from the
record (a server that ignores the condition) is a change too (:func:`changed`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["Fingerprint", "local_fingerprint", "from_headers", "changed", "conditions", "http_date"]


class Fingerprint(NamedTuple):
    """What a file was: ``size``, ``mtime_ns`` (local), ``etag``, ``last_modified`` (remote: the
    headers as the server sent them); None where not known."""

    size: int | None = None
    mtime_ns: int | None = None
    etag: str | None = None
    last_modified: str | None = None

    @property
    def known(self) -> bool:
        return any(v is not None for v in self)


def local_fingerprint(path: str | os.PathLike[str] | int) -> Fingerprint:
    """The fingerprint of a local file (a path or an open file descriptor): one ``stat``."""
    st = os.fstat(path) if isinstance(path, int) else os.stat(path)
    return Fingerprint(st.st_size, st.st_mtime_ns)


def http_date(t: Any) -> str:
    """A datetime as an HTTP date (``Sat, 28 Nov 2026 22:48:39 GMT``), as S3's answers carry it in
    ``Last-Modified`` (boto gives it parsed)."""
    import datetime
    from email.utils import format_datetime

    return format_datetime(t.astimezone(datetime.UTC), usegmt=True)


def from_headers(headers: Mapping[str, str], size: int | None) -> Fingerprint:
    """The fingerprint an HTTP answer tells: its ``ETag`` and ``Last-Modified`` (a weak ETag kept as
    sent) and the file's ``size`` when the caller knows it (``Content-Range``'s total)."""
    return Fingerprint(size, None, headers.get("ETag") or headers.get("etag") or None,
                       headers.get("Last-Modified") or headers.get("last-modified") or None)


def _opaque(etag: str) -> str:
    """An ETag without its weakness mark (``W/"x"`` -> ``"x"``): weak comparison (RFC 9110 8.8.3.2)."""
    return etag[2:] if etag.startswith("W/") else etag


def changed(recorded: tuple[Any, ...], now: tuple[Any, ...]) -> bool:
    """Whether ``now`` says the file is not the one ``recorded`` (each a :class:`Fingerprint`-shaped
    tuple). Only what both know is compared: the size; the modification time; the ETag where both
    have one (weakly), else ``Last-Modified``. A file moved from a local disk to a server is compared
    by its size alone."""
    r, n = Fingerprint(*recorded), Fingerprint(*now)
    if r.size is not None and n.size is not None and r.size != n.size:
        return True
    if r.mtime_ns is not None and n.mtime_ns is not None and r.mtime_ns != n.mtime_ns:
        return True
    if r.etag is not None and n.etag is not None:
        return _opaque(r.etag) != _opaque(n.etag)
    return r.last_modified is not None and n.last_modified is not None and r.last_modified != n.last_modified


def conditions(recorded: tuple[Any, ...]) -> dict[str, str]:
    """The request headers that make a server refuse (412) to answer from a file other than
    ``recorded``: ``If-Match`` with a strong ETag (a weak one never matches an ``If-Match``), else
    ``If-Unmodified-Since`` with its ``Last-Modified``; none when neither is known."""
    r = Fingerprint(*recorded)
    if r.etag is not None and not r.etag.startswith("W/"):
        return {"If-Match": r.etag}
    if r.last_modified is not None:
        return {"If-Unmodified-Since": r.last_modified}
    return {}
