"""Version 0 values: checking and normalising one reference, and writing Version 0 JSON."""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from refset.errors import InvalidReferences, Unsupported
from refset.io.atomic import write_bytes
from refset.io.compression import compress
from refset.model.inline import InlineBytes
from refset.model.keys import ChunkGrid, chunk_keys
from refset.model.producer import json_text
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, MAX_END, RANGE, WHOLE, Ref, resolve, v0_value

__all__ = ["normalize_value", "where", "dumps_v0", "write_json", "refs_from_v0", "is_int"]


def where(key: str, *index: int) -> str:
    """``refs["x/0"][1]``: the location of a field, for error messages."""
    return f"refs[{json.dumps(key)}]" + "".join(f"[{i}]" for i in index)


def is_int(v: object) -> bool:
    """An integer (Python or numpy), not a bool."""
    if type(v) is int:  # the common case, without the ABC check
        return True
    import numbers

    return isinstance(v, numbers.Integral) and not isinstance(v, bool | np.bool_)


def normalize_value(
    key: str,
    value: Any,
    problems: list[str],
    render_url: Callable[[str, str], str | None] | None = None,
) -> Ref | None:
    """One Version 0 (or Version 1 ``refs``) value as a :data:`~refset.model.table.Ref`; the set's own
    value forms (``bytes``, ``(url,)``, ``(url, offset, length)``, numpy integers) are taken too.

    Problems are appended to ``problems`` (one line each) and None is returned for a bad value.
    ``render_url(url, where)`` expands templates in URLs (Version 1); it reports its own problems.
    """
    if isinstance(value, str):
        if value.startswith("base64:"):
            try:  # strict mode is fast; what it refuses goes through b64decode's own rules
                return binascii.a2b_base64(value[7:], strict_mode=True)
            except (binascii.Error, ValueError):
                pass
            try:
                return base64.b64decode(value[7:], validate=True)
            except (binascii.Error, ValueError) as e:
                problems.append(f"{where(key)}: bad base64 data ({e})")
                return None
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dict):
        # a JSON document given as an object: the value is that JSON file
        try:
            return json_text(value, where(key))
        except InvalidReferences as e:
            problems.extend(e.problems)
            return None
    if isinstance(value, list | tuple):
        if len(value) not in (1, 3):
            problems.append(
                f"{where(key)}: a reference list must have 1 item [url] or 3 items "
                f"[url, offset, length], got {len(value)}"
            )
            return None
        url = value[0]
        if not isinstance(url, str):
            problems.append(f"{where(key, 0)}: url must be a string, got {type(url).__name__}")
            return None
        ok = True
        if len(value) == 3:
            for i, name in ((1, "offset"), (2, "length")):
                v = value[i]
                if not is_int(v) or v < 0:
                    shown = json.dumps(v, default=repr)
                    problems.append(f"{where(key, i)}: {name} must be a non-negative integer, got {shown}")
                    ok = False
            if ok and int(value[1]) + int(value[2]) >= MAX_END:
                problems.append(f"{where(key)}: offset {int(value[1])} + length {int(value[2])} must be "
                                "below 2**63")
                ok = False
        if render_url is not None and "{{" in url:
            rendered = render_url(url, where(key, 0))
            if rendered is None:
                return None
            url = rendered
        if not ok:
            return None
        return (url,) if len(value) == 1 else (url, int(value[1]), int(value[2]))
    problems.append(
        f"{where(key)}: value must be a string, a JSON object, [url] or [url, offset, length], "
        f"got {type(value).__name__}"
    )
    return None


def refs_from_v0(
    refs: Mapping[Any, Any],
    problems: list[str],
    render_url: Callable[[str, str], str | None] | None = None,
) -> list[tuple[str, Ref]]:
    """Normalise a Version 0 ``refs`` mapping; problems are collected, bad entries dropped."""
    out: list[tuple[str, Ref]] = []
    append = out.append
    plain = render_url is None
    for k, v in refs.items():
        if type(v) is list and len(v) == 3:  # the common [url, offset, length], checked inline
            url, off, n = v
            if (type(url) is str and type(off) is int and type(n) is int and 0 <= off and 0 <= n
                    and off + n < MAX_END and (plain or "{{" not in url) and type(k) is str):
                append((k, (url, off, n)))
                continue
        if not isinstance(k, str):
            problems.append(f"refs: key {k!r} must be a string, got {type(k).__name__}")
            continue
        r = normalize_value(k, v, problems, render_url)
        if r is not None:
            append((k, r))
    return out


#: Chunk references turned into text together (bounds the temporary list of member texts).
WRITE_BLOCK = 1 << 16


#: Arrays with fewer chunks than this are written through a dict (numpy's fixed cost per call).
SMALL_TABLE = 64


