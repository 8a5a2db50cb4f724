"""refset: kerchunk-style reference sets, columnar in memory, in every spec format and a packed one.

``import refset`` loads the error classes and :class:`Limits` only; each name below imports its module
on first use (PEP 562), so a command's start-up, a Dask worker's unpickling and ``refset --help``
pay only for what they touch. numpy and msgspec load with the model; zarr, xarray, h5py, pyarrow,
fsspec and jinja2 when first needed.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from refset.errors import InvalidReferences, ReferenceNotReachable, RefsetError, SourceChanged, Unsupported
from refset.options import Limits

if TYPE_CHECKING:
    from refset.combine import combine
    from refset.combine.append import append
    from refset.combine.refresh import refresh, verify
    from refset.formats import load, save
    from refset.model.keys import ChunkGrid
    from refset.model.refset import ReferenceSet
    from refset.model.table import ChunkTable, KeyTable, concat_tables, union_urls
    from refset.model.transforms import rename_urls
    from refset.scan import scan
    from refset.serve.fsspec import ReferenceFileSystem
    from refset.serve.zarr import ZarrStore

__version__ = "0.1.0"

__all__ = [
    "Limits",
    "load",
    "save",
    "scan",
    "combine",
    "append",
    "verify",
    "refresh",
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
    "SourceChanged",
]

#: Where each public name lives (imported when first asked for).
_HOME = {
    "load": "refset.formats",
    "save": "refset.formats",
    "scan": "refset.scan",
    "combine": "refset.combine",
    "append": "refset.combine.append",
    "verify": "refset.combine.refresh",
    "refresh": "refset.combine.refresh",
    "ReferenceSet": "refset.model.refset",
    "ChunkTable": "refset.model.table",
    "KeyTable": "refset.model.table",
    "concat_tables": "refset.model.table",
    "union_urls": "refset.model.table",
    "ChunkGrid": "refset.model.keys",
    "rename_urls": "refset.model.transforms",
    "ReferenceFileSystem": "refset.serve.fsspec",
    "ZarrStore": "refset.serve.zarr",
}


#: Names that were public and are gone, and what replaces them.
_GONE = {
    "set_limits": "limits are given where a set is read: refset.load(..., limits=refset.Limits(...))",
    "set_template_limits": "refset.Limits(template_seconds=..., template_memory=...), given as limits=",
    "TemplateLimits": "refset.Limits(template_seconds=..., template_memory=...), given as limits=",
}


def open_dataset(source: Any, **kwargs: Any) -> Any:
    """Open a reference set as an ``xarray.Dataset`` (see :mod:`refset.serve.xarray`)."""
    from refset.serve.xarray import open_dataset as _open

    return _open(source, **kwargs)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        hint = f" ({name} is gone: {_GONE[name]})" if name in _GONE else ""
        raise AttributeError(f"module 'refset' has no attribute {name!r}{hint}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``refset.scan`` and ``refset.combine`` are functions that share their names with the packages
    holding them. Importing a submodule sets the parent's attribute to it, which would hide the
    function once anything imported the package; that assignment is refused here (the package itself
    stays in ``sys.modules`` for ``from refset.scan import Scan``). So ``refset.scan.registry`` is an
    attribute of the function, which has none: spell ``from refset.scan import registry``."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("scan", "combine") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
