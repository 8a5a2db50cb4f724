"""refset.scan of TIFF, BigTIFF and Cloud-Optimized GeoTIFF files: every image reads back equal to what
tifffile reads from the file (the oracle), through refset, and through fsspec + zarr; GeoTIFF tags become
coordinates and attributes that match tifffile's parse of them; what cannot be referenced is refused
naming the image and why; broken structures are InvalidFile naming the file."""

from __future__ import annotations

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
pytest.importorskip("imagecodecs")
xr = pytest.importorskip("xarray")

from tests.conftest import CORPUS  # noqa: E402

COGS = sorted((CORPUS / "kerchunk-fixtures").glob("*.tif")) if CORPUS.exists() else []


def _image(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dt)
    hi = min(np.iinfo(dt).max, 5000)
    base = np.cumsum(rng.integers(0, 7, shape), axis=-1 if len(shape) == 2 else -2) % hi  # smooth rows
    return base.astype(dt)


#: name -> (array, tifffile.imwrite options)
CASES: dict[str, tuple[tuple[int, ...], str, dict[str, Any]]] = {
    "raw-tiled": ((70, 90), "uint16", {"tile": (32, 32)}),
    "zlib-tiled": ((64, 96), "int16", {"tile": (32, 48), "compression": "zlib"}),
    "lzw-predictor": ((64, 64), "uint16", {"tile": (16, 32), "compression": "lzw", "predictor": True}),
    "zstd-float-predictor": ((48, 64), "float32", {"tile": (16, 16), "compression": "zstd", "predictor": 3}),
    "packbits-strips": ((60, 40), "uint8", {"rowsperstrip": 12, "compression": "packbits"}),
    "zlib-strips": ((60, 40), "float64", {"rowsperstrip": 20, "compression": "zlib"}),
    "raw-strips-big-endian": ((30, 20), ">i4", {"rowsperstrip": 10, "byteorder": ">"}),
    "rgb-chunky": ((64, 64, 3), "uint8", {"tile": (32, 32), "photometric": "rgb", "compression": "zlib"}),
    "rgb-planar": ((3, 64, 64), "uint16", {"tile": (32, 32), "photometric": "rgb", "planarconfig": "separate",
                                           "compression": "zlib", "predictor": True}),
    "bigtiff": ((50, 50), "float32", {"tile": (16, 16), "bigtiff": True, "compression": "zlib"}),
}


def _write(path: Path, name: str) -> np.ndarray:
    shape, dtype, opts = CASES[name]
    data = _image(shape, dtype.lstrip(">"), seed=len(name))
    tifffile.imwrite(path, data, **opts)
    return data


def _pyramid(path: Path) -> list[np.ndarray]:
    """A COG-like file: a full image and two reduced-resolution subfiles, tiled, Deflate."""
    full = _image((128, 160), "uint16", 3)
    levels = [full, full[::2, ::2].copy(), full[::4, ::4].copy()]
    with tifffile.TiffWriter(path) as tw:
        for k, lv in enumerate(levels):
            tw.write(lv, tile=(32, 32), compression="zlib", subfiletype=1 if k else 0)
    return levels


