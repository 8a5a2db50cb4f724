"""Reading and writing reference sets: one module per on-disk form, one detection function.

Readers and writers meet only at :class:`~refset.model.ReferenceSet`, so conversion is load + save.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from ..errors import InvalidReferences, Unsupported
from ..model import ReferenceSet

__all__ = ["load", "save", "detect_format", "Format", "FORMATS"]

Format = Literal["json", "v1", "parquet", "packed"]
FORMATS: tuple[str, ...] = ("json", "v1", "parquet", "packed")


def _fs_and_path(source: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    import fsspec

    fs, _, paths = fsspec.get_fs_token_paths(source, storage_options=dict(storage_options or {}))
    return fs, paths[0]


def _head(source: str, storage_options: Mapping[str, Any] | None, n: int = 16) -> bytes:
    if "://" not in source and not storage_options:
        with open(source, "rb") as f:
            return f.read(n)
    import fsspec

    with fsspec.open(source, "rb", **dict(storage_options or {})) as f:
        return f.read(n)


def _is_dir(source: str, storage_options: Mapping[str, Any] | None) -> bool:
    if "://" not in source and not storage_options:
        return os.path.isdir(source)
    fs, path = _fs_and_path(source, storage_options)
    return bool(fs.isdir(path))


def detect_format(source: str, storage_options: Mapping[str, Any] | None = None) -> str:
    """``"json"``, ``"parquet"`` or ``"packed"``, from the content at ``source`` (not its name)."""
    if _is_dir(source, storage_options):
        return "parquet"
    from ._packed import MAGIC as PACKED_MAGIC

    head = _head(source, storage_options)
    if head.startswith(PACKED_MAGIC):
        return "packed"
    return "json"


def load(
    source: Any,
    *,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> ReferenceSet:
    """Read a reference set.

    ``source``: a :class:`ReferenceSet` (returned as is), a dict (Version 0 or 1), or a path/URL to
    JSON (``.json``, ``.json.gz``, ``.json.zst``; compression is recognised by content), a parquet
    reference directory, or a packed file. ``options`` go to the format's reader (for JSON:
    ``max_gen``, ``template_overrides``). Malformed input raises :class:`~refset.errors.InvalidReferences`.

    ``lazy=True`` (JSON files over 64 KiB): read keys, metadata and inline values now and the chunk
    tables on first use, keeping the text in memory until then; problems in chunk references are
    then reported at first use. Parquet and packed sets are always read lazily.
    """
    lazy = bool(options.pop("lazy", False))
    if isinstance(source, ReferenceSet):
        return source
    if not isinstance(source, (str, os.PathLike)) and isinstance(source, Mapping):
        from ._json import from_document

        return from_document(source, **options)
    if isinstance(source, (bytes, bytearray, memoryview)):
        from ._json import from_json_bytes

        return from_json_bytes(bytes(source), lazy=lazy, **options)
    if not isinstance(source, (str, os.PathLike)):
        raise InvalidReferences(
            f"source: expected a dict, a ReferenceSet or a path/URL, got {type(source).__name__}"
        )
    source = os.fspath(source)
    fmt = detect_format(source, storage_options)
    if fmt == "parquet":
        from ._parquet import read_parquet

        return read_parquet(source, storage_options=storage_options, **options)
    if fmt == "packed":
        from ._packed import read_packed

        return read_packed(source, storage_options=storage_options, **options)
    from ._io import decompress, read_bytes
    from ._json import from_json_bytes

    raw = read_bytes(source, storage_options)
    compression = {b"\x1f\x8b": "gzip", b"\x28\xb5": "zstd"}.get(raw[:2])
    box = [decompress(raw, source)]
    del raw  # the reader releases the text before it builds the tables
    rs = from_json_bytes(box, lazy=lazy, **options)
    rs.stored.setdefault("compression", compression)
    _release_freed_memory()
    return rs


def _release_freed_memory() -> None:
    """Hand the parser's freed temporaries back to the OS (glibc keeps them in its heap)."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass


def _infer_format(dest: str) -> str:
    name = dest.rstrip("/")
    for suffix in (".gz", ".zst", ".zstd"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if name.endswith((".parq", ".parquet")):
        return "parquet"
    if name.endswith((".packed", ".refs", ".rfs")):
        return "packed"
    return "json"


def save(
    refs: Any,
    dest: str | os.PathLike[str],
    *,
    format: Format | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> None:
    """Write ``refs`` (anything :func:`load` takes) to ``dest``, atomically.

    ``format``: ``"json"`` (Version 0), ``"v1"`` (Version 1 with templates and ``gen``), ``"parquet"``
    or ``"packed"``; inferred from ``dest`` when omitted (``.parq``/``.parquet`` -> parquet,
    ``.packed`` -> packed, else JSON). JSON output is compressed by suffix: ``.gz`` or ``.zst``.
    """
    rs = load(refs, storage_options=storage_options) if not isinstance(refs, ReferenceSet) else refs
    dest = os.fspath(dest)
    fmt = format or _infer_format(dest)
    if fmt not in FORMATS:
        raise Unsupported(f"format: unknown format {fmt!r}, expected one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        from ._parquet import write_parquet

        write_parquet(rs, dest, storage_options=storage_options, **options)
        return
    if fmt == "packed":
        from ._packed import write_packed

        write_packed(rs, dest, storage_options=storage_options, **options)
        return
    from ._io import compress, write_bytes

    if fmt == "v1":
        from ._v1_writer import dumps_v1

        data = dumps_v1(rs, **options)
    else:
        if options:
            raise Unsupported(f"options {sorted(options)} are not used by format 'json'")
        from ._json_v0 import dumps_v0

        data = dumps_v0(rs)
    write_bytes(dest, compress(data, dest), storage_options)
