"""refset.scan of JPEG-compressed TIFFs (compression 7): every image reads back equal, bit for bit, to
what tifffile reads from the file (the same libjpeg decodes both), through refset and through fsspec +
zarr; the codec's config holds the JPEGTables tag and the colour spaces tifffile chooses
(``tifffile.jpeg_decode_colorspace``, the JFIF test of the first tile or strip included); what tifffile
decodes another way (extra samples, predictors, palettes) is refused naming the image; 12-bit JPEG reads."""

from __future__ import annotations

import base64
import struct
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import refset
from refset.errors import InvalidFile, Unsupported
from refset.scan.tiff.scanner import TiffScanner
from refset.testing import ScannerTests
from tests.helpers import read_through_fsspec

tifffile = pytest.importorskip("tifffile")
imagecodecs = pytest.importorskip("imagecodecs")
pytest.importorskip("xarray")

from tifffile.tifffile import jpeg_decode_colorspace  # noqa: E402

from tests.scan.tiff.test_tiff import _image  # noqa: E402

#: name -> (shape, tifffile.imwrite options); all uint8
CASES: dict[str, tuple[tuple[int, ...], dict[str, Any]]] = {
    "gray-tiled": ((70, 90), {"tile": (32, 32)}),  # a 3 x 3 grid, the last row and column partial
    "gray-strips": ((64, 40), {"rowsperstrip": 16}),
    "miniswhite-strips": ((48, 40), {"rowsperstrip": 8, "photometric": "miniswhite"}),
    "ycbcr-tiled": ((64, 96, 3), {"tile": (32, 32)}),  # tifffile's default for RGB: YCbCr, 2 x 2 subsampled
    "ycbcr-strips": ((64, 48, 3), {"rowsperstrip": 16, "photometric": "rgb"}),
    "ycbcr-444-tiled": ((48, 48, 3), {"tile": (16, 16), "subsampling": (1, 1)}),
    "ycbcr-422-strips": ((64, 48, 3), {"rowsperstrip": 16, "subsampling": (2, 1)}),
    "rgb-tiled": ((64, 80, 3), {"tile": (32, 32), "photometric": "rgb",  # RGB kept RGB: an Adobe marker, no JFIF
                                "compressionargs": {"outcolorspace": "rgb"}}),
    "rgb-strips": ((64, 40, 3), {"rowsperstrip": 16, "photometric": "rgb",
                                 "compressionargs": {"outcolorspace": "rgb"}}),
    "rgb-planar-tiled": ((3, 64, 64), {"tile": (32, 32), "photometric": "rgb", "planarconfig": "separate"}),
    "cmyk-tiled": ((64, 64, 4), {"tile": (32, 32), "photometric": "separated"}),
    "quality-bigtiff": ((64, 64, 3), {"tile": (16, 16), "compressionargs": {"level": 60}, "bigtiff": True}),
}


