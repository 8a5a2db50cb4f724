"""refset.scan of FITS files: every image HDU reads back as astropy reads it (raw, and scaled through
xarray's CF decoding), tile-compressed ones included (Rice, GZIP_1/2, none; tiles as chunks), headers as
attributes, tables and quantized images skipped by name with the reason, broken headers and tables
InvalidFile naming the file, and seeded fuzzes of the headers and of the tile tables against astropy."""

from __future__ import annotations

import os
import random
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidFile, RefsetError
from refset.scan.fits.scanner import FitsScanner
from refset.testing import ScannerTests
from tests.helpers import read_through_fsspec
from tests.scan.fuzzcheck import refusal_problem

fits = pytest.importorskip("astropy.io.fits")
xr = pytest.importorskip("xarray")

FUZZ_CASES = 300 * int(os.environ.get("FUZZ_SCALE", "1"))


def _write(path: Path, quantized: bool = True) -> None:
    """A primary image (int16 with BSCALE/BZERO and BLANK), a float32 cube extension, a uint16 image
    (BZERO 32768, astropy's unsigned convention), a table, a float image tile-compressed with quantized
    values (left out) and three that are referenced: int16 Rice by rows, uint16 Rice in 4 x 6 tiles of
    a 3-D image, float64 GZIP_2 (byte-shuffled, lossless)."""
    rng = np.random.default_rng(0)
    primary = fits.PrimaryHDU(rng.integers(-1000, 1000, (20, 30)).astype(np.int16))
    primary.header["BSCALE"] = 0.5
    primary.header["BZERO"] = 10.0
    primary.header["BLANK"] = -32768
    primary.data[0, :3] = -32768
    primary.header["OBJECT"] = "M31"
    primary.header["EXPTIME"] = (30.0, "seconds")
    primary.header.add_history("made for refset's tests")
    cube = fits.ImageHDU(rng.standard_normal((4, 10, 12)).astype(np.float32), name="CUBE")
    unsigned = fits.ImageHDU(rng.integers(0, 65535, (8, 8)).astype(np.uint16), name="UNSIGNED")
    table = fits.BinTableHDU.from_columns([fits.Column(name="a", format="E", array=np.arange(5.0))], name="TAB")
    comp = fits.CompImageHDU(rng.standard_normal((16, 16)).astype(np.float32), name="COMP")
    double = fits.ImageHDU(rng.standard_normal((6, 5)), name="DOUBLE")
    rice = fits.CompImageHDU(rng.integers(-3000, 3000, (12, 40)).astype(np.int16), name="RICE",
                             compression_type="RICE_1")
    tiled = fits.CompImageHDU(rng.integers(0, 65535, (2, 8, 12)).astype(np.uint16), name="TILED",
                              compression_type="RICE_1", tile_shape=(1, 4, 6))
    gzip2 = fits.CompImageHDU(rng.standard_normal((10, 7)), name="GZIP2", compression_type="GZIP_2",
                              quantize_level=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hdus = [primary, cube, unsigned, table, comp, double, rice, tiled, gzip2]
        fits.HDUList([h for h in hdus if quantized or h is not comp]).writeto(path)


def _astropy(path: Path, scaled: bool) -> dict[str, np.ndarray]:
    out = {}
    with fits.open(path, do_not_scale_image_data=not scaled, memmap=False) as hdul:
        for k, hdu in enumerate(hdul):
            if isinstance(hdu, fits.PrimaryHDU | fits.ImageHDU | fits.CompImageHDU) and hdu.name != "COMP" \
                    and hdu.data is not None:
                out[hdu.name if k else "PRIMARY"] = np.asarray(hdu.data)
    return out


class TestFitsConformance(ScannerTests):
    scanner = FitsScanner

    def make_files(self, tmp_path: Path) -> dict[Path, Mapping[str, np.ndarray]]:
        p = tmp_path / "f.fits"
        _write(p, quantized=False)
        return {p: _astropy(p, scaled=False)}


def test_images_read_as_astropy_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "f.fits"
    _write(path)
    with pytest.warns(UserWarning, match="the tile-compressed image 'COMP' is left out: its values are quantized"):
        rs = refset.scan(str(path))
    assert sorted(p for p in rs.metadata) == ["CUBE", "DOUBLE", "GZIP2", "PRIMARY", "RICE", "TILED", "UNSIGNED"]
    assert rs.metadata["TILED"].chunks == (1, 4, 6) and rs.metadata["RICE"].chunks == (1, 40)
    raw = refset.open_dataset(rs, mask_and_scale=False)
    for name, want in _astropy(path, scaled=False).items():
        np.testing.assert_array_equal(raw[name].values, want, err_msg=name)
    decoded = refset.open_dataset(rs)
    for name, want in _astropy(path, scaled=True).items():  # BLANK pixels NaN, BSCALE/BZERO applied
        np.testing.assert_allclose(decoded[name].values, want, err_msg=name, equal_nan=True)
    attrs = decoded["PRIMARY"].attrs
    assert attrs["OBJECT"] == "M31" and attrs["EXPTIME"] == 30.0 and "made for refset's tests" in attrs["HISTORY"]
    skipped = refset.open_dataset(rs).attrs["fits_skipped_hdus"]
    assert skipped[0] == "TAB (BINTABLE)" and skipped[1].startswith("COMP (tile-compressed image: its values are "
                                                                    "quantized per tile (ZSCALE, ZZERO)")
    assert len(skipped) == 2
    table = rs.table("CUBE")
    with fits.open(path) as hdul:
        assert table.offset[0] == hdul["CUBE"].fileinfo()["datLoc"]  # the image's bytes, in place


def test_subchunks_and_drop(tmp_path: Path) -> None:
    path = tmp_path / "f.fits"
    _write(path)
    rs = refset.scan(str(path), subchunk=200, drop_variables=["DOUBLE", "COMP"])
    assert "DOUBLE" not in rs.metadata and rs.metadata["CUBE"].chunks == (1, 10, 12)
    np.testing.assert_array_equal(refset.open_dataset(rs, mask_and_scale=False)["CUBE"].values,
                                  _astropy(path, scaled=False)["CUBE"])


def test_review_cases(tmp_path: Path) -> None:
    """An EXTNAME with a "/" stays an array of the root; CONTINUE cards continue a string; a keyword
    without "= " is commentary (astropy reads such files); unsigned 64-bit images are refused (a float
    add_offset would lose their low bits)."""
    path = tmp_path / "r.fits"
    hdu = fits.ImageHDU(np.arange(6, dtype=np.int16).reshape(2, 3), name="SCI/1")
    hdu.header["LONGSTR"] = "x" * 100  # written with CONTINUE cards
    fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(path)
    data = bytearray(path.read_bytes())
    k = data.index(b"GCOUNT  ", 2880)
    data[k:k + 80] = b"MYNOTE  just a note, no value indicator".ljust(80)  # in GCOUNT's place (1 by default)
    path.write_bytes(bytes(data))
    rs = refset.scan(str(path))
    assert list(rs.metadata) == ["SCI_1"]
    assert refset.open_dataset(rs)["SCI_1"].attrs["LONGSTR"] == "x" * 100
    u64 = tmp_path / "u64.fits"
    fits.HDUList([fits.PrimaryHDU(np.array([1, 2**63 + 1], dtype=np.uint64))]).writeto(u64)
    with pytest.raises(refset.Unsupported, match="variable 'PRIMARY': unsigned 64-bit values"):
        refset.scan(str(u64))


def test_broken_headers_are_invalid_files(tmp_path: Path) -> None:
    path = tmp_path / "f.fits"
    _write(path)
    good = path.read_bytes()

    def case(name: str, data: bytes) -> str:
        p = tmp_path / f"{name}.fits"
        p.write_bytes(data)
        with pytest.raises(InvalidFile) as e:
            refset.scan(str(p))
        assert str(p) in str(e.value)
        return str(e.value)

    end = good.index(b"END" + b" " * 77)
    assert "no END card" in case("no-end", good[:end] + b" " * 80 + good[end + 80:2880])
    assert "not a valid FITS file" in case("bad-card", good[:end] + b"X" + good[end + 1:])  # "XND": commentary
    assert "past the end of the file" in case("cut", good[:2880 + 100])
    k = good.index(b"NAXIS1  =")
    assert "NAXIS1" in case("naxis", good[:k + 10] + b"'abc'".ljust(20) + good[k + 30:])


def _scan_case(case: Path, seed: int, failures: list[str], counts: dict[str, int]) -> refset.ReferenceSet | None:
    """The set of a fuzzed file; None after counting a refset error (a failure when it does not name
    the file, or is an InvalidFile no Broken caused) or recording a bare exception as a failure."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # images left out
            return refset.scan(str(case))
    except RefsetError as e:
        counts["refset error"] += 1
        problem = refusal_problem(str(case), e)
        if problem:
            failures.append(f"seed {seed}: {problem}")
    except Exception as e:
        failures.append(f"seed {seed}: bare {type(e).__name__}: {e}")
    return None


def test_fits_fuzz(tmp_path: Path) -> None:
    """Bit flips and runs in the headers: astropy's values for every image refset reads, or a refset
    error naming the file; never another exception."""
    src = tmp_path / "f.fits"
    _write(src)
    data = src.read_bytes()
    headers = [i for i in range(0, len(data), 2880) if data[i:i + 8] in (b"SIMPLE  ", b"XTENSION")]
    failures, counts = [], {"right": 0, "refset error": 0}
    case = tmp_path / "case.fits"
    for seed in range(FUZZ_CASES):
        rng = random.Random(seed)
        b = bytearray(data)
        h = rng.choice(headers)
        for _ in range(rng.randint(1, 3)):
            at = h + rng.randrange(0, 2880)
            b[at] = rng.choice((b[at] ^ (1 << rng.randrange(7)), ord(rng.choice("0123456789 '=-ETF"))))
        case.write_bytes(bytes(b))
        rs = _scan_case(case, seed, failures, counts)
        if rs is None:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = _astropy(case, scaled=False)
        except Exception:
            want = {}
        for name in rs.metadata:
            meta = rs.metadata[name]
            if meta.dtype.itemsize * int(np.prod(meta.shape, dtype=np.float64)) > 64 << 20:
                continue
            try:
                got = refset.open_dataset(rs, mask_and_scale=False)[name].values
            except RefsetError:
                continue
            except Exception as e:
                failures.append(f"seed {seed}: bare {type(e).__name__} reading {name}: {e}")
                continue
            w = want.get(name)
            if w is not None and (w.shape != got.shape or not np.array_equal(w, got, equal_nan=True)):
                failures.append(f"seed {seed}: {name} differs from astropy's")
        counts["right"] += 1
    assert not failures, "\n".join(failures[:10])
    assert counts["refset error"] > FUZZ_CASES // 20


CODECS = [("RICE_1", "u1"), ("RICE_1", "i2"), ("RICE_1", "i4"), ("GZIP_1", "i2"), ("GZIP_1", "i8"),
          ("GZIP_1", "f4"), ("GZIP_2", "i4"), ("GZIP_2", "f8"), ("GZIP_2", "u1"), ("NOCOMPRESS", "i2")]


@pytest.mark.parametrize(("kind", "dtype"), CODECS, ids=[f"{k}-{d}" for k, d in CODECS])
def test_tile_compressed_images_read_as_astropy_reads_them(tmp_path: Path, kind: str, dtype: str) -> None:
    """Each codec and type astropy (cfitsio's compressor) writes, in tiles of several rows and columns:
    refset's values equal astropy's, and so do fsspec's + zarr's from the saved set (imagecodecs
    registered for Rice); every tile is a chunk whose bytes lie in the table's heap."""
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype) if dtype[0] in "iu" else None
    values = rng.integers(max(info.min, -(10**6)), min(info.max, 10**6), (3, 12, 20)).astype(dtype) if info \
        else rng.standard_normal((3, 12, 20)).astype(dtype)
    path = tmp_path / "c.fits"
    kw = {"quantize_level": 0.0} if dtype[0] == "f" else {}
    hdu = fits.CompImageHDU(values, name="SCI", compression_type=kind, tile_shape=(1, 4, 10), **kw)
    hdu.header["OBJECT"] = "NGC 1300"
    fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(path)
    rs = refset.scan(str(path))
    meta = rs.metadata["SCI"]
    assert meta.shape == (3, 12, 20) and meta.chunks == (1, 4, 10)
    with fits.open(path) as hdul:
        want = np.asarray(hdul["SCI"].data)
    ds = refset.open_dataset(rs, mask_and_scale=False)
    np.testing.assert_array_equal(ds["SCI"].values, want)
    assert ds["SCI"].attrs["OBJECT"] == "NGC 1300" and not any(k.startswith(("ZCMP", "TFORM")) for k in ds["SCI"].attrs)
    with fits.open(path, disable_image_compression=True) as hdul:
        table = hdul["SCI"]
        heap = table.fileinfo()["datLoc"] + table.header["NAXIS1"] * table.header["NAXIS2"]
        sizes = [len(np.asarray(row)) for row in table.data["COMPRESSED_DATA"]]
    chunks = refset.scan(str(path), inline_threshold=0).table("SCI")  # small tiles are inlined otherwise
    assert (chunks.offset.ravel() >= heap).all() and chunks.length.ravel().tolist() == sizes
    np.testing.assert_array_equal(read_through_fsspec(rs, "SCI"), want)


def test_rice_one_is_rice_1(tmp_path: Path) -> None:
    """Early cfitsio named Rice ``RICE_ONE``; cfitsio and astropy still read it as RICE_1."""
    path = tmp_path / "r1.fits"
    values = np.arange(200, dtype=np.int16).reshape(10, 20) * 7
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(values, name="X", compression_type="RICE_1")]).writeto(path)
    data = bytearray(path.read_bytes())
    at = data.index(b"ZCMPTYPE= 'RICE_1  '")
    data[at:at + 20] = b"ZCMPTYPE= 'RICE_ONE'"
    path.write_bytes(bytes(data))
    np.testing.assert_array_equal(fits.getdata(path, 1), values)
    np.testing.assert_array_equal(refset.open_dataset(refset.scan(str(path)))["X"].values, values)


