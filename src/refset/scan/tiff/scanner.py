"""TIFF, BigTIFF and Cloud-Optimized GeoTIFF files -> reference sets: the :class:`TiffScanner`.

Each image directory (IFD) is an array named by its index (``"0"``, ``"1"``, ... as tifffile and
kerchunk's ``tiff_to_zarr`` name the levels of a pyramid): its tiles or strips are its chunks, with
their compression (none, Deflate, zstd; LZW, PackBits, LZMA, LERC, 8- and 12-bit JPEG, WebP and JPEG XL
through imagecodecs' numcodecs codecs) and horizontal or floating-point predictor as zarr filters. Shapes
are tifffile's: ``(y, x)``, ``(y, x, band)`` for interleaved samples, ``(band, y, x)`` for planar ones. A
georeferenced first image gets ``x``/``y`` coordinates of its pixel centres, a ``spatial_ref`` variable
holding ``GeoTransform`` and the EPSG code where the GeoKeys give one (``grid_mapping`` names it, as
rioxarray and GDAL write it), and every array its GeoKeys as attributes; GDAL's nodata tag is the fill
value. Only the directories are read (one request for a COG's header, whose directories come first),
and 4 bytes of the first tile or strip of a JPEG image whose photometric interpretation is RGB, 256 of
the first present one of a 16-bit JPEG XL image.

Each codec's config makes it call the imagecodecs function tifffile's ``TiffPage.decode`` calls, with
the same arguments:

- JPEG (compression 7): the JPEGTables tag and the colour conversion tifffile chooses
  (``jpeg_decode_colorspace``: YCbCr and JFIF RGB to RGB, Adobe RGB as is, CMYK, separate planes as
  grey; for an RGB image the first tile's or strip's JFIF marker decides, one 4-byte read) go into the
  ``imagecodecs_jpeg`` codec's config.
- LZMA (34925) and LERC (34887) decode to bytes as Deflate does (a predictor after them):
  ``lzma_decode`` and ``lerc_decode``, which undoes the Deflate or zstd layer GDAL's LercParameters tag
  (50674) announces by itself (tifffile does not read the tag); pixels a LERC mask marks invalid read as
  0 in both (not GDAL's NaN or nodata).
- WebP (50001): ``webp_decode`` of 3 (RGB) or 4 samples (``hasalpha``: RGBA, also where a stream left
  out an opaque alpha channel).
- JPEG XL (50002, and DNG's 52546): ``jpegxl_decode``; tifffile converts the decoded samples to the
  image's type, a zarr codec's are taken as they are, so a 16-bit image is referenced when its first
  stream holds the kind of samples (integer or float) its tags say.

What cannot be referenced exactly is refused naming the image and the reason: old-style JPEG and other
compressions without a numcodecs codec here (CCITT, JPEG 2000, ...), bit depths other than 8/16/32/64, a
last strip holding fewer rows than the others (a zarr chunk is whole), predictors on big-endian files,
FillOrder 2 outside JPEG, WebP and JPEG XL (tifffile reverses the bits of every byte before decoding);
for JPEG, samples other than 8- or 12-bit unsigned, extra samples (alpha), photometric interpretations
and sample counts other than greyscale, RGB, YCbCr and CMYK, predictors, Hamamatsu NDPI streams, and
tiles or strips 65,500 pixels or more across (cases where tifffile's decoding differs from the codec's,
or is not shown to be the same); for LERC, samples wider than a byte in a big-endian file (tifffile
reads the codec's native-order samples as big-endian); for WebP, samples other than 8-bit unsigned,
sample counts other than 3 and 4 and separate planes (libwebp decodes RGB or RGBA); for JPEG XL,
samples other than 8- to 16-bit unsigned and 16- or 32-bit float, 16-bit images whose first stream
holds the other kind of samples or cannot be read; and for WebP and JPEG XL a predictor.
"""

from __future__ import annotations

import base64
import math
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import DropList
from refset.io.magic import is_tiff
from refset.io.scanfile import Broken, ScanFile
from refset.model.setwriter import SetWriter
from refset.scan.flat import FlatScanner
from refset.scan.tiff import geo
from refset.scan.tiff.ifd import Ifd, metadata_spans, read_ifds
from refset.scan.tiff.jxl import jxl_float
from refset.scan.writer import cannot

