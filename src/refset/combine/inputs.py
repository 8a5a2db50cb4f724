"""A combine's inputs: what each given item is (a set, a document, a list of sets in one JSON file, a
reference file, a data file to scan) and how it opens, on the client or on a Dask worker."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from refset.abc.scanner import HEAD
from refset.errors import InvalidReferences
from refset.model.refset import ReferenceSet
from refset.scan import Scan, UnusedDropWarning

__all__ = ["ListItem", "absolute", "expand_lists", "open_input", "warn_unused"]


def absolute(x: Any) -> Any:
    """A local path as an absolute path (``~`` expanded) of this process; anything else as it is."""
    if isinstance(x, str | os.PathLike):
        path = os.fspath(x)
        if isinstance(path, str) and "://" not in path and "::" not in path:
            return os.path.abspath(os.path.expanduser(path))
    return x


@dataclass(frozen=True)
class ListItem:
    """One set of a JSON list of sets (kerchunk writes them) given as an input: its document and its
    name, ``list.json[0]``."""

    doc: Mapping[str, Any]
    name: str


def expand_lists(items: list[Any]) -> list[Any]:
    """Each local JSON file holding a list of sets (plain, ``.gz`` or ``.zst``) becomes its items
    (:class:`ListItem`); other inputs stay as they are."""
    out: list[Any] = []
    for x in items:
        doc = _json_list(os.fspath(x)) if isinstance(x, str | os.PathLike) else None
        if doc is None:
            out.append(x)
            continue
        for i, d in enumerate(doc):
            if not isinstance(d, Mapping):
                raise InvalidReferences(f"{os.fspath(x)}[{i}]: must be a JSON object (a reference set), "
                                        f"got {type(d).__name__}")
            out.append(ListItem(d, f"{os.fspath(x)}[{i}]"))
    return out


def _json_list(url: str) -> list[Any] | None:
    """The list a local JSON file holds, when it holds one (its first bytes tell, read through its
    compression), else None."""
    from refset.io.compression import decompress
    from refset.io.local import is_local, local_path
    from refset.io.magic import GZIP_MAGIC, ZSTD_MAGIC

    if not is_local(url):
        return None
    path = local_path(url)
    try:  # the common case (a set or a data file) costs one open and one small read
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # missing, unreadable: open_input says so
        return None
    try:
        head = os.read(fd, 64)
    except OSError:  # a directory (a parquet set, a zarr store)
        return None
    finally:
        os.close(fd)
    if head[:2] == GZIP_MAGIC or head[:4] == ZSTD_MAGIC:
        try:
            with open(path, "rb") as f:
                if head[:2] == GZIP_MAGIC:
                    import gzip

                    head = gzip.GzipFile(fileobj=f).read(64)
                else:
                    import zstandard

                    head = zstandard.ZstdDecompressor().stream_reader(f).read(64)
        except Exception:  # corrupt: open_input's reader names the problem
            return None
    if head.lstrip()[:1] != b"[":
        return None
    import json

    with open(path, "rb") as f:
        text = decompress(f.read(), path)
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise InvalidReferences(f"{path}: invalid JSON ({e})") from None
    if isinstance(doc, list) and not doc:
        raise InvalidReferences(f"{path}: an empty list, not a reference set or a list of them")
    return doc if isinstance(doc, list) else None


def warn_unused(unused: list[set[str]]) -> None:
    """One warning for the names to drop that no input had (each input's own warning is dropped: a list
    meant for heterogeneous files names variables that only some of them have)."""
    never = set.intersection(*unused) if unused else set()
    if never:
        warnings.warn(UnusedDropWarning(sorted(never), f"any of the {len(unused)} inputs"), stacklevel=3)


def open_input(x: Any, index: int = 0, *, storage_options: Mapping[str, Any] | None = None,
               scan: Scan | None = None) -> tuple[ReferenceSet, str]:
    """``(set, name)`` of one input: a set or dict as it is, a path/URL to a data file scanned (by the
    run ``scan``, a new one by default), any other path loaded as a reference set."""
    from refset.formats import load

    if isinstance(x, ReferenceSet | Mapping | ListItem):
        rs = load(x.doc if isinstance(x, ListItem) else x)
        if len(rs.urls) == 1:
            return rs, rs.urls[0]
        return rs, x.name if isinstance(x, ListItem) else f"input {index}"
    if not isinstance(x, str | os.PathLike):
        raise InvalidReferences(f"combine: input {index} is a {type(x).__name__}, not a set, a dict or a path")
    url = os.fspath(x)
    if _is_data_file(url, storage_options or {}):
        return (scan or Scan())(url, storage_options), url
    return load(url, storage_options=storage_options), url


def _is_data_file(url: str, so: Mapping[str, Any]) -> bool:
    """Whether a scanner reads the file at ``url`` (told by its content: an HDF5 user block too);
    one that starts like a reference set is not probed further."""
    from refset.io.magic import file_reader, starts_like_refs
    from refset.io.store import LocalStore, open_store
    from refset.scan.registry import scanner_for

    store = open_store(url, so)
    if isinstance(store, LocalStore):  # the common case, without fsspec's per-call cost
        if os.path.isdir(store.root):
            return False
        with open(store.root, "rb") as fh:
            fsize = os.fstat(fh.fileno()).st_size
            read_at = file_reader(fh)
            return not starts_like_refs(read_at(0, 16)) and scanner_for(read_at, fsize) is not None
    if store.isdir():
        return False
    head, size = store.read_sized("", 0, HEAD)
    if len(head) < 16 or starts_like_refs(head):
        return False
    if size is None:
        size = store.size()
    return scanner_for(lambda o, n: head[o:o + n] if o + n <= len(head) else store.read("", o, o + n), size) is not None