def _set_card(data: bytes, key: str, card: str) -> bytes:
    """``data`` with the first card of keyword ``key`` replaced by ``card``."""
    at = data.index(key.ljust(8).encode() + b"=")
    assert at % 80 == 0
    return data[:at] + card.ljust(80).encode() + data[at + 80:]


def test_zblank_is_the_null_value_of_an_integer_tiled_image(tmp_path: Path) -> None:
    """An integer image whose compressed header has ZBLANK and no BLANK: the null pixels are NaN once
    decoded, as astropy (and cfitsio) read them (review: the card was dropped, -65536.0 read)."""
    values = np.arange(200, dtype=np.int16).reshape(10, 20)
    values[3, 4] = -32768
    hdu = fits.CompImageHDU(values, name="SCI", compression_type="GZIP_1")
    hdu.header["BSCALE"] = 2.0
    plain, path = tmp_path / "plain.fits", tmp_path / "zblank.fits"
    fits.HDUList([fits.PrimaryHDU(), hdu]).writeto(plain)
    with fits.open(plain, disable_image_compression=True) as hdul:
        hdul[1].header["ZBLANK"] = -32768
        hdul.writeto(path)
    with fits.open(path) as hdul:
        want = np.asarray(hdul["SCI"].data)
    assert np.isnan(want[3, 4])
    got = refset.open_dataset(refset.scan(str(path)))["SCI"].values
    np.testing.assert_array_equal(got, want)
    odd = tmp_path / "zblank-odd.fits"  # a null value no int16 holds masks nothing (astropy refuses the file)
    with fits.open(plain, disable_image_compression=True) as hdul:
        hdul[1].header["ZBLANK"] = 70000
        hdul.writeto(odd)
    raw = refset.open_dataset(refset.scan(str(odd)), mask_and_scale=False)["SCI"].values
    np.testing.assert_array_equal(raw, values)


