"""A JSON text as the vectorised readers see it: its bytes, the positions of its unescaped quotes
(the string table: member m of the body has key string ``first + 2m`` and, for a string value,
value string ``first + 2m + 1``), the checked shape of members (key, value, ``[url, offset,
length]``) found column-wise, and ``base64:`` values decoded straight from the text."""

from __future__ import annotations

import binascii
import re

import numpy as np

from refset.formats.json.scan import (
    LOW8,
    Fallback,
    decode_string,
    digits_end,
    parse_uints,
    quotes,
    skip_ws,
    word,
    words,
)

__all__ = ["Doc", "member_shape", "base64_bytes", "base64_many", "base64_lengths"]

_ESCAPE_OR_CONTROL = re.compile(rb"[\x00-\x1f\\]")  # a backslash, or a byte JSON forbids in a string


class Doc:
    """The text and its string table; member m of the body has key string ``first + 2m``."""

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data
        self.a = np.frombuffer(data, np.uint8)
        self.W = words(data)
        self.q: np.ndarray = quotes(data, self.a)
        self.nstr = self.q.size // 2
        self.first = 0
        self.members = 0

    def s(self, j: np.ndarray) -> np.ndarray:
        out: np.ndarray = self.q[2 * j] + np.int64(1)
        return out

    def e(self, j: np.ndarray) -> np.ndarray:
        return np.asarray(self.q[2 * j + 1], np.int64)  # an int32 copy when the text is under 2 GiB

    def text(self, s: int, e: int) -> str:
        raw = self.data[s:e]
        if _ESCAPE_OR_CONTROL.search(raw) is None:  # its bytes are the string: no JSON parser needed
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                raise Fallback from None
        return decode_string(self.data, s, e)


def member_shape(doc: Doc, m: np.ndarray, more: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Check members ``m`` (ascending member numbers) and find their parts. ``more``: whether a
    member is followed by another of its object (default: all but the document's last are).

    Returns key/value spans, ``is_arr`` (value is a list), ``whole`` ([url]), offset, length and
    ``term``, the position of the ',' or '}' after each member.
    """
    a, W = doc.a, doc.W
    j = doc.first + 2 * m
    ks, ke, vs, ve = doc.s(j), doc.e(j), doc.s(j + 1), doc.e(j + 1)
    n = ks.size
    # between key and value: ws ':' ws ( '"' | '[' ws '"' )
    p = skip_ws(a, ke + 1, 1)
    if not np.all(a[p] == 58):
        raise Fallback
    p = skip_ws(a, p + 1, 1)
    is_arr = a[p] == 91
    if not np.all(is_arr | (p == vs - 1)):
        raise Fallback
    ai = np.flatnonzero(is_arr)
    if ai.size and not np.all(skip_ws(a, p[ai] + 1, 1) == vs[ai] - 1):
        raise Fallback
    # after the value: strings end with ws (',' | '}'); lists hold ', int, int]' or ']'
    after = skip_ws(a, ve + 1, 1)
    term = after.copy()
    ca = a[after[ai]]
    whole = np.zeros(n, bool)
    whole[ai[ca == 93]] = True
    three = ai[ca == 44]
    if np.count_nonzero(whole) + three.size != ai.size:
        raise Fallback
    w_i = np.flatnonzero(whole)
    if w_i.size:
        term[w_i] = skip_ws(a, after[w_i] + 1, 1)
    offset = np.zeros(n, np.uint64)
    length = np.zeros(n, np.uint64)
    if three.size:
        s1 = skip_ws(a, after[three] + 1, 1)
        e1 = digits_end(W, a, s1)
        c2 = skip_ws(a, e1, 1)
        if not np.all(a[c2] == 44):
            raise Fallback
        s2 = skip_ws(a, c2 + 1, 1)
        e2 = digits_end(W, a, s2)
        rb = skip_ws(a, e2, 1)
        if not np.all(a[rb] == 93):
            raise Fallback
        term[three] = skip_ws(a, rb + 1, 1)
        offset[three] = parse_uints(W, a, s1, e1)
        length[three] = parse_uints(W, a, s2, e2)
    # members are separated by ',' and the body ends with '}'
    if more is None:
        more = m < doc.members - 1
    if not np.all(a[term] == np.where(more, 44, 125)):
        raise Fallback
    nxt_key = doc.s(doc.first + 2 * (m[more] + 1)) - 1
    if np.any(skip_ws(a, term[more] + 1, 1) != nxt_key):
        raise Fallback
    return ks, ke, vs, ve, is_arr, whole, offset, length, term


def base64_bytes(data: bytes | bytearray, s: int, e: int) -> bytes | None:
    """The bytes of a ``base64:`` string value decoded straight from the text (its common case:
    strict base64 has no escapes), else None for the generic path."""
    if e - s > 7 and data[s:s + 7] == b"base64:":  # data: bytes or an mmap
        try:
            return binascii.a2b_base64(memoryview(data)[s + 7:e], strict_mode=True)
        except (binascii.Error, ValueError):
            return None
    return None


_BASE64 = word(b"base64:")


def base64_many(doc: Doc, s: np.ndarray, e: np.ndarray) -> list[bytes | None]:
    """:func:`base64_bytes` of the string values at ``[s, e)``: strict base64 decoded straight from
    the text (one short-lived view at a time), None for anything else."""
    fast = np.flatnonzero(e - s >= 7)  # the 8-byte word at s lies inside the text (to the quote)
    fast = fast[(doc.W[s[fast]] & LOW8[7]) == _BASE64]
    mv, a2b = memoryview(doc.data), binascii.a2b_base64
    xs, ys = (s[fast] + 7).tolist(), e[fast].tolist()
    try:
        got: list[bytes | None] = [a2b(mv[x:y], strict_mode=True) for x, y in zip(xs, ys, strict=True)]
    except (binascii.Error, ValueError):
        got = [base64_bytes(doc.data, x - 7, y) for x, y in zip(xs, ys, strict=True)]
    if fast.size == s.size:
        return got
    out: list[bytes | None] = [None] * s.size
    for j, v in zip(fast.tolist(), got, strict=True):
        out[j] = v
    return out


def base64_lengths(a: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray | None:
    """Decoded lengths of the ``base64:`` values at ``[s, e)`` of the text ``a``, which decoded in
    strict mode, from their lengths and padding; None unless every value is whole quads with at most
    two ``=`` (strict mode also takes ``=`` after a complete quad: ``AAAA=`` is 3 bytes)."""
    n = e - s - 7
    if bool((n % 4).any()):
        return None
    pad = np.zeros(n.size, np.int64)
    some = np.flatnonzero(n > 0)
    end = e[some]
    if bool((a[end - 3] == 61).any()):  # 61: "="; a third "=" from the end: extra padding
        return None
    pad[some] = (a[end - 1] == 61).astype(np.int64) + (a[end - 2] == 61)
    out: np.ndarray = n // 4 * 3 - pad
    return out
