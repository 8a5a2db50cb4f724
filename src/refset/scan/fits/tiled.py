"""Tile-compressed FITS images (FITS Standard 4.0, section 10) -> an array's type, tiles and codecs.

A tile-compressed image is a ``BINTABLE`` with ``ZIMAGE = T``: a row per tile, in FITS order (the first
axis fastest), whose ``COMPRESSED_DATA`` descriptor points at the tile's bytes in the table's heap. Each
tile is a chunk, decoded by a codec registered with numcodecs: ``RICE_1`` by imagecodecs' ``rcomp``
(``BLOCKSIZE``/``BYTEPIX`` from ``ZNAMEi``/``ZVALi``), ``GZIP_1`` by ``gzip`` (big-endian values),
``GZIP_2`` by ``gzip`` then a byte ``shuffle`` (most significant bytes first), ``NOCOMPRESS`` as is.

Left out (:class:`Unreferenced`, saying why): ``HCOMPRESS_1`` and
``PLIO_1`` (no codec here), floating-point images quantized to integers (a scale and zero per tile, or
dithering: no zarr codec parameter holds them), tiles some rows store another way
(``UNCOMPRESSED_DATA``/``GZIP_COMPRESSED_DATA``), tiles that do not divide the image (a zarr chunk is
whole: fpack's and astropy's default row-by-row tiles always do), 64-bit Rice. A table that is no
valid tile-compressed image (descriptors past its heap, a row count that is not the tile count) is
:class:`~refset.io.scanfile.Broken`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from refset.io.scanfile import Broken
from refset.scan.fits.header import DTYPES, int_card

__all__ = ["Tiles", "tiles", "Unreferenced", "RESERVED", "MAX_TILE"]

MAX_TILE = 1 << 31  # bytes of a decoded tile: a zarr chunk is decoded whole

#: keywords of the compression convention and of the table: not the image's attributes
RESERVED = re.compile(r"^(Z(IMAGE|CMPTYPE|BITPIX|NAXIS\d*|TILE\d+|NAME\d+|VAL\d+|MASKCMP|SIMPLE|TENSION|EXTEND|"
                      r"BLOCKED|PCOUNT|GCOUNT|HECKSUM|DATASUM|QUANTIZ|DITHER0|SCALE|ZERO|BLANK)|"
                      r"T(TYPE|FORM|UNIT|DIM|NULL|SCAL|ZERO|DISP)\d+|TFIELDS|THEAP|CHECKSUM|DATASUM)$")
_TFORM = re.compile(r"^\s*(\d*)([LXBIJKAEDCMPQ])(.*)$")
_WIDTH = {"L": 1, "B": 1, "A": 1, "I": 2, "J": 4, "K": 8, "E": 4, "D": 8, "C": 8, "M": 16, "P": 8, "Q": 16}
_CODECS = ("RICE_1", "GZIP_1", "GZIP_2", "NOCOMPRESS")


class Unreferenced(ValueError):
    """A valid tile-compressed image that cannot be referenced exactly: the message says why."""


@dataclass(frozen=True)
class Tiles:
    """A tile-compressed image as an array: its FITS type, shape, tile shape, zarr filters (encoding
    order) and each tile's byte range in the file (arrays of the tile grid's shape)."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    filters: list[dict[str, Any]] | None
    offset: np.ndarray
    length: np.ndarray


