"""An Icechunk repository seen as the first input of an append.

Icechunk 1.x lists a repository's chunks but not where its virtual chunks point, so a repository is not
read back into a reference set. What appending needs of it is its metadata (to compare the new
inputs with and place them after) and the values of its coordinates along the dimension appended to
(to re-encode the new ones and find duplicates): :func:`archive_view` is a set with every group's and
array's metadata (as zarr v2, as scanners make it), each 1-D array along that dimension with its chunks inline (their stored bytes, read
through Icechunk), and no chunks elsewhere. It exists for :func:`refset.append`, which hands the
combined set to :func:`~refset.formats.icechunk.writer.append`; the missing chunks are the
repository's, never written again. It is not a set to read values from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.errors import Unsupported
from refset.formats.icechunk.repo import exists, open_repository
from refset.formats.icechunk.writer import get_document
from refset.model.metadata import ArrayMetadata
from refset.model.table import INLINE, ChunkTable, KeyTable
from refset.model.transforms import with_zarr_format

if TYPE_CHECKING:
    from refset.model.refset import ReferenceSet

__all__ = ["archive_view", "MAX_COORDINATE_BYTES"]

#: A 1-D array along the dimension larger than this is not a coordinate to read whole.
MAX_COORDINATE_BYTES = 256 << 20


def _walk(store: Any, path: str, out: dict[str, dict[str, Any]]) -> None:
    """Every node under ``path`` by its path: ``{path: zarr.json}``."""
    from zarr.core.sync import sync

    async def children() -> list[str]:
        return [k async for k in store.list_dir(path)]

    raw = get_document(store, f"{path}/zarr.json" if path else "zarr.json")
    if raw is None:
        return
    doc = json.loads(raw)
    out[path] = doc
    if doc.get("node_type") == "group":
        for name in sorted(sync(children())):
            if name != "zarr.json":
                _walk(store, f"{path}/{name}" if path else name, out)


def archive_view(dest: str, dim: str, *, branch: str = "main", storage_options: Mapping[str, Any] | None = None,
                 remote_options: Mapping[str, Any] | None = None) -> ReferenceSet:
    """The repository at ``dest`` (tip of ``branch``) as the first input of an append along ``dim``."""
    from refset.model.refset import ReferenceSet

    if not exists(dest, storage_options):
        raise Unsupported(f"{dest}: no Icechunk repository there to append to")
    repo = open_repository(dest, storage_options=storage_options, remote_options=remote_options)
    store = repo.readonly_session(branch=branch).store
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
        meta = ArrayMetadata.from_v3(doc)
        metadata[key] = doc
        grid = meta.grid
        names = list(doc.get("dimension_names") or [])
        if names == [dim] and grid.shape[0] * meta.dtype.itemsize <= MAX_COORDINATE_BYTES:
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
                                    info={"format": "icechunk archive view", "source": dest})
    return with_zarr_format(view, 2)  # compared with the inputs' metadata as zarr v2, as scans make it
