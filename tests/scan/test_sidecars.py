"""Sidecars are sources too (issue 40, item 6): a GRIB file's ``.idx`` and a DMR++ file's granule are
recorded with the file whose scan read them (``via``), so that ``refset verify`` sees them change and
``refset refresh`` rescans the file that read them; a granule rewritten after its sidecar was scanned
is refused on read; a sidecar that describes more bytes than its granule holds is refused at scan,
naming both."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.combine.refresh import refresh_report
from refset.errors import InvalidFile, SourceChanged

h5py = pytest.importorskip("h5py")
xr = pytest.importorskip("xarray")


def _later(path: Path) -> None:
    """``path``'s modification time a second on (a rewrite)."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_a_grib_inventory_is_recorded_via_its_file(tmp_path: Path) -> None:
    pytest.importorskip("eccodes")
    from tests.scan.grib.gribfiles import forecast, write_idx

    grib = tmp_path / "fc.grib2"
    forecast(grib)
    idx = write_idx(grib)
    rs = refset.scan(str(grib))
    fps = rs.fingerprints
    assert fps.url.tolist() == [str(grib), str(idx)]
    assert fps.via.tolist() == ["", str(grib)]
    assert fps.get(str(idx))[0] == idx.stat().st_size
    out = tmp_path / "fc.json"
    refset.save(rs, out)
    assert refset.verify(out).ok
    _later(idx)  # the inventory rewritten (a reprocessing writes both)
    ver = refset.verify(out)
    assert [c.url for c in ver.of("changed")] == [str(idx)]
    report = refresh_report(out)
    assert report.rescanned == [str(grib)]  # the file whose scan read it
    assert refset.verify(out).ok
    with xr.open_dataset(grib, engine="cfgrib", backend_kwargs={"indexpath": ""}) as want:
        np.testing.assert_array_equal(refset.open_dataset(str(out)).t.values, want.t.values)


def _granule(path: Path, scale: float) -> np.ndarray:
    values = np.random.default_rng(0).standard_normal((4, 1000)).astype("f4") * scale
    with h5py.File(path, "w") as f:
        f.create_dataset("t", data=values, chunks=(2, 1000), compression="gzip")  # chunks kept as references
        f.create_dataset("c", data=np.arange(1, 6, dtype="f8") * scale)  # 40 bytes: inlined from the granule
    return values


def test_a_dmrpp_granule_is_recorded_via_its_sidecar(tmp_path: Path) -> None:
    from tests.scan.dmrpp.dmrppfiles import write_dmrpp

    h5, side = tmp_path / "g.h5", tmp_path / "g.h5.dmrpp"
    _granule(h5, 1.0)
    write_dmrpp(h5, side)
    rs = refset.scan(str(side))
    assert rs.urls == (str(h5),) and rs.table("t").kind.tolist() == [1, 1]  # ranges of the granule
    fps = rs.fingerprints
    assert sorted(zip(fps.url.tolist(), fps.via.tolist(), strict=True)) == [(str(h5), str(side)), (str(side), "")]
    out = tmp_path / "g.json"
    refset.save(rs, out)
    # the granule reprocessed (other values, the same layout) and its sidecar rebuilt
    want = _granule(h5, 2.0)
    _later(h5)
    with pytest.raises(SourceChanged, match=r"g\.h5"):
        refset.open_dataset(str(out)).t.values  # noqa: B018
    write_dmrpp(h5, side)
    _later(side)
    report = refresh_report(out)
    assert report.rescanned == [str(side)]  # the sidecar, whose scan reads the granule
    got = refset.open_dataset(str(out))
    np.testing.assert_array_equal(got.t.values, want)
    np.testing.assert_array_equal(got.c.values, np.arange(1, 6) * 2.0)
    assert refset.verify(out).ok


def test_a_sidecar_describing_more_than_its_granule_holds_is_refused(tmp_path: Path) -> None:
    from tests.scan.dmrpp.dmrppfiles import write_dmrpp

    h5, side = tmp_path / "g.h5", tmp_path / "g.h5.dmrpp"
    _granule(h5, 1.0)
    write_dmrpp(h5, side)
    size = h5.stat().st_size
    with open(h5, "r+b") as f:  # the granule cut short after its sidecar was written
        f.truncate(size - 200)
    with pytest.raises(InvalidFile, match=rf"{side}: a chunk at byte .* ends past the end of {h5} "
                                          rf"\({size - 200:,} bytes\): it does not describe that file"):
        refset.scan(str(side))
