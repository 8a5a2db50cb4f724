"""refset.scan of DMR++ sidecars: the set equals the scan of the HDF5 file they describe (every chunk's
byte range, the small ones inlined alike) and reads h5py's values, reading of the file only its small
chunks (none with inline_threshold=0); relative hrefs, groups, compact data, and refusals naming the
variable; the scanners' conformance suite; a seeded fuzz of the XML."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidFile, Unsupported
from refset.scan.dmrpp.scanner import DmrppScanner
from refset.testing import ScannerTests

h5py = pytest.importorskip("h5py")

from tests.scan.dmrpp.dmrppfiles import compact_dmrpp, write_dmrpp  # noqa: E402
from tests.scan.fuzzcheck import scan_and_read  # noqa: E402

FUZZ_CASES = 200 * int(os.environ.get("FUZZ_SCALE", "1"))


def _granule(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    want = {"t": rng.standard_normal((20, 30)).astype("f4"), "g/q": rng.integers(0, 1000, (7, 9)).astype("i2"),
            "c": np.arange(12, dtype="f8"), "f": rng.integers(0, 50, (16,)).astype("u4")}
    with h5py.File(path, "w") as f:
        f.create_dataset("t", data=want["t"], chunks=(8, 10), compression="gzip", compression_opts=4, shuffle=True)
        f["t"].attrs["units"] = "K"
        f["t"].attrs["scale"] = np.float32(1.5)
        g = f.create_group("g")
        g.create_dataset("q", data=want["g/q"], chunks=(4, 4), fillvalue=-9, compression="gzip")
        f.create_dataset("c", data=want["c"])  # contiguous
        f.create_dataset("f", data=want["f"], chunks=(4,), fletcher32=True, compression="gzip", shuffle=True)
        f.create_dataset("empty", shape=(6,), dtype="f4", chunks=(3,), fillvalue=np.nan)  # no chunk written
    want["empty"] = np.full(6, np.nan, "f4")
    return want


def _values(rs: refset.ReferenceSet, name: str) -> np.ndarray:
    import zarr

    return zarr.open_group(refset.ZarrStore(rs), mode="r", zarr_format=2)[name][...]


def test_the_sidecar_gives_the_files_references_and_values(tmp_path: Path) -> None:
    h5 = tmp_path / "granule.h5"
    want = _granule(h5)
    side = tmp_path / "granule.h5.dmrpp"
    write_dmrpp(h5, side)
    for threshold in (0, 500):  # 500: small chunks (the contiguous "c") read from the granule and stored
        rs = refset.scan(str(side), inline_threshold=threshold)
        assert rs.urls == (str(h5),)  # the granule, not the sidecar
        for name, values in want.items():
            np.testing.assert_array_equal(_values(rs, name), values, err_msg=name)
        direct = refset.scan(str(h5), inline_threshold=threshold)
        for name in ("t", "g/q", "c", "f"):
            a, b = rs.table(name), direct.table(name)
            assert rs.metadata[name].chunks == direct.metadata[name].chunks, name
            np.testing.assert_array_equal(a.kind, b.kind, err_msg=name)
            np.testing.assert_array_equal(a.offset[a.kind != 0], b.offset[b.kind != 0], err_msg=name)
            np.testing.assert_array_equal(a.length[a.kind != 0], b.length[b.kind != 0], err_msg=name)
            assert dict(a.inline) == dict(b.inline), name
    assert rs.table("c").kind.tolist() == [3]  # INLINE: 96 bytes, below the threshold
    ds = refset.open_dataset(rs)
    assert ds["t"].attrs["units"] == "K" and ds["t"].attrs["scale"] == 1.5


def test_relative_href_and_compact_data(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    h5 = tmp_path / "data" / "granule.h5"
    want = _granule(h5)
    side = tmp_path / "data" / "granule.dmrpp"
    write_dmrpp(h5, side, href="granule.h5")
    rs = refset.scan(str(side))
    assert rs.urls == (str(h5),)
    np.testing.assert_array_equal(_values(rs, "t"), want["t"])
    compact = tmp_path / "compact.dmrpp"
    compact_dmrpp(compact, str(h5), np.arange(6, dtype="<i4").reshape(2, 3))
    np.testing.assert_array_equal(_values(refset.scan(str(compact)), "v"), np.arange(6).reshape(2, 3))


def test_refusals_and_broken_sidecars(tmp_path: Path) -> None:
    h5 = tmp_path / "granule.h5"
    _granule(h5)
    side = tmp_path / "s.dmrpp"
    write_dmrpp(h5, side)
    text = side.read_text()
    bad = tmp_path / "bad.dmrpp"
    bad.write_text(text.replace('compressionType="shuffle deflate"', 'compressionType="shuffle szip"', 1))
    with pytest.raises(Unsupported, match="variable 't': filter 'szip'"):
        refset.scan(str(bad))
    bad.write_text(text[: len(text) // 2])
    with pytest.raises(InvalidFile, match=f"{bad}: not a valid DMR.. file: not well-formed XML"):
        refset.scan(str(bad))
    bad.write_text(text.replace("dmrpp:href=", "dmrpp:other="))
    with pytest.raises(InvalidFile, match="no dmrpp:href"):
        refset.scan(str(bad))
    bad.write_text(text.replace('chunkPositionInArray="[8,', 'chunkPositionInArray="[7,', 1))
    with pytest.raises(Unsupported, match=r"variable 't': chunk position \[7,.*off its grid"):
        refset.scan(str(bad))


def test_hand_written_sidecars(tmp_path: Path) -> None:
    """64-bit fill values exact, dims declared in a sibling group, compact data of the wrong size and
    members of one name refused."""
    h5 = tmp_path / "g.h5"
    with h5py.File(h5, "w") as f:
        f.create_dataset("v", shape=(4,), dtype="<i8", chunks=(2,), fillvalue=-9223372036854775806)
        f["v"][:2] = [1, 2]
    side = tmp_path / "g.dmrpp"
    write_dmrpp(h5, side)
    fill = -9223372036854775806  # netCDF's NC_FILL_INT64: not a float's
    np.testing.assert_array_equal(_values(refset.scan(str(side)), "v"), [1, 2, fill, fill])
    ns = ('xmlns="http://xml.opendap.org/ns/DAP/4.0#" xmlns:dmrpp="http://xml.opendap.org/dap/dmrpp/1.0.0#" '
          f'dmrpp:href="{h5}"')
    sib = tmp_path / "sib.dmrpp"
    sib.write_text(f'<?xml version="1.0"?><Dataset {ns} name="d"><Group name="a"><Dimension name="x" size="2"/>'
                   '</Group><Group name="b"><Int16 name="v"><Dim name="/a/x"/><dmrpp:compact>AAABAA==</dmrpp:compact>'
                   '</Int16></Group></Dataset>')
    rs = refset.scan(str(sib))
    assert rs.metadata["b/v"].dimension_names == ("x",)
    np.testing.assert_array_equal(_values(rs, "b/v"), [0, 1])
    short = tmp_path / "short.dmrpp"
    short.write_text(f'<?xml version="1.0"?><Dataset {ns} name="d"><Int32 name="c"><Dim size="4"/>'
                     '<dmrpp:compact>AAAAAAEAAAA=</dmrpp:compact></Int32></Dataset>')
    with pytest.raises(InvalidFile, match="8 bytes of compact data for shape"):
        refset.scan(str(short))
    twice = tmp_path / "twice.dmrpp"
    twice.write_text(f'<?xml version="1.0"?><Dataset {ns} name="d"><Group name="v"/><Int32 name="v"><Dim size="1"/>'
                     '<dmrpp:compact>AAAAAA==</dmrpp:compact></Int32></Dataset>')
    with pytest.raises(InvalidFile, match="two members named 'v'"):
        refset.scan(str(twice))


def test_dmrpp_fuzz(tmp_path: Path) -> None:
    """Byte flips and digit changes in a sidecar: a set, or a refset error naming the sidecar; never
    another exception. (Values are not compared: a sidecar that lies about offsets is not detectable
    without reading the granule.)"""
    h5 = tmp_path / "granule.h5"
    _granule(h5)
    side = tmp_path / "s.dmrpp"
    write_dmrpp(h5, side)
    data = side.read_bytes()
    bad = []
    case = tmp_path / "case.dmrpp"
    for seed in range(FUZZ_CASES):
        rng = random.Random(seed)
        b = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(b))
            b[at] = ord(rng.choice("0123456789-<>/\"= x[],")) if rng.random() < 0.7 else b[at] ^ (1 << rng.randrange(7))
        case.write_bytes(bytes(b))
        out = scan_and_read(case, read=False, mask_and_scale=True)
        if out not in ("read", "refset error"):
            bad.append(f"seed {seed}: {out}")
    assert not bad, "\n".join(bad[:10])


def test_small_chunks_come_from_the_granule_in_one_round_counted_with_the_scan(tmp_path: Path) -> None:
    """Over HTTP: the sidecar is read, then the granule's small chunks in one round through the scan's
    opener (counted in the run's requests); with inline_threshold=0 nothing of the granule is read. A
    granule that is not there is named, with the sidecar and what to do."""
    from refset.errors import ReferenceNotReachable
    from refset.scan import Scan
    from tests.httpserver import RangeServer

    h5 = tmp_path / "granule.h5"
    want = _granule(h5)
    side = tmp_path / "granule.dmrpp"
    write_dmrpp(h5, side, href="granule.h5")
    with RangeServer(tmp_path) as srv:
        run = Scan()
        rs = run(f"{srv.url}/granule.dmrpp")
        assert rs.urls == (f"{srv.url}/granule.h5",)
        assert rs.table("c").kind.tolist() == [3]  # inline: read from the granule
        assert run.requests == srv.requests == 2 + 1, (run.requests, srv.requests)  # sidecar; granule's size; chunks
        np.testing.assert_array_equal(np.frombuffer(rs["c/0"], "<f8"), want["c"])
        srv.reset()
        run = Scan(inline_threshold=0)
        run(f"{srv.url}/granule.dmrpp")
        assert run.requests == srv.requests == 1  # the sidecar alone
    h5.unlink()
    with pytest.raises(ReferenceNotReachable, match=f"the granule {side} describes.*inline_threshold=0 scans"):
        refset.scan(str(side))
    assert refset.scan(str(side), inline_threshold=0).urls == (str(h5),)


class TestDmrppConformance(ScannerTests):
    scanner = DmrppScanner

    def make_files(self, tmp_path: Path) -> dict[Path, dict[str, np.ndarray]]:
        out = {}
        for name, href in (("abs", None), ("rel", "abs.h5")):  # the second names the first's granule
            h5 = tmp_path / "abs.h5"
            want = _granule(h5)
            side = tmp_path / f"{name}.dmrpp"
            write_dmrpp(h5, side, href=href)
            out[side] = {"t": want["t"], "c": want["c"], "f": want["f"]}
        return out

    def referenced_files(self, path: Path) -> set[str]:
        return {str(path.parent / "abs.h5")}  # the granule it describes
