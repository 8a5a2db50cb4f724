"""An array: typed zarr metadata and its chunk table. The keys a set serves for it (``.zarray``,
``.zattrs`` or ``zarr.json``, and the chunk keys) are derived from it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from refset.errors import InvalidReferences
from refset.model.keys import ChunkGrid, array_key, chunk_keys
from refset.model.metadata import ArrayMetadata
from refset.model.table import ChunkTable

__all__ = ["Array"]


@dataclass(frozen=True, slots=True)
class Array:
    """One zarr array of a set: its :class:`~refset.model.metadata.ArrayMetadata` and its
    :class:`~refset.model.table.ChunkTable` (whose grid is the metadata's). Immutable."""

    metadata: ArrayMetadata
    table: ChunkTable

    def __post_init__(self) -> None:
        if self.table.grid != self.metadata.grid:
            g, m = self.table.grid, self.metadata.grid
            raise InvalidReferences(f"array: its table's grid (shape {g.shape}, chunks {g.chunks}) is not the one "
                                    f"its metadata describes (shape {m.shape}, chunks {m.chunks})")

    @property
    def grid(self) -> ChunkGrid:
        return self.metadata.grid

    def documents(self, path: str) -> dict[str, bytes]:
        """``{key: text}`` of the metadata documents of the array at ``path``."""
        return {array_key(path, name): text for name, text in self.metadata.documents().items()}

    def chunk_keys(self, path: str) -> Iterator[str]:
        """Keys of the present chunks of the array at ``path``, in C order."""
        present = self.table.present()
        step = 1 << 16
        for start in range(0, len(present), step):
            yield from chunk_keys(path, self.grid, present[start:start + step]).tolist()

    def present(self) -> np.ndarray:
        """Flat indices of the chunks that have a reference, ascending."""
        return self.table.present()
