"""refset.scan of GRIB files: every variable and coordinate equal to cfgrib's (the oracle) for the
corpus's GRIB2 files and for files written here with ecCodes (levels, steps, an ensemble, missing
points); also through fsspec + zarr (the codec is found by numcodecs' entry points), combined along
time, over HTTP; broken files are InvalidFile naming the file; a seeded fuzz of the messages' headers."""

from __future__ import annotations

import os
import random
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidFile, Unsupported
from refset.scan.grib.scanner import GribScanner
from refset.testing import ScannerTests

eccodes = pytest.importorskip("eccodes")
cfgrib = pytest.importorskip("cfgrib")
xr = pytest.importorskip("xarray")

from tests.conftest import CORPUS  # noqa: E402
from tests.scan.fuzzcheck import scan_and_read  # noqa: E402
from tests.scan.grib.gribfiles import forecast, write_grib  # noqa: E402

GRIBS = sorted(p for p in (CORPUS / "kerchunk-fixtures").glob("*") if p.suffix in (".grb2", ".grib2")) \
    if CORPUS.exists() else []
FUZZ_CASES = 200 * int(os.environ.get("FUZZ_SCALE", "1"))


def _cfgrib(path: Path) -> list[xr.Dataset]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [ds.load() for ds in cfgrib.open_datasets(str(path), backend_kwargs={"indexpath": ""})]


