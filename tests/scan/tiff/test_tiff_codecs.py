"""refset.scan of TIFFs compressed with LZMA (34925), LERC (34887, with GDAL's LercParameters tag),
WebP (50001) and JPEG XL (50002, and DNG's 52546): every image reads back equal, bit for bit, to what
tifffile reads from the file, through refset and through fsspec + zarr; each tile's codec decodes it to
what tifffile's own decode function gives; the codec configs are imagecodecs' numcodecs classes
calling the function tifffile calls with its arguments; what tifffile decodes another way is refused
naming the image and the reason."""

from __future__ import annotations

import os
import random
import struct
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import refset
from refset.errors import Unsupported
from refset.scan.tiff.jxl import jxl_float
from refset.scan.tiff.scanner import TiffScanner
from refset.testing import ScannerTests
from tests.helpers import read_through_fsspec

tifffile = pytest.importorskip("tifffile")
imagecodecs = pytest.importorskip("imagecodecs")
pytest.importorskip("imagecodecs.numcodecs")  # imagecodecs.numcodecs: the codecs refset's configs name
pytest.importorskip("xarray")

from tests.scan.tiff.test_tiff import _image  # noqa: E402

#: tifffile's compression name -> (TIFF code, imagecodecs' feature, its name)
CODECS = {"lzma": (34925, "LZMA", "LZMA"), "lerc": (34887, "LERC", "LERC"), "webp": (50001, "WEBP", "WebP"),
          "jpegxl": (50002, "JPEGXL", "JPEG XL")}

#: name -> (compression, shape, dtype, tifffile.imwrite options)
CASES: dict[str, tuple[str, tuple[int, ...], str, dict[str, Any]]] = {
    "lzma-u1-tiled": ("lzma", (70, 90), "uint8", {"tile": (32, 32)}),  # a 3 x 3 grid, partial edges
    "lzma-u2-strips-predictor": ("lzma", (64, 40), "uint16", {"rowsperstrip": 16, "predictor": True}),
    "lzma-f4-rgb-tiled-predictor": ("lzma", (64, 64, 3), "float32", {"tile": (32, 32), "predictor": 3}),
    "lzma-u2-planar-tiled": ("lzma", (3, 64, 64), "uint16", {"tile": (32, 32), "planarconfig": "separate"}),
    "lzma-i4-strips-big-endian": ("lzma", (30, 20), ">i4", {"rowsperstrip": 10, "byteorder": ">"}),
    "lerc-u1-tiled": ("lerc", (70, 90), "uint8", {"tile": (32, 32)}),
    "lerc-u2-strips": ("lerc", (64, 40), "uint16", {"rowsperstrip": 16}),
    "lerc-i2-rgb-strips": ("lerc", (48, 40, 3), "int16", {"rowsperstrip": 8}),
    "lerc-f4-lossy-tiled": ("lerc", (64, 64), "float32", {"tile": (32, 32), "compressionargs": {"level": 0.5}}),
    "lerc-deflate-rgb-tiled": ("lerc", (64, 64, 3), "uint8", {"tile": (32, 32),
                                                               "compressionargs": {"compression": "deflate"}}),
    "lerc-zstd-u2-planar-tiled": ("lerc", (3, 64, 64), "uint16", {"tile": (32, 32), "planarconfig": "separate",
                                                                   "compressionargs": {"compression": "zstd"}}),
    "lerc-u2-predictor-tiled": ("lerc", (64, 64), "uint16", {"tile": (32, 32), "predictor": True}),
    "lerc-f4-strips-bigtiff": ("lerc", (64, 40), "float32", {"rowsperstrip": 16, "bigtiff": True}),
    "webp-rgb-tiled": ("webp", (70, 90, 3), "uint8", {"tile": (32, 32)}),
    "webp-rgb-strips": ("webp", (64, 48, 3), "uint8", {"rowsperstrip": 16}),
    "webp-rgba-tiled": ("webp", (64, 64, 4), "uint8", {"tile": (32, 32)}),
    "webp-rgba-lossy-strips": ("webp", (64, 48, 4), "uint8", {"rowsperstrip": 16,
                                                              "compressionargs": {"level": 70, "lossless": False}}),
    "webp-rgb-lossy-tiled": ("webp", (64, 64, 3), "uint8", {"tile": (16, 16),
                                                            "compressionargs": {"level": 50, "lossless": False}}),
    "jpegxl-u1-tiled": ("jpegxl", (70, 90), "uint8", {"tile": (32, 32)}),
    "jpegxl-u2-strips": ("jpegxl", (64, 40), "uint16", {"rowsperstrip": 16}),
    "jpegxl-u1-rgb-lossy-tiled": ("jpegxl", (64, 64, 3), "uint8", {"tile": (32, 32), "compressionargs": {
        "lossless": False, "level": 90}}),
    "jpegxl-u2-rgba-tiled": ("jpegxl", (64, 64, 4), "uint16", {"tile": (32, 32)}),
    "jpegxl-u1-planar-tiled": ("jpegxl", (3, 64, 64), "uint8", {"tile": (32, 32), "planarconfig": "separate"}),
    "jpegxl-f4-tiled": ("jpegxl", (64, 64), "float32", {"tile": (32, 32)}),
    "jpegxl-f2-strips": ("jpegxl", (32, 24), "float16", {"rowsperstrip": 8}),
    "jpegxl-12bit-tiled": ("jpegxl", (64, 64), "uint16", {"tile": (32, 32), "bitspersample": 12}),
}


