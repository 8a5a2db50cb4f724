"""FITS files -> reference sets: the :class:`FitsScanner` (FITS Standard 4.0, IAU FITS Working Group).

Headers are read by refset itself: 2880-byte blocks of 80-character cards up to ``END``; only headers
are read. Each HDU holding an image (the primary array, ``IMAGE`` extensions) is an array named by its
``EXTNAME`` (``PRIMARY`` for the primary array; ``HDU<k>`` without a name), of shape
``(NAXISn, ..., NAXIS1)`` and FITS's big-endian type, one chunk (split along its first axis with
``subchunk``), with the header's cards as attributes. ``BSCALE``/``BZERO`` become ``scale_factor``/
``add_offset`` and ``BLANK`` the fill value, so xarray decodes the physical values astropy gives.
Tables (``BINTABLE``, ``TABLE``) and tile-compressed images (``ZIMAGE``) are skipped with their names
in the root's ``fits_skipped_hdus`` attribute; random groups are refused. A header that is not FITS
(no ``END``, a size past the file's end, a card that is not ``KEYWORD = value``) is
:class:`~refset.errors.InvalidFile` naming the file.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from refset.errors import InvalidFile
from refset.io.scanfile import ScanFile
from refset.model.refset import ReferenceSet
from refset.scan.flat import FlatScanner
from refset.scan.writer import DropList, SetWriter, cannot, split_rows

__all__ = ["FitsScanner", "read_header", "MAX_CARDS", "MAX_HDUS"]

BLOCK = 2880
MAX_CARDS = 100_000  # cards of one header (astropy reads any; 3,600 blocks is far past real ones)
MAX_HDUS = 10_000
_DTYPES = {8: "u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}
_STRUCTURAL = re.compile(r"^(SIMPLE|BITPIX|NAXIS\d*|EXTEND|XTENSION|PCOUNT|GCOUNT|END|BSCALE|BZERO|BLANK)$")
_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([EeDd][+-]?\d+)?$")


class Broken(ValueError):
    pass


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


def read_header(read_at: Callable[[int, int], bytes], at: int, size: int) -> tuple[dict[str, Any], int]:
    """``(cards, where the data starts)`` of the header at ``at``. COMMENT and HISTORY cards are
    joined as lists; a repeated keyword keeps its last value (as astropy's ``header[key]``)."""
    cards: dict[str, Any] = {}
    pos, n = at, 0
    last: str | None = None
    while True:
        if pos + BLOCK > size:
            raise Broken(f"the header at byte {at} has no END card before the end of the file")
        block = read_at(pos, BLOCK)
        if len(block) != BLOCK:
            raise Broken(f"the header at byte {at} is cut")
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


def _int(cards: dict[str, Any], key: str, default: int | None = None) -> int:
    v = cards.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise Broken(f"{key} = {v!r}, expected an integer")
    return v


class FitsScanner(FlatScanner):
    """FITS files: image HDUs."""

    name: ClassVar[str] = "fits"
    title: ClassVar[str] = "FITS"

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return head[:9] == b"SIMPLE  =" and head[9:30].strip() == b"T"

    def __call__(self, file: ScanFile) -> ReferenceSet:
        # docstring inherited
        drop = DropList(self.drop)
        out = SetWriter(file.url, self.inline_threshold)
        try:
            skipped = self._hdus(file, out, drop)
        except Broken as e:
            raise InvalidFile(f"{file.url}: not a valid FITS file: {e}") from None
        out.group("", {"fits_skipped_hdus": skipped} if skipped else {})
        drop.warn_unused(file.url)
        return out.build(file.read_ranges)

    def _hdus(self, file: ScanFile, out: SetWriter, drop: DropList) -> list[str]:
        at, k = 0, 0
        names: set[str] = set()
        skipped: list[str] = []
        while at < file.size:
            if k >= MAX_HDUS:
                raise Broken(f"more than {MAX_HDUS} HDUs")
            if k and not file.read_at(at, 8).startswith(b"XTENSION"):
                break  # bytes after the last HDU (astropy warns and ignores them)
            cards, data = read_header(file.read_at, at, file.size)
            bitpix = _int(cards, "BITPIX")
            naxis = _int(cards, "NAXIS")
            if bitpix not in _DTYPES or not 0 <= naxis <= 999:
                raise Broken(f"HDU {k}: BITPIX = {bitpix}, NAXIS = {naxis}")
            shape = tuple(_int(cards, f"NAXIS{i}") for i in range(naxis, 0, -1))
            if any(n < 0 for n in shape):
                raise Broken(f"HDU {k}: a negative axis length {shape}")
            pcount, gcount = _int(cards, "PCOUNT", 0), _int(cards, "GCOUNT", 1)
            if pcount < 0 or gcount < 0:
                raise Broken(f"HDU {k}: PCOUNT = {pcount}, GCOUNT = {gcount}")
            groups = k == 0 and naxis > 0 and shape[-1] == 0 and cards.get("GROUPS") is True
            nbytes = abs(bitpix) // 8 * gcount * (pcount + (math.prod(shape) if naxis else 0))
            if groups:
                nbytes = abs(bitpix) // 8 * gcount * (pcount + math.prod(shape[:-1]))
            if data + nbytes > file.size:
                raise Broken(f"HDU {k}: its {nbytes} bytes of data end past the end of the file ({file.size} bytes)")
            xt = str(cards.get("XTENSION", "")).strip() if k else ""
            extname = str(cards.get("EXTNAME", "")).strip().replace("/", "_") \
                if isinstance(cards.get("EXTNAME"), str) else ""  # a "/" would make it a group's
            name = extname or ("PRIMARY" if k == 0 else f"HDU{k}")
            base, j = name, 1
            while name in names:
                name, j = f"{base}_{j}", j + 1
            names.add(name)
            if groups:
                raise cannot(name, "random groups (a FITS format no longer written) are not referenced")
            if xt not in ("", "IMAGE") or cards.get("ZIMAGE") is True:
                skipped.append(f"{name} ({'tile-compressed image' if cards.get('ZIMAGE') is True else xt})")
            elif naxis and math.prod(shape) and name not in drop:
                self._image(out, name, cards, bitpix, shape, data)
            at = data + -(-nbytes // BLOCK) * BLOCK
            k += 1
        return skipped

    def _image(self, out: SetWriter, name: str, cards: dict[str, Any], bitpix: int, shape: tuple[int, ...],
               data: int) -> None:
        dtype = np.dtype(_DTYPES[bitpix])
        attrs: dict[str, Any] = {}
        for key, v in cards.items():
            if not _STRUCTURAL.match(key) and v is not None:
                attrs[key] = v
        scale, zero = cards.get("BSCALE", 1.0), cards.get("BZERO", 0.0)
        for key, v in (("BSCALE", scale), ("BZERO", zero)):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise cannot(name, f"{key} = {v!r} is no number")
        if bitpix == 64 and scale == 1 and zero == 2**63:
            raise cannot(name, "unsigned 64-bit values (BZERO = 2**63) have no exact CF decoding (a float "
                               "add_offset loses their low bits)")
        if scale != 1:
            attrs["scale_factor"] = float(scale)
        if zero != 0:
            attrs["add_offset"] = float(zero)
        fill = None
        if "BLANK" in cards and dtype.kind in "iu":
            fill = _int(cards, "BLANK")
        rows = split_rows(shape, dtype.itemsize, self.subchunk)
        n = shape[0] // rows
        step = rows * math.prod(shape[1:]) * dtype.itemsize
        grid = (n, *([1] * (len(shape) - 1)))
        dims = [f"{name}_{axis}" for axis in "zyx"[-len(shape):]] if len(shape) <= 3 else \
            [f"{name}_dim{i}" for i in range(len(shape))]
        out.array(name, shape=shape, chunks=(rows, *shape[1:]), dtype=dtype, fill_value=fill, filters=None,
                  attrs=attrs, dims=dims, offset=(data + step * np.arange(n, dtype=np.int64)).reshape(grid),
                  length=np.full(grid, step, np.int64))
