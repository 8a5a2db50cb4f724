"""Variables made of parts: archives whose files differ in chunks, padding, filters, compression,
packing, fill values and dtype combine (inputs in any order, in process, from combined sets and on a
process cluster), and read value by value as ``xr.open_mfdataset`` reads the files, after a round trip
through every storage format; foreign readers (fsspec + zarr) see the parts, never the variable."""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidReferences, RefsetError, Unsupported
from refset.model.parts import PARTS_ATTR, PartsWarning, find_parts
from tests.combine.hetero import CASES, write

xr = pytest.importorskip("xarray")
nc4 = pytest.importorskip("netCDF4")

#: Each case's part bounds along time: where its files stop decoding alike or leave the chunk grid.
BOUNDS = {
    "monthly": (0, 31, 59, 90, 120),
    "padded": (0, 10, 20, 30, 40),
    "shuffle": (0, 10, 20),
    "compression_off": (0, 12, 24),
    "packing": (0, 4, 8, 12, 16),
    "fills": (0, 3, 6, 9, 12),
    "dtypes": (0, 8, 16),
    "everything": (0, 31, 59, 69, 79, 95, 101, 105, 109, 112, 116, 118),
}


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    root = tmp_path_factory.mktemp("hetero")
    out = {}
    for name, case in CASES.items():
        (root / name).mkdir()
        out[name] = case(root / name)
    return out


def _mf(files: list[Path], **kw) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_mfdataset([str(f) for f in files], combine="nested", concat_dim="time", **kw).load()


def _open(rs, **kw) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        return refset.open_dataset(rs, **kw)


def _equal(got: xr.Dataset, want: xr.Dataset) -> None:
    for name in ("tas", "time"):
        assert got[name].dtype == want[name].dtype, name
        assert got[name].dims == want[name].dims
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    assert got.tas.attrs == want.tas.attrs