FUZZ_CASES = 300 * int(os.environ.get("FUZZ_SCALE", "1"))


def _need(compression: str) -> None:
    """Skip unless this imagecodecs has the codec (tifffile writes and reads it through imagecodecs)."""
    feature = CODECS[compression][1]
    if not getattr(getattr(imagecodecs, feature, None), "available", False):
        pytest.skip(f"imagecodecs here was built without {CODECS[compression][2]} ({feature})")


def _data(shape: tuple[int, ...], dtype: str, seed: int, bits: int | None = None) -> np.ndarray:
    data = _image(shape, dtype.lstrip("<>"), seed)
    if np.dtype(dtype).kind == "u" and np.dtype(dtype).itemsize == 1:
        data = (_image(shape, "uint16", seed) * 7 % 256).astype(np.uint8)
    if bits:
        data = data % (1 << bits)
    return data.astype(dtype)


def _write(path: Path, name: str) -> np.ndarray:
    compression, shape, dtype, opts = CASES[name]
    _need(compression)
    data = _data(shape, dtype, len(name), opts.get("bitspersample"))
    kw: dict[str, Any] = {"photometric": "rgb"} if len(shape) == 3 else {}  # (y, x, 3 or 4) or (3, y, x)
    if len(shape) == 3 and shape[-1] == 4:
        kw["extrasamples"] = ["unassalpha"]
    tifffile.imwrite(path, data, compression=compression, metadata=None, **kw, **opts)
    return data


def _read(rs: refset.ReferenceSet, name: str = "0") -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return refset.open_dataset(rs, mask_and_scale=False)[name].values


def _filters(rs: refset.ReferenceSet, name: str = "0") -> list[dict[str, Any]]:
    meta = rs.metadata[name]
    assert meta.compressor is None and meta.filters
    return [dict(f if isinstance(f, dict) else f.get_config()) for f in meta.filters]


def _through_zarr(rs: refset.ReferenceSet, name: str = "0") -> np.ndarray:
    """A foreign reader of the saved set: fsspec's ReferenceFileSystem + zarr, imagecodecs registered."""
    return read_through_fsspec(rs, name)  # type: ignore[no-any-return]