__all__ = ["TiffScanner", "COMPRESSIONS"]

# baseline and extension tags used
WIDTH, LENGTH, BITS, COMPRESSION, PHOTOMETRIC, SAMPLES, ROWS_PER_STRIP = 256, 257, 258, 259, 262, 277, 278
STRIP_OFFSETS, STRIP_COUNTS, PLANAR, PREDICTOR, TILE_WIDTH, TILE_LENGTH = 273, 279, 284, 317, 322, 323
TILE_OFFSETS, TILE_COUNTS, SAMPLE_FORMAT, SUBFILE, DESCRIPTION = 324, 325, 339, 254, 270
GDAL_METADATA, GDAL_NODATA, IMAGE_DEPTH = 42112, 42113, 32997
JPEG, JPEG_TABLES, EXTRA_SAMPLES, NDPI_MCU_STARTS, FILL_ORDER = 7, 347, 338, 65426, 266
LZMA, LERC, WEBP, JPEGXL, JPEGXL_DNG = 34925, 34887, 50001, 50002, 52546

#: TIFF compression code -> the zarr v2 codec that decodes it (None: stored as is).
COMPRESSIONS: dict[int, dict[str, Any] | None] = {
    1: None,
    8: {"id": "zlib", "level": 6},  # Adobe Deflate: a zlib stream
    32946: {"id": "zlib", "level": 6},  # the old Deflate code
    50000: {"id": "zstd", "level": 0},  # libtiff's ZSTD
    5: {"id": "imagecodecs_lzw"},
    32773: {"id": "imagecodecs_packbits"},
    JPEG: {"id": "imagecodecs_jpeg"},  # completed per image by _jpeg: tables and colour spaces
    LZMA: {"id": "imagecodecs_lzma"},  # xz streams, lzma_decode as tifffile calls it
    LERC: {"id": "imagecodecs_lerc"},  # lerc_decode undoes a Deflate or zstd layer (LercParameters) itself
    WEBP: {"id": "imagecodecs_webp"},  # completed per image by _webp: hasalpha for 4 samples
    JPEGXL: {"id": "imagecodecs_jpegxl"},
    JPEGXL_DNG: {"id": "imagecodecs_jpegxl"},  # tifffile decodes DNG's JPEG XL code as GDAL's
}
MAX_TABLES = 1 << 16  # bytes of a JPEGTables tag (quantization and Huffman tables: ~0.3-2 KB)
_OFFSET_TYPES = (3, 4, 16)  # SHORT, LONG, LONG8 (TIFF 6.0 and BigTIFF)
_NAMES = {1: "no compression", 8: "Deflate", 32946: "Deflate", 50000: "zstd", 5: "LZW", 32773: "PackBits",
          6: "old-style JPEG", 2: "CCITT RLE", 3: "CCITT Group 3", 4: "CCITT Group 4", 33003: "JPEG 2000",
          33004: "JPEG 2000", 33005: "JPEG 2000", 34712: "JPEG 2000", 34933: "PNG", 34934: "JPEG XR",
          22610: "JPEG XR", JPEG: "JPEG", LZMA: "LZMA", LERC: "LERC", WEBP: "WebP", JPEGXL: "JPEG XL",
          JPEGXL_DNG: "JPEG XL"}
#: compressions whose codec decodes a tile or strip to an image of its own type, as tifffile's
#: ``IMAGE_COMPRESSIONS`` (no predictor or fill order): (bits, sample format) -> that type, in the
#: machine's order (decoders write native samples; tifffile takes them so), and what is referenced
_DECODED: dict[int, tuple[dict[tuple[int, int], str], str]] = {
    JPEG: ({(8, 1): "|u1", (12, 1): "<u2"}, "8- and 12-bit unsigned JPEG are referenced"),  # 12-bit: uint16
    WEBP: ({(8, 1): "|u1"}, "libwebp decodes 8-bit unsigned samples"),
    JPEGXL: ({(8, 1): "|u1", **{(b, 1): "<u2" for b in range(9, 17)}, (16, 3): "<f2", (32, 3): "<f4"},
             "8- to 16-bit unsigned and 16- and 32-bit float JPEG XL are referenced"),
}
_DECODED[JPEGXL_DNG] = _DECODED[JPEGXL]


