"""Reading and writing reference sets: one module per on-disk form, one registry (:mod:`.registry`).

Readers produce a :class:`~refset.abc.source.Source`; :func:`load` wraps it in a
:class:`~refset.ReferenceSet` that remembers how to reopen it (pickling). Writers receive the set
with every table read, so conversion is load + save from any form to any form.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from refset.errors import InvalidReferences, Unsupported
from refset.formats.registry import FORMATS, by_name, detect, detect_with_head, for_dest
from refset.io.local import is_local, local_path
from refset.model.producer import check_bounds
from refset.model.refset import ReferenceSet
from refset.options import DEFAULT_LIMITS, Limits

__all__ = ["load", "save", "detect_format", "Format", "FORMATS"]

Format = Literal["json", "v1", "parquet", "packed", "icechunk"]


def detect_format(source: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """``"json"``, ``"parquet"`` or ``"packed"``, from the content at ``source`` (not its name)."""
    return detect(os.fspath(source), storage_options).name


def load(
    source: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    cache_size: int | None = None,
    limits: Limits | None = None,
    **options: Any,
) -> ReferenceSet:
    """Read a reference set.

    ``source``: a :class:`ReferenceSet` (returned as is), a mapping (a Version 0 or 1 document, or the
    set's own value forms: bytes, ``(url,)``, ``(url, offset, length)``), JSON text as bytes, or a
    path/URL to JSON (``.json``, ``.json.gz``, ``.json.zst``; compression is recognised by content),
    a parquet reference directory, or a packed file. ``options`` go to the format's reader (for JSON:
    ``lazy``, ``max_gen``, ``template_overrides``). ``cache_size``: at most this many decoded blocks (parquet
    records, packed segments) kept for single-key lookups (besides ``limits.block_cache`` bytes). Malformed input raises
    :class:`~refset.errors.InvalidReferences`. ``limits``: bounds on what reading may spend
    (:class:`~refset.options.Limits`; the defaults when None), kept by a set that reads lazily.

    ``lazy=True`` (JSON files over 64 KiB): read keys, metadata and inline values now and the chunk
    tables on first use, keeping the text in memory until then; problems in chunk references are
    then reported at first use. Parquet and packed sets are always read lazily.

    A set opened from a path or URL pickles as that path and these options, so Dask workers reopen it
    lazily; other sets pickle their columns.
    """
    if isinstance(source, ReferenceSet):
        rs = source
    elif not isinstance(source, str | os.PathLike) and isinstance(source, Mapping):
        from refset.formats.json.generic import from_document

        _json_options(options, "a mapping")
        options.pop("lazy", None)
        rs = from_document(source, limits=limits or DEFAULT_LIMITS, **options)
    elif isinstance(source, bytes | bytearray | memoryview):
        from refset.formats.json.read import json_source

        _json_options(options, "JSON text")
        rs = ReferenceSet(json_source([bytes(source)], limits=limits or DEFAULT_LIMITS, **options))
    elif isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        if is_local(path, storage_options) and not path.startswith("file://"):
            path = os.path.abspath(local_path(path))  # reopened elsewhere (a Dask worker) from any directory
        spec, head = detect_with_head(path, storage_options)
        src = spec.read(path, storage_options=storage_options, head=head, limits=limits or DEFAULT_LIMITS,
                        **options)
        kwargs = dict(options)
        if storage_options:
            kwargs["storage_options"] = dict(storage_options)
        if limits is not None:
            kwargs["limits"] = limits
        if cache_size is not None:
            kwargs["cache_size"] = cache_size
        rs = ReferenceSet(src, origin=(load, (path,), kwargs))
    else:
        raise InvalidReferences(
            f"source: expected a mapping, a ReferenceSet, JSON bytes or a path/URL, got {type(source).__name__}"
        )
    if cache_size is not None:
        rs.block_cache_size = max(1, int(cache_size))
    if limits is not None:
        rs.block_cache_bytes = limits.block_cache
    return rs


def _json_options(options: Mapping[str, Any], what: str) -> None:
    unknown = sorted(set(options) - {"lazy", "max_gen", "template_overrides"})
    if unknown:
        raise Unsupported(f"options {unknown} are not used when reading {what} "
                          "(it takes: lazy, max_gen, template_overrides)")


def save(
    refs: Any,
    dest: str | os.PathLike[str] | Any,
    *,
    format: Format | str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> None:
    """Write ``refs`` (anything :func:`load` takes) to ``dest``, atomically.

    ``format``: ``"json"`` (Version 0), ``"v1"`` (Version 1 with URL templates; ``gen=True`` adds
    ``gen``), ``"parquet"`` or ``"packed"``; inferred from ``dest`` when omitted
    (``.parq``/``.parquet`` -> parquet, ``.packed``/``.refs``/``.rfs`` -> packed, ``.v1.json`` -> v1,
    any other name -> JSON; suffixes in any case). JSON output is compressed by suffix: ``.gz`` or
    ``.zst``. (The command line refuses a suffix no format knows.) Files get the mode the umask gives new files.
    ``format="icechunk"`` (or ``icechunk://PATH``, or an ``icechunk.Repository`` / ``IcechunkStore`` as
    ``dest``) writes an Icechunk repository (docs/icechunk.md).
    """
    if not isinstance(dest, str | os.PathLike) and type(dest).__module__.split(".")[0] == "icechunk":
        format = format or "icechunk"  # an icechunk.Repository or IcechunkStore
    else:
        dest = os.fspath(dest)
    spec = by_name(format) if format is not None else for_dest(dest)
    options = spec.check_options(options)
    rs = load(refs, storage_options=storage_options)
    full = rs.loaded()
    check_bounds({p: full.table(p) for p in full.grids}, full.other)  # however the set was built
    spec.write(full, dest, storage_options=storage_options, **options)
    warn_parts(full, dest)


def warn_parts(rs: ReferenceSet, dest: Any) -> None:
    """Say once, after writing ``rs`` to ``dest``, which of its variables only refset serves whole."""
    from refset.model.parts import PartsWarning, find_parts

    mixed = find_parts(rs)
    if mixed:
        import warnings

        names = ", ".join(repr(p) for p in sorted(mixed))
        first = next(iter(sorted(mixed.items())))[1].paths()[0]
        warnings.warn(PartsWarning(
            f"{dest}: variables {names} are made of parts (their inputs differ in chunks, codecs, dtype or "
            f"packing): refset serves each whole; other readers (fsspec + zarr, kerchunk, xarray's zarr "
            f"engine) see each part as an array of its own ({first!r}, ...) and not the variable (see "
            "docs/formats.md, 'Variables made of parts')"), stacklevel=2)

