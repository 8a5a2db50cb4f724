"""Reading JSON reference sets: the vectorised reader for large documents (eager, or lazily in steps),
the generic parser for everything else, and ``refset validate``'s problem list."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from refset.abc.source import Source
from refset.errors import InvalidReferences, Unsupported
from refset.formats.json.generic import collect, decode_json, from_document
from refset.formats.json.lazy import LazyJsonSource
from refset.formats.json.plan import plan_document
from refset.formats.json.scan import Fallback
from refset.formats.json.v1 import DEFAULT_MAX_GEN
from refset.model.memory import MemorySource
from refset.options import DEFAULT_LIMITS, Limits

__all__ = ["read_json", "json_source", "document_problems"]

TRIM_SIZE = 1 << 24  # from this many bytes of JSON text, freed memory is handed back after reading


@functools.cache
def _malloc_trim() -> Any:
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            return ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            pass
    return None


def _release_freed_memory() -> None:
    """Hand the parser's freed temporaries back to the OS (glibc keeps them in its heap)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def json_source(
    box: list[bytes | bytearray],
    *,
    max_gen: int = DEFAULT_MAX_GEN,
    template_overrides: Mapping[str, str] | None = None,
    lazy: bool = False,
    info: Mapping[str, object] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Source:
    """The source of the JSON text in the one-item list ``box``, which the reader empties so that the
    text can be let go as soon as the tables no longer need it.

    ``lazy``: for large documents, read keys, metadata and inline values now and each chunk table when
    first used (problems in chunk references are then reported at first use).
    """
    data = box.pop()
    plan = plan_document(data, template_overrides, max_gen, limits)
    if plan is not None:
        del data
        if lazy and not (plan.head_doc or {}).get("gen"):
            try:
                if plan.heads is None:
                    plan.classify()
                return LazyJsonSource(plan, info)
            except Fallback:
                pass
        else:
            try:
                urls, tables, other = plan.finish()
                return MemorySource.of_parts(urls, tables, other, {**plan.info, **(info or {})})
            except Fallback:
                pass
        data = plan.doc.data
        del plan
    rs = from_document(decode_json(data), max_gen=max_gen, template_overrides=template_overrides, limits=limits)
    del data
    src = rs.source
    assert isinstance(src, MemorySource)
    return MemorySource(src.urls(), src.metadata, src.tables, src.other(), {**src.info(), **(info or {})},
                        fingerprints=src.fingerprints())


def read_json(
    source: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    lazy: bool = False,
    max_gen: int = DEFAULT_MAX_GEN,
    template_overrides: Mapping[str, str] | None = None,
    head: bytes | None = None,
    limits: Limits = DEFAULT_LIMITS,
    **options: Any,
) -> Source:
    """Open a JSON reference set (plain, gzip or zstd, recognised from the content). ``head``: the
    file's first bytes when already read; a head shorter than ``HEAD_SIZE`` is the whole file."""
    from refset.io.compression import decompress
    from refset.io.magic import HEAD_SIZE
    from refset.io.store import read_bytes

    if options:
        raise Unsupported(f"options {sorted(options)} are not used when reading JSON references")
    if head is not None and len(head) < HEAD_SIZE:
        raw = head
    else:
        raw = read_bytes(os.fspath(source), dict(storage_options or {}))
    compression = {b"\x1f\x8b": "gzip", b"\x28\xb5": "zstd"}.get(bytes(raw[:2]))
    box = [decompress(raw, source, limits.decompressed)]
    del raw  # the reader releases the text before it builds the tables
    big = len(box[0]) >= TRIM_SIZE
    src = json_source(box, max_gen=max_gen, template_overrides=template_overrides, lazy=lazy,
                      info={"compression": compression}, limits=limits)
    if big:  # a small document's temporaries are too few to be worth a walk of the heap
        _release_freed_memory()
    return src


def document_problems(data: bytes | bytearray, *, max_gen: int = DEFAULT_MAX_GEN, limits: Limits = DEFAULT_LIMITS,
                      ) -> list[str]:
    """Every problem of a JSON reference document, one line each (empty when valid)."""
    plan = plan_document(data, None, max_gen, limits)
    if plan is not None:
        try:
            plan.finish()
            return []  # the vectorised reader accepts only valid documents
        except Fallback:
            pass
        except InvalidReferences as e:
            return e.problems
    try:
        doc = decode_json(data)
    except InvalidReferences as e:
        return e.problems
    problems: list[str] = []
    collect(doc, problems, max_gen=max_gen, limits=limits)
    return problems
