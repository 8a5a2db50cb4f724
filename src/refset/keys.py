"""Key grammar: zarr metadata -> chunk grid, and chunk key <-> chunk index.

Zarr v2 (``<array>/.zarray``) chunk keys are ``i.j.k`` or ``i/j/k`` (``dimension_separator``), and
``0`` for a scalar. Zarr v3 (``<array>/zarr.json``) uses ``chunk_key_encoding``: ``default`` gives
``c/i/j`` (or ``c.i.j``), ``v2`` gives ``i.j`` like zarr v2.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

__all__ = ["ChunkGrid", "grid_from_metadata", "grid_from_document", "split_metadata_key", "METADATA_NAMES"]

METADATA_NAMES = (".zarray", "zarr.json")


@dataclass(frozen=True, slots=True)
class ChunkGrid:
    """The regular chunk grid of one zarr array and the spelling of its chunk keys."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    separator: str = "."  # between chunk indices
    prefix: str = ""  # before the indices: "" (zarr v2 style) or "c" (zarr v3 default encoding)
    zarr_format: int = 2
    grid_shape: tuple[int, ...] = field(init=False, compare=False, repr=False)
    """Number of chunks along each dimension."""

    def __post_init__(self) -> None:
        grid = tuple(-(-s // c) if c else 0 for s, c in zip(self.shape, self.chunks))
        object.__setattr__(self, "grid_shape", grid)

    @property
    def nchunks(self) -> int:
        return math.prod(self.grid_shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def chunk_key(self, index: tuple[int, ...] | list[int]) -> str:
        """The key suffix of the chunk at ``index`` (no array prefix)."""
        if not self.shape:
            return self.prefix or "0"
        body = self.separator.join(map(str, index))
        return f"{self.prefix}{self.separator}{body}" if self.prefix else body

    def parse(self, suffix: str) -> tuple[int, ...] | None:
        """Chunk index of a canonical key suffix inside the grid, else None."""
        if not self.shape:
            return () if suffix == (self.prefix or "0") else None
        if self.prefix:
            head = self.prefix + self.separator
            if not suffix.startswith(head):
                return None
            suffix = suffix[len(head) :]
        parts = suffix.split(self.separator)
        if len(parts) != len(self.shape):
            return None
        out = []
        for p, n in zip(parts, self.grid_shape):
            # canonical decimal only: no sign, no leading zeros, no spaces
            if not (p.isdigit() and p.isascii()) or (p[0] == "0" and len(p) > 1):
                return None
            i = int(p)
            if i >= n:
                return None
            out.append(i)
        return tuple(out)


def split_metadata_key(key: str) -> tuple[str, str] | None:
    """``"a/b/.zarray"`` -> ``("a/b", ".zarray")``; None for other keys."""
    head, _, name = key.rpartition("/")
    if name in METADATA_NAMES:
        return head, name
    return None


def _int_tuple(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        return None
    return tuple(value)


def grid_from_metadata(name: str, text: bytes) -> ChunkGrid | None:
    """The chunk grid described by a ``.zarray`` or ``zarr.json`` document (JSON text), or None.

    None means "no chunk grid": the document is not an array, is malformed, or uses a grid refset
    does not index (irregular grids). Such arrays keep their keys in the generic table, losslessly.
    """
    try:
        meta = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        return None
    return grid_from_document(name, meta)


def grid_from_document(name: str, meta: object) -> ChunkGrid | None:
    """:func:`grid_from_metadata` for an already parsed document."""
    if not isinstance(meta, dict):
        return None
    if name == ".zarray":
        shape, chunks = _int_tuple(meta.get("shape")), _int_tuple(meta.get("chunks"))
        sep = meta.get("dimension_separator") or "."
        if shape is None or chunks is None or len(shape) != len(chunks) or sep not in (".", "/"):
            return None
        grid = ChunkGrid(shape, chunks, sep, "", 2)
    else:
        if meta.get("node_type") != "array" or meta.get("zarr_format") != 3:
            return None
        shape = _int_tuple(meta.get("shape"))
        cg = meta.get("chunk_grid")
        if shape is None or not isinstance(cg, dict) or cg.get("name") != "regular":
            return None
        cfg = cg.get("configuration")
        chunks = _int_tuple(cfg.get("chunk_shape")) if isinstance(cfg, dict) else None
        if chunks is None or len(shape) != len(chunks):
            return None
        enc = meta.get("chunk_key_encoding") or {"name": "default"}
        if not isinstance(enc, dict):
            return None
        cfg = enc.get("configuration") or {}
        if not isinstance(cfg, dict):
            return None
        if enc.get("name") == "default":
            sep = cfg.get("separator", "/")
            prefix = "c"
        elif enc.get("name") == "v2":
            sep = cfg.get("separator", ".")
            prefix = ""
        else:
            return None
        if sep not in ("/", "."):
            return None
        grid = ChunkGrid(shape, chunks, sep, prefix, 3)
    if any(c == 0 for c in grid.chunks):
        return None
    return grid
