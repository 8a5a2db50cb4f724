"""Parsed JSON reference documents (Version 0, the ``{"version": 1, "refs": ...}`` envelope, Version 1,
and any mapping in the set's own value forms) into a Builder: the generic path, one key at a time,
which reports every problem precisely."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from refset.errors import InvalidReferences
from refset.formats.json.v0 import refs_from_v0
from refset.formats.json.v1 import DEFAULT_MAX_GEN, read_v1
from refset.model.builder import Builder
from refset.model.refset import ReferenceSet
from refset.options import DEFAULT_LIMITS, Limits

__all__ = ["from_document", "collect", "decode_json", "is_v1"]


def decode_json(data: bytes | bytearray) -> Any:
    """Parse JSON text; a syntax error becomes InvalidReferences naming the position.

    ``NaN``, ``Infinity`` and ``-Infinity`` are accepted, as Python's json (and fsspec) read them:
    kerchunk writes them in attributes.
    """
    import msgspec

    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        first: Exception = e
    except RecursionError:
        raise InvalidReferences("invalid JSON: nested too deeply") from None
    try:
        return json.loads(bytes(data))
    except (ValueError, UnicodeDecodeError):
        raise InvalidReferences(f"invalid JSON: {first}") from None
    except RecursionError:
        raise InvalidReferences("invalid JSON: nested too deeply") from None


def is_v1(doc: Mapping[str, Any]) -> bool:
    """Version 1 when ``version`` is present and is not itself a reference (a V0 key "version")."""
    v = doc.get("version")
    return "version" in doc and not isinstance(v, str | list | tuple | dict | bytes)


def collect(
    doc: Any,
    problems: list[str],
    *,
    max_gen: int = DEFAULT_MAX_GEN,
    template_overrides: Mapping[str, str] | None = None,
    builder: Builder | None = None,
    refs_done: bool = False,
    limits: Limits = DEFAULT_LIMITS,
) -> Builder:
    """Check ``doc`` and add its references to a Builder; problems are appended, one line each."""
    b = builder or Builder()
    if not isinstance(doc, Mapping):
        if isinstance(doc, list) and doc and all(isinstance(x, Mapping) for x in doc):
            problems.append(f"document: is a list of {len(doc)} reference sets, not one: combine them "
                            "with `refset combine` (in Python: refset.combine), or load each item")
        else:
            problems.append(f"document: must be a JSON object, got {type(doc).__name__}")
        return b
    if is_v1(doc):
        if doc["version"] != 1:
            problems.append(f"version: unknown version {json.dumps(doc['version'], default=str)}, "
                            "expected 1")
            return b
        read_v1(doc, b, problems, max_gen=max_gen, template_overrides=template_overrides,
                refs_done=refs_done, limits=limits)
    elif not refs_done:
        b.items.update(refs_from_v0(doc, problems))
    return b


def from_document(
    doc: Mapping[str, Any],
    *,
    max_gen: int = DEFAULT_MAX_GEN,
    template_overrides: Mapping[str, str] | None = None,
    builder: Builder | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> ReferenceSet:
    """The set of a parsed document. ``builder`` (empty, possibly sharing a URL table) lets a lazy
    reader finish with the URL ids it handed out."""
    problems: list[str] = []
    b = collect(doc, problems, max_gen=max_gen, template_overrides=template_overrides, builder=builder,
                limits=limits)
    if problems:
        raise InvalidReferences(problems)
    info = {"format": "json", "version": 1 if is_v1(doc) else 0}
    urls, tables, other = b.build_parts()
    # grids handed in from outside are checked against the metadata; built ones are consistent
    return ReferenceSet.from_arrays({}, tables, urls, other=other, validate=bool(b.extra_grids), info=info)
