"""GRIB ``.idx`` sidecars (NOAA's inventories): a run scans one file of a product whole, learns its
inventory, and builds the product's other files from their inventories, reading one message per grid;
every set equals the set of the file scanned whole (and so cfgrib's values); an inventory that does not
fit scans the file whole. Inventories are written here from ecCodes' own offsets and keys."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.scan import Scan
from refset.scan.grib.idx import forecast_minutes, parse_idx
from tests.scan.grib.gribfiles import forecast, write_grib, write_idx

eccodes = pytest.importorskip("eccodes")
xr = pytest.importorskip("xarray")


def _product(d: Path, days: int = 4) -> list[Path]:
    out = []
    for k in range(days):
        p = d / f"fc{k}.grib2"
        forecast(p, date=20240115 + k, seed=k)
        write_idx(p)
        out.append(p)
    return out


def _whole(path: Path, tmp: Path) -> dict:
    """The set of ``path`` scanned whole: a copy without its sidecar, its URL put back."""
    bare = tmp / "bare" / path.name
    bare.parent.mkdir(exist_ok=True)
    shutil.copy(path, bare)
    return refset.rename_urls(refset.scan(str(bare)), {str(bare): str(path)}).to_dict()


def test_a_product_scans_from_its_inventories(tmp_path: Path) -> None:
    files = _product(tmp_path)
    run = Scan()
    sets = [run(str(f)) for f in files]
    for f, rs in zip(files, sets, strict=True):
        assert rs.to_dict() == _whole(f, tmp_path), f.name  # references, times, steps, coordinates
    got = refset.open_dataset(refset.combine(sets, concat_dims="time")).load()
    with xr.open_dataset(files[2], engine="cfgrib", backend_kwargs={"indexpath": ""}) as want:
        np.testing.assert_array_equal(got.t.isel(time=2).values, want.t.values)
        assert got.time.values[2] == want.time.values


def test_the_inventory_saves_reading_the_messages(tmp_path: Path) -> None:
    """Over HTTP: the template file is read whole; the next file costs its inventory and one message."""
    from tests.httpserver import RangeServer

    files = []
    for k in range(2):  # 400 messages: the samples and the inventory a small part of a file
        files.append(tmp_path / f"big{k}.grib2")
        write_grib(files[-1], [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": lv, "step": st,
                                "dataDate": 20240101 + k, "dataTime": 0}
                               for lv in (1000, 925, 850, 700, 500) for st in range(0, 240, 3)], seed=k)
        write_idx(files[-1])
    with RangeServer(tmp_path) as srv:
        run = Scan(head_bytes=1024)  # the files are small: a default first read would bring all of one
        run(f"{srv.url}/{files[0].name}")
        srv.reset()
        before = run.requests
        run(f"{srv.url}/{files[1].name}")
        size = files[1].stat().st_size
        assert srv.bytes < size / 10, (srv.bytes, size)  # its head, inventory, one message, last header
        assert srv.requests <= 4
        assert run.requests - before == srv.requests  # the inventory's request counted with the file's


def test_the_threads_of_many_share_what_a_file_teaches(tmp_path: Path) -> None:
    """Scan.many's threads share the run's GRIB scanner: a directory without sidecars costs one probe
    for all of them (not one a thread), and a product with sidecars is learnt from one file while the
    threads that started with it wait, so that many threads cost the requests and bytes of one, and
    every set equals the file's own scan."""
    from tests.httpserver import RangeServer

    bare, product = tmp_path / "bare", tmp_path / "idx"
    bare.mkdir()
    product.mkdir()
    files = []
    for k in range(12):
        files.append(bare / f"fc{k}.grib2")
        forecast(files[-1], date=20240101 + k, seed=k)
    with_idx = _product(product, days=12)
    with RangeServer(tmp_path) as srv:
        urls = [f"{srv.url}/bare/{f.name}" for f in files]
        sets = list(Scan().many(urls, concurrency=6))
        assert srv.requests == len(files) + 1, srv.requests  # each file's head, and one sidecar probe
        for f, u, rs in zip(files, urls, sets, strict=True):
            assert rs.to_dict() == refset.rename_urls(refset.scan(str(f)), {str(f): u}).to_dict()
        urls = [f"{srv.url}/idx/{f.name}" for f in with_idx]
        costs = []
        for threads in (1, 6):
            srv.reset()
            sets = list(Scan(head_bytes=1024).many(urls, concurrency=threads))
            costs.append((srv.requests, srv.bytes))
            for f, u, rs in zip(with_idx, urls, sets, strict=True):
                assert rs.to_dict() == refset.rename_urls(refset.scan(str(f)), {str(f): u}).to_dict()
    assert costs[1] == costs[0], costs  # one file read whole in both: the others from their inventories