def _same_tiles(path: Path, rs: refset.ReferenceSet, name: str = "0") -> None:
    """Each tile or strip: the codec (the last filter) decodes its bytes to what tifffile's own decode
    function (``TiffPage.decode``) gives, bit for bit, its output viewed as the array's type as zarr views
    it (with a predictor: to what tifffile's decompressor, the same imagecodecs function, gives)."""
    from numcodecs import get_codec

    imagecodecs.numcodecs.register_codecs(verbose=False)
    codec = get_codec(_filters(rs, name)[-1])
    dtype = rs.metadata[name].dtype
    with tifffile.TiffFile(path) as tf:
        page = tf.pages[int(name)]
        fh = tf.filehandle
        for index, (offset, count) in enumerate(zip(page.dataoffsets, page.databytecounts, strict=True)):
            fh.seek(offset)
            raw = fh.read(count)
            got = np.ascontiguousarray(codec.decode(raw)).tobytes()
            if page.predictor != 1:
                decompress = tifffile.TIFF.DECOMPRESSORS[page.compression]
                assert got == np.ascontiguousarray(decompress(raw)).tobytes()
                continue
            segment = page.decode(raw, index)[0]
            np.testing.assert_array_equal(np.frombuffer(got, dtype), segment.reshape(-1))


class TestTiffCodecsConformance(ScannerTests):
    scanner = TiffScanner

    def make_files(self, tmp_path: Path) -> dict[Path, Mapping[str, np.ndarray]]:
        out: dict[Path, Mapping[str, np.ndarray]] = {}
        for name in ("lzma-u2-strips-predictor", "lerc-deflate-rgb-tiled", "webp-rgba-tiled", "jpegxl-u2-strips"):
            if not getattr(getattr(imagecodecs, CODECS[CASES[name][0]][1], None), "available", False):
                continue
            p = tmp_path / f"{name}.tif"
            _write(p, name)
            out[p] = {"0": tifffile.imread(p)}
        if not out:
            pytest.skip("imagecodecs here has none of LZMA, LERC, WebP and JPEG XL")
        return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_layouts_read_as_tifffile_reads_them(tmp_path: Path, name: str) -> None:
    compression, _, _, opts = CASES[name]
    path = tmp_path / f"{name}.tif"
    data = _write(path, name)
    want = tifffile.imread(path)
    if compression in ("lzma", "webp", "jpegxl") and opts.get("compressionargs", {}).get("lossless") is not False:
        np.testing.assert_array_equal(want, data)  # lossless: the oracle reads what was written
    rs = refset.scan(str(path), inline_threshold=0)
    got = _read(rs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    with tifffile.TiffFile(path) as tf:
        page = tf.pages[0]
        assert page.compression == CODECS[compression][0]
        table = rs.table("0")  # each chunk is a tile's or strip's own byte range, several per image
        assert sorted(table.offset[table.kind == 1].tolist()) == sorted(page.dataoffsets)
        assert len(page.dataoffsets) >= 3
        assert _filters(rs)[-1]["id"] == f"imagecodecs_{compression}"
        if page.predictor != 1:
            assert _filters(rs)[0]["id"] == {2: "imagecodecs_delta", 3: "imagecodecs_floatpred"}[page.predictor]
    _same_tiles(path, rs)
    np.testing.assert_array_equal(_through_zarr(rs), want)


def test_codec_configs(tmp_path: Path) -> None:
    """The configs: the codec id alone (the numcodecs classes' defaults are tifffile's arguments), WebP's
    ``hasalpha`` for 4 samples; the predictor a filter before LZMA or LERC as before Deflate."""
    want = {
        "lzma-u1-tiled": [{"id": "imagecodecs_lzma"}],
        "lzma-u2-strips-predictor": [{"id": "imagecodecs_delta", "shape": [16, 40], "dtype": "<u2", "axis": -1},
                                     {"id": "imagecodecs_lzma"}],
        "lerc-u2-strips": [{"id": "imagecodecs_lerc"}],
        "lerc-deflate-rgb-tiled": [{"id": "imagecodecs_lerc"}],
        "lerc-u2-predictor-tiled": [{"id": "imagecodecs_delta", "shape": [32, 32], "dtype": "<u2", "axis": -1},
                                    {"id": "imagecodecs_lerc"}],
        "webp-rgb-strips": [{"id": "imagecodecs_webp"}],
        "webp-rgba-tiled": [{"id": "imagecodecs_webp", "hasalpha": True}],
        "jpegxl-u2-strips": [{"id": "imagecodecs_jpegxl"}],
    }
    for name, filters in want.items():
        path = tmp_path / f"{name}.tif"
        _write(path, name)
        assert _filters(refset.scan(str(path))) == filters, name
    # the classes' decode, given these configs, call the function tifffile calls with its arguments
    from numcodecs import get_codec

    imagecodecs.numcodecs.register_codecs(verbose=False)
    webp = get_codec({"id": "imagecodecs_webp"})
    assert (webp.index, webp.hasalpha) == (0, None)  # webp_decode(data): index=0, hasalpha=None
    assert get_codec({"id": "imagecodecs_webp", "hasalpha": True}).hasalpha is True
    jxl = get_codec({"id": "imagecodecs_jpegxl"})
    assert (jxl.index, jxl.keeporientation, jxl.numthreads) == (None, None, None)  # jpegxl_decode's defaults


def test_big_endian_16_bit_jpegxl(tmp_path: Path) -> None:
    """libjxl's images are native (tifffile's and the codec's): a JPEG XL image of a big-endian file is
    native uint16 (LZMA's bytes are the file's, big-endian, as Deflate's: lzma-i4-strips-big-endian)."""
    _need("jpegxl")
    data = _data((64, 32), "uint16", 3)
    tiles = [imagecodecs.jpegxl_encode(np.ascontiguousarray(data[y:y + 32])) for y in (0, 32)]
    path = tmp_path / "be-jxl.tif"
    tifffile.imwrite(path, iter(tiles), shape=data.shape, dtype=">u2", byteorder=">", tile=(32, 32),
                     compression="jpegxl")
    assert tifffile.TiffFile(path).byteorder == ">"
    want = tifffile.imread(path)
    np.testing.assert_array_equal(want, data)
    rs = refset.scan(str(path))
    assert rs.metadata["0"].dtype == np.dtype("<u2")
    np.testing.assert_array_equal(_read(rs), want)
    np.testing.assert_array_equal(_through_zarr(rs), want)


def test_lerc_parameters_tag_and_its_compression_layer(tmp_path: Path) -> None:
    """GDAL's LercParameters (50674) says [version, 0 none / 1 Deflate / 2 zstd]: tifffile writes it and
    reads past it, imagecodecs' ``lerc_decode`` (the codec's too) undoes a Deflate or zstd layer by its
    magic bytes. One codec does it (no zlib or zstd filter before it), equal to tifffile's values."""
    _need("lerc")
    for layer, code, magic in ((None, 0, b"Lerc2"), ("deflate", 1, b"\x78"), ("zstd", 2, b"\x28\xb5\x2f\xfd")):
        path = tmp_path / f"lerc-{layer}.tif"
        data = _data((64, 64), "float32", 5)
        tifffile.imwrite(path, data, tile=(32, 32), compression="lerc",
                         compressionargs={"compression": layer} if layer else {})
        with tifffile.TiffFile(path) as tf:
            page = tf.pages[0]
            assert tuple(page.tags[50674].value) == (4, code)
            tf.filehandle.seek(page.dataoffsets[0])
            assert tf.filehandle.read(len(magic)) == magic
        rs = refset.scan(str(path))
        assert _filters(rs) == [{"id": "imagecodecs_lerc"}]
        want = tifffile.imread(path)
        np.testing.assert_array_equal(want, data)
        np.testing.assert_array_equal(_read(rs), want)
        np.testing.assert_array_equal(_through_zarr(rs), want)


def test_lerc_masks_read_as_tifffile_reads_them(tmp_path: Path) -> None:
    """LERC blobs with a mask of valid pixels (as GDAL writes for nodata): tifffile and the codec both
    read the invalid pixels as 0 (not the nodata value, not NaN)."""
    _need("lerc")
    data = _data((64, 64), "float32", 6)
    mask = np.ones(data.shape, bool)
    mask[10:20, 5:50] = False
    parts = [(data[y:y + 32, x:x + 32], mask[y:y + 32, x:x + 32]) for y in (0, 32) for x in (0, 32)]
    tiles = [imagecodecs.lerc_encode(np.ascontiguousarray(d), masks=np.ascontiguousarray(m)) for d, m in parts]
    assert imagecodecs.lerc_decode(tiles[0], masks=True)[1] is not None
    path = tmp_path / "lerc-masked.tif"
    tifffile.imwrite(path, iter(tiles), shape=data.shape, dtype=data.dtype, tile=(32, 32), compression="lerc",
                     extratags=[(42113, "s", 0, "-9999", True)])
    want = tifffile.imread(path)
    assert (want[~mask] == 0).all() and np.array_equal(want[mask], data[mask])
    rs = refset.scan(str(path))
    got = _read(rs)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_through_zarr(rs), want)


