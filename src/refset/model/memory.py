"""A set held in memory: the :class:`~refset.abc.source.Source` of sets built by readers, scanners and
combine."""

from __future__ import annotations

from collections.abc import Mapping

from refset.abc.source import Block, NotLoaded
from refset.errors import InvalidReferences
from refset.model.fingerprints import Fingerprints, split
from refset.model.metadata import ArrayMetadata
from refset.model.table import ChunkTable, KeyTable, Ref, resolve

__all__ = ["MemorySource"]


class MemorySource:
    """A set held in memory: URL table, arrays (metadata and chunk tables), other keys and the
    fingerprints of its files, all loaded. Fingerprints not given are taken from where JSON keeps
    them among the other keys (:func:`refset.model.fingerprints.split`): ``other`` never holds them."""

    def __init__(
        self,
        urls: tuple[str, ...],
        metadata: Mapping[str, ArrayMetadata],
        tables: Mapping[str, ChunkTable],
        other: KeyTable,
        info: Mapping[str, object] | None = None,
        fetched: Mapping[tuple[str, int, int], bytes] | None = None,
        fingerprints: Fingerprints | None = None,
    ) -> None:
        other, stored = split(other)
        self._fingerprints = stored if fingerprints is None else fingerprints
        self._urls = tuple(urls)
        self.metadata = dict(metadata)
        self.tables = dict(tables)
        self._other = other
        self._info = dict(info or {})
        #: bytes of some of the set's range references, already read when it was made (url, offset,
        #: length) -> bytes: a scan keeps its small arrays' so that combine need not read them again
        self.fetched = dict(fetched or {})

    @classmethod
    def of_parts(cls, urls: tuple[str, ...], tables: Mapping[str, ChunkTable], other: KeyTable,
                 info: Mapping[str, object] | None = None) -> MemorySource:
        """A source from readers' parts, whose ``other`` still holds the arrays' documents (trusted:
        built by refset's own readers, each table on the grid its document describes)."""
        from refset.model.producer import split_documents

        metadata, rest = split_documents(other, list(tables))
        missing = [p for p in tables if p not in metadata]
        if missing:
            raise InvalidReferences(f"array {missing[0]!r}: no metadata document describes its chunk grid")
        return cls(urls, metadata, tables, rest, info)

    def urls(self) -> tuple[str, ...]:
        return self._urls

    def fingerprints(self) -> Fingerprints:
        return self._fingerprints

    def table(self, path: str) -> ChunkTable:
        return self.tables[path]

    def other(self) -> KeyTable:
        return self._other

    def other_under(self, path: str) -> KeyTable | None:
        return self._other

    def lookup_other(self, key: str) -> Ref | NotLoaded | None:
        o = self._other
        i = o.find(key)
        return None if i < 0 else resolve(o.row(i), self._urls, key)

    def block_size(self, path: str) -> int:
        return 0

    def block(self, path: str, i: int) -> Block:
        raise KeyError(path)

    def count(self) -> int | None:
        docs = sum(len(m.documents()) for m in self.metadata.values())
        return len(self._other) + docs + sum(t.count() for t in self.tables.values())

    def info(self) -> dict[str, object]:
        return dict(self._info)