def test_an_inventory_that_does_not_fit_scans_the_file_whole(tmp_path: Path) -> None:
    files = _product(tmp_path, 3)
    run = Scan()
    run(str(files[0]))  # the template
    idx = files[1].with_name(files[1].name + ".idx")
    lines = idx.read_text().splitlines()
    idx.write_text("\n".join(lines[:-1]) + "\n")  # a message left out: another shape
    assert run(str(files[1])).to_dict() == _whole(files[1], tmp_path)
    idx2 = files[2].with_name(files[2].name + ".idx")
    first, rest = idx2.read_text().split("\n", 1)
    n, off, tail = first.split(":", 2)
    idx2.write_text(f"{n}:{int(off) + 1}:{tail}\n{rest}")  # an offset that points off the message
    assert run(str(files[2])).to_dict() == _whole(files[2], tmp_path)


def test_what_the_inventory_does_not_say_is_checked(tmp_path: Path) -> None:
    """Found by a review, each a wrong value before: a message moved to the file's other grid at a
    place no sample reads (its grid section is checked, locally), ensemble members the inventory
    names in its seventh field, messages appended after the inventory was written. Each file's set
    equals its whole scan."""
    shift = {"latitudeOfFirstGridPointInDegrees": 70.0, "latitudeOfLastGridPointInDegrees": 10.0}

    def build(path: Path, date: int, shifted: set[int], members: tuple[int, ...] = (), extra: int = 0) -> None:
        fields: list[dict[str, object]] = []
        for k, (var, lv) in enumerate([("t", 500), ("t", 850), ("u", 500), ("u", 850)]):
            fld: dict[str, object] = {"shortName": var, "typeOfLevel": "isobaricInhPa", "level": lv,
                                      "dataDate": date, "dataTime": 1200, "step": 6}
            if k in shifted:
                fld.update(shift)
            fields.append(fld)
        fields += [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": 500, "dataDate": date,
                    "dataTime": 1200, "step": 6, "number": m} for m in members]
        fields += [{"shortName": "t", "typeOfLevel": "isobaricInhPa", "level": 700 + k, "dataDate": date,
                    "dataTime": 1200, "step": 6} for k in range(extra)]
        write_grib(path, fields, seed=date % 100)
        idx = write_idx(path)
        if extra:  # messages appended after the inventory was written: it does not list them
            idx.write_text("\n".join(idx.read_text().splitlines()[:-extra]) + "\n")
        if members:  # wgrib2 names the member in the seventh field
            lines = idx.read_text().splitlines()
            idx.write_text("\n".join(ln + (f"ENS=+{members[k - 4]}" if k >= 4 else "") for k, ln in
                                      enumerate(lines)) + "\n")

    cases = {"grid moved": ({2, 3}, {1, 2, 3}, (), (), 0), "members": (set(), set(), (1, 2), (1, 3), 0),
             "appended": (set(), set(), (), (), 1)}
    for name, (a_shift, b_shift, a_members, b_members, extra) in cases.items():
        d = tmp_path / name.replace(" ", "-")
        d.mkdir()
        a, b = d / "a.grib2", d / "b.grib2"
        build(a, 20240115, a_shift, a_members)
        build(b, 20240116, b_shift, b_members, extra)
        run = Scan()
        run(str(a))
        assert run(str(b)).to_dict() == _whole(b, d), name