class TiffScanner(FlatScanner):
    """TIFF and BigTIFF files (GeoTIFF and COG included)."""

    name: ClassVar[str] = "tiff"
    title: ClassVar[str] = "TIFF"

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return is_tiff(head)

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        # docstring inherited: the header, the directories and every tag's values are the metadata
        ifds = read_ifds(file)
        for start, end in metadata_spans(ifds).tolist():  # values read or not (libtiff would decode
            file.mark_metadata(start, end)  # a tile over them as pixels)
        first = ifds[0]
        georef = geo.georeference(first)
        root: dict[str, Any] = {}
        for tag, key in ((DESCRIPTION, "ImageDescription"), (GDAL_METADATA, "GDAL_METADATA")):
            text = first.text(tag)
            if text:
                root[key] = text
        out.group("", root)
        base = _size(first)
        file.prefetch(_peeks(ifds))  # a remote file's JFIF markers and JPEG XL headers: one round
        for k, ifd in enumerate(ifds):
            name = str(k)
            if name in drop:
                continue
            _image(out, ifd, k, name, base, georef, file.size, first.one(SAMPLES, 1))
        if georef is not None and "0" not in drop:
            geo.write_coordinates(out, georef, base)


def _size(ifd: Ifd) -> tuple[int, int]:
    return ifd.one(LENGTH), ifd.one(WIDTH)


def _dtype(ifd: Ifd, name: str) -> np.dtype[Any]:
    spp = ifd.one(SAMPLES, 1)
    bits = ifd.ints(BITS, 1)
    fmt = ifd.ints(SAMPLE_FORMAT, 1)
    if len(set(bits.tolist())) != 1 or len(set(fmt.tolist())) != 1:
        raise cannot(name, f"its {spp} samples differ in bits ({bits.tolist()}) or format ({fmt.tolist()})")
    b, f = int(bits[0]), int(fmt[0])
    code = ifd.one(COMPRESSION, 1)
    if code in _DECODED:
        types, referenced = _DECODED[code]
        if (b, f) not in types:
            kind_name = {1: "unsigned", 2: "signed", 3: "floating-point"}.get(f, f"format-{f}")
            raise cannot(name, f"{_label(code)} of {b}-bit {kind_name} samples ({referenced})")
        return np.dtype(types[b, f])
    kind = {1: "u", 2: "i", 3: "f"}.get(f)
    if kind is None:
        raise cannot(name, f"sample format {f} (only unsigned, signed and IEEE float are referenced)")
    if b not in (8, 16, 32, 64) or (kind == "f" and b == 8):
        raise cannot(name, f"{b} bits per sample (a zarr data type holds 8, 16, 32 or 64)")
    return np.dtype(f"{ifd.endian if b > 8 else '|'}{kind}{b // 8}")


def _label(code: int) -> str:
    return f"{_NAMES.get(code, 'compression')} ({code})"


def _codecs(ifd: Ifd, name: str, dtype: np.dtype[Any], chunks: tuple[int, ...], axis: int,
            offsets: np.ndarray, counts: np.ndarray) -> list[dict[str, Any]]:
    """The zarr v2 filters, in encoding order: the predictor, then the compression. ``offsets`` and
    ``counts``: the tiles' or strips' (JPEG's JFIF test, JPEG XL's sample kind)."""
    code = ifd.one(COMPRESSION, 1)
    if code not in COMPRESSIONS:
        raise cannot(name, f"{_label(code)} has no numcodecs codec here")
    if code == JPEG:
        first = (int(offsets[0]), int(counts[0])) if offsets.size else (0, 0)
        return [_jpeg(ifd, name, chunks, first)]
    if code in _DECODED:
        return [_image_codec(ifd, name, code, dtype, offsets, counts)]
    if ifd.one(FILL_ORDER, 1) != 1:
        raise cannot(name, f"FillOrder {ifd.one(FILL_ORDER, 1)} with {_label(code)} (tifffile reverses the "
                           "bits of every byte before decoding)")
    if code == LERC and dtype.itemsize > 1 and dtype.byteorder == ">":
        raise cannot(name, f"LERC ({LERC}) of {dtype.itemsize}-byte samples in a big-endian file (tifffile "
                           "reads the codec's native-order samples as big-endian)")
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
        if ifd.entries[JPEG_TABLES].count > MAX_TABLES:  # each array's metadata holds a copy
            raise Broken(f"tag {JPEG_TABLES}: JPEG tables of {ifd.entries[JPEG_TABLES].count} bytes (at most "
                         f"{MAX_TABLES}; real ones are a few KB)")
        tables = ifd.values(JPEG_TABLES).tobytes()
        if tables:
            out["tables"] = base64.b64encode(tables).decode()  # as Jpeg.get_config writes it
    out.update(bitspersample=int(ifd.ints(BITS, 1)[0]), colorspace_jpeg=colorspace_jpeg, colorspace_data=colorspace_data)
    return out


