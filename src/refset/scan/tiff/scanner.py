"""TIFF, BigTIFF and Cloud-Optimized GeoTIFF files -> reference sets: the :class:`TiffScanner`.

Each image directory (IFD) is an array named by its index (``"0"``, ``"1"``, ... as tifffile and
kerchunk's ``tiff_to_zarr`` name the levels of a pyramid): its tiles or strips are its chunks, with
their compression (none, Deflate, zstd; LZW, PackBits and 8- and 12-bit JPEG through imagecodecs' numcodecs
codecs) and horizontal or floating-point predictor as zarr filters. Shapes are tifffile's: ``(y, x)``,
``(y, x, band)`` for interleaved samples, ``(band, y, x)`` for planar ones. A georeferenced first image
gets ``x``/``y`` coordinates of its pixel centres, a ``spatial_ref`` variable holding ``GeoTransform`` and
the EPSG code where the GeoKeys give one (``grid_mapping`` names it, as rioxarray and GDAL write it),
and every array its GeoKeys as attributes; GDAL's nodata tag is the fill value. Only the directories
are read (one request for a COG's header, whose directories come first), and 4 bytes of the first tile
or strip of a JPEG image whose photometric interpretation is RGB.

JPEG (compression 7) is decoded as tifffile decodes it: the JPEGTables tag and the colour conversion
tifffile chooses (``jpeg_decode_colorspace``: YCbCr and JFIF RGB to RGB, Adobe RGB as is, CMYK, separate
planes as grey; for an RGB image the first tile's or strip's JFIF marker decides, one 4-byte read) go
into the ``imagecodecs_jpeg`` codec's config.

What cannot be referenced exactly is refused naming the image and the reason: old-style JPEG and other
compressions without a numcodecs codec here, bit depths other than 8/16/32/64, a last strip holding
fewer rows than the others (a zarr chunk is whole), predictors on big-endian files; and for JPEG,
samples other than 8- or 12-bit unsigned, extra samples (alpha), photometric interpretations
and sample counts other than greyscale, RGB, YCbCr and CMYK, predictors, Hamamatsu NDPI streams, and
tiles or strips 65,500 pixels or more across (cases where tifffile's decoding differs from the codec's,
or is not shown to be the same).
"""

from __future__ import annotations

import base64
import math
from typing import Any, ClassVar

import numpy as np

from refset.errors import InvalidFile
from refset.io.scanfile import ScanFile
from refset.model.refset import ReferenceSet
from refset.scan.flat import FlatScanner
from refset.scan.tiff import geo
from refset.scan.tiff.ifd import MAGICS, Broken, Ifd, metadata_spans, overlapping, read_ifds
from refset.scan.writer import DropList, SetWriter, cannot

__all__ = ["TiffScanner", "COMPRESSIONS"]

# baseline and extension tags used
WIDTH, LENGTH, BITS, COMPRESSION, PHOTOMETRIC, SAMPLES, ROWS_PER_STRIP = 256, 257, 258, 259, 262, 277, 278
STRIP_OFFSETS, STRIP_COUNTS, PLANAR, PREDICTOR, TILE_WIDTH, TILE_LENGTH = 273, 279, 284, 317, 322, 323
TILE_OFFSETS, TILE_COUNTS, SAMPLE_FORMAT, SUBFILE, DESCRIPTION = 324, 325, 339, 254, 270
GDAL_METADATA, GDAL_NODATA, IMAGE_DEPTH = 42112, 42113, 32997
JPEG, JPEG_TABLES, EXTRA_SAMPLES, NDPI_MCU_STARTS = 7, 347, 338, 65426

#: TIFF compression code -> the zarr v2 codec that decodes it (None: stored as is).
COMPRESSIONS: dict[int, dict[str, Any] | None] = {
    1: None,
    8: {"id": "zlib", "level": 6},  # Adobe Deflate: a zlib stream
    32946: {"id": "zlib", "level": 6},  # the old Deflate code
    50000: {"id": "zstd", "level": 0},  # libtiff's ZSTD
    5: {"id": "imagecodecs_lzw"},
    32773: {"id": "imagecodecs_packbits"},
    JPEG: {"id": "imagecodecs_jpeg"},  # completed per image by _jpeg: tables and colour spaces
}
_OFFSET_TYPES = (3, 4, 16)  # SHORT, LONG, LONG8 (TIFF 6.0 and BigTIFF)
_NAMES = {6: "old-style JPEG", 34887: "LERC", 34925: "LZMA", 50001: "WebP", 50002: "JPEG XL",
          2: "CCITT RLE", 3: "CCITT Group 3", 4: "CCITT Group 4"}