def _same_as_cfgrib(path: Path, rs: refset.ReferenceSet) -> int:
    """Every variable and coordinate of cfgrib's datasets equals refset's of the same name (values,
    dtype, dims); the number of variables compared."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = refset.open_dataset(rs).load()
    n = 0
    for want in _cfgrib(path):
        for name in [*want.data_vars, *want.coords]:
            got = ours[name]
            assert got.dims == want[name].dims, name
            assert got.dtype == want[name].dtype, (name, got.dtype, want[name].dtype)
            np.testing.assert_array_equal(got.values, want[name].values, err_msg=f"{path.name}: {name}")
            n += name in want.data_vars
    return n


class TestGribConformance(ScannerTests):
    scanner = GribScanner

    def make_files(self, tmp_path: Path) -> dict[Path, Mapping[str, np.ndarray]]:
        p = tmp_path / "f.grib2"
        forecast(p)
        want = {n: ds[n].values for ds in _cfgrib(p) for n in ds.data_vars}
        return {p: want}


@pytest.mark.skipif(not GRIBS, reason="shared corpus not found (CI provides it)")
@pytest.mark.parametrize("path", GRIBS, ids=lambda p: p.name)
def test_corpus_gribs_read_as_cfgrib_reads_them(path: Path) -> None:
    assert _same_as_cfgrib(path, refset.scan(str(path))) >= 1


def test_levels_steps_and_variables_as_cfgrib(tmp_path: Path) -> None:
    path = tmp_path / "f.grib2"
    forecast(path)
    rs = refset.scan(str(path))
    assert _same_as_cfgrib(path, rs) == 3
    ds = refset.open_dataset(rs)
    assert ds["t"].dims == ("step", "isobaricInhPa", "latitude", "longitude")
    assert ds["isobaricInhPa"].values.tolist() == [850.0, 500.0]  # stored decreasing, as cfgrib does
    assert rs.table("t").count() == 6 and rs.metadata["t"].chunks == (1, 1, 31, 16)  # a message a chunk


def test_an_ensemble_and_missing_points_as_cfgrib(tmp_path: Path) -> None:
    path = tmp_path / "ens.grib2"
    write_grib(path, [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": 500, "number": m,
                       "missing": [0, 5, 17] if m == 2 else None} for m in (1, 2, 3)])
    rs = refset.scan(str(path))
    _same_as_cfgrib(path, rs)
    ds = refset.open_dataset(rs)
    assert ds["t"].dims[0] == "number" and np.isnan(ds["t"].values[1].reshape(-1)[[0, 5, 17]]).all()


def test_foreign_readers_and_combine_along_time(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    zarr = pytest.importorskip("zarr")
    days = []
    for i, date in enumerate((20240115, 20240116)):
        p = tmp_path / f"d{i}.grib2"
        forecast(p, date=date, seed=i)
        days.append(p)
    sets = [refset.scan(str(p)) for p in days]
    mapper = fsspec.filesystem("reference", fo=sets[0].to_dict()).get_mapper("")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = zarr.open_group(mapper, mode="r", zarr_format=2)["t"][...]
    np.testing.assert_array_equal(got, _cfgrib(days[0])[1]["t"].values)
    both = refset.combine(sets, concat_dims=["time"], identical_dims=["latitude", "longitude"])
    ds = refset.open_dataset(both)
    want = xr.concat([_cfgrib(p)[1] for p in days], dim="time")
    np.testing.assert_array_equal(ds["t"].transpose(*want["t"].dims).values, want["t"].values)
    np.testing.assert_array_equal(ds["time"].values, want["time"].values)


def test_duplicates_and_broken_files(tmp_path: Path) -> None:
    dup = tmp_path / "dup.grib2"
    write_grib(dup, [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": 500}] * 2)
    with pytest.raises(Unsupported, match="variable 't': 2 messages at the same coordinates"):
        refset.scan(str(dup))
    good = tmp_path / "f.grib2"
    forecast(good)
    data = good.read_bytes()
    cut = tmp_path / "cut.grib2"
    cut.write_bytes(data[:-10])
    with pytest.raises(InvalidFile, match=f"{cut}: not a valid GRIB file: message at byte .*past the end"):
        refset.scan(str(cut))
    end = tmp_path / "end.grib2"
    end.write_bytes(data[:-4] + b"7778")
    with pytest.raises(InvalidFile, match="no 7777 end marker"):
        refset.scan(str(end))


def test_review_cases_values_and_refusals(tmp_path: Path) -> None:
    """Values of 9999 beside a bitmap stay data; one variable on two grids keeps both; messages after
    long padding are read; a multi-field message is refused (ecCodes reads its first field only)."""
    bm = tmp_path / "bitmap.grib2"
    write_grib(bm, [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": 500, "missing": [1, 2]}])
    h = eccodes.codes_grib_new_from_file(open(bm, "rb"))
    vals = eccodes.codes_get_values(h)
    eccodes.codes_release(h)
    vals[5:9] = 9999.0  # present points equal to ecCodes' default missingValue
    h = eccodes.codes_grib_new_from_samples("regular_ll_pl_grib2")
    eccodes.codes_set(h, "bitmapPresent", 1)
    eccodes.codes_set(h, "missingValue", 1e20)
    vals[[1, 2]] = 1e20
    eccodes.codes_set_values(h, vals)
    with open(bm, "wb") as f:
        eccodes.codes_write(h, f)
    eccodes.codes_release(h)
    _same_as_cfgrib(bm, refset.scan(str(bm)))
    got = refset.open_dataset(refset.scan(str(bm)))["t"].values.reshape(-1)
    assert np.isnan(got[[1, 2]]).all() and (got[5:9] == 9999.0).all()
    two = tmp_path / "two.grib2"
    write_grib(two, [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": 500}])
    other = tmp_path / "other.grib2"
    write_grib(other, [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": 500}], sample="GRIB2")
    padded = tmp_path / "padded.grib2"
    padded.write_bytes(two.read_bytes() + bytes(5000) + other.read_bytes())
    ds = refset.open_dataset(refset.scan(str(padded)))
    assert len([v for v in ds.data_vars]) == 2  # the same variable on two grids, both kept
    multi = tmp_path / "multi.grib2"
    m = bytearray(two.read_bytes())  # repeat sections 4-7: one message, two fields
    at, sections = 16, []
    while m[at:at + 4] != b"7777":
        n = int.from_bytes(m[at:at + 4], "big")
        sections.append((m[at + 4], bytes(m[at:at + n])))
        at += n
    body = b"".join(b for _, b in sections) + b"".join(b for k, b in sections if k >= 4)
    total = 16 + len(body) + 4
    multi.write_bytes(bytes(m[:8]) + total.to_bytes(8, "big") + body + b"7777")
    with pytest.raises(Unsupported, match="holds 2 fields"):
        refset.scan(str(multi))


def test_remote_grib_reads_its_messages_in_few_requests(tmp_path: Path) -> None:
    from refset.scan import Scan
    from tests.httpserver import RangeServer

    path = tmp_path / "f.grib2"
    write_grib(path, [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": lv, "step": st}
                      for lv in (1000, 925, 850, 700, 500) for st in range(0, 240, 3)],
               sample="regular_ll_pl_grib2", seed=3)  # 400 messages: past the first read and a block after
    assert path.stat().st_size > 64 * 1024 + 256 * 1024
    with RangeServer(tmp_path) as server:
        run = Scan()
        rs = run(f"{server.url}/f.grib2")
        # the head, a look for f.grib2.idx (none), then the rest in one request
        assert server.requests == 3, server.requests
        _same_as_cfgrib(path, rs)
        shutil.copy(path, tmp_path / "g.grib2")
        server.reset()
        run(f"{server.url}/g.grib2")
        assert server.requests == 2, server.requests  # its directory has no sidecars: not looked for


def test_grib_fuzz(tmp_path: Path) -> None:
    """Bit flips in the first 200 bytes of a message (its sections 0-5): a set whose variables read,
    or a refset error naming the file; never another exception."""
    src = tmp_path / "f.grib2"
    forecast(src)
    data = src.read_bytes()
    starts = [i for i in range(len(data) - 3) if data[i:i + 4] == b"GRIB"]
    counts: dict[str, int] = {}
    bad = []
    case = tmp_path / "case.grib2"
    for seed in range(FUZZ_CASES):
        rng = random.Random(seed)
        b = bytearray(data)
        s0 = rng.choice(starts)
        for _ in range(rng.randint(1, 4)):
            b[s0 + rng.randrange(0, 200)] ^= 1 << rng.randrange(8)
        case.write_bytes(bytes(b))
        out = scan_and_read(case, mask_and_scale=True)
        counts[out.split(":")[0]] = counts.get(out.split(":")[0], 0) + 1
        if out not in ("read", "refset error"):
            bad.append(f"seed {seed}: {out}")
    assert not bad, "\n".join(bad[:10])
    assert counts.get("refset error", 0) > FUZZ_CASES // 10
