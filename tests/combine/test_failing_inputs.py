"""Inputs that fail (issue 30, item 3): every error names the input (index and name), in Python and
on the command line; ``on_error="skip"`` / ``--on-error skip`` leaves them out and lists them; CF
time errors are refset errors naming the input; a duplicate time is shown as its date; an output
that cannot be written is refused before any work. Files are written by netCDF4; values are checked
against xarray's reading of the good files."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.combine import SKIPPED_ATTR, SkippedInputsWarning
from refset.errors import InvalidFile, InvalidReferences, RefsetError, Unsupported

from ..httpserver import RangeServer

netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")


def _day(path: Path, i: int, units: str = "days since 2000-01-01", t: float | None = None) -> Path:
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 4)
        v = ds.createVariable("time", "f8", ("time",))
        v.units = units
        v[:] = [i if t is None else t]
        a = ds.createVariable("a", "f4", ("time", "x"), zlib=True)
        a[:] = np.arange(4, dtype="f4")[None] + 10 * i
    return path


@pytest.fixture
def days(tmp_path: Path) -> list[Path]:
    return [_day(tmp_path / f"d{i}.nc", i) for i in range(6)]


def _truncate(path: Path, keep: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:keep])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "import sys; from refset.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, timeout=300)


def test_a_truncated_json_among_many_is_named(days: list[Path], tmp_path: Path):
    sets = []
    for i, f in enumerate(days * 5):  # 30 inputs: the batch reader's path, then one by one
        p = tmp_path / f"s{i:02d}.json"
        refset.save(refset.scan(f), str(p))
        sets.append(str(p))
    _truncate(Path(sets[17]), 200)
    with pytest.raises(InvalidReferences) as e:
        refset.combine(sets, concat_dims="new")
    assert f"input 17 ({sets[17]!r})" in str(e.value)
    r = _cli("combine", *sets, "--concat-dim", "new", "-o", str(tmp_path / "out.json"))
    assert r.returncode == 1 and "input 17" in r.stderr and sets[17] in r.stderr, r.stderr
    assert not (tmp_path / "out.json").exists()


def test_the_broken_data_file_is_the_one_named(days: list[Path], tmp_path: Path):
    _truncate(days[3], 3000)
    with pytest.raises(InvalidFile) as e:
        refset.combine([str(d) for d in days], concat_dims="time")
    assert str(days[3]) in str(e.value) and str(days[0]) not in str(e.value)
    r = _cli("scan", *map(str, days), "--concat-dim", "time", "-o", str(tmp_path / "out.json"))
    assert r.returncode == 1 and str(days[3]) in r.stderr and str(days[0]) not in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def _check_skipped(rs: refset.ReferenceSet, good: list[Path], bad: list[int], names: list[str]) -> None:
    ds = xr.open_dataset(rs, engine="refset")
    want = xr.open_mfdataset([str(p) for p in good], combine="nested", concat_dim="time")
    np.testing.assert_array_equal(ds.a.values, want.a.values)
    np.testing.assert_array_equal(ds.time.values, want.time.values)
    listed = ds.attrs[SKIPPED_ATTR]
    assert [s["index"] for s in listed] == bad
    assert [s["name"] for s in listed] == [names[i] for i in bad]
    assert all(s["name"] in s["error"] for s in listed)


def test_skip_leaves_failing_inputs_out_and_lists_them(days: list[Path], tmp_path: Path):
    _truncate(days[1], 3000)
    (tmp_path / "garbage.nc").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 40)
    inputs = [str(d) for d in days] + [str(tmp_path / "garbage.nc")]
    with pytest.warns(SkippedInputsWarning, match="2 of 7 inputs skipped"):
        rs = refset.combine(inputs, concat_dims="time", on_error="skip")
    _check_skipped(rs, [d for i, d in enumerate(days) if i != 1], [1, 6], inputs)
    # the list survives saving
    refset.save(rs, str(tmp_path / "skipped.json"))
    assert json.loads(refset.load(str(tmp_path / "skipped.json"))[".zattrs"])[SKIPPED_ATTR][0]["index"] == 1


def test_skip_over_http_many_files_at_once(days: list[Path], tmp_path: Path):
    _truncate(days[4], 5000)
    with RangeServer(days[0].parent) as srv:
        urls = [f"{srv.url}/{d.name}" for d in days] + [f"{srv.url}/missing.nc"]
        with pytest.warns(SkippedInputsWarning):
            rs = refset.combine(urls, concat_dims="time", on_error="skip")
        _check_skipped(rs, [d for i, d in enumerate(days) if i != 4], [4, 6], urls)
        with pytest.raises(RefsetError) as e:  # without skip: the first failing one, named
            refset.combine(urls, concat_dims="time")
        assert urls[4] in str(e.value)


def test_skip_on_the_command_line(days: list[Path], tmp_path: Path):
    _truncate(days[2], 3000)
    out = tmp_path / "out.json"
    r = _cli("scan", *map(str, days), "--concat-dim", "time", "--on-error", "skip", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "1 skipped" in r.stderr and f"skipped input 2: {days[2]}" in r.stderr, r.stderr
    _check_skipped(refset.load(str(out)), [d for i, d in enumerate(days) if i != 2], [2], list(map(str, days)))
    # scanning files one to one: the others are written, the failing one listed
    r = _cli("scan", *map(str, days), "--on-error", "skip", "-o", str(tmp_path / "each") + "/")
    assert r.returncode == 0 and "1 skipped" in r.stderr and str(days[2]) in r.stderr, r.stderr
    assert sorted(p.name for p in (tmp_path / "each").iterdir()) == [f"d{i}.nc.json" for i in (0, 1, 3, 4, 5)]
    r = _cli("scan", *map(str, days), "--concat-dim", "time", "--on-error", "skip", "--workers", "2",
             "-o", str(tmp_path / "o2.json"))  # on an embedded cluster of 2 processes
    assert r.returncode == 0 and f"skipped input 2: {days[2]}" in r.stderr, r.stderr
    _check_skipped(refset.load(str(tmp_path / "o2.json")), [d for i, d in enumerate(days) if i != 2], [2],
                   list(map(str, days)))


def test_skip_when_every_input_fails_and_option_mistakes(days: list[Path]):
    for d in days[:2]:
        _truncate(d, 100)
    with pytest.raises(InvalidReferences, match="every input failed"), warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedInputsWarning)
        refset.combine([str(d) for d in days[:2]], concat_dims="time", on_error="skip")
    with pytest.raises(InvalidReferences, match="on_error must be 'raise' or 'skip'"):
        refset.combine([str(d) for d in days], concat_dims="time", on_error="ignore")


def test_unreadable_time_units_name_the_input(days: list[Path], tmp_path: Path):
    odd = _day(tmp_path / "odd.nc", 9, units="days since garbage")
    with pytest.raises(InvalidReferences) as e:
        refset.combine([str(days[0]), str(odd)], concat_dims="time")
    assert str(odd) in str(e.value) and "days since garbage" in str(e.value)


def test_a_duplicate_time_is_shown_as_its_date(days: list[Path], tmp_path: Path):
    twin = _day(tmp_path / "twin.nc", 0, t=2.0)
    with pytest.raises(InvalidReferences, match=r"both have the value 2\.0 \(2000-01-03 00:00:00\)"):
        refset.combine([str(days[2]), str(twin)], concat_dims="time")


def test_an_unwritable_output_directory_is_refused_before_any_work(days: list[Path]):
    r = _cli("scan", *map(str, days), "--concat-dim", "time", "-o", "/proc/out.json")
    assert r.returncode == 2 and "output directory /proc is not writable" in r.stderr, r.stderr


def test_a_directory_given_as_an_input_says_so(days: list[Path]):
    d = days[0].parent
    with pytest.raises(Unsupported, match=rf"{d}: is a directory, not a data file or a reference set \(a glob "
                                          rf"such as {d}/\*\.nc takes its files\)"):
        refset.combine([str(d)], concat_dims="time")
    r = _cli("scan", str(d), "--concat-dim", "time", "-o", str(d / "out.json"))
    assert r.returncode == 1 and "is a directory" in r.stderr and ".zmetadata" not in r.stderr, r.stderr


def test_skip_on_a_cluster(days: list[Path], tmp_path: Path):
    """On a real LocalCluster (processes), inputs that fail are left out by the tasks that open them
    and listed as in one process; the values are the good files'; every input failing is an error."""
    distributed = pytest.importorskip("distributed")
    _truncate(days[1], 3000)
    (tmp_path / "garbage.nc").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(range(256)) * 40)
    inputs = [str(d) for d in days] + [str(tmp_path / "garbage.nc")]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        with pytest.warns(SkippedInputsWarning, match="2 of 7 inputs skipped"):
            rs = refset.combine(inputs, concat_dims="time", on_error="skip", client=client, batch_size=2)
        _check_skipped(rs, [d for i, d in enumerate(days) if i != 1], [1, 6], inputs)
        with pytest.raises(InvalidReferences, match="every input failed"), warnings.catch_warnings():
            warnings.simplefilter("ignore", SkippedInputsWarning)
            refset.combine([inputs[1], inputs[6]], concat_dims="time", on_error="skip", client=client)


def test_skip_keeps_each_inputs_index_for_coo_map(days: list[Path]):
    """After a skip, per-input values, INDEX and callables still speak of each input's index among
    all the inputs given (they were given the index among those left: input 2's data got input 1's
    time), in one process as on a cluster."""
    _truncate(days[1], 3000)
    files = [str(d) for d in days[:3]]
    times = [10, 20, 30]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SkippedInputsWarning)
        for sel, want in ((lambda i, rs, name: times[i], [10, 30]), ("INDEX", [0, 2]),
                          (np.array(times), [10, 30]), (times, [10, 30])):
            rs = refset.combine(files, concat_dims="new", coo_map={"new": sel}, on_error="skip")
            ds = xr.open_dataset(rs, engine="refset")
            assert ds.new.values.tolist() == want, sel
            np.testing.assert_array_equal(ds.a.isel(new=1).values.ravel(), np.arange(4) + 20)  # day 2's