class TiffScanner(FlatScanner):
    """TIFF and BigTIFF files (GeoTIFF and COG included)."""

    name: ClassVar[str] = "tiff"
    title: ClassVar[str] = "TIFF"

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return head[:4] in MAGICS

    def __call__(self, file: ScanFile) -> ReferenceSet:
        # docstring inherited
        drop = DropList(self.drop)
        try:
            ifds = read_ifds(file.read_at, file.size)
            out = SetWriter(file.url, self.inline_threshold)
            first = ifds[0]
            georef = geo.georeference(first)
            root: dict[str, Any] = {}
            for tag, key in ((DESCRIPTION, "ImageDescription"), (GDAL_METADATA, "GDAL_METADATA")):
                text = first.text(tag)
                if text:
                    root[key] = text
            out.group("", root)
            base = _size(first)
            spans = metadata_spans(ifds)
            for k, ifd in enumerate(ifds):
                name = str(k)
                if name in drop:
                    continue
                _image(out, ifd, k, name, base, georef, file.size, spans, first.one(SAMPLES, 1))
            if georef is not None and "0" not in drop:
                geo.write_coordinates(out, georef, base)
        except Broken as e:
            raise InvalidFile(f"{file.url}: not a valid TIFF file: {e}") from None
        drop.warn_unused(file.url)
        return out.build(file.read_ranges)


def _size(ifd: Ifd) -> tuple[int, int]:
    return ifd.one(LENGTH), ifd.one(WIDTH)


def _dtype(ifd: Ifd, name: str) -> np.dtype[Any]:
    spp = ifd.one(SAMPLES, 1)
    bits = ifd.ints(BITS, 1)
    fmt = ifd.ints(SAMPLE_FORMAT, 1)
    if len(set(bits.tolist())) != 1 or len(set(fmt.tolist())) != 1:
        raise cannot(name, f"its {spp} samples differ in bits ({bits.tolist()}) or format ({fmt.tolist()})")
    b, f = int(bits[0]), int(fmt[0])
    if ifd.one(COMPRESSION, 1) == JPEG:
        if (b, f) not in ((8, 1), (12, 1)):
            kind_name = {1: "unsigned", 2: "signed", 3: "floating-point"}.get(f, f"format-{f}")
            raise cannot(name, f"JPEG (7) of {b}-bit {kind_name} samples (8- and 12-bit unsigned JPEG are "
                               "referenced)")
        return np.dtype("u1" if b == 8 else "<u2")  # libjpeg gives 12-bit samples as native uint16
    kind = {1: "u", 2: "i", 3: "f"}.get(f)
    if kind is None:
        raise cannot(name, f"sample format {f} (only unsigned, signed and IEEE float are referenced)")
    if b not in (8, 16, 32, 64) or (kind == "f" and b == 8):
        raise cannot(name, f"{b} bits per sample (a zarr data type holds 8, 16, 32 or 64)")
    return np.dtype(f"{ifd.endian if b > 8 else '|'}{kind}{b // 8}")


def _codecs(ifd: Ifd, name: str, dtype: np.dtype[Any], chunks: tuple[int, ...], axis: int,
            first: tuple[int, int]) -> list[dict[str, Any]]:
    """The zarr v2 filters, in encoding order: the predictor, then the compression. ``first``: the offset
    and byte count of the first tile or strip (JPEG's JFIF test)."""
    code = ifd.one(COMPRESSION, 1)
    if code not in COMPRESSIONS:
        raise cannot(name, f"{_NAMES.get(code, 'compression')} ({code}) has no numcodecs codec here")
    if code == JPEG:
        return [_jpeg(ifd, name, chunks, first)]
    out: list[dict[str, Any]] = []
    predictor = ifd.one(PREDICTOR, 1)
    if predictor != 1:
        if dtype.itemsize > 1 and dtype.byteorder == ">":
            raise cannot(name, f"predictor {predictor} on big-endian samples (the codec undoes it in native order)")
        if predictor == 2 and dtype.kind in "iu":
            out.append({"id": "imagecodecs_delta", "shape": list(chunks), "dtype": dtype.str, "axis": axis})
        elif predictor == 3 and dtype.kind == "f":
            out.append({"id": "imagecodecs_floatpred", "shape": list(chunks), "dtype": dtype.str, "axis": axis})
        else:
            raise cannot(name, f"predictor {predictor} on {dtype} samples")
    comp = COMPRESSIONS[code]
    if comp is not None:
        out.append(dict(comp))
    return out