def test_parse_idx_and_forecasts() -> None:
    text = b"1:0:d=2023092800:TMP:500 mb:anl:\n2:1200:d=2023092800:APCP:surface:0-6 hour acc fcst:\n"
    lines = parse_idx(text)
    assert lines is not None and [ln.offset for ln in lines] == [0, 1200] and lines[1].date == 2023092800
    assert [forecast_minutes(ln.forecast) for ln in lines] == [0, 360]
    assert forecast_minutes("90 min fcst") == 90 and forecast_minutes("2 day fcst") == 2880
    assert forecast_minutes("6 hour ave fcst") == 360 and forecast_minutes("bogus") is None
    for bad in (b"1.1:0:d=2023092800:UGRD:10 m:anl:", b"1:5:d=2023092800:TMP:500 mb:anl:",
                b"1:0:d=2023092800:A:l:anl:\n2:0:d=2023092800:B:l:anl:", b"\xff", b"", b"1:0:d=20230928:T:l:anl:",
                b"1:0:d=2023132800:T:l:anl:", b"1:0:d=2023092825:T:l:anl:", b"1:" + b"9" * 5000 + b":d=2023092800:T:l:anl:"):
        assert parse_idx(bad) is None, bad


def test_fuzzed_inventories_never_misplace_a_message(tmp_path: Path) -> None:
    """A seeded fuzz of inventories (fields, numbers, lines changed): a scan never raises a bare
    exception, and every chunk reference it gives is the byte range of the message scanned whole
    gives (a changed date or forecast hour moves a message's coordinate: the inventory is trusted
    for those; never its bytes)."""
    files = _product(tmp_path, 2)
    want = _whole(files[1], tmp_path)
    ranges = sorted(tuple(v) for k, v in want.items() if isinstance(v, list) and len(v) == 3)
    idx = files[1].with_name(files[1].name + ".idx")
    good = idx.read_text()
    rng = random.Random(31)
    for _ in range(int(60 * float(__import__("os").environ.get("FUZZ_SCALE", "1")))):
        lines = good.splitlines()
        k = rng.randrange(len(lines))
        parts = lines[k].split(":")
        what = rng.randrange(5)
        if what == 0:
            j = rng.randrange(len(parts))
            parts[j] = rng.choice(["", "0", "x", "99999999", "d=2099123100", "6 hour fcst", "anl", parts[j] * 2])
            lines[k] = ":".join(parts)
        elif what == 1:
            lines.insert(rng.randrange(len(lines)), lines[k])
        elif what == 2:
            del lines[k]
        elif what == 3:
            i = rng.randrange(len(lines))
            lines[k], lines[i] = lines[i], lines[k]
        else:
            lines[k] = lines[k].replace(":", "", 1)
        idx.write_text("\n".join(lines) + "\n")
        run = Scan()
        run(str(files[0]))
        got = run(str(files[1])).to_dict()
        assert sorted(tuple(v) for k2, v in got.items() if isinstance(v, list) and len(v) == 3) == ranges


def _wgrib2_idx(grib: Path, order: list[tuple[str, int]], date: int) -> None:
    """An inventory in wgrib2's words (``TMP:500 mb``) of messages of one size in ``order``."""
    size = grib.stat().st_size // len(order)
    grib.with_name(grib.name + ".idx").write_text("".join(
        f"{n + 1}:{n * size}:d={date}12:{var.upper().replace('T', 'TMP')}:{lv} mb:6 hour fcst:\n"
        for n, (var, lv) in enumerate(order)))


def _fields(order: list[tuple[str, int]] | list[tuple[str, int, str]], date: int) -> list[dict[str, object]]:
    return [{"shortName": f[0], "typeOfLevel": f[2] if len(f) > 2 else "isobaricInhPa", "level": f[1],
             "dataDate": date, "dataTime": 1200, "step": 6} for f in order]


