"""FITS headers (FITS Standard 4.0, section 4): 2880-byte blocks of 80-character cards up to ``END``.

:func:`read_header` gives a header's cards as a dict and where its data starts; a header that is not
FITS (no ``END``, a card that is not ``KEYWORD = value``, a value FITS does not define) is
:class:`~refset.io.scanfile.Broken`. Header blocks are read as the file's metadata.
"""

from __future__ import annotations

import re
from typing import Any

from refset.io.scanfile import Broken, ScanFile

__all__ = ["read_header", "int_card", "BLOCK", "DTYPES", "MAX_CARDS"]

BLOCK = 2880
MAX_CARDS = 100_000  # cards of one header (astropy reads any; 3,600 blocks is far past real ones)
DTYPES = {8: "u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([EeDd][+-]?\d+)?$")


def _value(text: str) -> Any:
    """A card's value: a string ('...' with '' for a quote), T/F, an integer, a real (E or D
    exponent), a complex ``(re, im)``; None for an empty value. Anything else is :class:`Broken`."""
    t = text.strip()
    if t.startswith("'"):
        out, i = [], 1
        while i < len(t):
            if t[i] == "'":
                if t[i + 1:i + 2] == "'":
                    out.append("'")
                    i += 2
                    continue
                return "".join(out).rstrip(), t[i + 1:]
            out.append(t[i])
            i += 1
        raise Broken(f"a string value without its closing quote: {text!r}")
    value, _, _comment = t.partition("/")
    v = value.strip()
    if v == "":
        return None, ""
    if v in ("T", "F"):
        return v == "T", ""
    if re.fullmatch(r"[+-]?\d+", v):
        return int(v), ""
    if _NUMBER.match(v):
        return float(v.replace("D", "E").replace("d", "e")), ""
    if v.startswith("(") and v.endswith(")"):
        parts = v[1:-1].split(",")
        if len(parts) == 2 and all(_NUMBER.match(p.strip()) for p in parts):
            return [float(p.strip().replace("D", "E")) for p in parts], ""
    raise Broken(f"a value that is no FITS value: {v!r}")


def read_header(file: ScanFile, at: int) -> tuple[dict[str, Any], int]:
    """``(cards, where the data starts)`` of the header at ``at``. COMMENT and HISTORY cards are
    joined as lists; a repeated keyword keeps its last value (as astropy's ``header[key]``)."""
    cards: dict[str, Any] = {}
    pos, n = at, 0
    last: str | None = None
    while True:
        if pos + BLOCK > file.size:
            raise Broken(f"the header at byte {at} has no END card before the end of the file")
        block = file.read_exact(pos, BLOCK)
        pos += BLOCK
        for i in range(0, BLOCK, 80):
            card = block[i:i + 80]
            try:
                text = card.decode("ascii")
            except UnicodeDecodeError:
                raise Broken(f"a header card of non-ASCII bytes at byte {pos - BLOCK + i}") from None
            key = text[:8].rstrip()
            n += 1
            if n > MAX_CARDS:
                raise Broken(f"a header of more than {MAX_CARDS} cards")
            if key == "END":
                return cards, pos
            if key in ("COMMENT", "HISTORY", ""):
                if key:
                    cards.setdefault(key, []).append(text[8:].rstrip())
                continue
            if key == "CONTINUE" and isinstance(last, str) and isinstance(cards.get(last), str) \
                    and cards[last].endswith("&"):  # a long string continued (FITS 4.0, 4.2.1.2)
                more, _ = _value(text[8:])
                cards[last] = cards[last][:-1] + (more if isinstance(more, str) else "")
                continue
            if text[8:10] != "= ":
                continue  # commentary keywords (no value indicator), ESO's HIERARCH: not attributes
            if not re.fullmatch(r"[A-Z0-9_-]{1,8}", key):
                raise Broken(f"keyword {key!r} has characters FITS does not allow")
            cards[key], _ = _value(text[10:])
            last = key


def int_card(cards: dict[str, Any], key: str, default: int | None = None) -> int:
    v = cards.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise Broken(f"{key} = {v!r}, expected an integer")
    return v