def _image_codec(ifd: Ifd, name: str, code: int, dtype: np.dtype[Any], offsets: np.ndarray,
                 counts: np.ndarray) -> dict[str, Any]:
    """imagecodecs' WebP or JPEG XL codec decoding the image's tiles or strips as tifffile's
    ``TiffPage.decode`` does (its ``decode_image``): ``webp_decode(data)``, ``hasalpha=True`` for 4
    samples, or ``jpegxl_decode(data)``, the codecs' defaults otherwise."""
    predictor = ifd.one(PREDICTOR, 1)
    if predictor != 1:
        raise cannot(name, f"predictor {predictor} with {_label(code)}: the codec decodes whole images "
                           "(tifffile ignores the tag)")
    if code == WEBP:
        return _webp(ifd, name)
    if dtype.itemsize == 2:
        _jpegxl_kind(ifd, name, code, dtype, offsets, counts)
    return {"id": "imagecodecs_jpegxl"}


def _webp(ifd: Ifd, name: str) -> dict[str, Any]:
    """``webp_decode`` gives RGB, or RGBA where the stream has alpha or ``hasalpha`` is set (tifffile
    sets it for 4 samples: a stream may leave out an opaque alpha channel)."""
    spp, planar = ifd.one(SAMPLES, 1), ifd.one(PLANAR, 1)
    if spp not in (3, 4) or (planar == 2 and spp > 1):
        layout = "in separate planes" if planar == 2 and spp > 1 else "per pixel"
        raise cannot(name, f"WebP ({WEBP}) of {spp} samples {layout} (libwebp decodes interleaved RGB or "
                           "RGBA)")
    return {"id": "imagecodecs_webp", "hasalpha": True} if spp == 4 else {"id": "imagecodecs_webp"}


def _jpegxl_kind(ifd: Ifd, name: str, code: int, dtype: np.dtype[Any], offsets: np.ndarray,
                 counts: np.ndarray) -> None:
    """Refused unless the first present stream holds the kind of 2-byte samples the tags say: libjxl
    decodes integer streams of 9 to 16 bits to uint16, float16 ones to float16, and tifffile converts
    them to the image's type where a zarr codec's output is taken as it is (one read of 256 bytes)."""
    present = np.flatnonzero(counts > 0)
    if not present.size:
        return  # no stream: every tile reads as absent
    at, count = int(offsets[present[0]]), int(counts[present[0]])
    is_float = jxl_float(ifd.file.read_exact(at, min(count, 256), metadata=False))  # a peek into data
    if is_float is None:
        raise cannot(name, f"{_label(code)}: the header of its first stream does not say whether its "
                           "samples are integers or floats in its first 256 bytes")
    if is_float != (dtype.kind == "f"):
        kind = "floating-point" if is_float else "integer"
        raise cannot(name, f"{_label(code)} streams of {kind} samples in a {dtype.name} image (tifffile "
                           "converts the decoded samples to the image's type, a zarr codec does not)")


def _segments(ifd: Ifd) -> tuple[bool, np.ndarray, np.ndarray]:
    """``(tiled, offsets, byte counts)`` of the image's tiles, or of its strips."""
    tiled = ifd.has(TILE_WIDTH) or ifd.has(TILE_OFFSETS)
    offsets = ifd.ints(TILE_OFFSETS if tiled else STRIP_OFFSETS, types=_OFFSET_TYPES)
    return tiled, offsets, ifd.ints(TILE_COUNTS if tiled else STRIP_COUNTS, types=_OFFSET_TYPES)


