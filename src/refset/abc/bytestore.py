"""What a byte store is: the files under one location, read (and written) by path.

Every reader of bytes in refset goes through one (:func:`refset.io.store.open_store` makes them):
reference files and directories (JSON, packed, parquet), data files being scanned, chunks read for
combine. Locality, URL chaining (``simplecache::s3://...``), HTTP answers checked against their
``Content-Range``, retries and timeouts are decided there once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from refset.io.fingerprint import Fingerprint

__all__ = ["ByteStore"]


class ByteStore(ABC):
    """The files at and under ``url``. Paths are relative to it (``""``: the file at ``url`` itself).

    A store that cannot list its directories (plain HTTP) says so by :meth:`list` returning None.
    """

    url: str

    @abstractmethod
    def read(self, path: str = "", start: int | None = None, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the file at ``path`` (None: from its beginning / to its end); fewer
        at the end of the file, never more. :class:`FileNotFoundError` when there is no such file;
        another failure (a server answering wrong bytes, a timeout after retries) is an ``OSError``
        naming the file."""

    def read_sized(self, path: str = "", start: int = 0, end: int | None = None) -> tuple[bytes, int | None]:
        """:meth:`read`, and the file's size when the answer tells it (an HTTP ``Content-Range``), so
        that no request is spent asking. Note to implementers: the default reads, then asks
        :meth:`size` only when the answer is shorter than asked (the end of the file)."""
        data = self.read(path, start, end)
        if end is None or len(data) < end - start:
            return data, start + len(data)
        return data, None

    def read_fingerprinted(self, path: str = "", start: int = 0, end: int | None = None,
                           ) -> tuple[bytes, int | None, Fingerprint | None]:
        """:meth:`read_sized`, and what the answer tells of the file
        (:class:`~refset.io.fingerprint.Fingerprint`: an HTTP or S3 answer's ``ETag``, ``Last-Modified``
        and size), None when it tells nothing. Note to implementers: the default tells nothing."""
        data, size = self.read_sized(path, start, end)
        return data, size, None

    def read_ranges(self, path: str, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        """Bytes ``[starts[i], ends[i])`` of the file at ``path`` for every i, each exactly as long as
        asked (a short one is an ``OSError`` naming the file and offset). Note to implementers: the
        default reads them one after another; remote stores read them concurrently."""
        out = []
        for s, e in zip(starts, ends, strict=True):
            data = self.read(path, s, e)
            if len(data) != e - s:
                raise OSError(f"{self.join(path)}: short read at byte {s} ({len(data)} of {e - s} bytes)")
            out.append(data)
        return out

    @abstractmethod
    def size(self, path: str = "") -> int:
        """Size in bytes of the file at ``path``."""

    def stat(self, path: str = "") -> tuple[int, Fingerprint | None]:
        """:meth:`size` of the file at ``path`` and what the store tells of it in the same request (a
        ``HEAD``'s ``ETag`` and ``Last-Modified``), None when it tells nothing. Note to implementers:
        the default tells nothing."""
        return self.size(path), None

    @abstractmethod
    def exists(self, path: str = "") -> bool:
        """Whether there is a file or a directory at ``path``."""

    @abstractmethod
    def isdir(self, path: str = "") -> bool:
        """Whether ``path`` is a directory."""

    def list(self, path: str = "") -> set[str] | None:
        """Names in the directory ``path`` (empty when it does not exist), or None when this store
        cannot list (plain HTTP). Note to implementers: the default cannot."""
        return None

    def join(self, path: str) -> str:
        """The URL of ``path`` in this store."""
        return f"{self.url.rstrip('/')}/{path}" if path else self.url