def test_webp_rgba_streams_without_their_opaque_alpha(tmp_path: Path) -> None:
    """4-sample WebP whose streams were written without alpha (libwebp leaves out an all-opaque alpha
    channel): tifffile decodes with ``hasalpha=True`` (alpha 255), and so does the codec's config."""
    _need("webp")
    rgb = _data((32, 64, 3), "uint8", 7)
    tiles = [imagecodecs.webp_encode(np.ascontiguousarray(rgb[:, x:x + 32]), lossless=True) for x in (0, 32)]
    assert imagecodecs.webp_decode(tiles[0]).shape == (32, 32, 3)
    path = tmp_path / "rgba-no-alpha.tif"
    tifffile.imwrite(path, iter(tiles), shape=(32, 64, 4), dtype="uint8", tile=(32, 32), compression="webp",
                     photometric="rgb", extrasamples=["unassalpha"])
    want = tifffile.imread(path)
    assert (want[..., 3] == 255).all() and np.array_equal(want[..., :3], rgb)
    rs = refset.scan(str(path))
    assert _filters(rs) == [{"id": "imagecodecs_webp", "hasalpha": True}]
    np.testing.assert_array_equal(_read(rs), want)
    np.testing.assert_array_equal(_through_zarr(rs), want)


def _patch_tag(path: Path, code: int, value: int) -> None:
    """Overwrite the value of an existing SHORT tag of the first page."""
    with tifffile.TiffFile(path) as tf:
        tag = tf.pages[0].tags[code]
        assert tag.dtype == 3
        fmt, where = tf.byteorder + "H", tag.valueoffset
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, where, value)
    path.write_bytes(bytes(data))