#: photometric interpretation -> the samples per pixel JPEG is referenced with (greyscale, RGB, CMYK, YCbCr)
_JPEG_SAMPLES = {0: 1, 1: 1, 2: 3, 5: 4, 6: 3}


def _jpeg(ifd: Ifd, name: str, chunks: tuple[int, ...], first: tuple[int, int]) -> dict[str, Any]:
    """imagecodecs' JPEG codec (``imagecodecs.numcodecs.Jpeg``) decoding the image's tiles or strips as
    tifffile's ``TiffPage.decode`` does: the same libjpeg call (``jpeg8_decode``) with the JPEGTables tag
    and the colour spaces of ``tifffile.jpeg_decode_colorspace``. What tifffile decodes another way is
    refused."""
    photometric, spp = ifd.one(PHOTOMETRIC, 0), ifd.one(SAMPLES, 1)  # tifffile's defaults
    planar, predictor = ifd.one(PLANAR, 1), ifd.one(PREDICTOR, 1)
    if ifd.has(EXTRA_SAMPLES):
        raise cannot(name, "JPEG (7) with extra samples (alpha): tifffile leaves their colour conversion to "
                           "libjpeg's guess")
    if _JPEG_SAMPLES.get(photometric) != spp:
        raise cannot(name, f"JPEG (7) of photometric interpretation {photometric} with {spp} samples per pixel "
                           "(referenced: 1-sample greyscale, 3-sample RGB or YCbCr, 4-sample CMYK)")
    if planar not in (1, 2):
        raise cannot(name, f"JPEG (7) with planar configuration {planar}")
    if predictor != 1:
        raise cannot(name, f"predictor {predictor} with JPEG (7): a lossy codec has no predictor to undo")
    if ifd.has(NDPI_MCU_STARTS):
        raise cannot(name, "a Hamamatsu NDPI JPEG stream (tifffile splits it at its McuStarts)")
    if max(chunks) >= 65500:
        raise cannot(name, f"JPEG (7) tiles or strips of {chunks} pixels (65,500 or more across: tifffile "
                           "passes their size to libjpeg)")
    colorspace_jpeg: int | None = None
    colorspace_data: int | None = {2: 2, 5: 4, 6: 2}.get(photometric)  # YCbCr, RGB -> RGB; CMYK as is
    if photometric == 2 and not _jfif(ifd, first):
        colorspace_jpeg = 2  # RGB without a JFIF marker (Adobe's, Aperio SVS): not YCbCr
    if planar == 2:
        colorspace_data = 1  # each plane greyscale
    out: dict[str, Any] = {"id": "imagecodecs_jpeg"}
    if ifd.has(JPEG_TABLES):
        if ifd.entries[JPEG_TABLES].type not in (1, 7):
            raise Broken(f"tag {JPEG_TABLES}: values of type {ifd.entries[JPEG_TABLES].type}, expected bytes")
        tables = ifd.values(JPEG_TABLES).tobytes()
        if tables:
            out["tables"] = base64.b64encode(tables).decode()  # as Jpeg.get_config writes it
    out.update(bitspersample=int(ifd.ints(BITS, 1)[0]), colorspace_jpeg=colorspace_jpeg, colorspace_data=colorspace_data)
    return out


def _jfif(ifd: Ifd, first: tuple[int, int]) -> bool:
    """tifffile's ``TiffPage.is_jfif``: whether the image's first tile or strip (the first, even when
    absent: then no) holds a JFIF APP0 marker (``JFIF`` at byte 6)."""
    offset, count = first
    if offset == 0 or count < 11:
        return False
    return ifd.read_at(offset + 6, 4) == b"JFIF"


def _fill(ifd: Ifd, dtype: np.dtype[Any]) -> tuple[Any, bool]:
    """``(GDAL's nodata value, whether there is one)``."""
    text = ifd.text(GDAL_NODATA)
    if text is None or not text.strip():
        return None, False
    try:
        v = float(text.strip())
    except ValueError:
        raise Broken(f"GDAL nodata {text!r} is not a number") from None
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not (math.isfinite(v) and v.is_integer() and info.min <= v <= info.max):
            return None, False  # GDAL ignores a nodata value the type cannot hold
        return int(v), True
    return v, True


