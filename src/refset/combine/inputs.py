"""A combine's inputs: what each given item is (a set, a document, a list of sets in one JSON file, a
reference file, a data file to scan) and how it opens, on the client or on a Dask worker."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from refset.errors import InvalidReferences, RefsetError, Unsupported, located
from refset.model.refset import ReferenceSet
from refset.scan import Scan, UnusedDropWarning

__all__ = ["ListItem", "Skipped", "absolute", "all_failed", "expand_lists", "input_name", "open_input", "open_inputs",
           "warn_unused"]


@dataclass(frozen=True)
class Skipped:
    """An input left out by ``on_error="skip"``: its index among the inputs, its name, the error."""

    index: int
    name: str
    error: str


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
    run ``scan``, a new one by default), any other path loaded as a reference set. A file is told from
    the scan's own first read: a remote data file costs one request to tell and scan."""
    from refset.formats import load

    if isinstance(x, ReferenceSet | Mapping | ListItem):
        rs = load(x.doc if isinstance(x, ListItem) else x)
        if len(rs.urls) == 1:
            return rs, rs.urls[0]
        named = rs.format_info().get("name")  # a set that says what it is (an Icechunk archive's view)
        return rs, x.name if isinstance(x, ListItem) else str(named) if named else f"input {index}"
    if not isinstance(x, str | os.PathLike):
        raise InvalidReferences(f"combine: input {index} is a {type(x).__name__}, not a set, a dict or a path")
    url = os.fspath(x)
    scanned = (scan or Scan()).scan_if_data(url, storage_options)
    if scanned is not None:
        return scanned, url
    from refset.io.local import is_local, local_path

    if is_local(url, storage_options or {}):
        path = local_path(url)
        if os.path.isdir(path) and not os.path.exists(os.path.join(path, ".zmetadata")):
            raise Unsupported(f"{url}: is a directory, not a data file or a reference set (a glob such as "
                              f"{url.rstrip('/')}/*.nc takes its files)")
    return load(url, storage_options=storage_options), url


def all_failed(skipped: Sequence[Skipped]) -> InvalidReferences:
    """The error when ``on_error="skip"`` left no input."""
    return InvalidReferences(f"combine: every input failed; the first: {skipped[0].error}")


def input_name(x: Any, index: int) -> str:
    """How errors name input ``index``: its path or URL, else its position."""
    return os.fspath(x) if isinstance(x, str | os.PathLike) else x.name if isinstance(x, ListItem) else f"input {index}"


def open_inputs(items: Sequence[Any], start: int = 0, *, storage_options: Mapping[str, Any] | None = None,
                scan: Scan | None = None, concurrency: int | None = None,
                progress: Callable[[int], Any] | None = None, skipped: list[Skipped] | None = None,
                ) -> tuple[list[tuple[ReferenceSet, str]], list[set[str]]]:
    """Every input opened as :func:`open_input` opens it (``start``: the first one's index), remote data
    files scanned ``concurrency`` at a time (default :data:`refset.scan.CONCURRENCY`), and for each
    input the names to drop that it lacked (their warnings are kept back: the caller warns once).
    ``progress(1)`` is called as each input has been opened (remote data files as their scans end,
    then the others in order). An input that fails raises its error, which names it (index and
    name); with a list ``skipped``, the input is left out and its (index, name, error) appended."""
    from refset.io.local import is_local

    run = scan or Scan()
    so = storage_options or {}
    remote = [i for i, x in enumerate(items)
              if isinstance(x, str | os.PathLike) and not is_local(os.fspath(x), so)]
    opened: list[tuple[ReferenceSet, str] | None] = [None] * len(items)
    unused: list[set[str]] = [set() for _ in items]
    failed: set[int] = set()

    def fail(i: int, e: RefsetError | FileNotFoundError) -> None:
        name = input_name(items[i], start + i)
        err = located(e, f"combine: input {start + i} ({name!r})", name) if isinstance(e, RefsetError) else e
        if skipped is None:
            if err is e:
                raise e
            raise err from e
        skipped.append(Skipped(start + i, name, str(err) if isinstance(err, RefsetError) else
                               f"{name}: no such file ({type(err).__name__})"))
        failed.add(i)
        if progress is not None:
            progress(1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnusedDropWarning)
        if len(remote) > 1:
            urls = [os.fspath(items[i]) for i in remote]
            for i, url, rs in zip(remote, urls, run.scan_many_if_data(urls, so, concurrency=concurrency,
                                                                     errors=True), strict=True):
                if isinstance(rs, RefsetError):
                    fail(i, rs)
                elif rs is not None:
                    opened[i] = (rs, url)
                    if progress is not None:  # as each arrives, while the others are read
                        progress(1)
        threaded = len(caught)  # their warnings name their files: matched below
        for i, x in enumerate(items):
            if opened[i] is not None or i in failed:
                continue  # scanned above, and counted
            mark = len(caught)
            try:
                opened[i] = open_input(x, start + i, storage_options=so, scan=run)
            except (RefsetError, FileNotFoundError) as e:
                fail(i, e)
                continue
            unused[i] = {n for w in caught[mark:] if isinstance(w.message, UnusedDropWarning)
                         for n in w.message.names}
            if progress is not None:
                progress(1)
    by_url: dict[str, set[str]] = {}
    for k, w in enumerate(caught):
        if not isinstance(w.message, UnusedDropWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        elif k < threaded:
            by_url.setdefault(w.message.url, set()).update(w.message.names)
    for i in remote:
        if opened[i] is not None and not unused[i]:
            unused[i] = by_url.get(os.fspath(items[i]), set())
    return [o for o in opened if o is not None], unused