def _data(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Smooth uint8 samples (JPEG's kind of image), noisy enough that decoding differences would show."""
    return (_image(shape, "uint16", seed) * 7 % 256).astype(np.uint8)


def _write(path: Path, name: str) -> None:
    shape, opts = CASES[name]
    tifffile.imwrite(path, _data(shape, len(name)), compression="jpeg", **opts)


def _read(rs: refset.ReferenceSet, name: str = "0") -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return refset.open_dataset(rs, mask_and_scale=False)[name].values


def _codec(rs: refset.ReferenceSet, name: str = "0") -> dict[str, Any]:
    filters = rs.metadata[name].filters
    assert filters is not None and len(filters) == 1 and rs.metadata[name].compressor is None
    f = filters[0]
    return dict(f if isinstance(f, dict) else f.get_config())


def _oracle_colorspaces(page: Any) -> tuple[Any, Any]:
    return jpeg_decode_colorspace(page.photometric, page.planarconfig, page.extrasamples, page.is_jfif)


def _through_zarr(rs: refset.ReferenceSet, name: str = "0") -> np.ndarray:
    """A foreign reader of the saved set: fsspec's ReferenceFileSystem + zarr, imagecodecs registered."""
    return read_through_fsspec(rs, name)  # type: ignore[no-any-return]


class TestTiffJpegConformance(ScannerTests):
    scanner = TiffScanner

    def make_files(self, tmp_path: Path) -> dict[Path, Mapping[str, np.ndarray]]:
        out: dict[Path, Mapping[str, np.ndarray]] = {}
        for name in ("gray-tiled", "ycbcr-tiled", "rgb-strips"):
            p = tmp_path / f"{name}.tif"
            _write(p, name)
            out[p] = {"0": tifffile.imread(p)}
        p = tmp_path / "tables.tif"
        _write_with_tables(p, _data((64, 64, 3), 5), tile=(32, 32))
        out[p] = {"0": tifffile.imread(p)}
        return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_jpeg_layouts_read_as_tifffile_reads_them(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.tif"
    _write(path, name)
    want = tifffile.imread(path)
    rs = refset.scan(str(path), inline_threshold=0)
    got = _read(rs)
    assert got.dtype == np.uint8 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    with tifffile.TiffFile(path) as tf:
        page = tf.pages[0]
        assert page.compression == 7
        cfg = _codec(rs)
        assert cfg["id"] == "imagecodecs_jpeg" and "tables" not in cfg  # tifffile writes whole JPEG streams
        assert (cfg["colorspace_jpeg"], cfg["colorspace_data"]) == _oracle_colorspaces(page)
        # each chunk is a tile's or strip's own byte range, several per image
        table = rs.table("0")
        assert sorted(table.offset[table.kind == 1].tolist()) == sorted(page.dataoffsets)
        assert len(page.dataoffsets) >= 3
    np.testing.assert_array_equal(_through_zarr(rs), want)


def test_codec_config_of_ycbcr_and_rgb(tmp_path: Path) -> None:
    """YCbCr converts to RGB (libjpeg's JFIF default); Adobe RGB is taken as RGB (no conversion)."""
    ycbcr, rgb = tmp_path / "ycbcr.tif", tmp_path / "rgb.tif"
    _write(ycbcr, "ycbcr-tiled")
    _write(rgb, "rgb-tiled")
    with tifffile.TiffFile(ycbcr) as a, tifffile.TiffFile(rgb) as b:
        assert a.pages[0].photometric == 6 and b.pages[0].photometric == 2 and not b.pages[0].is_jfif
    assert _codec(refset.scan(str(ycbcr))) == {"id": "imagecodecs_jpeg", "bitspersample": 8,
                                                "colorspace_jpeg": None, "colorspace_data": 2}
    assert _codec(refset.scan(str(rgb))) == {"id": "imagecodecs_jpeg", "bitspersample": 8,
                                             "colorspace_jpeg": 2, "colorspace_data": 2}


def _patch_tag(path: Path, code: int, value: int, *, at: int = 0) -> None:
    """Overwrite the ``at``-th value of an existing SHORT or LONG tag of the first page."""
    with tifffile.TiffFile(path) as tf:
        tag = tf.pages[0].tags[code]
        fmt, where = tf.byteorder + ("H" if tag.dtype == 3 else "I" if tag.dtype == 4 else "Q"), tag.valueoffset
        where += at * struct.calcsize(fmt)
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, where, value)
    path.write_bytes(bytes(data))


def test_rgb_with_a_jfif_marker_is_decoded_as_ycbcr(tmp_path: Path) -> None:
    """Photometric RGB over JFIF streams (YCbCr inside): tifffile lets libjpeg convert them."""
    path = tmp_path / "rgb-jfif.tif"
    _write(path, "ycbcr-tiled")
    _patch_tag(path, 262, 2)
    page = tifffile.TiffFile(path).pages[0]
    assert page.photometric == 2 and page.is_jfif
    rs = refset.scan(str(path))
    assert (_codec(rs)["colorspace_jpeg"], _codec(rs)["colorspace_data"]) == (None, 2)
    np.testing.assert_array_equal(_read(rs), tifffile.imread(path))


def test_rgb_jfif_test_looks_at_the_first_tile_only(tmp_path: Path) -> None:
    """As tifffile's ``is_jfif``: the first tile decides, also when it is absent (then: not JFIF, and
    every tile is decoded as RGB without conversion)."""
    path = tmp_path / "rgb-first-absent.tif"
    _write(path, "ycbcr-tiled")
    _patch_tag(path, 262, 2)
    _patch_tag(path, 325, 0, at=0)  # the first tile's byte count
    page = tifffile.TiffFile(path).pages[0]
    assert not page.is_jfif
    rs = refset.scan(str(path))
    assert (_codec(rs)["colorspace_jpeg"], _codec(rs)["colorspace_data"]) == _oracle_colorspaces(page) == (2, 2)
    want = tifffile.imread(path)
    assert (want[:32, :32] == 0).all()
    np.testing.assert_array_equal(_read(rs), want)


def _split_tables(jpeg: bytes) -> tuple[bytes, bytes]:
    """``(tables, abbreviated stream)``: the quantization and Huffman tables of a JPEG stream as a
    tables-only stream (SOI, DQT/DHT, EOI), and the stream without them (as libtiff and GDAL write
    tiles under a JPEGTables tag); the APP0 (JFIF) marker dropped as libtiff drops it."""
    assert jpeg[:2] == b"\xff\xd8"
    tables, rest, i = [b"\xff\xd8"], [b"\xff\xd8"], 2
    while True:
        marker = jpeg[i:i + 2]
        length = struct.unpack(">H", jpeg[i + 2:i + 4])[0]
        if marker == b"\xff\xda":  # start of scan: the entropy-coded data follows, to EOI
            rest.append(jpeg[i:])
            break
        segment = jpeg[i:i + 2 + length]
        if marker in (b"\xff\xdb", b"\xff\xc4"):
            tables.append(segment)
        elif marker != b"\xff\xe0":
            rest.append(segment)
        i += 2 + length
    return b"".join(tables) + b"\xff\xd9", b"".join(rest)


def _write_with_tables(path: Path, data: np.ndarray, *, tile: tuple[int, int] | None = None, rows: int = 0,
                       rgb: bool = False) -> tuple[bytes, np.ndarray]:
    """A JPEG TIFF as GDAL writes one: tables in the JPEGTables tag, abbreviated tiles or strips;
    ``rgb``: RGB kept RGB (photometric RGB, no JFIF marker), else YCbCr for 3 samples. The tables, and
    the image libjpeg decodes from the whole streams."""
    h, w = data.shape[:2]
    if tile:
        parts = [data[y:y + tile[0], x:x + tile[1]] for y in range(0, h, tile[0]) for x in range(0, w, tile[1])]
        parts = [np.pad(p, [(0, tile[0] - p.shape[0]), (0, tile[1] - p.shape[1])] + [(0, 0)] * (p.ndim - 2))
                 for p in parts]
    else:
        parts = [data[y:y + rows] for y in range(0, h, rows)]
    kw: dict[str, Any] = {"outcolorspace": "rgb"} if rgb else {}
    if data.ndim == 3 and not rgb:
        kw.update(outcolorspace="ycbcr", subsampling="420")
    streams = [imagecodecs.jpeg8_encode(np.ascontiguousarray(p), level=85, **kw) for p in parts]
    split = [_split_tables(s) for s in streams]
    tables = split[0][0]
    assert all(t == tables for t, _ in split)  # the same quality, the standard Huffman tables
    opts: dict[str, Any] = {"tile": tile} if tile else {"rowsperstrip": rows}
    if data.ndim == 3:
        opts["photometric"] = "rgb"
        opts["compressionargs"] = {"outcolorspace": "rgb" if rgb else "ycbcr"}
    tifffile.imwrite(path, iter([s for _, s in split]), shape=data.shape, dtype=data.dtype, compression="jpeg",
                     jpegtables=tables, **opts)
    decoded = [imagecodecs.jpeg8_decode(s) for s in streams]
    if tile:
        across = -(-w // tile[1])
        rows_of = [np.concatenate(decoded[i:i + across], axis=1) for i in range(0, len(decoded), across)]
        whole = np.concatenate(rows_of, axis=0)[:h, :w]
    else:
        whole = np.concatenate(decoded, axis=0)
    return tables, whole


@pytest.mark.parametrize("layout", ["gray-tiled", "gray-strips", "ycbcr-tiled", "ycbcr-strips", "rgb-tiled"])
def test_jpegtables_go_into_the_codec(tmp_path: Path, layout: str) -> None:
    kind, how = layout.split("-")
    data = _data((64, 96, 3) if kind != "gray" else (64, 96), 7)
    path = tmp_path / f"{layout}.tif"
    tiled = how == "tiled"
    tables, whole = _write_with_tables(path, data, tile=(32, 32) if tiled else None, rows=16, rgb=kind == "rgb")
    page = tifffile.TiffFile(path).pages[0]
    assert page.jpegtables == tables and not page.is_jfif
    assert page.photometric == {"gray": 1, "ycbcr": 6, "rgb": 2}[kind]
    want = tifffile.imread(path)
    np.testing.assert_array_equal(want, whole)  # the oracle decodes the abbreviated streams with the tables
    rs = refset.scan(str(path))
    cfg = _codec(rs)
    import imagecodecs.numcodecs

    assert cfg["tables"] == imagecodecs.numcodecs.Jpeg(tables=tables).get_config()["tables"]
    assert base64.b64decode(cfg["tables"]) == tables
    assert (cfg["colorspace_jpeg"], cfg["colorspace_data"]) == _oracle_colorspaces(page)
    np.testing.assert_array_equal(_read(rs), want)
    np.testing.assert_array_equal(_through_zarr(rs), want)


def test_pages_with_tables_of_their_own(tmp_path: Path) -> None:
    """Two pages of one size encoded at other qualities: each array carries its page's tables (kerchunk's
    ``tiff_to_zarr`` refuses JPEGTables in a series of several pages)."""
    path = tmp_path / "stack.tif"
    with tifffile.TiffWriter(path) as tw:
        for k, level in enumerate((90, 50)):
            image = _data((32, 32), k)
            parts = [np.ascontiguousarray(image[y:y + 16, x:x + 16]) for y in (0, 16) for x in (0, 16)]
            split = [_split_tables(imagecodecs.jpeg8_encode(p, level=level)) for p in parts]
            tw.write(iter([s for _, s in split]), shape=image.shape, dtype="uint8", tile=(16, 16),
                     compression="jpeg", jpegtables=split[0][0])
    rs = refset.scan(str(path))
    with tifffile.TiffFile(path) as tf:
        assert tf.pages[0].jpegtables != tf.pages[1].jpegtables
        for k, page in enumerate(tf.pages):
            assert base64.b64decode(_codec(rs, str(k))["tables"]) == page.jpegtables
            np.testing.assert_array_equal(_read(rs, str(k)), page.asarray())


def test_a_jpeg_pyramid_gives_an_array_per_level(tmp_path: Path) -> None:
    """A COG-like file: a tiled YCbCr image and two reduced-resolution levels in the chain."""
    path = tmp_path / "cog.tif"
    full = _data((128, 160, 3), 3)
    with tifffile.TiffWriter(path) as tw:
        for k, lv in enumerate([full, full[::2, ::2], full[::4, ::4]]):
            tw.write(np.ascontiguousarray(lv), tile=(16, 16), compression="jpeg", subfiletype=1 if k else 0)
    rs = refset.scan(str(path))
    assert [p for p in rs.metadata if p.isdigit()] == ["0", "1", "2"]
    with tifffile.TiffFile(path) as tf:
        for k, page in enumerate(tf.pages):
            np.testing.assert_array_equal(_read(rs, str(k)), page.asarray())
            assert _codec(rs, str(k))["colorspace_data"] == 2
    ds = refset.open_dataset(rs)
    assert ds["1"].dims == ("y_1", "x_1", "band_1") and ds["1"].attrs["NewSubfileType"] == 1


def test_subifds_are_left_aside(tmp_path: Path) -> None:
    """Overviews in SubIFDs (as tifffile writes an OME pyramid) are not in the chain: the full image
    reads, alone."""
    path = tmp_path / "subifds.tif"
    full = _data((64, 64, 3), 4)
    with tifffile.TiffWriter(path) as tw:
        tw.write(full, subifds=1, tile=(16, 16), compression="jpeg")
        tw.write(np.ascontiguousarray(full[::2, ::2]), subfiletype=1, tile=(16, 16), compression="jpeg")
    rs = refset.scan(str(path))
    assert [p for p in rs.metadata if p.isdigit()] == ["0"]
    np.testing.assert_array_equal(_read(rs), tifffile.imread(path))


def test_twelve_bit_jpeg_reads_as_tifffile_reads_it(tmp_path: Path) -> None:
    """12-bit JPEG (libjpeg-turbo 3 decodes it to uint16), tiled and stripped: tifffile's values, also
    through fsspec + zarr."""
    for layout in ({"tile": (16, 16)}, {"rowsperstrip": 8}):
        twelve = tmp_path / "12bit.tif"
        tifffile.imwrite(twelve, _image((32, 48), "uint16") % 4096, compression="jpeg", bitspersample=12,
                         **layout)
        assert tifffile.TiffFile(twelve).pages[0].bitspersample == 12  # tifffile writes (and reads) 12-bit JPEG
        rs = refset.scan(str(twelve))
        assert rs.metadata["0"].dtype == np.dtype("<u2")
        want = tifffile.imread(twelve)
        np.testing.assert_array_equal(_read(rs), want)
        np.testing.assert_array_equal(_through_zarr(rs), want)
        twelve.unlink()


def test_jpeg_refusals_name_the_image_and_the_reason(tmp_path: Path) -> None:
    # RGBA: tifffile leaves the conversion of 4 components to libjpeg
    rgba = _data((32, 32, 4), 1)
    tiles = [imagecodecs.jpeg8_encode(np.ascontiguousarray(rgba[y:y + 16, x:x + 16]))
             for y in (0, 16) for x in (0, 16)]
    alpha = tmp_path / "rgba.tif"
    tifffile.imwrite(alpha, iter(tiles), shape=rgba.shape, dtype="uint8", tile=(16, 16), compression="jpeg",
                     photometric="rgb", extrasamples=["unassalpha"])
    assert tifffile.TiffFile(alpha).pages[0].extrasamples
    with pytest.raises(Unsupported, match=r"variable '0': JPEG \(7\) with extra samples"):
        refset.scan(str(alpha))
    palette = tmp_path / "palette.tif"
    tifffile.imwrite(palette, _data((32, 32), 2), compression="jpeg", photometric="palette",
                     colormap=np.zeros((3, 256), np.uint16))
    with pytest.raises(Unsupported, match=r"JPEG \(7\) of photometric interpretation 3 with 1 samples"):
        refset.scan(str(palette))
    # a predictor tag (tifffile will not write one with JPEG): a private tag renamed Predictor
    pred = tmp_path / "predictor.tif"
    tifffile.imwrite(pred, _data((32, 32), 3), compression="jpeg", extratags=[(65000, "H", 1, 2, True)])
    data = bytearray(pred.read_bytes())
    entry = tifffile.TiffFile(pred).pages[0].tags[65000].offset
    struct.pack_into("<H", data, entry, 317)
    pred.write_bytes(bytes(data))
    with pytest.raises(Unsupported, match=r"variable '0': predictor 2 with JPEG \(7\)"):
        refset.scan(str(pred))
    rs = refset.scan(str(pred), drop_variables=["0"])  # the rest of the file scans
    assert "0" not in rs.metadata


def _cog_rgb_jpeg(path: Path, levels: list[np.ndarray], tile: int = 64, gap: int = 300_000) -> None:
    """A COG-like file: the header and every level's directory first, then each level's tiles (RGB JPEG
    with Adobe's marker, no JFIF), ``gap`` bytes apart, so that each level's first tile lies past the
    head and past the block a read fetches."""
    streams = [[imagecodecs.jpeg8_encode(np.ascontiguousarray(lv[y:y + tile, x:x + tile]), level=90,
                                         colorspace="RGB", outcolorspace="RGB")
                for y in range(0, lv.shape[0], tile) for x in range(0, lv.shape[1], tile)] for lv in levels]
    ntags = 12
    sizes = [2 + ntags * 12 + 4 + 6 + 8 * len(s) for s in streams]
    at, pos = 8, 8 + sum(sizes) + gap
    head, data = bytearray(b"II*\0" + struct.pack("<I", 8)), bytearray()
    for k, (lv, ss) in enumerate(zip(levels, streams, strict=True)):
        offs = []
        for s in ss:
            offs.append(pos + len(data))
            data += s
        data += b"\0" * gap
        arrays = at + 2 + ntags * 12 + 4
        nxt = at + sizes[k] if k + 1 < len(levels) else 0

        def entry(tag: int, typ: int, count: int, value: int) -> bytes:
            return struct.pack("<HHII", tag, typ, count, value)

        many = len(ss) > 1
        head += struct.pack("<H", ntags) + b"".join([
            entry(254, 4, 1, 1 if k else 0), entry(256, 4, 1, lv.shape[1]), entry(257, 4, 1, lv.shape[0]),
            entry(258, 3, 3, arrays), entry(259, 3, 1, 7), entry(262, 3, 1, 2), entry(277, 3, 1, 3),
            entry(284, 3, 1, 1), entry(322, 3, 1, tile), entry(323, 3, 1, tile),
            entry(324, 4, len(ss), arrays + 6 if many else offs[0]),
            entry(325, 4, len(ss), arrays + 6 + 4 * len(ss) if many else len(ss[0]))]) + struct.pack("<I", nxt)
        head += struct.pack("<HHH", 8, 8, 8) + struct.pack(f"<{len(ss)}I", *offs)
        head += struct.pack(f"<{len(ss)}I", *[len(s) for s in ss])
        at += sizes[k]
    path.write_bytes(bytes(head.ljust(8 + sum(sizes) + gap, b"\0") + data))


def test_a_remote_rgb_jpeg_cog_peeks_at_its_levels_in_one_round(tmp_path: Path) -> None:
    """Each RGB level's first tile decides JFIF (4 bytes): over HTTP all levels' are read in one round
    with the directories' (review: one block a level, one after another)."""
    from refset.scan import Scan
    from tests.httpserver import RangeServer

    full = _data((256, 256, 3), 6)
    levels = [np.ascontiguousarray(full[::2 ** k, ::2 ** k]) for k in range(3)]
    path = tmp_path / "rgb.tif"
    _cog_rgb_jpeg(path, levels)
    with tifffile.TiffFile(path) as tf:
        assert [p.is_jfif for p in tf.pages] == [False] * 3
        want = [p.asarray() for p in tf.pages]
    with RangeServer(tmp_path) as srv:
        run = Scan()
        rs = run(f"{srv.url}/rgb.tif")
        assert run.rounds == 2 and run.nbytes < 100_000, (run.rounds, run.nbytes)  # the head, then the peeks
        for k in range(3):
            np.testing.assert_array_equal(_read(rs, str(k)), want[k])


def test_jpeg_tables_past_64_kib_are_a_broken_file(tmp_path: Path) -> None:
    """Each array's codec config holds a copy of its JPEGTables: a tag of more than 64 KiB (real ones
    are a few KB) is refused, so that many directories pointing at one large tag cannot blow up the
    set (review: 40 directories x 4 MiB gave a 213 MB set)."""
    path = tmp_path / "tables.tif"
    tifffile.imwrite(path, _data((32, 32), 1), tile=(16, 16), compression="jpeg",
                     extratags=[(347, 7, 70_000, b"\0" * 70_000, True)])
    assert tifffile.TiffFile(path).pages[0].tags[347].count == 70_000
    with pytest.raises(InvalidFile, match=r"JPEG tables of 70000 bytes"):
        refset.scan(str(path))
