"""The one table of on-disk forms: name, reader, writer, suffixes and magic bytes.

``load`` and ``save``, the CLI and the xarray backend all ask here; nothing else knows a suffix or a
magic number. Readers and writers are named as ``module:function`` and imported on first use, so this
module stays light (``import refset`` loads no pyarrow, zarr or jinja2).
"""

from __future__ import annotations

import functools
import glob
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from refset.abc.format import StoredForm
from refset.errors import InvalidOption, InvalidReferences, Unsupported
from refset.io.local import is_local, local_path, trimmed
from refset.io.magic import (
    HEAD_SIZE,
    PACKED_MAGIC,
    describe,
    file_reader,
    not_a_set,
    starts_like_refs,
    zarr_store_problem,
)

__all__ = ["FORMATS", "forms", "by_name", "for_dest", "detect", "looks_like_refs", "ENTRY_POINTS",
           "detect_with_head", "COMPRESSION_SUFFIXES"]

COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd")

def refuse_non_refs(source: str, read_at: Callable[[int, int], bytes], size: int) -> None:
    """Raise :class:`~refset.errors.InvalidReferences` naming what ``source`` is when it is no
    reference set (a data file ``refset scan`` reads, one parquet record file, a GRIB inventory: see
    :func:`refset.io.magic.describe`), and what to do instead; else return."""
    problem = not_a_set(source, describe(read_at, size))
    if problem:
        raise InvalidReferences(problem)


def _refuse_zmetadata(source: str, storage_options: Mapping[str, Any] | None) -> None:
    """A ``.zmetadata`` file given for its set (parquet) or store (zarr): name the directory to give."""
    import json

    from refset.io.store import read_bytes

    directory = source.rstrip("/").rsplit("/", 1)[0] if "/" in source.rstrip("/") else "."
    try:
        doc = json.loads(read_bytes(source, dict(storage_options or {})))
    except (OSError, ValueError):
        return  # not readable as JSON: the readers say why
    if isinstance(doc, dict) and "record_size" in doc:
        raise InvalidReferences(f"{source}: is the .zmetadata of a parquet reference set, not a set: give "
                                f"its directory, {directory}")
    if isinstance(doc, dict) and "metadata" in doc:
        raise InvalidReferences(f"{source}: is the .zmetadata of a zarr store, not a reference set: open "
                                f"the store, {directory}, with zarr or xarray.open_zarr")



#: The entry-point group other packages add stored forms to (``name = "package.module:FormClass"``).
ENTRY_POINTS = "refset.formats"


def _builtin() -> dict[str, StoredForm]:
    from refset.formats.icechunk import IcechunkForm
    from refset.formats.json import JsonForm, JsonV1Form
    from refset.formats.packed import PackedForm
    from refset.formats.parquet import ParquetForm

    return {f.name: f for f in (JsonForm(), JsonV1Form(), ParquetForm(), PackedForm(), IcechunkForm())}


#: The built-in stored forms by name (:func:`forms` adds the installed ones).
FORMATS: dict[str, StoredForm] = _builtin()


@functools.cache
def forms() -> dict[str, StoredForm]:
    """Every stored form by name: the built-in ones, then those installed under :data:`ENTRY_POINTS`
    (one that fails to load is left out with a warning, as xarray treats its backends)."""
    out = dict(FORMATS)
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        try:
            cls = ep.load()
            if not (isinstance(cls, type) and issubclass(cls, StoredForm)):
                raise TypeError("not a refset.abc.format.StoredForm subclass")
            form = cls()
        except Exception as e:
            warnings.warn(f"refset: stored form {ep.name!r} ({ep.value}) could not be loaded: {e}",
                          RuntimeWarning, stacklevel=2)
            continue
        out.setdefault(form.name, form)
    return out


def by_name(name: str) -> StoredForm:
    spec = forms().get(name)
    if spec is None:
        raise Unsupported(f"format: unknown format {name!r}, expected one of {', '.join(forms())}")
    return spec


def _strip_compression(name: str) -> str:
    for suffix in COMPRESSION_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def _by_prefix(url: str) -> StoredForm | None:
    """The form whose scheme ``url`` starts with (``icechunk://``), or None."""
    for spec in forms().values():
        if spec.prefixes and url.lower().startswith(spec.prefixes):
            return spec
    return None


