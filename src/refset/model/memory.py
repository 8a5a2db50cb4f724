"""A set held in memory: the :class:`~refset.abc.source.Source` of sets built by readers, scanners and
combine."""

from __future__ import annotations

from collections.abc import Mapping

from refset.abc.source import Block, NotLoaded
from refset.model.table import ChunkTable, KeyTable, Ref, resolve

__all__ = ["MemorySource"]


class MemorySource:
    """A set held in memory: URL table, chunk tables and generic keys, all loaded."""

    def __init__(
        self,
        urls: tuple[str, ...],
        tables: Mapping[str, ChunkTable],
        other: KeyTable,
        info: Mapping[str, object] | None = None,
    ) -> None:
        self._urls = tuple(urls)
        self.tables = dict(tables)
        self.grids = {p: t.grid for p, t in self.tables.items()}
        self._other = other
        self._info = dict(info or {})

    def urls(self) -> tuple[str, ...]:
        return self._urls

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
        return len(self._other) + sum(t.count() for t in self.tables.values())

    def info(self) -> dict[str, object]:
        return dict(self._info)
