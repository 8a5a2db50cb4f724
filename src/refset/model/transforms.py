"""Transforms of whole sets that return new sets (the input is never changed)."""

from __future__ import annotations

from collections.abc import Mapping

from refset.model.refset import ReferenceSet
from refset.model.table import union_urls

__all__ = ["rename_urls"]


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
                                    info=rs.format_info())
