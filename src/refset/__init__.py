"""refset: kerchunk-style reference sets, columnar in memory, in every spec format and a packed one.

``import refset`` loads numpy and msgspec only; zarr, xarray, h5py, pyarrow, fsspec and jinja2 load
when first needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from refset.combine import combine
from refset.errors import InvalidReferences, ReferenceNotReachable, RefsetError, Unsupported
from refset.formats import load, save
from refset.formats._templates import TemplateLimits, set_template_limits
from refset.keys import ChunkGrid
from refset.limits import Limits, set_limits
from refset.model import ReferenceSet
from refset.scan import scan
from refset.tables import ChunkTable, KeyTable, concat_tables, union_urls
from refset.transforms import rename_urls

if TYPE_CHECKING:
    from refset.fs import ReferenceFileSystem
    from refset.zarr_store import ZarrStore

__version__ = "0.1.0"

__all__ = [
    "set_template_limits",
    "TemplateLimits",
    "set_limits",
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
    """Open a reference set as an ``xarray.Dataset`` (see :mod:`refset.xarray_backend`)."""
    from refset.xarray_backend import open_dataset as _open

    return _open(source, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "ReferenceFileSystem":
        from refset.fs import ReferenceFileSystem

        return ReferenceFileSystem
    if name == "ZarrStore":
        from refset.zarr_store import ZarrStore

        return ZarrStore
    raise AttributeError(f"module 'refset' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
