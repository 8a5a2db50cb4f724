"""What a stored form of a reference set provides: the :class:`Source` protocol.

A :class:`~refset.ReferenceSet` holds one source (composition, not subclassing) and owns caching and
thread safety for all of them: it calls :meth:`Source.table`, :meth:`Source.other` and
:meth:`Source.other_under` one at a time (under its lock) and caches what they return. The other
members are called from any thread at any time, also while one of those runs: they answer from
memory (``urls`` returns a tuple built in one step; ``lookup_other``, ``block_size``, ``count`` and
``info`` read state that is replaced whole, never changed in place) or, for :meth:`Source.block`, read
and decode without changing shared state (a block carries its own URLs).

Layers, from the bytes up::

    formats/*  (one reader per on-disk form)  ->  Source  ->  ReferenceSet (cache, locks, Mapping)
                                                              ->  engine / fs / zarr_store / xarray
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from refset.model.fingerprints import Fingerprints
from refset.model.metadata import ArrayMetadata
from refset.model.table import ChunkTable, KeyTable, Ref

__all__ = ["Source", "Block", "NotLoaded", "NOT_LOADED", "Reopen"]


class NotLoaded:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_LOADED"


NOT_LOADED: Final = NotLoaded()
"""Returned by non-blocking lookups that would have to read or decode first."""

# How to open a set again in another process: (callable, args, kwargs)
Reopen = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class Block(Protocol):
    """Independently decoded cells ``[i * block_size, (i + 1) * block_size)`` of one array (a parquet
    record file, a packed segment). Refs carry URL strings, so a block needs no shared URL table."""

    @property
    def decoded(self) -> bool:
        """Whether :meth:`ref` answers without decoding (False: the first call may decompress)."""

    @property
    def nbytes(self) -> int:
        """The memory the block holds, once decoded (what the set's block cache counts)."""

    def ref(self, j: int) -> Ref | None:
        """The reference of cell ``j`` of the block, None when absent."""


class Source(Protocol):
    """A stored form of a reference set, as the set sees it."""

    @property
    def metadata(self) -> Mapping[str, ArrayMetadata]:
        """Every array with a chunk table, and its metadata, known at open. Its documents (``.zarray``,
        ``.zattrs``, ``zarr.json``) are not among the other keys: the set derives them."""

    def urls(self) -> tuple[str, ...]:
        """The URL table so far; it only grows, so a ``path_id`` handed out stays valid. Tables
        returned by :meth:`table` and :meth:`other` index it."""

    def fingerprints(self) -> Fingerprints:
        """What the set's files were when scanned (:mod:`refset.model.fingerprints`), known at open;
        empty when the set records none. Optional: a source without this member records none."""

    def table(self, path: str) -> ChunkTable:
        """The chunk table of array ``path`` (may read and decode)."""

    def other(self) -> KeyTable:
        """Every key outside the arrays: neither a chunk key nor a metadata document of one (may read
        and decode)."""

    def other_under(self, path: str) -> KeyTable | None:
        """A table holding at least every key of :meth:`other` at or below directory ``path``, when
        that is cheaper than :meth:`other`; None otherwise."""

    def lookup_other(self, key: str) -> Ref | NotLoaded | None:
        """One key outside the arrays, answered without reading (thread-safe): its reference,
        None when absent, or :data:`NOT_LOADED` when :meth:`other` must be read first."""

    def block_size(self, path: str) -> int:
        """Cells per :class:`Block` of array ``path``; 0 when single chunks are read through
        :meth:`table`."""

    def block(self, path: str, i: int) -> Block:
        """Block ``i`` of array ``path`` (reads and decodes; thread-safe)."""

    def count(self) -> int | None:
        """Number of keys (the arrays' documents and chunks included) when known without reading
        everything, else None."""

    def info(self) -> dict[str, object]:
        """Facts about the stored form (``refset info``)."""