def _rename_tag(path: Path, private: int, code: int) -> None:
    """Give a private tag of the first page another code (a tag tifffile will not write)."""
    with tifffile.TiffFile(path) as tf:
        entry = tf.pages[0].tags[private].offset
    data = bytearray(path.read_bytes())
    struct.pack_into("<H", data, entry, code)
    path.write_bytes(bytes(data))


def test_jpegxl_dng_code_reads_as_gdal_code(tmp_path: Path) -> None:
    """DNG's JPEG XL code (52546): tifffile decodes it as 50002, and so does the scan."""
    _need("jpegxl")
    path = tmp_path / "dng-jxl.tif"
    _write(path, "jpegxl-u2-strips")
    _patch_tag(path, 259, 52546)
    with tifffile.TiffFile(path) as tf:
        assert tf.pages[0].compression == 52546
    want = tifffile.imread(path)
    rs = refset.scan(str(path))
    assert _filters(rs) == [{"id": "imagecodecs_jpegxl"}]
    np.testing.assert_array_equal(_read(rs), want)
    np.testing.assert_array_equal(_through_zarr(rs), want)


@pytest.mark.parametrize(("stored", "tagged"), [("float16", 1), ("uint16", 3)])
def test_16_bit_jpegxl_streams_of_the_other_kind_are_refused(tmp_path: Path, stored: str, tagged: int) -> None:
    """tifffile converts what libjxl decodes (uint16 or float16, as the stream says) to the image's type;
    a zarr codec's output is viewed as it is: where the first stream's header holds the other kind of
    2-byte samples than the tags, the values would differ, and the image is refused."""
    _need("jpegxl")
    path = tmp_path / f"{stored}-as-{tagged}.tif"
    data = _data((32, 24), stored, 8)
    if stored == "float16":
        tifffile.imwrite(path, data, rowsperstrip=8, compression="jpegxl")
        _patch_tag(path, 339, tagged)
    else:  # tifffile writes no SampleFormat tag for unsigned samples: a private one renamed
        tifffile.imwrite(path, data, rowsperstrip=8, compression="jpegxl", extratags=[(65000, "H", 1, tagged, True)])
        _rename_tag(path, 65000, 339)
    page_dtype = tifffile.TiffFile(path).pages[0].dtype
    want = tifffile.imread(path)
    assert want.dtype == page_dtype != data.dtype
    assert not np.array_equal(want.view(data.dtype), data)  # a view of the bytes is not tifffile's values
    with pytest.raises(Unsupported, match=r"variable '0': JPEG XL \(50002\) streams of (floating-point|integer) "
                                          r"samples in a (uint16|float16) image"):
        refset.scan(str(path))