def _columns(cards: dict[str, Any]) -> dict[str, tuple[int, str, str, int]]:
    """``TTYPE -> (byte position in a row, type letter, what follows it, repeat count)`` of the table's
    columns."""
    out: dict[str, tuple[int, str, str, int]] = {}
    at = 0
    fields = int_card(cards, "TFIELDS", 0)
    if not 0 <= fields <= 999:
        raise Broken(f"TFIELDS = {fields} (a table has 0 to 999 columns)")
    for i in range(1, fields + 1):
        form = cards.get(f"TFORM{i}")
        m = _TFORM.match(form) if isinstance(form, str) else None
        if m is None:
            raise Broken(f"TFORM{i} = {form!r} is no binary table column format")
        repeat = int(m.group(1) or 1)
        letter = m.group(2)
        name = str(cards.get(f"TTYPE{i}", "")).strip().upper()
        if name:
            out[name] = (at, letter, m.group(3), repeat)
        at += -(-repeat // 8) if letter == "X" else repeat * _WIDTH[letter]
    if at != int_card(cards, "NAXIS1"):
        raise Broken(f"its columns hold {at} bytes a row, NAXIS1 says {cards['NAXIS1']}")
    return out


def _descriptors(table: np.ndarray, column: tuple[int, str, str, int], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(elements, heap offsets)`` of a variable-length column (``P``: two 32-bit, ``Q``: two 64-bit)
    holding one descriptor a row."""
    at, letter, _, repeat = column
    if repeat != 1:
        raise Broken(f"a variable-length column of {repeat} descriptors a row, expected 1")
    width = 4 if letter == "P" else 8
    raw = np.ascontiguousarray(table[:, at:at + 2 * width]).view(f">u{width}").reshape(rows, 2)
    if (raw > np.iinfo(np.int64).max).any():
        raise Broken("a descriptor past 2**63")
    return raw[:, 0].astype(np.int64), raw[:, 1].astype(np.int64)


def _zvals(cards: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    i = 1
    while f"ZNAME{i}" in cards:
        out[str(cards[f"ZNAME{i}"]).strip().upper()] = cards.get(f"ZVAL{i}")
        i += 1
    return out


def tiles(cards: dict[str, Any], data: int, read_exact: Callable[[int, int], bytes]) -> Tiles:
    """The tile-compressed image whose table header is ``cards`` and whose table starts at byte
    ``data``: reads the table's rows (not the heap) with ``read_exact(offset, n)``. :class:`Broken` for a table that is not a valid
    one, :class:`Unreferenced` for one that cannot be referenced exactly."""
    zbitpix = int_card(cards, "ZBITPIX")
    znaxis = int_card(cards, "ZNAXIS")
    if zbitpix not in DTYPES or not 1 <= znaxis <= 999:
        raise Broken(f"ZBITPIX = {zbitpix}, ZNAXIS = {znaxis}")
    size = [int_card(cards, f"ZNAXIS{i}") for i in range(1, znaxis + 1)]  # FITS order: first axis fastest
    tile = [int_card(cards, f"ZTILE{i}", size[0] if i == 1 else 1) for i in range(1, znaxis + 1)]
    if any(n <= 0 for n in size) or any(t <= 0 for t in tile):
        raise Broken(f"an image of {size} pixels in tiles of {tile}")
    kind = str(cards.get("ZCMPTYPE", "")).strip().upper()
    kind = "RICE_1" if kind == "RICE_ONE" else kind  # the name early cfitsio wrote (it still reads it)
    if kind not in _CODECS:
        raise Unreferenced(f"tile compression {kind or 'unnamed'} has no numcodecs codec here (RICE_1, GZIP_1, "
                           "GZIP_2 and NOCOMPRESS are referenced)")
    dtype = np.dtype(DTYPES[zbitpix])
    if math.prod(size) * dtype.itemsize >= 1 << 62:
        raise Broken(f"an image of {size} pixels")
    if math.prod(tile) * dtype.itemsize > MAX_TILE:
        raise Unreferenced(f"tiles of {tile[::-1]} pixels ({math.prod(tile) * dtype.itemsize} bytes decoded: "
                           f"more than {MAX_TILE >> 30} GiB a chunk)")
    if any(n % t for n, t in zip(size, tile, strict=True)):
        raise Unreferenced(f"its tiles of {tile[::-1]} pixels do not divide its {size[::-1]} (a zarr chunk is "
                           "whole: compress it with tiles that divide the image, fpack's default rows do)")
    columns = _columns(cards)
    quantized = [k for k in ("ZSCALE", "ZZERO", "ZBLANK") if k in columns] + \
        [k for k in ("ZSCALE", "ZZERO") if k in cards]
    zquantiz = str(cards.get("ZQUANTIZ", "")).strip().upper()
    if quantized or (dtype.kind == "f" and (kind == "RICE_1" or zquantiz not in ("", "NONE"))):
        raise Unreferenced(f"its values are quantized per tile ({', '.join(quantized) or zquantiz or kind}), with "
                           "a scale, zero or dither a tile no zarr codec parameter holds (floats compressed "
                           "losslessly, GZIP with quantize level 0, are referenced)")
    if "COMPRESSED_DATA" not in columns:
        raise Broken("no COMPRESSED_DATA column")
    _, letter, rest, _ = columns["COMPRESSED_DATA"]
    if letter not in "PQ" or not rest.startswith("B"):
        raise Broken(f"COMPRESSED_DATA is {letter}{rest}, expected a variable-length byte column (1PB or 1QB)")
    rows, width = int_card(cards, "NAXIS2"), int_card(cards, "NAXIS1")
    grid = tuple(-(-n // t) for n, t in zip(size, tile, strict=True))
    if rows != math.prod(grid):
        raise Broken(f"{rows} rows for {math.prod(grid)} tiles")
    table = np.frombuffer(read_exact(data, rows * width), np.uint8).reshape(rows, width)
    nelem, where = _descriptors(table, columns["COMPRESSED_DATA"], rows)
    for other in ("UNCOMPRESSED_DATA", "GZIP_COMPRESSED_DATA"):
        if other in columns and columns[other][1] in "PQ" and columns[other][3]:
            if _descriptors(table, columns[other], rows)[0].any():
                raise Unreferenced(f"some of its tiles are stored in {other} (a tile the compressor could not "
                                   "compress as the others: a zarr array has one codec)")
    theap = int_card(cards, "THEAP", rows * width)
    heap = rows * width + int_card(cards, "PCOUNT", 0) - theap
    if theap < rows * width or heap < 0:
        raise Broken(f"THEAP = {theap} for a table of {rows * width} bytes")
    if (nelem <= 0).any():
        raise Unreferenced("a tile without compressed bytes (cfitsio's null tiles are not referenced)")
    if (where + nelem > heap).any():
        raise Broken(f"a tile's bytes end past the table's heap ({heap} bytes)")
    chunks = tuple(tile[::-1])
    filters = _filters(kind, cards, dtype, chunks)
    if kind == "RICE_1":
        dtype = dtype.newbyteorder("<")  # rcomp gives the integers in native (little-endian here) order
    elif kind == "NOCOMPRESS" and (nelem != math.prod(tile) * dtype.itemsize).any():
        raise Broken(f"an uncompressed tile of other than {math.prod(tile) * dtype.itemsize} bytes")
    return Tiles(dtype=dtype, shape=tuple(size[::-1]), chunks=chunks, filters=filters,
                 offset=(data + theap + where).reshape(grid[::-1]), length=nelem.reshape(grid[::-1]))


def _filters(kind: str, cards: dict[str, Any], dtype: np.dtype[Any], chunks: tuple[int, ...]) -> list[dict[str, Any]] | None:
    if kind == "NOCOMPRESS":
        return None
    if kind == "GZIP_1":
        return [{"id": "gzip", "level": 1}]
    if kind == "GZIP_2":
        shuffle = [{"id": "shuffle", "elementsize": dtype.itemsize}] if dtype.itemsize > 1 else []
        return [*shuffle, {"id": "gzip", "level": 1}]
    vals = _zvals(cards)
    block, bytepix = vals.get("BLOCKSIZE", 32), vals.get("BYTEPIX", 4)
    if dtype.itemsize == 8:
        raise Unreferenced("Rice-compressed 64-bit integers (cfitsio does not write them; no codec here)")
    if bytepix != dtype.itemsize:
        raise Unreferenced(f"Rice bytes per pixel {bytepix!r} for {dtype.itemsize}-byte values")
    if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= 1 << 16:
        raise Broken(f"Rice BLOCKSIZE = {block!r}")
    return [{"id": "imagecodecs_rcomp", "shape": list(chunks), "dtype": dtype.newbyteorder("<").str,
             "nblock": block}]