def _read(rs: refset.ReferenceSet, name: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return refset.open_dataset(rs, mask_and_scale=False)[name].values


class TestTiffConformance(ScannerTests):
    scanner = TiffScanner

    def make_files(self, tmp_path: Path) -> dict[Path, Mapping[str, np.ndarray]]:
        out: dict[Path, Mapping[str, np.ndarray]] = {}
        for name in ("zlib-tiled", "lzw-predictor", "rgb-planar", "bigtiff"):
            p = tmp_path / f"{name}.tif"
            _write(p, name)
            out[p] = {"0": tifffile.imread(p)}
        return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_layout_reads_as_tifffile_reads_it(tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.tif"
    data = _write(path, name)
    want = tifffile.imread(path)
    np.testing.assert_array_equal(want, data)  # the oracle reads what was written
    rs = refset.scan(str(path), inline_threshold=0)
    got = _read(rs, "0")
    assert got.dtype == want.dtype.newbyteorder("=") or got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    page = tifffile.TiffFile(path).pages[0]
    meta = rs.metadata["0"]
    if page.is_tiled:
        assert meta.chunks[-2 if page.planarconfig == 2 or page.samplesperpixel == 1 else -3:][:2] == (
            page.tilelength, page.tilewidth)
    # each chunk is a byte range of the file: the tile's or strip's own offset and length
    offsets = page.dataoffsets
    table = rs.table("0")
    assert sorted(table.offset[table.kind == 1].tolist()) == sorted(o for o, n in zip(offsets, page.databytecounts) if n)


def test_a_pyramid_gives_an_array_per_level(tmp_path: Path) -> None:
    path = tmp_path / "cog.tif"
    levels = _pyramid(path)
    rs = refset.scan(str(path))
    assert [p for p in rs.metadata if p.isdigit()] == ["0", "1", "2"]
    ds = refset.open_dataset(rs)
    for k, lv in enumerate(levels):
        np.testing.assert_array_equal(ds[str(k)].values, lv)
    assert ds["1"].dims == ("y_1", "x_1") and ds["0"].dims == ("y", "x")
    assert ds["1"].attrs["NewSubfileType"] == 1


def _geotiff(path: Path, *, point: bool = False, nodata: str | None = None, epsg: int = 32633) -> np.ndarray:
    data = _image((40, 60), "int16", 5)
    keys = [1, 1, 0, 3, 1024, 0, 1, 1, 1025, 0, 1, 2 if point else 1, 3072, 0, 1, epsg]
    extratags = [(33550, "d", 3, (30.0, 20.0, 0.0), True), (33922, "d", 6, (0, 0, 0, 500000.0, 4650000.0, 0), True),
                 (34735, "H", len(keys), keys, True)]
    if nodata is not None:
        extratags.append((42113, "s", len(nodata) + 1, nodata, True))
    tifffile.imwrite(path, data, tile=(16, 16), compression="zlib", extratags=extratags)
    return data


@pytest.mark.parametrize("point", [False, True], ids=["area", "point"])
def test_geotiff_coordinates_and_crs(tmp_path: Path, point: bool) -> None:
    path = tmp_path / "geo.tif"
    _geotiff(path, point=point)
    geo = tifffile.TiffFile(path).geotiff_metadata  # the oracle's parse of the GeoKeys
    assert int(geo["ProjectedCSTypeGeoKey"]) == 32633
    rs = refset.scan(str(path))
    ds = refset.open_dataset(rs)
    # pixel centres: the tie point is the first pixel's corner (PixelIsArea) or its centre (PixelIsPoint)
    half = 0.0 if point else 0.5
    np.testing.assert_allclose(ds["x"].values, 500000.0 + (np.arange(60) + half) * 30.0)
    np.testing.assert_allclose(ds["y"].values, 4650000.0 - (np.arange(40) + half) * 20.0)
    ref = ds["spatial_ref"]
    assert ref.attrs["spatial_ref"] == "EPSG:32633" and ref.attrs["ProjectedCSTypeGeoKey"] == 32633
    corner = 500000.0 - (15.0 if point else 0.0)
    assert [float(v) for v in ref.attrs["GeoTransform"].split()] == [corner, 30.0, 0.0,
                                                                     4650000.0 + (10.0 if point else 0.0), 0.0, -20.0]
    assert ds["0"].attrs["grid_mapping"] == "spatial_ref" and "spatial_ref" in ds.coords


def test_gdal_nodata_is_the_fill_value(tmp_path: Path) -> None:
    path = tmp_path / "nodata.tif"
    data = _geotiff(path, nodata="-32768")
    data_with_fill = data.copy()
    data_with_fill[0, :5] = -32768
    tifffile.imwrite(path, data_with_fill, tile=(16, 16), extratags=[(42113, "s", 7, "-32768", True)])
    ds = refset.open_dataset(refset.scan(str(path)))
    assert np.isnan(ds["0"].values[0, :5]).all() and not np.isnan(ds["0"].values[1:]).any()
    raw = refset.open_dataset(refset.scan(str(path)), mask_and_scale=False)["0"].values
    np.testing.assert_array_equal(raw, data_with_fill)


@pytest.mark.skipif(not COGS, reason="shared corpus not found (CI provides it)")
@pytest.mark.parametrize("path", COGS, ids=lambda p: p.name)
def test_corpus_cogs_read_as_tifffile_and_through_fsspec(path: Path) -> None:
    rs = refset.scan(str(path))
    tf = tifffile.TiffFile(path)
    for k, page in enumerate(tf.pages):
        np.testing.assert_array_equal(_read(rs, str(k)), page.asarray())
    # a foreign reader of the saved set: fsspec's ReferenceFileSystem + zarr, imagecodecs registered
    np.testing.assert_array_equal(read_through_fsspec(rs, "0"), tf.pages[0].asarray())


def test_pages_of_one_size_and_other_samples_and_volumes(tmp_path: Path) -> None:
    """Pages of the first page's size but another sample count get a band dim of their own (xarray
    refused the dataset); volumetric images (SGI's ImageDepth) are refused naming the image."""
    path = tmp_path / "pages.tif"
    rgb, rgba = _image((32, 32, 3), "uint8", 1), _image((32, 32, 4), "uint8", 2)
    with tifffile.TiffWriter(path) as tw:
        tw.write(rgb, photometric="rgb")
        tw.write(rgba, photometric="rgb", extrasamples=["unassalpha"])
    ds = refset.open_dataset(refset.scan(str(path)))
    assert ds["0"].dims == ("y", "x", "band") and ds["1"].dims == ("y", "x", "band_1")
    np.testing.assert_array_equal(ds["1"].values, rgba)
    vol = tmp_path / "vol.tif"
    tifffile.imwrite(vol, _image((4, 32, 32), "uint8"), volumetric=True, photometric="minisblack", tile=(4, 32, 32))
    with pytest.raises(Unsupported, match="variable '0': a volumetric image"):
        refset.scan(str(vol))


def test_refused_with_the_image_and_the_reason(tmp_path: Path) -> None:
    j2k = tmp_path / "j2k.tif"  # (JPEG: test_tiff_jpeg.py; LZMA, LERC, WebP, JPEG XL: test_tiff_codecs.py)
    tifffile.imwrite(j2k, _image((32, 32), "uint8"), tile=(16, 16), compression="jpeg2000")
    with pytest.raises(Unsupported, match=r"variable '0': JPEG 2000 \(34712\) has no numcodecs codec here"):
        refset.scan(str(j2k))
    strips = tmp_path / "strips.tif"
    tifffile.imwrite(strips, _image((50, 20), "uint8"), rowsperstrip=16, compression="zlib")
    with pytest.raises(Unsupported, match="its last strip holds 2 of 16 rows"):
        refset.scan(str(strips))
    rs = refset.scan(str(strips), drop_variables=["0"])  # the rest of the file scans
    assert "0" not in rs.metadata
    bits = tmp_path / "bits.tif"
    tifffile.imwrite(bits, np.zeros((16, 16), bool))
    with pytest.raises(Unsupported, match="1 bits per sample"):
        refset.scan(str(bits))
    be = tmp_path / "be-predictor.tif"
    tifffile.imwrite(be, _image((16, 16), "uint16"), byteorder=">", compression="zlib", predictor=True)
    with pytest.raises(Unsupported, match="predictor 2 on big-endian samples"):
        refset.scan(str(be))


def _patch(data: bytearray, at: int, fmt: str, *values: Any) -> None:
    struct.pack_into(fmt, data, at, *values)


def test_broken_structures_are_invalid_files(tmp_path: Path) -> None:
    path = tmp_path / "ok.tif"
    _write(path, "zlib-tiled")
    good = path.read_bytes()
    first = struct.unpack_from("<I", good, 4)[0]

    def case(name: str, edit: Any) -> str:
        data = bytearray(good)
        edit(data)
        p = tmp_path / f"{name}.tif"
        p.write_bytes(bytes(data))
        with pytest.raises(InvalidFile) as e:
            rs = refset.scan(str(p))
            _read(rs, "0")
        assert str(p) in str(e.value)
        return str(e.value)

    assert "past the end" in case("ifd-past-end", lambda d: _patch(d, 4, "<I", len(good) + 10))
    n = struct.unpack_from("<H", good, first)[0]
    assert "loops" in case("loop", lambda d: _patch(d, first + 2 + 12 * n, "<I", first))
    assert "entries" in case("no-entries", lambda d: _patch(d, first, "<H", 0))
    assert "past the end" in case("truncated", lambda d: d.__delitem__(slice(len(good) // 2, None)))


def test_remote_cog_costs_few_requests(tmp_path: Path) -> None:
    """A COG over HTTP: its directories come first, so the scan reads the head and nothing else."""
    from refset.scan import Scan
    from tests.httpserver import RangeServer

    path = tmp_path / "cog.tif"
    _pyramid(path)
    with RangeServer(tmp_path) as server:
        run = Scan()
        rs = run(f"{server.url}/cog.tif")
        assert run.requests == server.requests == 1, server.requests  # the head holds every directory
        np.testing.assert_array_equal(refset.open_dataset(rs)["0"].values, tifffile.imread(path))