def test_jpegxl_header_parse_agrees_with_libjxl() -> None:
    """``jxl_float`` (ISO/IEC 18181-1's SizeHeader, ImageMetadata and BitDepth; bare codestreams and
    containers) against the type libjxl decodes to."""
    if not getattr(getattr(imagecodecs, "JPEGXL", None), "available", False):
        pytest.skip("imagecodecs here was built without JPEG XL (JPEGXL)")
    rng = np.random.default_rng(1)
    for dtype in ("uint8", "uint16", "float16", "float32"):
        for shape in ((8, 8), (17, 33), (300, 5), (64, 64, 3), (40, 24, 4), (9, 1000)):
            for kw in ({}, {"lossless": False, "level": 90}, {"bitspersample": 12}):
                if ("bitspersample" in kw and dtype != "uint16") or (dtype == "float16" and kw):
                    continue
                data = _data(shape, dtype, int(rng.integers(100)), kw.get("bitspersample"))
                stream = imagecodecs.jpegxl_encode(data, **kw)
                assert jxl_float(stream[:256]) == (imagecodecs.jpegxl_decode(stream).dtype.kind == "f"), \
                    (dtype, shape, kw)
    assert jxl_float(b"\xff\x0a") is None  # the header cut short
    assert jxl_float(b"\0\0\0\x0cJXL \r\n\x87\n" + b"\0\0\0\x14ftypjxl \0\0\0\0jxl ") is None  # no codestream box


def test_jpegxl_header_fuzz() -> None:
    """Seeded byte flips and cuts of real streams' first 256 bytes: jxl_float gives True, False or None,
    never an exception; where libjxl still decodes the flipped stream, an answer other than None is
    libjxl's sample kind."""
    if not getattr(getattr(imagecodecs, "JPEGXL", None), "available", False):
        pytest.skip("imagecodecs here was built without JPEG XL (JPEGXL)")
    streams = [imagecodecs.jpegxl_encode(_data(shape, dtype, k, None), **kw)
               for k, (shape, dtype, kw) in enumerate([((17, 33), "uint16", {}), ((16, 16), "float16", {}),
                                                        ((40, 24, 3), "float32", {}), ((9, 100), "uint8", {}),
                                                        ((30, 30), "uint16", {"lossless": False, "level": 90})])]
    checked = 0
    for seed in range(FUZZ_CASES):
        r = random.Random(seed)
        b = bytearray(r.choice(streams))
        for _ in range(r.randint(1, 3)):
            at = r.randrange(min(len(b), 40))
            b[at] = r.choice((b[at] ^ (1 << r.randrange(8)), r.randrange(256)))
        cut = bytes(b[:r.choice((3, 8, 16, 64, 256))])
        got = jxl_float(cut)
        assert got in (True, False, None), (seed, got)
        if got is None:
            continue
        try:
            kind = imagecodecs.jpegxl_decode(bytes(b)).dtype.kind
        except Exception:
            continue  # libjxl refuses the flipped stream: nothing to agree with
        checked += 1
        assert got == (kind == "f"), seed
    assert checked > FUZZ_CASES // 40, checked  # flips libjxl still decodes, compared