def _image(out: SetWriter, ifd: Ifd, k: int, name: str, base: tuple[int, int], georef: geo.Georef | None,
           size: int, spans: np.ndarray, base_spp: int) -> None:
    h, w = _size(ifd)
    spp = ifd.one(SAMPLES, 1)
    planar = ifd.one(PLANAR, 1)
    if h <= 0 or w <= 0 or spp <= 0:
        raise Broken(f"image {k}: {h} x {w} pixels of {spp} samples")
    dtype = _dtype(ifd, name)
    if ifd.one(IMAGE_DEPTH, 1) != 1:
        raise cannot(name, f"a volumetric image ({ifd.one(IMAGE_DEPTH, 1)} planes deep, SGI's ImageDepth)")
    if ifd.has(TILE_WIDTH) or ifd.has(TILE_OFFSETS):
        tw, tl = ifd.one(TILE_WIDTH), ifd.one(TILE_LENGTH)
        offsets, counts = ifd.ints(TILE_OFFSETS, types=_OFFSET_TYPES), ifd.ints(TILE_COUNTS, types=_OFFSET_TYPES)
    else:
        tw, tl = w, min(ifd.one(ROWS_PER_STRIP, 2**32 - 1), h)
        offsets, counts = ifd.ints(STRIP_OFFSETS, types=_OFFSET_TYPES), ifd.ints(STRIP_COUNTS, types=_OFFSET_TYPES)
        if tl > 0 and h % tl:
            raise cannot(name, f"its last strip holds {h % tl} of {tl} rows (a zarr chunk is whole: rewrite it "
                               "tiled, or with rows per strip dividing its height)")
    if tw <= 0 or tl <= 0:
        raise Broken(f"image {k}: tiles or strips of {tl} x {tw} pixels")
    down, across = -(-h // tl), -(-w // tw)
    separate = planar == 2 and spp > 1
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    grid: tuple[int, ...]
    want = down * across * (spp if separate else 1)
    if offsets.size != want or counts.size != want:
        raise Broken(f"image {k}: {offsets.size} offsets and {counts.size} byte counts for {want} tiles or strips")
    if (offsets < 0).any() or (counts < 0).any() or ((counts > 0) & (offsets + counts > size)).any():
        raise Broken(f"image {k}: a tile or strip lies past the end of the file ({size} bytes)")
    if overlapping(spans, offsets, counts).any():  # libtiff would decode the header or a directory as pixels
        raise Broken(f"image {k}: a tile or strip overlaps the file's header or directories")
    same = (h, w) == base
    ydim, xdim = ("y", "x") if same else (f"y_{k}", f"x_{k}")
    bdim = "band" if k == 0 or (same and spp == base_spp) else f"band_{k}"
    if separate:
        shape, chunks, grid, dims, axis = (spp, h, w), (1, tl, tw), (spp, down, across), [bdim, ydim, xdim], -1
    elif spp > 1:
        shape, chunks, grid, dims, axis = (h, w, spp), (tl, tw, spp), (down, across, 1), [ydim, xdim, bdim], -2
    else:
        shape, chunks, grid, dims, axis = (h, w), (tl, tw), (down, across), [ydim, xdim], -1
    first = (int(offsets[0]), int(counts[0])) if offsets.size else (0, 0)
    filters = _codecs(ifd, name, dtype, chunks, axis, first)
    fill, nodata = _fill(ifd, dtype)
    attrs: dict[str, Any] = {"tiff_directory": k, "NewSubfileType": ifd.one(SUBFILE, 0),
                             "Photometric": ifd.one(PHOTOMETRIC, 1) if ifd.has(PHOTOMETRIC) else None}
    attrs = {a: v for a, v in attrs.items() if v is not None}
    if georef is not None:
        attrs.update(geo.attributes(georef, base, (h, w)))
    if not filters and dtype.kind in "iuf":
        want_len = math.prod(chunks) * dtype.itemsize
        bad = (counts > 0) & (counts != want_len)
        if bad.any():
            raise Broken(f"image {k}: an uncompressed tile or strip of {int(counts[bad][0])} bytes, expected "
                         f"{want_len}")
    # the fill value is GDAL's nodata or none (xarray masks a zarr fill value: 0 would hide real zeros);
    # tiles never written then read as zeros, as tifffile and GDAL without nodata read them
    out.array(name, shape=shape, chunks=chunks, dtype=dtype, fill_value=fill if nodata else None,
              filters=filters or None, attrs=attrs, dims=dims,
              offset=np.where(counts > 0, offsets, 0).reshape(grid), length=counts.reshape(grid))