def test_hostile_tile_tables_are_named(tmp_path: Path) -> None:
    """A descriptor column of no width, an image of 10**20 pixels and tiles decoding past 2 GiB: a
    refset error naming the file, or the image left out naming why; never a bare error at read."""
    path = tmp_path / "t.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(np.arange(400, dtype=np.int16).reshape(20, 20), name="X",
                                                       compression_type="GZIP_1")]).writeto(path)
    good = path.read_bytes()
    cases = {"zero-width": _set_card(_set_card(good, "TFORM1", "TFORM1  = '0PB(40)'"), "NAXIS1",
                                     "NAXIS1  =                    0"),
             "huge": _set_card(_set_card(good, "ZNAXIS1", "ZNAXIS1 = 100000000000000000000"), "ZTILE1",
                               "ZTILE1  = 100000000000000000000")}
    for label, data in cases.items():
        p = tmp_path / f"{label}.fits"
        p.write_bytes(data)
        with pytest.raises(InvalidFile) as e:
            refset.scan(str(p))
        assert str(p) in str(e.value) and "not a valid FITS file" in str(e.value), label
    p = tmp_path / "big-tiles.fits"
    p.write_bytes(_set_card(_set_card(good, "ZNAXIS1", "ZNAXIS1 =           2000000000"), "ZTILE1",
                            "ZTILE1  =           2000000000"))
    with pytest.warns(UserWarning, match=r"'X' is left out: tiles of \[1, 2000000000\] pixels"):
        assert "X" not in refset.scan(str(p)).metadata


