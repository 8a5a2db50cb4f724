"""Combine many reference sets (or data files, scanned) into one along concat dims.

Each input's chunk table of a variable is placed into the combined grid by array arithmetic on its
columns (no per-chunk Python): its position along each concat dim comes from its coordinate values
(see ``_coords``), all URL tables become one, the coordinates of the concat dims are written inline.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from refset.abc.scanner import HEAD
from refset.combine.coords import coordinates
from refset.combine.placement import Combiner
from refset.errors import InvalidReferences
from refset.formats.json.batch import NotBatch, read_documents
from refset.model.refset import ReferenceSet
from refset.model.stack import SetStack
from refset.scan import Scan, UnusedDropWarning

__all__ = ["combine", "open_input"]

Selector = Any  # list of values | re.Pattern | "INDEX" | "attr:N" | "vattr:V:N" | "data:V" | "cf:V" | callable


def combine(
    inputs: Iterable[Any],
    *,
    concat_dims: str | Sequence[str],
    identical_dims: Sequence[str] = (),
    coo_map: Mapping[str, Selector] | None = None,
    coo_dtypes: Mapping[str, Any] | None = None,
    preprocess: Callable[[ReferenceSet], ReferenceSet] | None = None,
    postprocess: Callable[[ReferenceSet], ReferenceSet] | None = None,
    check: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    remote_options: Mapping[str, Any] | None = None,
    scan_options: Mapping[str, Any] | None = None,
    client: Any = None,
    batch_size: int = 64,
    progress: Callable[[int], Any] | None = None,
) -> ReferenceSet:
    """One set from ``inputs`` (sets, dicts, reference files in any format, or NetCDF/HDF5 files,
    which are scanned) concatenated along ``concat_dims``, in the order of their coordinates.

    ``coo_map[dim]`` says where an input's coordinate comes from (kerchunk's vocabulary): a list
    (one value per input), a compiled regex on the input's name (its path or single URL; group 1 if
    any), ``"attr:NAME"``, ``"vattr:VAR:NAME"``, ``"data:VAR"``, ``"cf:VAR"``, ``"INDEX"`` or
    ``fn(index, set, name)``. Default: the values of the variable named like the dim, CF-aware (times
    in other units are re-encoded in the first input's). A dim no input has is new: data variables
    gain it as their first dim. ``identical_dims``: variables taken from the first input, checked
    equal in every input unless ``check=False``. ``client``: a ``distributed.Client`` on whose
    workers the inputs are opened (scanned) and combined as a tree of ``batch_size`` sets per task
    (see ``_dask``). ``storage_options``: fsspec options for opening (scanning) the inputs;
    ``remote_options``: for the data files their references point into, read for coordinate values
    (default: ``storage_options``). ``scan_options``: keywords of :func:`refset.scan` for the inputs
    that are data files (``inline_threshold``, ``group``, ``drop_variables``, ``subchunk``). ``progress(n)`` is called as each input has been opened (scanned), with 1.
    """
    dims = [concat_dims] if isinstance(concat_dims, str) else list(concat_dims)
    if not dims:
        raise InvalidReferences("combine: concat_dims is empty")
    given = list(inputs)
    so = dict(storage_options or {})
    ro = so if remote_options is None else dict(remote_options)
    sc = dict(scan_options or {})
    if given and preprocess is None and client is None:
        try:  # local JSON reference files, read together (lists of sets are not taken)
            batch = read_documents(given, so)
        except NotBatch:
            pass
        else:
            if progress is not None:
                for _ in given:
                    progress(1)
            return _combine(batch, dims, identical_dims, coo_map, coo_dtypes, postprocess, check, ro)
    items = expand_lists(given)
    if not items:
        raise InvalidReferences("combine: no inputs")
    if client is not None:
        from refset.combine.cluster import combine_on_cluster

        items = [absolute(x) for x in items]  # the workers' working directory is not ours
        out = combine_on_cluster(client, items, dims=dims, identical=list(identical_dims),
                                 coo_map=dict(coo_map or {}), coo_dtypes=dict(coo_dtypes or {}),
                                 preprocess=preprocess, check=check, so=so, ro=ro, batch=batch_size,
                                 progress=progress, scan_options=sc)
        _check_identical(identical_dims, list(out.grids))
        return postprocess(out) if postprocess is not None else out
    opened, unused = [], []
    run = Scan(**sc)  # one run for the data files: files of one product share parsed headers
    for i, x in enumerate(items):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnusedDropWarning)
            opened.append(open_input(x, i, storage_options=so, scan=run))
        unused.append(set().union(*(w.message.names for w in caught if isinstance(w.message, UnusedDropWarning))))
        for w in caught:
            if not isinstance(w.message, UnusedDropWarning):
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if progress is not None:
            progress(1)
    _warn_unused(unused)
    sets = [rs for rs, _ in opened]
    names = [n for _, n in opened]
    if preprocess is not None:
        sets = [preprocess(rs) for rs in sets]
    return _combine(SetStack.from_sets(sets, names), dims, identical_dims, coo_map, coo_dtypes, postprocess,
                    check, ro)


def _combine(inputs: SetStack, dims: list[str], identical_dims: Sequence[str],
             coo_map: Mapping[str, Selector] | None, coo_dtypes: Mapping[str, Any] | None,
             postprocess: Callable[[ReferenceSet], ReferenceSet] | None, check: bool,
             ro: Mapping[str, Any]) -> ReferenceSet:
    _check_identical(identical_dims, inputs.paths())
    coords = coordinates(inputs, dims, dict(coo_map or {}), dict(coo_dtypes or {}), ro)
    out = Combiner(inputs, coords, set(identical_dims), check, ro).build()
    return postprocess(out) if postprocess is not None else out


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


def _check_identical(names: Sequence[str], paths: Sequence[str]) -> None:
    """Every name in ``identical_dims`` is a variable of some input (a typo would check nothing)."""
    have = set(paths)
    missing = [n for n in names if n.strip("/") not in have]
    if missing:
        raise InvalidReferences(f"combine: identical_dims names {', '.join(map(repr, missing))}, which no input "
                                f"has (its variables: {', '.join(sorted(have)) or 'none'})")


def _warn_unused(unused: list[set[str]]) -> None:
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