def _shuffled(files: list[Path], seed: int = 0) -> list[Path]:
    out = list(files)
    random.Random(seed).shuffle(out)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_each_case_reads_as_open_mfdataset(archives, case: str) -> None:
    files = archives[case]
    rs = refset.combine(_shuffled(files), concat_dims="time")
    layout = find_parts(rs)["tas"]
    assert layout.bounds == BOUNDS[case]
    assert "tas/.zarray" not in rs  # never the variable under its name with one part's metadata
    want = _mf(files)
    ds = _open(rs)
    _equal(ds, want)
    # selections across part boundaries: steps, unsorted integers, a scalar, a dim dropped
    n = len(want.time)
    for sel in ({"time": slice(1, n - 1, 3)}, {"time": [n - 1, 0, n // 2, 1, n // 2 + 1]},
                {"time": n // 2, "x": 1}, {"time": slice(None, None, -2), "y": [2, 0]}, {"y": 1}):
        np.testing.assert_array_equal(ds.tas.isel(sel).values, want.tas.isel(sel).values, err_msg=str(sel))
    # Dask chunks never straddle a part's stored chunk (a padded chunk is a short one), each many stored
    # chunks (and parts) long: all of them in one task by default, a few with a small dask chunk-size
    stored: list[int] = []
    for name, a, b in zip(layout.names, layout.bounds[:-1], layout.bounds[1:], strict=True):
        c = json.loads(rs[f"tas/{name}/.zarray"])["chunks"][0]
        stored += [c] * ((b - a) // c) + ([(b - a) % c] if (b - a) % c else [])
    edges = set(np.cumsum(stored).tolist())
    lazy = _open(rs, chunks={})
    assert lazy.tas.chunks[0] == (n,)
    np.testing.assert_array_equal(lazy.tas.values, want.tas.values)
    dask = pytest.importorskip("dask")
    with dask.config.set({"array.chunk-size": "256B"}):
        small = _open(rs, chunks={})
    assert set(np.cumsum(small.tas.chunks[0]).tolist()) <= edges and 1 < len(small.tas.chunks[0]) <= len(stored)
    np.testing.assert_array_equal(small.tas.values, want.tas.values)


def test_decoding_options_apply_to_every_part(archives) -> None:
    files = archives["packing"]
    rs = refset.combine(files, concat_dims="time")
    for kw in ({"mask_and_scale": False}, {"decode_times": False}):
        got, want = _open(rs, **kw), _mf(files, **kw)
        assert got.tas.dtype == want.tas.dtype
        np.testing.assert_array_equal(got.tas.values, want.tas.values)
        np.testing.assert_array_equal(got.time.values, want.time.values)
    assert "tas" not in _open(rs, drop_variables=["tas"])


@pytest.mark.parametrize("fmt", ["json", "v1", "parquet", "packed"])
def test_every_format_reads_back_what_it_wrote(archives, tmp_path: Path, fmt: str) -> None:
    files = archives["everything"]
    rs = refset.combine(files, concat_dims="time")
    out = tmp_path / f"set.{fmt}"
    with pytest.warns(PartsWarning, match=r"variables 'tas' are made of parts.*'tas/part0'") as said:
        refset.save(rs, out, format=fmt)
    assert len([w for w in said if issubclass(w.category, PartsWarning)]) == 1  # said once
    back = refset.load(out)
    assert back.to_dict() == rs.to_dict()
    assert find_parts(back) == find_parts(rs)
    _equal(_open(str(out)), _mf(files))


def test_foreign_readers_see_the_parts_and_never_a_wrong_value(archives, tmp_path: Path) -> None:
    """fsspec + xarray's zarr engine: the regular variables, not ``tas``; fsspec + zarr: each part a
    regular array whose raw values and attributes are its files' (so any CF reader decodes it right)."""
    zarr = pytest.importorskip("zarr")
    files = archives["everything"]
    rs = refset.combine(files, concat_dims="time")
    out = tmp_path / "set.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        refset.save(rs, out)
    so = {"fo": str(out)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_dataset("reference://", engine="zarr", backend_kwargs={
            "consolidated": False, "storage_options": so})
    assert "tas" not in ds.variables and "time" in ds.variables
    group = zarr.open_group("reference://", mode="r", storage_options=so, zarr_format=2)
    layout = find_parts(rs)["tas"]
    assert group["tas"].attrs[PARTS_ATTR] == layout.to_json()
    raw = []
    for f in files:
        with nc4.Dataset(f) as d:
            d.set_auto_maskandscale(False)
            raw.append((d["tas"][:], {k: d["tas"].getncattr(k) for k in d["tas"].ncattrs()}))
    row = 0
    k = 0
    for name, a, b in zip(layout.names, layout.bounds[:-1], layout.bounds[1:], strict=True):
        part = group[f"tas/{name}"]
        got = part[:]
        at = 0
        while row < b:  # the files whose rows this part holds
            values, attrs = raw[k]
            np.testing.assert_array_equal(got[at:at + len(values)], values)
            for key in ("scale_factor", "add_offset"):
                assert (key in part.attrs) == (key in attrs) and part.attrs.get(key) == attrs.get(key)
            at += len(values)
            row += len(values)
            k += 1
        assert at == b - a


def test_combined_sets_combine_again_and_on_a_process_cluster(archives, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    files = archives["everything"]
    want = _mf(files)
    one = refset.combine(files, concat_dims="time")
    # sets that are themselves made of parts, out of order: the parts join where they decode alike
    pieces = [refset.combine(files[a:b], concat_dims="time") for a, b in ((5, 9), (0, 5), (9, 12))]
    again = refset.combine(pieces, concat_dims="time")
    assert find_parts(again) == find_parts(one)
    _equal(_open(again), want)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        rs = refset.combine(_shuffled(files, 3), concat_dims="time", client=client, batch_size=3)
        assert find_parts(rs) == find_parts(one)
        lazy = _open(rs, chunks={})
        pickle.loads(pickle.dumps(lazy.tas.data))  # the graph pickles
        total = client.compute(lazy.tas.sum()).result()
    np.testing.assert_allclose(float(total), float(want.tas.sum()), rtol=1e-6)
    _equal(_open(rs), want)


def test_append_of_other_chunks_adds_a_part(archives, tmp_path: Path) -> None:
    files = archives["monthly"]
    dest = tmp_path / "archive.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        refset.save(refset.combine(files[:2], concat_dims="time"), dest)
        refset.append(files[2:], dest, concat_dim="time")
    assert find_parts(refset.load(dest))["tas"].bounds == BOUNDS["monthly"]
    _equal(_open(str(dest)), _mf(files))


def test_a_regular_archive_stays_one_plain_array(tmp_path: Path) -> None:
    files = [write(tmp_path / f"r{k}.nc", 4 * k, 4, chunk=2) for k in range(3)]
    rs = refset.combine(files, concat_dims="time")
    assert not find_parts(rs) and "tas/.zarray" in rs and "tas/.zgroup" not in rs
    with warnings.catch_warnings():
        warnings.simplefilter("error", PartsWarning)  # nothing to say
        refset.save(rs, tmp_path / "r.json")


def test_what_cannot_be_concatenated_is_refused_naming_both_inputs(tmp_path: Path) -> None:
    def plain(path: Path, times: list[float], dims: tuple[str, str], chunk: int) -> Path:
        """``tas(time, *dims)`` of zeros, ``dims`` of sizes y 3, x 4."""
        sizes = {"y": 3, "x": 4}
        with nc4.Dataset(path, "w") as ds:
            ds.createDimension("time", None)
            for d in dims:
                ds.createDimension(d, sizes[d])
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = times
            shape = (len(times), *(sizes[d] for d in dims))
            ds.createVariable("tas", "f4", ("time", *dims), chunksizes=(chunk, *shape[1:]))[:] = np.zeros(shape)
        return path

    a = write(tmp_path / "a.nc", 0, 4, chunk=2)
    b = plain(tmp_path / "b.nc", [4, 5], ("x", "y"), 1)  # tas(time, x, y): other dims
    with pytest.raises(Unsupported, match=r"variable 'tas': dims \['time', 'x', 'y'\] in input '.*b\.nc' differ "
                                          r"from \['time', 'y', 'x'\] in input '.*a\.nc'"):
        refset.combine([a, b], concat_dims="time")
    odd = write(tmp_path / "odd.nc", 0, 3, chunk=3, dtype="f8")  # days 0, 1, 2 in f8; then 0.5 ... interleaved
    half = plain(tmp_path / "half.nc", [0.5, 1.5], ("y", "x"), 2)
    with pytest.raises(Unsupported, match=r"variable 'tas': the values of input '.*(odd|half)\.nc' along 'time' "
                                          "are not consecutive"):
        refset.combine([odd, half], concat_dims="time")


def test_text_durations_and_missing_rows_read_as_open_mfdataset(tmp_path: Path) -> None:
    """A char variable in other chunks keeps its width; durations in other units decode each with
    its own (``decode_timedelta``); rows of inputs without the variable are missing values (NaN),
    as xarray fills them, also after a padded chunk and at both ends."""
    files = [write(tmp_path / "a.nc", 0, 4, chunk=2, label=2, duration="hours", tas=False),
             write(tmp_path / "b.nc", 4, 3, chunk=3, label=3, duration="days"),
             write(tmp_path / "c.nc", 7, 3, chunk=2, label=1, duration="days"),
             write(tmp_path / "d.nc", 10, 4, chunk=4, label=4, duration="hours", tas=False),
             write(tmp_path / "e.nc", 14, 2, chunk=2, label=2, duration="hours")]
    rs = refset.combine(files[::-1], concat_dims="time")
    got, want = _open(rs, decode_timedelta=True), _mf(files, decode_timedelta=True)
    for name in ("label", "dur", "tas"):
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    assert np.isnan(got.tas.values[:4]).all() and np.isnan(got.tas.values[10:14]).all()
    lazy = _open(rs, chunks={}, decode_timedelta=True)
    np.testing.assert_array_equal(lazy.label.values, want.label.values)


def test_parts_combine_along_their_own_dim_only(archives) -> None:
    tile = refset.combine(archives["padded"], concat_dims="time")
    with pytest.raises(Unsupported, match=r"variable 'tas': made of parts along 'time' in input .*: it combines "
                                          "along 'time' only, not 'x'"):
        refset.combine([tile, tile], concat_dims="x", coo_map={"x": [0, 1]})


def test_parts_over_http_read_in_few_requests(archives, tmp_path: Path) -> None:
    """A selection's chunks of every part fetched in coalesced plans (a batch of parts fetched while
    the one before decodes): a request a file at most, never one a chunk (zarr's own reads)."""
    from tests.httpserver import RangeServer

    files = archives["padded"]  # 4 files, one part each, 3 chunks a part
    root = files[0].parent
    with RangeServer(root) as srv:
        rs = refset.combine(files, concat_dims="time")
        remote = refset.load({k: ([v[0].replace(str(root), srv.url), *v[1:]] if isinstance(v, list) else v)
                              for k, v in rs.to_dict().items()})
        ds = _open(remote)
        srv.reset()
        got = ds.tas.values
        assert srv.requests <= len(files)  # at most one a file: every chunk of a file in one range
    np.testing.assert_array_equal(got, _mf(files).tas.values)


def test_info_shows_the_parts(archives, tmp_path: Path) -> None:
    out = tmp_path / "set.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PartsWarning)
        refset.save(refset.combine(archives["padded"], concat_dims="time"), out)
    got = subprocess.run([sys.executable, "-m", "refset.cli", "info", str(out)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert "parts of tas:" in got.stdout and "4 along 'time' (shape 40x3x4): part0 0:10, part1 10:20" in got.stdout


def test_a_damaged_layout_is_refused_naming_the_variable(archives) -> None:
    """A seeded fuzz of the parts layout attribute: every mutation gives the same layout back or an
    InvalidReferences naming ``tas``, never a bare exception or values read through a wrong layout."""
    files = archives["padded"]
    rs = refset.combine(files, concat_dims="time")
    want = _mf(files).tas.values
    doc = json.loads(rs["tas/.zattrs"])
    rng = random.Random(29)
    outcomes = {"same": 0, "refused": 0}
    for _ in range(300):
        layout = json.loads(json.dumps(doc[PARTS_ATTR]))
        what = rng.randrange(9)
        if what == 0:
            layout["parts"][rng.randrange(4)][rng.randrange(1, 3)] += rng.choice([-3, -1, 1, 2])
        elif what == 1:
            layout["parts"].pop(rng.randrange(4))
        elif what == 2:
            i, j = rng.sample(range(4), 2)
            layout["parts"][i][0], layout["parts"][j][0] = layout["parts"][j][0], layout["parts"][i][0]
        elif what == 3:
            layout["shape"][rng.randrange(3)] += rng.choice([-1, 1])
        elif what == 4:
            layout[rng.choice(["dim", "dims", "shape", "parts"])] = rng.choice([None, 7, "x", [], {}, [[1]]])
        elif what == 5:
            layout["parts"][rng.randrange(4)][0] = rng.choice(["", "../time", "part9", ".zarray", 3, "part1"])
        elif what == 6:
            layout["dims"] = layout["dims"][::-1]
        items = dict(rs.to_dict())
        items["tas/.zattrs"] = json.dumps({**doc, PARTS_ATTR: layout})
        if what == 7:
            items["tas/.zattrs"] = rng.choice(['{"refset_parts": ', '["refset_parts"]', '{"refset_parts": null}'])
        elif what == 8:
            del items[rng.choice(["tas/.zgroup", "tas/part1/.zattrs", "tas/part2/.zarray"])]
        damaged = refset.load(items)
        try:
            ds = _open(damaged)
            got = ds.tas.values
        except InvalidReferences as e:
            assert "'tas'" in str(e)
            outcomes["refused"] += 1
            continue
        except RefsetError:
            outcomes["refused"] += 1
            continue
        np.testing.assert_array_equal(got, want)  # only a layout equal to the original reads
        outcomes["same"] += 1
    assert outcomes["refused"] > 200


def test_parts_pickle_cheaply_and_read_async(archives) -> None:
    import asyncio

    rs = refset.combine(archives["everything"], concat_dims="time")
    ds = _open(rs)
    back = pickle.loads(pickle.dumps(ds))  # the whole dataset (its datastore) pickles, as xr.open_zarr's
    np.testing.assert_array_equal(back.tas.values, ds.tas.values)
    got = asyncio.run(_open(rs).tas.load_async())
    np.testing.assert_array_equal(got.values, ds.tas.values)
    data = ds.tas.variable._data
    blob = pickle.dumps(data)
    assert len(blob) < 200_000
    np.testing.assert_array_equal(np.asarray(pickle.loads(blob)), ds.tas.values)