def _peeks(ifds: list[Ifd]) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` the codecs' choice reads in the images' data: an RGB JPEG
    image's first JFIF marker (:func:`_jfif`), a 9- to 16-bit JPEG XL image's first stream header
    (:func:`_jpegxl_kind`). A tag that cannot be read here is left to the image's own checks."""
    out = []
    for ifd in ifds:
        try:
            code = ifd.one(COMPRESSION, 1)
            if code not in (JPEG, JPEGXL, JPEGXL_DNG):
                continue
            _, offsets, counts = _segments(ifd)
            if not offsets.size or offsets.size != counts.size:
                continue
            if code == JPEG and ifd.one(PHOTOMETRIC, 0) == 2 and offsets[0] > 0 and counts[0] >= 11:
                out.append((int(offsets[0]) + 6, int(offsets[0]) + 10))
            elif code != JPEG and ifd.ints(BITS, 1).size and 9 <= int(ifd.ints(BITS, 1)[0]) <= 16:
                present = np.flatnonzero(counts > 0)
                if present.size:
                    at = int(offsets[present[0]])
                    out.append((at, at + min(int(counts[present[0]]), 256)))
        except Broken:
            continue
    return out


def _jfif(ifd: Ifd, first: tuple[int, int]) -> bool:
    """tifffile's ``TiffPage.is_jfif``: whether the image's first tile or strip (the first, even when
    absent: then no) holds a JFIF APP0 marker (``JFIF`` at byte 6)."""
    offset, count = first
    if offset == 0 or count < 11:
        return False
    return ifd.file.read_exact(offset + 6, 4, metadata=False) == b"JFIF"  # a peek into data


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
           size: int, base_spp: int) -> None:
    h, w = _size(ifd)
    spp = ifd.one(SAMPLES, 1)
    planar = ifd.one(PLANAR, 1)
    if h <= 0 or w <= 0 or spp <= 0:
        raise Broken(f"image {k}: {h} x {w} pixels of {spp} samples")
    dtype = _dtype(ifd, name)
    if ifd.one(IMAGE_DEPTH, 1) != 1:
        raise cannot(name, f"a volumetric image ({ifd.one(IMAGE_DEPTH, 1)} planes deep, SGI's ImageDepth)")
    tiled, offsets, counts = _segments(ifd)
    if tiled:
        tw, tl = ifd.one(TILE_WIDTH), ifd.one(TILE_LENGTH)
    else:
        tw, tl = w, min(ifd.one(ROWS_PER_STRIP, 2**32 - 1), h)
        if tl > 0 and h % tl:
            raise cannot(name, f"its last strip holds {h % tl} of {tl} rows (a zarr chunk is whole: rewrite it "
                               "tiled, or with rows per strip dividing its height)")
    if tw <= 0 or tl <= 0:
        raise Broken(f"image {k}: tiles or strips of {tl} x {tw} pixels")
    down, across = -(-h // tl), -(-w // tw)
    if spp > 1 and planar not in (1, 2):  # neither interleaved nor planar (tifffile guesses a layout)
        raise Broken(f"image {k}: planar configuration {planar} (1: interleaved samples, 2: planes)")
    separate = planar == 2 and spp > 1
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    grid: tuple[int, ...]
    want = down * across * (spp if separate else 1)
    if offsets.size != want or counts.size != want:
        raise Broken(f"image {k}: {offsets.size} offsets and {counts.size} byte counts for {want} tiles or strips")
    if (offsets < 0).any() or (counts < 0).any() or ((counts > 0) & (offsets + counts > size)).any():
        raise Broken(f"image {k}: a tile or strip lies past the end of the file ({size} bytes)")
    same = (h, w) == base
    ydim, xdim = ("y", "x") if same else (f"y_{k}", f"x_{k}")
    bdim = "band" if k == 0 or (same and spp == base_spp) else f"band_{k}"
    if separate:
        shape, chunks, grid, dims, axis = (spp, h, w), (1, tl, tw), (spp, down, across), [bdim, ydim, xdim], -1
    elif spp > 1:
        shape, chunks, grid, dims, axis = (h, w, spp), (tl, tw, spp), (down, across, 1), [ydim, xdim, bdim], -2
    else:
        shape, chunks, grid, dims, axis = (h, w), (tl, tw), (down, across), [ydim, xdim], -1
    filters = _codecs(ifd, name, dtype, chunks, axis, offsets, counts)
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
