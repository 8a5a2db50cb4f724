"""Which URLs are plain local files (read with ``open``, no fsspec), and their paths."""

from __future__ import annotations

import os

__all__ = ["is_local", "local_path"]


def is_local(path: str, storage_options: object = None) -> bool:
    """Whether ``path`` is a plain local path (or ``file://`` URL) with no storage options (a
    chained URL such as ``simplecache::/data/a.nc`` is fsspec's)."""
    return (("://" not in path and "::" not in path) or path.startswith("file://")) and not storage_options


def trimmed(url: str) -> str:
    """``url`` without trailing slashes, but a filesystem's root kept a root: ``memory:///`` ->
    ``memory://`` (not ``memory:``, a relative local path), ``/`` stays ``/``."""
    out = url.rstrip("/")
    if not out:
        return url[:1]
    return out + "//" if out.endswith(":") and url.startswith(out + "//") else out


def local_path(path: str) -> str:
    """The file path of a local path or ``file://`` URL, ``~`` expanded (as fsspec does)."""
    return os.path.expanduser(path[len("file://") :] if path.startswith("file://") else path)
