"""JSON reference documents (Version 0, the ``{"version": 1, "refs": ...}`` envelope, Version 1)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from ..errors import InvalidReferences
from ..model import Builder, ReferenceSet
from ._json_v0 import refs_from_v0
from ._json_v1 import DEFAULT_MAX_GEN, read_v1

__all__ = ["from_document", "from_json_bytes", "document_problems", "decode_json"]


def decode_json(data: bytes) -> Any:
    """Parse JSON text; a syntax error becomes InvalidReferences naming the position."""
    import msgspec

    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:
        raise InvalidReferences(f"invalid JSON: {e}") from None


def is_v1(doc: Mapping[str, Any]) -> bool:
    """Version 1 when ``version`` is present and is not itself a reference (a V0 key "version")."""
    v = doc.get("version")
    return "version" in doc and not isinstance(v, (str, list, dict))


def collect(
    doc: Any,
    problems: list[str],
    *,
    max_gen: int = DEFAULT_MAX_GEN,
    template_overrides: Mapping[str, str] | None = None,
    builder: Builder | None = None,
    refs_done: bool = False,
) -> Builder:
    """Check ``doc`` and add its references to a Builder; problems are appended, one line each."""
    b = builder or Builder()
    if not isinstance(doc, Mapping):
        problems.append(f"document: must be a JSON object, got {type(doc).__name__}")
        return b
    if is_v1(doc):
        if doc["version"] != 1:
            problems.append(f"version: unknown version {json.dumps(doc['version'])}, expected 1")
            return b
        read_v1(doc, b, problems, max_gen=max_gen, template_overrides=template_overrides,
                refs_done=refs_done)
    elif not refs_done:
        for k, r in refs_from_v0(doc, problems):
            b.add(k, r)
    return b


def from_document(
    doc: Mapping[str, Any],
    *,
    max_gen: int = DEFAULT_MAX_GEN,
    template_overrides: Mapping[str, str] | None = None,
    builder: Builder | None = None,
    dense: Collection[str] | None = None,
) -> ReferenceSet:
    """The set of a parsed document. ``builder`` (empty, possibly sharing a URL table) and
    ``dense`` (see ``Builder.build``) let a lazy reader finish the way it started."""
    problems: list[str] = []
    b = collect(doc, problems, max_gen=max_gen, template_overrides=template_overrides, builder=builder)
    if problems:
        raise InvalidReferences(problems)
    rs = b.build(dense=dense)
    rs.stored.update(format="json", version=1 if is_v1(doc) else 0)
    return rs


def from_json_bytes(
    data: bytes | list[bytes],
    *,
    max_gen: int = DEFAULT_MAX_GEN,
    template_overrides: Mapping[str, str] | None = None,
    lazy: bool = False,
) -> ReferenceSet:
    """Parse JSON text (or a one-item list holding it, which the reader may empty to save memory).

    ``lazy``: large documents read their chunk tables on first use (see ``_fastjson.fast_load``).
    """
    from ._fastjson import fast_load

    rs = fast_load(data, max_gen=max_gen, template_overrides=template_overrides, lazy=lazy)
    if rs is not None:
        return rs
    text = data[0] if isinstance(data, list) else data
    return from_document(decode_json(text), max_gen=max_gen, template_overrides=template_overrides)


def document_problems(data: bytes, *, max_gen: int = DEFAULT_MAX_GEN) -> list[str]:
    """Every problem of a JSON reference document, one line each (empty when valid)."""
    from ._fastjson import fast_load

    try:
        if fast_load(data, max_gen=max_gen) is not None:
            return []  # the vectorised reader accepts only valid documents
    except InvalidReferences as e:
        return e.problems
    try:
        doc = decode_json(data)
    except InvalidReferences as e:
        return e.problems
    problems: list[str] = []
    collect(doc, problems, max_gen=max_gen)
    return problems
