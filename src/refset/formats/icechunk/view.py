"""An Icechunk repository seen as the first input of an append.

Icechunk 1.x lists a repository's chunks but not where its virtual chunks point, so a repository is not
read back into a reference set. What appending needs of it is its metadata (to compare the new
inputs with and place them after) and the values of the coordinate along the dimension appended to
(to re-encode the new ones and find duplicates): :func:`archive_view` is a set with every group's and
array's metadata (as zarr v2, as scanners make it), the coordinate's chunks inline (their stored
bytes, read through Icechunk) and no chunks elsewhere. It exists for :func:`refset.append`, which
hands the combined set to :func:`~refset.formats.icechunk.writer.append`; the missing chunks are the
repository's, never written again. It is not a set to read values from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.errors import Unsupported
from refset.formats.icechunk.repo import exists, open_repository, session
from refset.formats.icechunk.writer import get_document
from refset.model.decoding import CF_DECODING
from refset.model.metadata import ArrayMetadata
from refset.model.table import INLINE, ChunkTable, KeyTable
from refset.model.transforms import with_zarr_format

if TYPE_CHECKING:
    from refset.model.refset import ReferenceSet

__all__ = ["archive_view", "MAX_COORDINATE_BYTES"]

#: A coordinate larger than this is not read for an append.
MAX_COORDINATE_BYTES = 256 << 20
#: Attributes whose NaN and infinite values the writer spelled as text (Icechunk takes standard JSON
#: only), read back as numbers so that combine compares numbers with numbers.
_NUMERIC = frozenset({*CF_DECODING, "actual_range"}) - {"_Unsigned", "_Encoding"}
_SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _floats(attrs: Mapping[str, Any]) -> dict[str, Any]:
    def back(v: Any) -> Any:
        if isinstance(v, list):
            return [back(x) for x in v]
        return _SPECIAL.get(v, v) if isinstance(v, str) else v

    return {k: back(v) if k in _NUMERIC else v for k, v in attrs.items()}


def _walk(store: Any, path: str, out: dict[str, dict[str, Any]]) -> None:
    """Every node under ``path`` by its path: ``{path: zarr.json}``."""
    from refset.io.bridge import run

    async def children() -> list[str]:
        return [k async for k in store.list_dir(path)]

    raw = get_document(store, f"{path}/zarr.json" if path else "zarr.json")
    if raw is None:
        return
    doc = json.loads(raw)
    out[path] = doc
    if doc.get("node_type") == "group":
        for name in sorted(run(children())):
            if name != "zarr.json":
                _walk(store, f"{path}/{name}" if path else name, out)


def archive_view(dest: str, dim: str, *, branch: str = "main", storage_options: Mapping[str, Any] | None = None,
                 remote_options: Mapping[str, Any] | None = None) -> ReferenceSet:
    """The repository at ``dest`` (tip of ``branch``) as the first input of an append along ``dim``."""
    from refset.model.refset import ReferenceSet

    if not exists(dest, storage_options):
        raise Unsupported(f"{dest}: no Icechunk repository there to append to")
    repo, _ = open_repository(dest, storage_options=storage_options, remote_options=remote_options)
    store = session(repo, dest, branch, writable=False).store
    nodes: dict[str, dict[str, Any]] = {}
    _walk(store, "", nodes)
    metadata: dict[str, Any] = {}
    tables: dict[str, ChunkTable] = {}
    groups: dict[str, tuple[int, int, int, int, bytes | None]] = {}
    for path, doc in nodes.items():
        key = f"{path}/zarr.json" if path else "zarr.json"
        if doc.get("node_type") != "array":
            groups[key] = (INLINE, 0, 0, 0, json.dumps(doc).encode())
            continue
        doc = {**doc, "attributes": _floats(doc.get("attributes") or {})}
        meta = ArrayMetadata.from_v3(doc)
        metadata[key] = doc
        grid = meta.grid
        names = list(doc.get("dimension_names") or [])
        if path == dim and names == [dim]:
            if grid.shape[0] * meta.dtype.itemsize > MAX_COORDINATE_BYTES:
                raise Unsupported(f"{dest}: the coordinate {dim!r} holds {grid.shape[0]:,} values, more than "
                                  f"{MAX_COORDINATE_BYTES >> 20} MiB to read for an append")
            flat = np.arange(grid.nchunks, dtype=np.int64)
            inline = {}
            for i in flat.tolist():
                data = get_document(store, f"{path}/c/{i}")
                if data is not None:
                    inline[i] = data
            have = np.asarray(sorted(inline), np.int64)
            z = np.zeros(have.size, np.int64)
            tables[path] = ChunkTable.from_entries(grid, have, np.full(have.size, INLINE, np.uint8), z, z, z, inline)
        else:
            tables[path] = ChunkTable.empty(grid)
    view = ReferenceSet.from_arrays(metadata, tables, (), other=KeyTable.from_items(groups),
                                    info={"format": "icechunk archive view", "name": dest})
    return with_zarr_format(view, 2)  # compared with the inputs' metadata as zarr v2, as scans make it
