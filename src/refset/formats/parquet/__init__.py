"""fsspec's parquet layout of reference sets (``LazyReferenceMapper``): the stored form ``parquet``.
:mod:`.reader` reads lazily, a record file at a time; :mod:`.writer` writes column-wise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from refset.abc.format import Option, StoredForm

if TYPE_CHECKING:
    from refset.abc.source import Source
    from refset.model.refset import ReferenceSet
    from refset.options import Limits

__all__ = ["ParquetForm"]


class ParquetForm(StoredForm):
    """A directory: ``.zmetadata`` and per array its record files ``refs.<n>.parq``."""

    name: ClassVar[str] = "parquet"
    description: ClassVar[str] = "fsspec's parquet layout (a directory)"
    suffixes: ClassVar[tuple[str, ...]] = (".parq", ".parquet")
    directory: ClassVar[bool] = True
    zarr_v3: ClassVar[bool] = False  # fsspec's layout holds zarr v2 metadata only
    other_keys: ClassVar[bool] = False  # and chunk keys of arrays: a key must fall in a record
    verbatim_metadata: ClassVar[bool] = False  # .zmetadata holds parsed documents, as fsspec writes it
    options: ClassVar[tuple[Option, ...]] = (
        Option("record_size", int, "chunks per record file", minimum=1),
        Option("categorical_threshold", float, "dictionary-encode paths above this many rows per unique path",
               minimum=0),
        Option("pad", bool, "pad each array's last record to record_size rows"),
        Option("compression", str, "parquet codec", choices=("zstd", "snappy", "gzip", "brotli", "lz4", "none")),
        Option("compression_level", int, "codec level (zstd 1-22, gzip 1-9, brotli 0-11)", minimum=0,
               maximum=22, none_ok=True),
    )

    def read(self, source: str, *, storage_options: Mapping[str, Any] | None = None,
             head: bytes | None = None, limits: Limits | None = None, **options: Any) -> Source:
        # docstring inherited
        from refset.formats.parquet.reader import read_parquet

        return read_parquet(source, storage_options=storage_options, head=head, limits=limits, **options)

    def write(self, rs: ReferenceSet, dest: str, *, storage_options: Mapping[str, Any] | None = None,
              **options: Any) -> None:
        # docstring inherited
        from refset.formats.parquet.writer import write_parquet

        write_parquet(rs, dest, storage_options=storage_options, **options)
