"""refset.scan of FITS files: every image HDU reads back as astropy reads it (raw, and scaled through
xarray's CF decoding), headers as attributes, tables and tile-compressed images skipped by name,
broken headers InvalidFile naming the file, and a seeded fuzz of the headers against astropy."""

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

fits = pytest.importorskip("astropy.io.fits")
xr = pytest.importorskip("xarray")

FUZZ_CASES = 300 * int(os.environ.get("FUZZ_SCALE", "1"))


def _write(path: Path) -> None:
    """A primary image (int16 with BSCALE/BZERO and BLANK), a float32 cube extension, a uint16 image
    (BZERO 32768, astropy's unsigned convention), a table and a tile-compressed image."""
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits.HDUList([primary, cube, unsigned, table, comp, double]).writeto(path)


def _astropy(path: Path, scaled: bool) -> dict[str, np.ndarray]:
    out = {}
    with fits.open(path, do_not_scale_image_data=not scaled, memmap=False) as hdul:
        for k, hdu in enumerate(hdul):
            if isinstance(hdu, fits.PrimaryHDU | fits.ImageHDU) and not isinstance(hdu, fits.CompImageHDU) \
                    and hdu.data is not None:
                out[hdu.name if k else "PRIMARY"] = np.asarray(hdu.data)
    return out


class TestFitsConformance(ScannerTests):
    scanner = FitsScanner

    def make_files(self, tmp_path: Path) -> dict[Path, Mapping[str, np.ndarray]]:
        p = tmp_path / "f.fits"
        _write(p)
        return {p: _astropy(p, scaled=False)}


def test_images_read_as_astropy_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "f.fits"
    _write(path)
    rs = refset.scan(str(path))
    assert sorted(p for p in rs.metadata) == ["CUBE", "DOUBLE", "PRIMARY", "UNSIGNED"]
    raw = refset.open_dataset(rs, mask_and_scale=False)
    for name, want in _astropy(path, scaled=False).items():
        np.testing.assert_array_equal(raw[name].values, want, err_msg=name)
    decoded = refset.open_dataset(rs)
    for name, want in _astropy(path, scaled=True).items():  # BLANK pixels NaN, BSCALE/BZERO applied
        np.testing.assert_allclose(decoded[name].values, want, err_msg=name, equal_nan=True)
    attrs = decoded["PRIMARY"].attrs
    assert attrs["OBJECT"] == "M31" and attrs["EXPTIME"] == 30.0 and "made for refset's tests" in attrs["HISTORY"]
    assert refset.open_dataset(rs).attrs["fits_skipped_hdus"] == ["TAB (BINTABLE)", "COMP (tile-compressed image)"]
    table = rs.table("CUBE")
    with fits.open(path) as hdul:
        assert table.offset[0] == hdul["CUBE"].fileinfo()["datLoc"]  # the image's bytes, in place


def test_subchunks_and_drop(tmp_path: Path) -> None:
    path = tmp_path / "f.fits"
    _write(path)
    rs = refset.scan(str(path), subchunk=200, drop_variables=["DOUBLE"])
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
        try:
            rs = refset.scan(str(case))
        except RefsetError as e:
            counts["refset error"] += 1
            if str(case) not in str(e):
                failures.append(f"seed {seed}: unnamed {e}")
            continue
        except Exception as e:
            failures.append(f"seed {seed}: bare {type(e).__name__}: {e}")
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
