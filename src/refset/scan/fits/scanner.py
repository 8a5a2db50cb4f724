"""FITS files -> reference sets: the :class:`FitsScanner` (FITS Standard 4.0, IAU FITS Working Group).

Headers are read by refset itself (:mod:`refset.scan.fits.header`); only headers are read, and the
tables of tile-compressed images. Each HDU holding an image (the primary array, ``IMAGE`` extensions) is an array named by its
``EXTNAME`` (``PRIMARY`` for the primary array; ``HDU<k>`` without a name), of shape
``(NAXISn, ..., NAXIS1)`` and FITS's big-endian type, one chunk (split along its first axis with
``subchunk``), with the header's cards as attributes. ``BSCALE``/``BZERO`` become ``scale_factor``/
``add_offset`` and ``BLANK`` the fill value, so xarray decodes the physical values astropy gives.
A tile-compressed image (a ``BINTABLE`` with ``ZIMAGE = T``) is an array of its image's shape and type
whose chunks are its tiles (:mod:`refset.scan.fits.tiled`: Rice and GZIP through numcodecs codecs); one
that cannot be referenced exactly (quantized floats, HCOMPRESS, ...) is left out with a warning and named,
with the reason, in the root's ``fits_skipped_hdus`` attribute.
Other tables (``BINTABLE``, ``TABLE``) are skipped with their names in the root's ``fits_skipped_hdus``
attribute; random groups are refused. A header that is not FITS
(no ``END``, a size past the file's end, a card that is not ``KEYWORD = value``) is
:class:`~refset.errors.InvalidFile` naming the file.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import DropList
from refset.io.magic import is_fits
from refset.io.scanfile import Broken, ScanFile
from refset.model.setwriter import SetWriter
from refset.scan.fits.header import BLOCK, DTYPES, int_card, read_header
from refset.scan.fits.tiled import RESERVED, Unreferenced, tiles
from refset.scan.flat import FlatScanner
from refset.scan.writer import cannot, split_rows

__all__ = ["FitsScanner", "MAX_HDUS"]

MAX_HDUS = 10_000
_STRUCTURAL = re.compile(r"^(SIMPLE|BITPIX|NAXIS\d*|EXTEND|XTENSION|PCOUNT|GCOUNT|END|BSCALE|BZERO|BLANK)$")


class FitsScanner(FlatScanner):
    """FITS files: image HDUs."""

    name: ClassVar[str] = "fits"
    title: ClassVar[str] = "FITS"

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return is_fits(head)

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        # docstring inherited: headers are the metadata; a tile table is read as data
        skipped = self._hdus(file, out, drop)
        out.group("", {"fits_skipped_hdus": skipped} if skipped else {})

    def _hdus(self, file: ScanFile, out: SetWriter, drop: DropList) -> list[str]:
        at, k = 0, 0
        names: set[str] = set()
        skipped: list[str] = []
        while at < file.size:
            if k >= MAX_HDUS:
                raise Broken(f"more than {MAX_HDUS} HDUs")
            if k and not file.read_at(at, 8).startswith(b"XTENSION"):
                break  # bytes after the last HDU (astropy warns and ignores them)
            cards, data = read_header(file, at)
            bitpix = int_card(cards, "BITPIX")
            naxis = int_card(cards, "NAXIS")
            if bitpix not in DTYPES or not 0 <= naxis <= 999:
                raise Broken(f"HDU {k}: BITPIX = {bitpix}, NAXIS = {naxis}")
            shape = tuple(int_card(cards, f"NAXIS{i}") for i in range(naxis, 0, -1))
            if any(n < 0 for n in shape):
                raise Broken(f"HDU {k}: a negative axis length {shape}")
            pcount, gcount = int_card(cards, "PCOUNT", 0), int_card(cards, "GCOUNT", 1)
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
            if xt == "BINTABLE" and cards.get("ZIMAGE") is True:
                if int_card(cards, "ZNAXIS", 0) and name not in drop:
                    try:
                        t = tiles(cards, data, lambda o, n: file.read_exact(o, n, metadata=False))
                    except Unreferenced as e:
                        skipped.append(f"{name} (tile-compressed image: {e})")
                        warnings.warn(f"{file.url}: the tile-compressed image {name!r} is left out: {e}", stacklevel=5)
                    else:
                        if "BLANK" not in cards and t.dtype.kind in "iu" and "ZBLANK" in cards:
                            # the null value, as cfitsio reads it
                            cards = {**cards, "BLANK": int_card(cards, "ZBLANK")}
                        _array(out, name, cards, RESERVED, t.dtype, t.shape, t.chunks, t.filters, t.offset, t.length)
            elif xt not in ("", "IMAGE"):
                skipped.append(f"{name} ({xt})")
            elif naxis and math.prod(shape) and name not in drop:
                self._image(out, name, cards, bitpix, shape, data)
            at = data + -(-nbytes // BLOCK) * BLOCK
            k += 1
        return skipped

    def _image(self, out: SetWriter, name: str, cards: dict[str, Any], bitpix: int, shape: tuple[int, ...],
               data: int) -> None:
        dtype = np.dtype(DTYPES[bitpix])
        rows = split_rows(shape, dtype.itemsize, self.subchunk)
        n = shape[0] // rows
        step = rows * math.prod(shape[1:]) * dtype.itemsize
        grid = (n, *([1] * (len(shape) - 1)))
        _array(out, name, cards, None, dtype, shape, (rows, *shape[1:]), None,
               (data + step * np.arange(n, dtype=np.int64)).reshape(grid), np.full(grid, step, np.int64))


def _array(out: SetWriter, name: str, cards: dict[str, Any], reserved: re.Pattern[str] | None, dtype: np.dtype[Any],
           shape: tuple[int, ...], chunks: tuple[int, ...], filters: list[dict[str, Any]] | None,
           offset: np.ndarray, length: np.ndarray) -> None:
    """An image's array: the header's cards as attributes (but for the structural ones and
    ``reserved``), ``BSCALE``/``BZERO`` as ``scale_factor``/``add_offset``, ``BLANK`` the fill value."""
    attrs: dict[str, Any] = {}
    for key, v in cards.items():
        if not _STRUCTURAL.match(key) and not (reserved and reserved.match(key)) and v is not None:
            attrs[key] = v
    scale, zero = cards.get("BSCALE", 1.0), cards.get("BZERO", 0.0)
    for key, v in (("BSCALE", scale), ("BZERO", zero)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise cannot(name, f"{key} = {v!r} is no number")
    if dtype.itemsize == 8 and dtype.kind == "i" and scale == 1 and zero == 2**63:
        raise cannot(name, "unsigned 64-bit values (BZERO = 2**63) have no exact CF decoding (a float "
                           "add_offset loses their low bits)")
    if scale != 1:
        attrs["scale_factor"] = float(scale)
    if zero != 0:
        attrs["add_offset"] = float(zero)
    fill = None
    if "BLANK" in cards and dtype.kind in "iu":
        fill = int_card(cards, "BLANK")
        if not np.iinfo(dtype).min <= fill <= np.iinfo(dtype).max:
            fill = None  # no pixel of the type holds it: nothing to mask (astropy refuses such a file)
    dims = [f"{name}_{axis}" for axis in "zyx"[-len(shape):]] if len(shape) <= 3 else \
        [f"{name}_dim{i}" for i in range(len(shape))]
    out.array(name, shape=shape, chunks=chunks, dtype=dtype, fill_value=fill, filters=filters, attrs=attrs,
              dims=dims, offset=offset, length=length)
