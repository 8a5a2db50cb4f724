"""The one chunk decoder: a chunk's stored bytes to its values, from the array's :class:`ArrayMetadata`
alone (serving and combine both decode with it).

A zarr v2 array decodes with its numcodecs ``filters`` and ``compressor`` (the compressor first) and
its ``order``, as zarr does: the last codec's output viewed as the array's dtype and shaped like a
chunk. A zarr v3 array decodes the same way through its v2 form (:meth:`ArrayMetadata.to_v2`:
``transpose`` is order F, ``bytes`` the byte order, ``numcodecs.*``, ``gzip``, ``zstd``, ``blosc``,
``crc32c``, ``vlen-utf8``, ``vlen-bytes``); a chain without one (sharding, a codec numcodecs does not
know) is refused with :class:`~refset.errors.Unsupported`, and the reader reads that array through
zarr instead. Codecs come from numcodecs' registry (imagecodecs' registered on demand:
:mod:`refset.model.codecs`; refset's GRIB codec by its entry point). Imports numcodecs on first use.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from refset.errors import Unsupported
from refset.model.metadata import ArrayMetadata

__all__ = ["ChunkDecoder", "decoder"]


class ChunkDecoder:
    """Decodes the chunks of arrays stored like one :class:`ArrayMetadata` (immutable; one instance
    may decode in many threads at once: numcodecs' decoders keep no state)."""

    __slots__ = ("chunks", "codecs", "dtype", "order", "size")

    def __init__(self, codecs: tuple[Any, ...], dtype: np.dtype[Any], chunks: tuple[int, ...],
                 order: str) -> None:
        self.codecs = codecs  # in the order they encode: decoded last to first
        self.dtype = dtype
        self.chunks = chunks
        self.order = order
        self.size = int(np.prod(chunks, dtype=np.int64))

    def values(self, raw: Any) -> np.ndarray:
        """The values ``raw`` (a chunk's stored bytes, any bytes-like) decodes to, flat, in the
        array's dtype: any codec's error is raised as it is."""
        x: Any = raw
        for c in reversed(self.codecs):
            x = c.decode(x)
        if isinstance(x, np.ndarray) and x.dtype == object:
            return x.reshape(-1)
        if self.dtype.kind == "O":  # object values need an object codec (vlen-utf8, ...)
            raise ValueError("object values without an object codec")
        from numcodecs.compat import ensure_ndarray_like

        got: np.ndarray = ensure_ndarray_like(x).reshape(-1).view(self.dtype)
        return got

    def decode(self, raw: Any) -> np.ndarray:
        """A chunk's values shaped like a chunk (an edge chunk's padding included); a ValueError when
        ``raw`` holds another number of values."""
        a = self.values(raw)
        if a.size != self.size:
            raise ValueError(f"decodes to {a.size} values, a chunk holds {self.size}")
        got: np.ndarray = a.reshape(self.chunks, order=self.order)  # type: ignore[call-overload]
        return got


@functools.lru_cache(maxsize=512)
def decoder(meta: ArrayMetadata) -> ChunkDecoder:
    """The decoder of ``meta``'s chunks (one per distinct metadata). Raises
    :class:`~refset.errors.Unsupported` when refset cannot decode them (a zarr v3 chain without a v2
    form, a codec numcodecs does not know)."""
    v2 = meta.to_v2()  # Unsupported for sharding and codecs v2 has no counterpart of
    specs = [*v2.filters, *([v2.compressor] if v2.compressor else [])]
    codecs: tuple[Any, ...] = ()
    if specs:
        import numcodecs

        from refset.model.codecs import ensure_codecs

        ensure_codecs([meta])
        try:
            codecs = tuple(numcodecs.get_codec(dict(s)) for s in specs)
        except Exception as e:  # numcodecs' ValueError for an unknown id, a codec's own for its config
            raise Unsupported(f"codec not available ({type(e).__name__}: {e})") from None
    return ChunkDecoder(codecs, v2.dtype, tuple(meta.chunks), v2.order)