def for_dest(dest: str, *, strict: bool = False) -> StoredForm:
    """The format a destination's name asks for (JSON Version 0 when nothing matches).

    ``strict`` (the command line): a name whose suffix no format knows (``out.xyz``) raises
    :class:`InvalidOption` naming the known suffixes; a name without a suffix is still JSON.
    """
    by_scheme = _by_prefix(dest)
    if by_scheme is not None:
        return by_scheme
    name = _strip_compression(dest.rstrip("/")).lower()  # suffixes in any case: OUT.JSON
    matches = [(len(x), spec) for spec in forms().values() for x in spec.suffixes if name.endswith(x)]
    if matches:  # the longest suffix: out.v1.json is Version 1
        return max(matches, key=lambda m: m[0])[1]
    suffix = os.path.splitext(os.path.basename(name))[1]
    if strict and suffix and not dest.endswith("/"):
        known = ", ".join(s for spec in forms().values() for s in spec.suffixes)
        raise InvalidOption(f"output {dest!r}: unknown suffix {suffix!r}; known suffixes: {known} "
                          f"(JSON may end in {' or '.join(COMPRESSION_SUFFIXES)} too)")
    return FORMATS["json"]


def looks_like_refs(name: str) -> bool:
    """Whether a path names a reference set by its suffix, or (local files) by its magic bytes."""
    stripped = _strip_compression(name.rstrip("/"))
    if any(stripped.endswith(s.suffixes) for s in forms().values()):
        return True
    if "://" not in name and os.path.isfile(name):
        try:
            with open(name, "rb") as f:
                return f.read(len(PACKED_MAGIC)) == PACKED_MAGIC
        except OSError:
            return False
    return False


def _local(source: str, storage_options: Mapping[str, Any] | None) -> str | None:
    return local_path(source) if is_local(source, storage_options) else None




def detect(source: str, storage_options: Mapping[str, Any] | None = None) -> StoredForm:
    """The format of the reference set at ``source``, from its content (not its name).

    A directory holding ``.zmetadata`` is parquet. Remotely, where directories may not be listable
    (plain HTTP servers), ``<source>/.zmetadata`` is tried when the source cannot be read as a file or
    does not start like JSON or packed.
    """
    return detect_with_head(source, storage_options)[0]


def detect_with_head(source: str, storage_options: Mapping[str, Any] | None = None
                     ) -> tuple[StoredForm, bytes | None]:
    """:func:`detect`, and for a remote file its first ``HEAD_SIZE`` bytes (all of it when shorter),
    which the reader takes instead of asking for them again."""
    by_scheme = _by_prefix(source)
    if by_scheme is not None:
        return by_scheme, None
    if source.rstrip("/").rsplit("/", 1)[-1] == ".zmetadata":
        _refuse_zmetadata(source, storage_options)
    local = _local(source, storage_options)
    if local is not None:
        if os.path.isdir(local):
            return FORMATS["parquet"], None
        if not os.path.lexists(local) and glob.glob(glob.escape(local) + ".refset-old-*"):
            return FORMATS["parquet"], None  # a killed write set it aside (see _parquet._set_aside)
        with open(local, "rb") as f:
            head = f.read(16)
            if not starts_like_refs(head):  # the error path only: name what it is
                refuse_non_refs(source, file_reader(f), os.fstat(f.fileno()).st_size)
        return (FORMATS["packed"] if head.startswith(PACKED_MAGIC) else FORMATS["json"]), None
    from refset.io.store import FsspecStore

    store = FsspecStore(trimmed(source), storage_options)

    def has(name: str) -> bool:
        try:
            return store.exists(name)
        except Exception:  # a server that refuses the probe: not there, rather than fail differently
            return False

    if _strip_compression(source.rstrip("/")).endswith(FORMATS["parquet"].suffixes) or source.endswith("/"):
        if has(".zmetadata"):
            return FORMATS["parquet"], None

    def refuse_zarr_store() -> None:
        problem = zarr_store_problem(source, has)
        if problem:
            raise InvalidReferences(problem)

    try:
        head = bytes(store.read("", 0, HEAD_SIZE))
    except Exception:
        if has(".zmetadata"):
            return FORMATS["parquet"], None
        from refset.io.atomic import remote_leftovers

        if remote_leftovers(store.fs, store.root):  # a write killed while copying its tree into place left it
            return FORMATS["parquet"], None
        refuse_zarr_store()
        raise
    if head.startswith(PACKED_MAGIC):
        return FORMATS["packed"], head
    if not starts_like_refs(head):
        refuse_non_refs(source, lambda offset, n: head[offset:offset + n], len(head))
        if has(".zmetadata"):  # e.g. an HTML directory listing
            return FORMATS["parquet"], None
        refuse_zarr_store()
    return FORMATS["json"], head
