"""Where the codecs a set's arrays name come from.

numcodecs knows its own codecs; imagecodecs' (``imagecodecs_lzw``, ``imagecodecs_delta``, ... which TIFF
sets name) are registered with numcodecs only when ``imagecodecs.numcodecs.register_codecs()`` runs.
:func:`ensure_codecs` runs it when an array names one, before zarr or refset builds the codec, so a set
reads without the caller knowing which package decodes it. fsspec + zarr readers of a saved set call
``imagecodecs.numcodecs.register_codecs()`` themselves (docs/scan.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from refset.errors import Unsupported

__all__ = ["ensure_codecs", "codec_ids", "register_for"]

_registered = False


def codec_ids(metadata: Iterable[Any]) -> set[str]:
    """The numcodecs codec ids of ``metadata`` (ArrayMetadata objects): zarr v2's filters and compressor,
    zarr v3's ``numcodecs.<id>`` codecs (inside a sharding codec too)."""
    out: set[str] = set()
    for m in metadata:
        if m.zarr_format == 3:
            _v3_ids(m.codecs, out)
            continue
        for spec in [*(m.filters or ()), m.compressor]:
            if isinstance(spec, dict) or hasattr(spec, "get"):
                out.add(str(spec.get("id")))
    return out


def _v3_ids(codecs: Iterable[Any], out: set[str]) -> None:
    for c in codecs:
        if not hasattr(c, "get"):
            continue
        name = str(c.get("name"))
        if name.startswith("numcodecs."):
            out.add(name[len("numcodecs."):])
        inner = (c.get("configuration") or {}).get("codecs") if hasattr(c.get("configuration") or {}, "get") else None
        if isinstance(inner, list):
            _v3_ids(inner, out)


def ensure_codecs(metadata: Iterable[Any]) -> None:
    """Register imagecodecs' numcodecs codecs when an array of ``metadata`` names one;
    :class:`~refset.errors.Unsupported` naming the package when it is not installed."""
    global _registered
    if _registered:
        return
    wanted = sorted(i for i in codec_ids(metadata) if i.startswith("imagecodecs_"))
    if not wanted:
        return
    try:
        from imagecodecs.numcodecs import register_codecs
    except ImportError:
        raise Unsupported(f"codecs {', '.join(wanted)} need the imagecodecs package: pip install imagecodecs "
                          "(or 'refset[tiff]')") from None
    register_codecs(verbose=False)
    _registered = True


def register_for(codec_id: str) -> None:
    """Register the package that decodes numcodecs codec ``codec_id`` with numcodecs, when it is one
    registered on demand (imagecodecs')."""
    if codec_id.startswith("imagecodecs_"):
        from refset.model.metadata import ArrayMetadata

        ensure_codecs([ArrayMetadata.build(shape=[1], chunks=[1], dtype="u1",
                                           filters=[{"id": codec_id}])])
