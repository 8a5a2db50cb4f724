"""A large JSON set read in steps (``refset.load(path, lazy=True)``): the :class:`LazyJsonSource`.

At open: strings, metadata and inline values. When every list-valued key lies under an array
(``plan.heads``), keys and listings outside the arrays are answered from that; anything else first
classifies the list-valued keys (:meth:`Plan.classify`). The chunk table of an array that holds at
most half the list keys is read from its own members (the first read of one variable of many builds
its table only); the first table of any other array builds them all (:meth:`Plan.finish`) and
releases the text. The set calls these steps one at a time; :meth:`LazyJsonSource.lookup_other` reads only
state that is replaced whole, never changed in place.
"""

from __future__ import annotations

from collections.abc import Mapping

from refset.abc.source import NOT_LOADED, Block, NotLoaded
from refset.formats.json.generic import decode_json, from_document
from refset.formats.json.plan import Plan
from refset.formats.json.scan import Fallback
from refset.formats.json.v1 import DEFAULT_MAX_GEN
from refset.model.builder import Builder
from refset.model.fingerprints import Fingerprints, split
from refset.model.producer import drop_documents, split_documents
from refset.model.table import ChunkTable, KeyTable, Ref, resolve

__all__ = ["LazyJsonSource"]


class LazyJsonSource:
    """The :class:`~refset.abc.source.Source` of a JSON document read in steps."""

    def __init__(self, plan: Plan, info: Mapping[str, object] | None = None) -> None:
        self._plan: Plan | None = plan
        self.grids = dict(plan.grids)
        self._heads = plan.heads
        self._info = {**plan.info, **(info or {})}
        self._url_ids = plan.builder.url_ids  # shared by every table built from the plan
        self._url_t: tuple[str, ...] = ()
        # string-valued keys (metadata, inline data): known at open; the fingerprints among them
        self.metadata, strings = split_documents(plan.builder.build_other(plan.grids), list(self.grids))
        self._strings, self._fingerprints = split(strings)
        self._done: tuple[tuple[str, ...], dict[str, ChunkTable], KeyTable] | None = None

    @property
    def steps_left(self) -> bool:
        """Whether the text is still held (some table or the classification is not read yet)."""
        return self._plan is not None

    @property
    def classified(self) -> bool:
        """Whether the list-valued keys are classified (``other`` is known)."""
        plan = self._plan
        return plan is None or plan.batches is not None

    def urls(self) -> tuple[str, ...]:
        done = self._done
        if done is not None:
            return done[0]
        if len(self._url_t) != len(self._url_ids):
            self._url_t = tuple(self._url_ids)
        return self._url_t

    def fingerprints(self) -> Fingerprints:
        return self._fingerprints

    def table(self, path: str) -> ChunkTable:
        plan = self._plan
        if plan is not None:
            try:
                t = plan.table(path)
            except Fallback:
                t = None
            if t is not None:  # an array of at most half the list keys: read on its own
                return t
        tables = self._finish()[1]
        return tables.get(path) or ChunkTable.empty(self.grids[path])

    def other(self) -> KeyTable:
        plan = self._plan
        if plan is not None:
            try:
                plan.classify()
            except Fallback:
                return self._finish()[2]
            return split(drop_documents(plan.builder.build_other(plan.grids), self.metadata))[0]
        return self._finish()[2]

    def other_under(self, path: str) -> KeyTable | None:
        if not self.classified and self._heads is not None and not self._heads.inside(path):
            return self._strings  # no list-valued key lies there
        return None

    def lookup_other(self, key: str) -> Ref | NotLoaded | None:
        done = self._done
        if done is not None:
            table = done[2]
        elif self._heads is not None and not ("0" <= key[-1:] <= "9"
                                              and key.startswith(self._heads.prefixes)):
            table = self._strings  # cannot be a list-valued key: a string-valued key, if any
        else:
            return NOT_LOADED
        i = table.find(key)
        return None if i < 0 else resolve(table.row(i), self.urls(), key)

    def block_size(self, path: str) -> int:
        return 0

    def block(self, path: str, i: int) -> Block:
        raise KeyError(path)

    def count(self) -> int | None:
        return None

    def info(self) -> dict[str, object]:
        return dict(self._info)

    def _finish(self) -> tuple[tuple[str, ...], dict[str, ChunkTable], KeyTable]:
        done = self._done
        if done is not None:
            return done
        plan = self._plan
        assert plan is not None
        try:
            done = plan.finish()
        except Fallback:
            rs = from_document(decode_json(plan.doc.data), max_gen=plan.max_gen or DEFAULT_MAX_GEN,
                               template_overrides=plan.template_overrides, limits=plan.limits,
                               builder=Builder(url_ids=self._url_ids))  # ids handed out stay valid
            done = (rs.urls, {p: rs.table(p) for p in rs.grids}, rs.other)
        else:
            done = (done[0], done[1], split(drop_documents(done[2], self.metadata))[0])
        self._done = done
        self._plan = None  # releases the text
        return done
