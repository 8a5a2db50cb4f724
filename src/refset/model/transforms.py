"""Transforms of whole sets that return new sets (the input is never changed)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from refset.model.refset import ReferenceSet
from refset.model.table import KeyTable, union_urls

__all__ = ["rename_urls", "with_root_attrs", "with_zarr_format"]


def rename_urls(rs: ReferenceSet, prefixes: Mapping[str, str]) -> ReferenceSet:
    """``rs`` with every URL starting with a key of ``prefixes`` starting with its value instead
    (the longest matching prefix wins), e.g. ``{"/data/": "s3://bucket/data/"}``. URLs that become
    equal share one entry of the URL table."""
    rs = rs.loaded()
    order = sorted(prefixes, key=len, reverse=True)

    def rename(url: str) -> str:
        for old in order:
            if url.startswith(old):
                return prefixes[old] + url[len(old):]
        return url

    urls, (remap,) = union_urls([[rename(u) for u in rs.urls]])
    tables = {p: rs.table(p).remap_paths(remap) for p in rs.grids}
    return ReferenceSet.from_arrays({}, tables, urls, other=rs.key_table().remap_paths(remap), validate=False,
                                    info=rs.format_info(), fingerprints=rs.fingerprints.renamed(rename))


def with_zarr_format(rs: ReferenceSet, zarr_format: int) -> ReferenceSet:
    """``rs`` with every array's and group's metadata in zarr format ``zarr_format`` (2 or 3): arrays
    translated by :class:`~refset.model.metadata.ArrayMetadata`, groups' ``.zgroup``/``.zattrs`` and
    ``zarr.json`` into each other; chunk keys keep their spelling, chunk tables are shared."""

    from refset.errors import Unsupported
    from refset.model.array import Array

    if zarr_format not in (2, 3):
        raise Unsupported(f"zarr_format: 2 or 3, got {zarr_format!r}")
    rs = rs.loaded()
    arrays = {}
    for p, m in rs.metadata.items():
        m2 = m.to_v3() if zarr_format == 3 else m.to_v2()
        arrays[p] = Array(m2, rs.table(p).with_grid(m2.grid))  # the same cells, keys spelled as before
    other = rs.other
    groups: dict[str, dict[str, object]] = {}
    drop: list[int] = []
    for i, key in enumerate(other.keys.tolist()):
        head, _, name = key.rpartition("/")
        if name not in (".zgroup", ".zattrs", "zarr.json") or head in arrays:
            continue
        doc = _group_document(other, i, key, "translated")
        g = groups.setdefault(head, {})
        if name == ".zgroup" or (name == "zarr.json" and isinstance(doc, dict) and doc.get("node_type") == "group"):
            g.setdefault("attributes", {})
        elif name == ".zattrs" and isinstance(doc, dict):
            g["attributes"] = doc
        if name == "zarr.json" and isinstance(doc, dict):
            g["attributes"] = doc.get("attributes") or {}
        drop.append(i)
    rest = other.without_rows(np.asarray(drop, np.int64))
    metadata: dict[str, object] = {}
    for head, g in groups.items():
        pre = f"{head}/" if head else ""
        attrs = g.get("attributes") or {}
        if zarr_format == 3:
            metadata[pre + "zarr.json"] = {"zarr_format": 3, "node_type": "group", "attributes": attrs}
        else:
            metadata[pre + ".zgroup"] = {"zarr_format": 2}
            if attrs:
                metadata[pre + ".zattrs"] = attrs
    return ReferenceSet.from_arrays(metadata, arrays, rs.urls, other=rest, validate=False, info=rs.format_info(),
                                    fingerprints=rs.fingerprints)


def with_root_attrs(rs: ReferenceSet, attrs: Mapping[str, object]) -> ReferenceSet:
    """``rs`` with ``attrs`` added to its root group's attributes (``.zattrs``, or the attributes of
    a zarr v3 ``zarr.json``), replacing those of the same names."""

    from refset.errors import InvalidReferences

    rs = rs.loaded()
    other = rs.other
    v3 = other.find("zarr.json") >= 0
    name = "zarr.json" if v3 else ".zattrs"
    i = other.find(name)
    doc: dict[str, object] = {}
    if i >= 0:
        got = _group_document(other, i, name, "changed")
        if not isinstance(got, dict):
            raise InvalidReferences(f"{name!r}: not a JSON object")
        doc = got
    if v3:
        old = doc.get("attributes")
        doc = {**doc, "attributes": {**(old if isinstance(old, dict) else {}), **attrs}}
    else:
        doc = {**doc, **attrs}
    metadata: dict[str, object] = {name: doc}
    if not v3 and other.find(".zgroup") < 0:
        metadata[".zgroup"] = {"zarr_format": 2}
    rest = other.without_rows(np.asarray([i], np.int64))
    return ReferenceSet.from_arrays(metadata, dict(rs.arrays), rs.urls, other=rest, validate=False,
                                    info=rs.format_info(), fingerprints=rs.fingerprints)


def _group_document(other: KeyTable, i: int, key: str, what: str) -> object:
    """The parsed JSON of group document ``key`` (row ``i`` of ``other``), which must be inline to be
    ``what`` ("translated", "changed")."""
    import json

    from refset.errors import InvalidReferences, Unsupported

    data = other.data[i]
    if data is None:
        raise Unsupported(f"{key!r}: group metadata stored in a file cannot be {what}")
    try:
        return json.loads(data)
    except ValueError as e:
        raise InvalidReferences(f"{key!r}: not JSON ({e})") from None
