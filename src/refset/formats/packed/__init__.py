"""refset's packed form (spec: docs/packed-format.md): a head (index, URL table, other keys) and per array
segments of packed columns, each block checked by CRC-32; opening reads the head only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from refset.abc.format import Option, StoredForm
from refset.io.magic import PACKED_MAGIC

if TYPE_CHECKING:
    from refset.abc.source import Source
    from refset.model.refset import ReferenceSet
    from refset.options import Limits

__all__ = ["PackedForm"]


class PackedForm(StoredForm):
    """One binary file, a few bytes per reference; opens in one read of its head."""

    name: ClassVar[str] = "packed"
    description: ClassVar[str] = "refset's packed binary form"
    suffixes: ClassVar[tuple[str, ...]] = (".packed", ".refs", ".rfs")
    magic: ClassVar[tuple[bytes, ...]] = (PACKED_MAGIC,)
    options: ClassVar[tuple[Option, ...]] = (
        Option("level", int, "zstd level of every block", minimum=1, maximum=22),
        Option("segment_chunks", int, "chunk-grid cells per segment", minimum=1),
    )

    def read(self, source: str, *, storage_options: Mapping[str, Any] | None = None,
             head: bytes | None = None, limits: Limits | None = None, **options: Any) -> Source:
        # docstring inherited
        from refset.formats.packed.file import read_packed
        from refset.options import DEFAULT_LIMITS

        return read_packed(source, storage_options=dict(storage_options or {}) or None, head=head,
                           limits=limits or DEFAULT_LIMITS, **options)

    def write(self, rs: ReferenceSet, dest: str, *, storage_options: Mapping[str, Any] | None = None,
              **options: Any) -> None:
        # docstring inherited
        from refset.formats.packed.file import write_packed

        write_packed(rs, dest, storage_options=dict(storage_options or {}) or None, **options)