def test_tile_compressed_images_left_out_say_why(tmp_path: Path) -> None:
    """No codec (HCOMPRESS_1, PLIO_1), quantized floats, tiles that do not divide the image: left out
    with a warning naming the image and the reason, listed in fits_skipped_hdus; the other images of
    the file are referenced; drop_variables leaves one out silently."""
    rng = np.random.default_rng(3)
    ints = rng.integers(0, 1000, (12, 40)).astype(np.int16)
    hdus = [fits.PrimaryHDU(ints),
            fits.CompImageHDU(ints, name="HC", compression_type="HCOMPRESS_1"),
            fits.CompImageHDU(ints, name="PLIO", compression_type="PLIO_1"),
            fits.CompImageHDU(ints.astype(np.float32), name="QUANT", compression_type="GZIP_1"),
            fits.CompImageHDU(ints, name="ODD", compression_type="RICE_1", tile_shape=(5, 7))]
    path = tmp_path / "out.fits"
    fits.HDUList(hdus).writeto(path)
    with pytest.warns(UserWarning) as caught:
        rs = refset.scan(str(path))
    assert list(rs.metadata) == ["PRIMARY"]
    said = [str(w.message) for w in caught]
    assert any("'HC' is left out: tile compression HCOMPRESS_1 has no numcodecs codec" in m for m in said)
    assert any("'PLIO' is left out: tile compression PLIO_1" in m for m in said)
    assert any("'QUANT' is left out: its values are quantized per tile (ZSCALE, ZZERO)" in m for m in said)
    assert any("'ODD' is left out: its tiles of [5, 7] pixels do not divide its [12, 40]" in m for m in said)
    skipped = refset.open_dataset(rs).attrs["fits_skipped_hdus"]
    assert [s.split(" ")[0] for s in skipped] == ["HC", "PLIO", "QUANT", "ODD"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        refset.scan(str(path), drop_variables=["HC", "PLIO", "QUANT", "ODD"])


def test_tile_table_fuzz(tmp_path: Path) -> None:
    """Bit flips in the rows and heaps of tile-compressed images: astropy's values for every image
    refset reads, or a refset error naming the file; never another exception."""
    src = tmp_path / "f.fits"
    _write(src, quantized=False)
    data = src.read_bytes()
    regions = []
    with fits.open(src, disable_image_compression=True) as hdul:
        for hdu in hdul[1:]:
            if hdu.header.get("ZIMAGE"):
                start = hdu.fileinfo()["datLoc"]
                regions.append((start, start + hdu.header["NAXIS1"] * hdu.header["NAXIS2"] + hdu.header["PCOUNT"]))
    failures, counts = [], {"right": 0, "refset error": 0}
    case = tmp_path / "case.fits"
    for seed in range(FUZZ_CASES):
        rng = random.Random(seed)
        b = bytearray(data)
        lo, hi = rng.choice(regions)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(lo, hi) if rng.random() < 0.5 else rng.randrange(lo, min(hi, lo + 64))  # rows
            b[at] = rng.choice((b[at] ^ (1 << rng.randrange(8)), rng.randrange(256), 0, 255))
        case.write_bytes(bytes(b))
        rs = _scan_case(case, seed, failures, counts)
        if rs is None:
            continue
        for name in rs.metadata:
            try:
                got = refset.open_dataset(rs, mask_and_scale=False)[name].values
            except RefsetError:
                counts["refset error"] += 1
                continue
            except Exception as e:
                failures.append(f"seed {seed}: bare {type(e).__name__} reading {name}: {e}")
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with fits.open(case, do_not_scale_image_data=True, memmap=False) as hdul:
                        w = np.asarray(hdul[name].data)
            except Exception:
                continue  # astropy cannot read it: refset read something, and said nothing wrong
            if w.shape != got.shape or not np.array_equal(w, got, equal_nan=True):
                failures.append(f"seed {seed}: {name} differs from astropy's")
        counts["right"] += 1
    assert not failures, "\n".join(failures[:10])
    assert counts["refset error"] > FUZZ_CASES // 20