def test_refusals_name_the_image_and_the_reason(tmp_path: Path) -> None:
    _need("webp")
    rgb = _data((32, 32, 3), "uint8", 9)
    streams = [imagecodecs.webp_encode(np.ascontiguousarray(rgb[:, x:x + 16])) for x in (0, 16)]
    gray = tmp_path / "webp-gray.tif"  # tifffile will not write it, nor read it (libwebp decodes RGB)
    tifffile.imwrite(gray, iter(streams), shape=(32, 32), dtype="uint8", tile=(32, 16), compression="webp")
    with pytest.raises(Unsupported, match=r"variable '0': WebP \(50001\) of 1 samples per pixel"):
        refset.scan(str(gray))
    planar = tmp_path / "webp-planar.tif"
    tifffile.imwrite(planar, iter(streams * 3), shape=(3, 32, 32), dtype="uint8", tile=(32, 16),
                     compression="webp", photometric="rgb", planarconfig="separate")
    with pytest.raises(Unsupported, match=r"WebP \(50001\) of 3 samples in separate planes"):
        refset.scan(str(planar))
    wide = tmp_path / "webp-16.tif"
    tifffile.imwrite(wide, iter(streams), shape=(32, 32, 3), dtype="uint16", tile=(32, 16), compression="webp",
                     photometric="rgb")
    with pytest.raises(Unsupported, match=r"WebP \(50001\) of 16-bit unsigned samples"):
        refset.scan(str(wide))
    pred = tmp_path / "webp-predictor.tif"  # tifffile will not write a predictor with WebP
    tifffile.imwrite(pred, rgb, compression="webp", tile=(16, 16), extratags=[(65000, "H", 1, 2, True)])
    _rename_tag(pred, 65000, 317)
    with pytest.raises(Unsupported, match=r"variable '0': predictor 2 with WebP \(50001\)"):
        refset.scan(str(pred))
    rs = refset.scan(str(pred), drop_variables=["0"])  # the rest of the file scans
    assert "0" not in rs.metadata


def test_jpegxl_refusals(tmp_path: Path) -> None:
    _need("jpegxl")
    data = _data((32, 32), "uint16", 10)
    streams = [imagecodecs.jpegxl_encode(np.ascontiguousarray(data[:, x:x + 16])) for x in (0, 16)]
    signed = tmp_path / "jxl-int16.tif"
    tifffile.imwrite(signed, iter(streams), shape=data.shape, dtype="int16", tile=(32, 16), compression="jpegxl")
    with pytest.raises(Unsupported, match=r"variable '0': JPEG XL \(50002\) of 16-bit signed samples"):
        refset.scan(str(signed))
    pred = tmp_path / "jxl-predictor.tif"
    tifffile.imwrite(pred, data, compression="jpegxl", tile=(16, 16), extratags=[(65000, "H", 1, 2, True)])
    _rename_tag(pred, 65000, 317)
    with pytest.raises(Unsupported, match=r"predictor 2 with JPEG XL \(50002\)"):
        refset.scan(str(pred))
    cut = tmp_path / "jxl-cut.tif"  # the first stream's header cannot be read
    tifffile.imwrite(cut, iter([b"\xff\x0a", streams[1]]), shape=data.shape, dtype="uint16", tile=(32, 16),
                     compression="jpegxl")
    with pytest.raises(Unsupported, match=r"JPEG XL \(50002\): the header of its first stream"):
        refset.scan(str(cut))


