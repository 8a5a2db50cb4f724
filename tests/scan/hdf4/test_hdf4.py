"""refset.scan of HDF4 files (SD interface): every dataset equal to pyhdf's read (the HDF4 library's)
for the corpus's MODIS file and files written here (contiguous, deflate, chunked raw and compressed,
every number type, attributes, dimension names, empty datasets); broken structures are InvalidFile
naming the file; a seeded fuzz of the structures."""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import refset
from refset.errors import InvalidFile
from refset.scan.hdf4.scanner import Hdf4Scanner
from refset.testing import ScannerTests

pyhdf = pytest.importorskip("pyhdf.SD")
zarr = pytest.importorskip("zarr")

from tests.conftest import CORPUS  # noqa: E402
from tests.scan.fuzzcheck import scan_and_read  # noqa: E402

SDC = pyhdf.SDC
MOD14 = CORPUS / "kerchunk-fixtures" / "MOD14.hdf4"
FUZZ_CASES = 200 * int(os.environ.get("FUZZ_SCALE", "1"))
TYPES = {"f4": SDC.FLOAT32, "f8": SDC.FLOAT64, "i1": SDC.INT8, "u1": SDC.UINT8, "i2": SDC.INT16, "u2": SDC.UINT16,
         "i4": SDC.INT32, "u4": SDC.UINT32}


def _write(path: Path) -> None:
    f = pyhdf.SD(str(path), SDC.WRITE | SDC.CREATE)
    f.title = "refset test"
    f.version = 2
    rng = np.random.default_rng(0)
    for k, (kind, code) in enumerate(TYPES.items()):
        values = (rng.standard_normal((12, 9)) * 50).astype(kind)
        d = f.create(f"v_{kind}", code, values.shape)
        if k % 2:
            d.setcompress(SDC.COMP_DEFLATE, value=4)  # (chunked storage: the corpus's MODIS file)
        d[:] = values
        d.units = "m"
        d.scale = 1.5
        d.dim(0).setname("row")
        d.dim(1).setname("col")
        d.endaccess()
    e = f.create("empty", SDC.FLOAT32, (0,))  # an unlimited dimension never written
    e.endaccess()
    never = f.create("never", SDC.INT16, (5,))  # defined, never written: netCDF's default fill
    never.endaccess()
    f.end()


def _pyhdf(path: Path) -> dict[str, np.ndarray]:
    f = pyhdf.SD(str(path), SDC.READ)
    out = {}
    for name, info in f.datasets().items():
        n = int(np.prod(info[1]))
        out[name] = np.asarray(f.select(name)[:]) if n else np.zeros(0)
    f.end()
    return out


def _ours(rs: refset.ReferenceSet) -> Any:
    return zarr.open_group(refset.ZarrStore(rs), mode="r", zarr_format=2)


class TestHdf4Conformance(ScannerTests):
    scanner = Hdf4Scanner

    def make_files(self, tmp_path: Path) -> dict[Path, Mapping[str, np.ndarray]]:
        p = tmp_path / "f.hdf"
        _write(p)
        return {p: {k: v for k, v in _pyhdf(p).items() if v.size}}


def _check(path: Path) -> int:
    rs = refset.scan(str(path))
    ours = _ours(rs)
    f = pyhdf.SD(str(path), SDC.READ)
    n = 0
    for name, want in _pyhdf(path).items():
        np.testing.assert_array_equal(ours[name][...].reshape(-1), want.reshape(-1), err_msg=name)
        sds = f.select(name)
        attrs = dict(ours[name].attrs)
        for k, v in sds.attributes().items():
            if k != "_FillValue":
                assert attrs[k] == v or np.allclose(attrs[k], v), (name, k)
        assert attrs["_ARRAY_DIMENSIONS"] == list(sds.dimensions().keys()), name
        n += 1
    root = dict(_ours(rs).attrs)
    assert all(root[k] == v for k, v in f.attributes().items())
    f.end()
    return n


def test_every_layout_and_type_reads_as_the_hdf4_library_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "f.hdf"
    _write(path)
    assert _check(path) == len(TYPES) + 2
    assert _pyhdf(path)["never"].tolist() == [-32767] * 5  # read back as the library gives it


@pytest.mark.skipif(not MOD14.exists(), reason="shared corpus not found (CI provides it)")
def test_modis_fire_product() -> None:
    assert _check(MOD14) == 30  # two chunked compressed masks, 6390x8 grid cells, 27 empty fire lists
    rs = refset.scan(str(MOD14))
    assert rs.metadata["fire mask"].chunks == (10, 1354) and rs.table("fire mask").count() == 203


def test_broken_files_are_invalid(tmp_path: Path) -> None:
    path = tmp_path / "f.hdf"
    _write(path)
    good = path.read_bytes()
    cut = tmp_path / "cut.hdf"
    cut.write_bytes(good[: len(good) // 3])
    with pytest.raises(InvalidFile, match=f"{cut}: not a valid HDF4 file"):
        refset.scan(str(cut))
    loop = tmp_path / "loop.hdf"
    data = bytearray(good)
    data[6:10] = (4).to_bytes(4, "big")  # the first descriptor block's next block: itself
    loop.write_bytes(bytes(data))
    with pytest.raises(InvalidFile, match="loops"):
        refset.scan(str(loop))


def test_hdf4_fuzz(tmp_path: Path) -> None:
    """Bit flips and words in the file's structures (its descriptor blocks and the elements they
    list): a set whose datasets read, or a refset error naming the file; never another exception."""
    src = tmp_path / "f.hdf"
    _write(src)
    data = src.read_bytes()
    bad = []
    case = tmp_path / "case.hdf"
    for seed in range(FUZZ_CASES):
        rng = random.Random(seed)
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(0, min(len(b), 4096)) if rng.random() < 0.5 else rng.randrange(len(b))
            if rng.random() < 0.7:
                b[at] ^= 1 << rng.randrange(8)
            else:
                b[at:at + 4] = rng.choice((0, 1, 0xFFFFFFFF, 0x7FFFFFFF)).to_bytes(4, "big")[: len(b[at:at + 4])]
        case.write_bytes(bytes(b))
        out = scan_and_read(case)
        if out not in ("read", "refset error"):
            bad.append(f"seed {seed}: {out}")
    assert not bad, "\n".join(bad[:10])