def _reordered(d: Path, name: str, swap: tuple[int, int]) -> list[Path]:
    """Three files of t on four levels with inventories in wgrib2's words; the last two rewritten
    with messages ``swap`` exchanged (same sizes) and their inventories left as they were."""
    listed = [("t", 500), ("t", 250), ("t", 850), ("t", 700)]
    files = []
    for k in range(3):
        path = d / f"{name}{k}.grib2"
        date = 20240115 + k
        stored = list(listed)
        if k:
            a, b = swap
            stored[a], stored[b] = stored[b], stored[a]
        write_grib(path, _fields(stored, date), seed=1)
        _wgrib2_idx(path, listed, date)
        files.append(path)
    assert len({f.stat().st_size for f in files}) == 1 and files[0].stat().st_size % len(listed) == 0
    return files


def test_a_reordered_file_whose_inventory_stayed_is_read_whole(tmp_path: Path) -> None:
    """Issue 40, item 6: GRIB files rewritten with their messages in another order (same sizes) and
    their .idx left as it was gave t at 250 and 850 hPa swapped, silently. Each message's product
    definition is now checked against the template's, and each inventory's levels against the
    messages a whole scan reads: every set equals the file's whole scan, and a SidecarWarning names
    the file and its sidecar. Locally every message is checked; over HTTP the sampled ones."""
    from refset.scan import SidecarWarning
    from tests.httpserver import RangeServer

    files = _reordered(tmp_path, "r", (1, 2))  # the first message, which the template samples, in place
    run = Scan()
    with pytest.warns(SidecarWarning) as caught:
        sets = [run(str(f)) for f in files]
    for f, rs in zip(files, sets, strict=True):
        assert rs.to_dict() == _whole(f, tmp_path), f.name
    named = [(w.message.url, w.message.sidecar) for w in caught]  # type: ignore[union-attr]
    assert named == [(str(f), f"{f}.idx") for f in files[1:]]
    assert "line 2 says TMP:250 mb, the message at byte" in str(caught[0].message)
    assert "is t at isobaricInhPa 850" in str(caught[0].message)
    got = refset.open_dataset(refset.combine(sets, concat_dims="time")).t.sel(isobaricInhPa=250).values
    for k, f in enumerate(files):
        with xr.open_dataset(f, engine="cfgrib", backend_kwargs={"indexpath": ""}) as want:
            np.testing.assert_array_equal(got[k], want.t.sel(isobaricInhPa=250).values)

    # a product whose files disagree on a field the inventories name alike (no level tells): neither
    # file's inventory is trusted, both read whole
    fields = [("t", 500, "isobaricInhPa"), ("2t", 2, "heightAboveGround"), ("u", 500, "isobaricInhPa")]
    for k, order in enumerate((fields, [fields[0], fields[2], fields[1]])):
        path = tmp_path / f"s{k}.grib2"
        write_grib(path, _fields(order, 20240115 + k), seed=1)
        size = path.stat().st_size // 3
        path.with_name(path.name + ".idx").write_text("".join(
            f"{n + 1}:{n * size}:d={20240115 + k}12:{v}:{lv}:6 hour fcst:\n"
            for n, (v, lv) in enumerate([("TMP", "500 mb"), ("TMP", "2 m above ground"), ("UGRD", "500 mb")])))
    run = Scan()
    with pytest.warns(SidecarWarning, match="s0.grib2.idx, which lists the same messages"):
        for k in range(2):
            f = tmp_path / f"s{k}.grib2"
            assert run(str(f)).to_dict() == _whole(f, tmp_path)

    remote = tmp_path / "http"
    remote.mkdir()
    files = _reordered(remote, "h", (0, 1))  # the sampled message moved
    with RangeServer(remote) as srv:
        run = Scan(head_bytes=1024)
        with pytest.warns(SidecarWarning):
            for f in files:
                url = f"{srv.url}/{f.name}"
                assert run(url).to_dict() == refset.rename_urls(refset.scan(str(f)), {str(f): url}).to_dict()