def test_lerc_big_endian_and_fill_order_are_refused(tmp_path: Path) -> None:
    """tifffile reads LERC's native samples as the file's byte order, and reverses the bits of every
    byte of a FillOrder 2 image before decoding LZMA, LERC, Deflate or raw samples: refused."""
    _need("lerc")
    data = _data((32, 32), "uint16", 11)
    tiles = [imagecodecs.lerc_encode(np.ascontiguousarray(data[:, x:x + 16])) for x in (0, 16)]
    be = tmp_path / "lerc-be.tif"
    tifffile.imwrite(be, iter(tiles), shape=data.shape, dtype=">u2", byteorder=">", tile=(32, 16),
                     compression="lerc")
    assert not np.array_equal(tifffile.imread(be), data)  # tifffile: byte-swapped
    with pytest.raises(Unsupported, match=r"variable '0': LERC \(34887\) of 2-byte samples in a big-endian"):
        refset.scan(str(be))
    be8 = tmp_path / "lerc-be-u1.tif"  # single bytes have no order: referenced
    small = _data((32, 32), "uint8", 12)
    tifffile.imwrite(be8, iter([imagecodecs.lerc_encode(np.ascontiguousarray(small[:, x:x + 16])) for x in (0, 16)]),
                     shape=small.shape, dtype="uint8", byteorder=">", tile=(32, 16), compression="lerc")
    np.testing.assert_array_equal(_read(refset.scan(str(be8))), tifffile.imread(be8))
    for compression, label in (("lerc", "LERC"), ("lzma", "LZMA"), ("zlib", "Deflate"), (None, "no compression")):
        if compression in CODECS:
            _need(compression)
        path = tmp_path / f"{compression}-fillorder.tif"
        tifffile.imwrite(path, data, compression=compression, tile=(16, 16), extratags=[(65000, "H", 1, 2, True)])
        _rename_tag(path, 65000, 266)
        assert tifffile.TiffFile(path).pages[0].fillorder == 2
        try:  # tifffile reverses the bits first: other values, or no stream at all
            assert not np.array_equal(tifffile.imread(path), data)
        except (imagecodecs.LercError, imagecodecs.LzmaError, imagecodecs.DeflateError, imagecodecs.ZlibError):
            assert compression is not None
        with pytest.raises(Unsupported, match=rf"variable '0': FillOrder 2 with {label} \("):
            refset.scan(str(path))


def test_planar_configuration_other_than_1_and_2_is_broken(tmp_path: Path) -> None:
    """Found by the fuzz test on an interleaved LERC file: PlanarConfiguration 32768 is neither layout
    (tifffile reads such an image as planes, wrongly); the file is broken, not read as interleaved."""
    from refset.errors import InvalidFile

    path = tmp_path / "planar-32768.tif"
    tifffile.imwrite(path, _data((32, 32, 3), "uint8", 13), photometric="rgb", compression="zlib", tile=(16, 16))
    _patch_tag(path, 284, 32768)
    assert tifffile.TiffFile(path).pages[0].shape == (3, 32, 32)
    with pytest.raises(InvalidFile, match="planar configuration 32768"):
        refset.scan(str(path))


def test_a_dropped_image_with_an_empty_bits_tag_leaves_the_rest(tmp_path: Path) -> None:
    """A JPEG XL image whose BitsPerSample tag holds no value is refused naming it, and dropping it
    scans the file's other image (review: the one-round peek at stream headers raised IndexError for
    every image, dropped or not)."""
    path = tmp_path / "bits0.tif"
    with tifffile.TiffWriter(path) as tw:
        tw.write(np.zeros((32, 32), np.uint8), tile=(16, 16))
        tw.write(np.ones((32, 32), np.uint8), tile=(16, 16))
    data = bytearray(path.read_bytes())
    with tifffile.TiffFile(path) as tf:
        tags = {t.code: t for t in tf.pages[0].tags.values()}
        struct.pack_into("<I", data, tags[258].offset + 4, 0)  # BitsPerSample: no values
        struct.pack_into("<H", data, tags[259].offset + 8, 50002)  # Compression: JPEG XL
    path.write_bytes(bytes(data))
    with pytest.raises(Unsupported, match=r"variable '0': its 1 samples differ in bits \(\[\]\)"):
        refset.scan(str(path))
    rs = refset.scan(str(path), drop_variables=["0"])
    assert "0" not in rs.metadata and "1" in rs.metadata
