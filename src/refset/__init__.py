"""refset: kerchunk-style reference sets, columnar in memory, in every spec format and a packed one.

``import refset`` loads numpy and msgspec only; zarr, xarray, h5py, pyarrow, fsspec and jinja2 load
when first needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refset.combine import combine
from refset.errors import InvalidReferences, ReferenceNotReachable, RefsetError, Unsupported
from refset.formats import load, save
from refset.model.keys import ChunkGrid
from refset.model.refset import ReferenceSet
from refset.model.table import ChunkTable, KeyTable, concat_tables, union_urls
from refset.model.transforms import rename_urls
from refset.options import Limits
from refset.scan import scan

if TYPE_CHECKING:
    from refset.serve.fsspec import ReferenceFileSystem
    from refset.serve.zarr import ZarrStore

__version__ = "0.1.0"

__all__ = [
    "Limits",
    "load",
    "save",
    "scan",
    "combine",
    "ReferenceSet",
    "ChunkTable",
    "KeyTable",
    "ChunkGrid",
    "concat_tables",
    "union_urls",
    "rename_urls",
    "ReferenceFileSystem",
    "ZarrStore",
    "open_dataset",
    "RefsetError",
    "InvalidReferences",
    "Unsupported",
    "ReferenceNotReachable",
]


def open_dataset(source: Any, **kwargs: Any) -> Any:
    """Open a reference set as an ``xarray.Dataset`` (see :mod:`refset.serve.xarray`)."""
    from refset.serve.xarray import open_dataset as _open

    return _open(source, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "ReferenceFileSystem":
        from refset.serve.fsspec import ReferenceFileSystem

        return ReferenceFileSystem
    if name == "ZarrStore":
        from refset.serve.zarr import ZarrStore

        return ZarrStore
    raise AttributeError(f"module 'refset' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
