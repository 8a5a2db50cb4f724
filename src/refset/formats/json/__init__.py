"""JSON reference sets (the specification's Version 0, and Version 1 with ``templates`` and ``gen``): the
stored forms ``json`` and ``v1``, and the batch entry combine reads many documents through.

The reader is split by layer: :mod:`.scan` (numpy byte scanning), :mod:`.plan` (the document plan),
:mod:`.lazy` (the lazy source), :mod:`.generic` (the per-key path that reports every problem), :mod:`.read`
(the entry) and :mod:`.batch` (many small documents at once); :mod:`.v0` and :mod:`.v1_writer` write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from refset.abc.format import Option, StoredForm

if TYPE_CHECKING:
    from refset.abc.source import Source
    from refset.model.refset import ReferenceSet
    from refset.model.stack import SetStack
    from refset.options import Limits

__all__ = ["JsonForm", "JsonV1Form", "read_batch", "NotBatch"]


class JsonForm(StoredForm):
    """Version 0 JSON, plain or gzip/zstd-compressed (by the destination's suffix)."""

    name: ClassVar[str] = "json"
    description: ClassVar[str] = "Version 0 JSON (.gz/.zst compress)"
    suffixes: ClassVar[tuple[str, ...]] = (".json",)
    magic: ClassVar[tuple[bytes, ...]] = (b"{", b"\x1f\x8b", b"\x28\xb5\x2f\xfd")

    def read(self, source: str, *, storage_options: Mapping[str, Any] | None = None,
             head: bytes | None = None, limits: Limits | None = None, **options: Any) -> Source:
        # docstring inherited: both versions are read by one reader
        from refset.formats.json.read import read_json
        from refset.options import DEFAULT_LIMITS

        return read_json(source, storage_options=storage_options, head=head, limits=limits or DEFAULT_LIMITS,
                         **options)

    def write(self, rs: ReferenceSet, dest: str, *, storage_options: Mapping[str, Any] | None = None,
              **options: Any) -> None:
        # docstring inherited
        from refset.formats.json.v0 import write_json

        write_json(rs, dest, storage_options=storage_options, **options)


class JsonV1Form(JsonForm):
    """Version 1 JSON: URL templates (and ``gen`` for regular runs of chunks, with ``gen=True``)."""

    name: ClassVar[str] = "v1"
    description: ClassVar[str] = "Version 1 JSON with templates (gen=True: and gen)"
    suffixes: ClassVar[tuple[str, ...]] = (".v1.json",)
    magic: ClassVar[tuple[bytes, ...]] = ()
    options: ClassVar[tuple[Option, ...]] = (Option("gen", bool, "add gen entries for regular runs of chunks"),)

    def write(self, rs: ReferenceSet, dest: str, *, storage_options: Mapping[str, Any] | None = None,
              **options: Any) -> None:
        # docstring inherited
        from refset.formats.json.v1_writer import write_v1

        write_v1(rs, dest, storage_options=storage_options, **options)


class NotBatch(Exception):
    """The documents need the generic reader, one set each (see :func:`read_batch`)."""


def read_batch(items: Sequence[Any], storage_options: Mapping[str, Any]) -> SetStack:
    """Many local JSON reference files read at once into a :class:`~refset.model.stack.SetStack`, read
    as the generic reader reads each; :class:`NotBatch` for anything that reader must see."""
    from refset.formats.json.batch import read_documents

    return read_documents(items, storage_options)
