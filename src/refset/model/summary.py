"""A reference set in figures: its keys by kind, its arrays (shape, chunks, grid, chunks present,
data type), unique URLs, referenced bytes and the facts its stored form keeps (what ``refset info``
prints)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.model.parts import find_parts
from refset.model.table import INLINE, RANGE, WHOLE

if TYPE_CHECKING:
    from refset.model.refset import ReferenceSet

__all__ = ["summary"]


def summary(rs: ReferenceSet) -> dict[str, Any]:
    """Figures about ``rs``, as plain values (JSON-ready), in this order:

    - ``format``: the stored form, e.g. ``"json (version 0)"`` or ``"json (version 1, zstd-compressed)"``;
    - ``keys``: every key, then by kind: ``inline``, ``range`` and ``whole_file``;
    - ``references``: chunk keys holding data (of every array);
    - ``unique_urls`` and ``referenced_bytes`` (the total length of byte-range references);
    - ``arrays``: one dict per array: ``path``, ``shape``, ``chunks``, ``grid`` (chunks along each
      axis), ``chunks_present``, ``chunks_total``, ``fraction_present`` (4 decimals) and ``dtype``
      (as the metadata spells it);
    - ``parts`` (only when the set has some): per variable made of parts, its layout (concat dim, dims,
      shape, and each part's name and rows, see :mod:`refset.model.parts`);
    - then what else the stored form tells (:meth:`ReferenceSet.format_info`, less its format,
      version and compression), e.g. the packed format's per-array figures.

    Every chunk table is read (a lazy form, parquet or packed, reads each here).
    """
    kinds = np.bincount(rs.key_table().kind, minlength=4).astype(np.int64)
    arrays: list[dict[str, Any]] = []
    for p, g in rs.grids.items():
        counts = rs.table(p).kind_counts()
        kinds[1:] += counts[1:]
        present = int(counts[1:].sum())
        arrays.append({
            "path": p,
            "shape": list(g.shape),
            "chunks": list(g.chunks),
            "grid": list(g.grid_shape),
            "chunks_present": present,
            "chunks_total": g.nchunks,
            "fraction_present": round(present / g.nchunks, 4) if g.nchunks else 1.0,
            "dtype": _dtype(rs, p),
        })
    info = rs.format_info()  # after the tables: a lazy form may tell more once they are read
    out: dict[str, Any] = {
        "format": _format_name(info),
        "keys": int(kinds.sum()),
        "inline": int(kinds[INLINE]),
        "range": int(kinds[RANGE]),
        "whole_file": int(kinds[WHOLE]),
        "references": sum(a["chunks_present"] for a in arrays),
        "unique_urls": len(rs.urls),
        "referenced_bytes": rs.referenced_bytes(),
        "arrays": arrays,
    }
    mixed = find_parts(rs)
    if mixed:  # only when there are some: the figures of a regular set are unchanged
        out["parts"] = {p: layout.to_json() for p, layout in sorted(mixed.items())}
    out.update({k: v for k, v in info.items() if k not in ("format", "version", "compression")})
    return out


def _dtype(rs: ReferenceSet, path: str) -> str | None:
    """The data type an array's metadata declares, as it spells it."""
    dt = rs.metadata[path].dtype_json
    if isinstance(dt, dict) and isinstance(dt.get("name"), str):
        return str(dt["name"])
    return dt if isinstance(dt, str) else json.dumps(dt)


def _format_name(stored: Mapping[str, object]) -> str:
    """``json (version 1, zstd-compressed)``: the stored form's name, version and compression."""
    name = str(stored.get("format", "?"))
    extra = [f"version {stored['version']}"] if "version" in stored else []
    if stored.get("compression"):
        extra.append(f"{stored['compression']}-compressed")
    return f"{name} ({', '.join(extra)})" if extra else name