def dumps_v0(rs: ReferenceSet) -> bytes:
    """Version 0 JSON text of ``rs``: what ``msgspec.json.encode(rs.to_dict())`` gives, with the set's
    fingerprints where JSON keeps them (:func:`refset.model.fingerprints.spelled`). The
    references of large arrays are written from their columns, a block of members at a time, URLs
    and array paths escaped once each."""
    import msgspec

    enc = msgspec.json.encode
    other = rs.stored_key_table()  # the keys, and the fingerprints where other readers do not look
    stored = {key: v0_value(resolve(other.row(i), rs.urls, key)) for i, key in enumerate(other.keys.tolist())}
    if _nested(rs.grids):  # an array inside another: their chunk keys may coincide
        return enc({**rs.to_dict(), **stored})
    head = enc(stored)
    parts = [head[:-1]]  # "{...other members" without the closing brace
    urls = _json_strings(rs.urls)
    for path in rs.grids:
        t = rs.table(path)
        f, kind, pid, off, ln = t.entries()
        if not f.size:
            continue
        parts.append(b"," if len(parts) > 1 or len(head) > 2 else b"")
        if f.size < SMALL_TABLE:
            parts.append(enc({key: v0_value(ref) for key, ref in rs.items_of(path)})[1:-1])
            continue
        esc = enc(path).decode()[1:-1]  # chunk keys: the array path, then ASCII digits and separators
        for s in range(0, f.size, WRITE_BLOCK):
            e = s + WRITE_BLOCK
            if s:
                parts.append(b",")
            parts.append(_members(esc, rs.grids[path], f[s:e], kind[s:e], pid[s:e], off[s:e], ln[s:e],
                                  urls, t.inline, enc))
    parts.append(b"}")
    return b"".join(parts)


def _nested(paths: Mapping[str, Any]) -> bool:
    """Whether an array path lies inside another array (the root array holds every other)."""
    if "" in paths and len(paths) > 1:
        return True
    return any(p[:i] in paths for p in paths for i in range(len(p)) if p[i] == "/")


def _json_strings(values: tuple[str, ...]) -> list[str]:
    """Each string as a JSON string literal (quotes included)."""
    import msgspec

    return [msgspec.json.encode(v).decode() for v in values]


def _members(esc_path: str, grid: ChunkGrid, f: np.ndarray, kind: np.ndarray, pid: np.ndarray,
             off: np.ndarray, ln: np.ndarray, urls: list[str], inline: InlineBytes,
             enc: Callable[[Any], bytes]) -> bytes:
    """``"key":value`` of chunks ``f``, comma-separated. One block of texts at a time: formatting
    each member in Python is 1.6-2x faster than composing them with numpy string operations."""
    keys = chunk_keys(esc_path, grid, f).tolist()
    if bool((kind == RANGE).all()):  # the common case: one comprehension
        return ",".join([f'"{k}":[{urls[p]},{o},{n}]' for k, p, o, n in
                         zip(keys, pid.tolist(), off.tolist(), ln.tolist(), strict=True)]).encode()
    out: list[str] = [""] * len(keys)
    rng = np.flatnonzero(kind == RANGE)
    for i, p, o, n in zip(rng.tolist(), pid[rng].tolist(), off[rng].tolist(), ln[rng].tolist(), strict=True):
        out[i] = f'"{keys[i]}":[{urls[p]},{o},{n}]'
    whole = np.flatnonzero(kind == WHOLE)
    for i, p in zip(whole.tolist(), pid[whole].tolist(), strict=True):
        out[i] = f'"{keys[i]}":[{urls[p]}]'
    inl = np.flatnonzero(kind == INLINE)
    if inl.size:
        _inline_members(out, keys, inl, inline, f[inl], enc)
    return ",".join(out).encode()


def _inline_members(out: list[str], keys: list[str], at: np.ndarray, inline: InlineBytes, flat: np.ndarray,
                    enc: Callable[[Any], bytes]) -> None:
    """``out[at[j]]``: the member of ``keys[at[j]]`` and the value at ``flat[j]`` (ascending, all
    present), spelt as :func:`~refset.model.table.encode_inline` does: the text of ASCII values, else
    base64 of a view into the buffer (which needs no JSON escapes)."""
    pos = inline.positions(flat)
    starts, ends = inline.offsets[pos], inline.offsets[pos + 1]
    data = memoryview(inline.data)
    b2a = binascii.b2a_base64
    for i, a, b, text in zip(at.tolist(), starts.tolist(), ends.tolist(),
                             _ascii(inline.data, pos, starts, ends).tolist(), strict=True):
        if text and (b - a < 7 or bytes(data[a:a + 7]) != b"base64:"):
            out[i] = f'"{keys[i]}":{enc(data[a:b].tobytes().decode("ascii")).decode()}'
        else:
            out[i] = f'"{keys[i]}":"base64:{b2a(data[a:b], newline=False).decode("ascii")}"'


def _ascii(data: bytes, pos: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Whether each value (at buffer positions ``pos``) is ASCII, by one ``reduceat`` over the
    buffer: the inline values of a block of a table's entries are consecutive positions (a table's
    inline chunks are exactly its INLINE rows), so the segments between their starts are the values."""
    out: np.ndarray = ends == starts
    full = np.flatnonzero(~out)
    if full.size:
        raw = np.frombuffer(data, np.uint8, int(ends[-1]))
        out[full] = np.maximum.reduceat(raw, starts[full]) < 128
    return out


def write_json(rs: ReferenceSet, dest: str, *, storage_options: Mapping[str, Any] | None = None,
               **options: Any) -> None:
    """Write ``rs`` as Version 0 JSON to ``dest`` (``.gz``/``.zst``: compressed), atomically."""
    if options:
        raise Unsupported(f"options {sorted(options)} are not used by format 'json'")
    dest = os.fspath(dest)
    write_bytes(dest, compress(dumps_v0(rs), dest), dict(storage_options or {}))
