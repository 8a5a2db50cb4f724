"""combine compares what decoding needs: inputs whose packing, fill, valid range or time encoding differ are
combined as parts, each decoded with its own attributes (never with the first input's); inputs that
differ only where decoding does not look (a zlib level, ``standard`` vs ``proleptic_gregorian`` after 1582, a
history attribute) combine, with values equal to ``xr.open_mfdataset``; ``coo_dtypes`` to datetime64 decodes
CF times with their units and calendar."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.combine import combine
from refset.errors import Unsupported

nc4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")


def _file(path: Path, day: int, *, attrs: dict | None = None, level: int = 4, calendar: str = "standard",
          units: str = "days since 2024-01-01", bounds_units: str | None = None, history: str = "",
          bounds: bool = True) -> str:
    """One day of int16 ``tas`` (packed with ``attrs``), ``time`` with ``time_bnds``."""
    with nc4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 3)
        ds.createDimension("nv", 2)
        if history:
            ds.history = history
        t = ds.createVariable("time", "f8", ("time",))
        t.units, t.calendar = units, calendar
        scale = 24 if units.startswith("hours") else 1
        t[:] = [day * scale]
        if bounds:
            t.bounds = "time_bnds"
            b = ds.createVariable("time_bnds", "f8", ("time", "nv"))
            if bounds_units:
                b.units = bounds_units
            b[:] = [[day * scale, (day + 1) * scale]]
        v = ds.createVariable("tas", "i2", ("time", "lat"), zlib=True, complevel=level)
        v.set_auto_maskandscale(False)
        for k, x in (attrs or {}).items():
            v.setncattr(k, x)
        v[:] = np.array([[100, 200, 300]], "i2") + day
    return str(path)


def _mf(files: list[str]) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_mfdataset(files, combine="nested", concat_dim="time", data_vars="minimal",
                                 coords="minimal", compat="override").load()


PACKED = {"scale_factor": 0.01, "add_offset": 200.0}


def _same_as_xarray(rs: refset.ReferenceSet, files: list[str], parts: str | None = "tas") -> None:
    """``rs`` read by refset equals xr.open_mfdataset of ``files`` (sorted by time) value by value;
    ``parts``: the variable stored as parts."""
    from refset.model.parts import find_parts

    assert (parts in find_parts(rs)) if parts else not find_parts(rs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = refset.open_dataset(rs).load()
    want = _mf(sorted(files, key=lambda f: float(xr.open_dataset(f, decode_times=False).time[0]) * (
        24 if "hours" in xr.open_dataset(f, decode_times=False).time.units else 1)))
    for name in want.data_vars:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    np.testing.assert_array_equal(got.time.values, want.time.values)


@pytest.mark.parametrize(("attr", "first", "second"), [
    ("scale_factor", 0.01, 0.02),
    ("add_offset", 200.0, 210.0),
    ("missing_value", -1, -2),
    ("valid_range", [0, 100], [0, 200]),
    ("valid_min", 0, 1),
    ("_Unsigned", "true", "false"),
])
def test_a_decoding_attribute_that_differs_makes_parts_decoded_each_with_its_own(tmp_path: Path, attr, first,
                                                                                 second) -> None:
    """Never decoded with the first input's attributes: each input's values with its own, as xarray."""
    a = _file(tmp_path / "a.nc", 0, attrs={**PACKED, attr: first})
    b = _file(tmp_path / "b.nc", 1, attrs={**PACKED, attr: second})
    _same_as_xarray(combine([b, a], concat_dims="time"), [a, b])
    c = _file(tmp_path / "c.nc", 2, attrs={k: v for k, v in PACKED.items() if k != attr})  # absent: differs
    _same_as_xarray(combine([a, c], concat_dims="time"), [a, c])


def test_per_file_packing_is_decoded_per_file_in_every_combine_path(tmp_path: Path) -> None:
    """The ERA5 case: each file packed with its own scale and offset. Before parts, every file was
    decoded with the first file's (215.0 where xarray reads 263.0), then refused; now each file's values
    are decoded with its own, for data files, their sets in memory, JSON files (combine's batch
    reader) and (below) on a process cluster."""
    packs = [(0.01, 200.0), (0.02, 210.0), (0.01, 250.0), (0.005, 260.0)]
    files = [_file(tmp_path / f"era{i}.nc", i, attrs={"scale_factor": s, "add_offset": o})
             for i, (s, o) in enumerate(packs)]
    _same_as_xarray(combine(files, concat_dims="time"), files)
    _same_as_xarray(combine([refset.scan(f) for f in files[::-1]], concat_dims="time"), files)
    jsons = []
    for f in files:
        jsons.append(f.replace(".nc", ".json"))
        refset.save(refset.scan(f), jsons[-1])
    _same_as_xarray(combine(jsons, concat_dims="time"), files)
    # the same packing in every file: one regular array, equal to xarray
    same = [_file(tmp_path / f"same{i}.nc", i, attrs=dict(PACKED)) for i in range(3)]
    _same_as_xarray(combine(same, concat_dims="time"), same, parts=None)


def test_per_file_packing_on_a_process_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    files = [_file(tmp_path / f"era{i}.nc", i, attrs={"scale_factor": 0.01, "add_offset": 200.0 + 10 * (i == 3)})
             for i in range(4)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        # batches of two: the difference lies between the batches, found by the final combine
        rs = combine(files[::-1], concat_dims="time", client=client, batch_size=2)
    _same_as_xarray(rs, files)
    from refset.model.parts import find_parts

    assert find_parts(rs)["tas"].bounds == (0, 3, 4)


def test_bounds_inherit_the_time_units_of_their_parent(tmp_path: Path) -> None:
    """time_bnds has no units of its own: xarray decodes it with time's. Files in days and in hours
    re-encode time; time_bnds' raw numbers stay as stored, in parts that carry their file's units."""
    a = _file(tmp_path / "a.nc", 0)
    b = _file(tmp_path / "b.nc", 1, units="hours since 2024-01-01")
    rs = combine([a, b], concat_dims="time")
    _same_as_xarray(rs, [a, b], parts="time_bnds")
    assert json.loads(rs["time_bnds/part1/.zattrs"])["units"] == "hours since 2024-01-01"
    c = _file(tmp_path / "c.nc", 1, bounds_units="days since 2024-01-01")  # own units equal: one array
    rs = combine([_file(tmp_path / "a2.nc", 0, bounds_units="days since 2024-01-01"), c], concat_dims="time")
    assert "time_bnds/.zarray" in rs


def test_what_decoding_does_not_read_may_differ(tmp_path: Path) -> None:
    """zlib levels 2 and 6 (one decoder), ``standard`` and ``proleptic_gregorian`` calendars on dates
    after 1582-10-15 (xarray writes the one, archives the other), a global history: combined, equal
    to xr.open_mfdataset."""
    files = [_file(tmp_path / "a.nc", 0, attrs=dict(PACKED), level=2, history="made once"),
             _file(tmp_path / "b.nc", 1, attrs=dict(PACKED), level=6, calendar="proleptic_gregorian",
                   history="made twice"),
             _file(tmp_path / "c.nc", 2, attrs=dict(PACKED), level=9, calendar="gregorian",
                   units="hours since 2024-01-01", bounds_units="hours since 2024-01-01")]
    rs = combine(files[:2], concat_dims="time")
    assert json.loads(rs["tas/.zarray"])["filters"][-1] == {"id": "zlib", "level": 2}  # the first input's
    got = refset.open_dataset(rs).load()
    want = _mf(files[:2])
    xr.testing.assert_allclose(got.tas, want.tas)
    np.testing.assert_array_equal(got.time.values, want.time.values)
    np.testing.assert_array_equal(got.time_bnds.values, want.time_bnds.values)
    got = refset.open_dataset(combine(files[1::-1], concat_dims="time")).load()  # sorted by time
    xr.testing.assert_allclose(got, want.assign_attrs(got.attrs))
    # its own hourly units: time_bnds in parts, each decoded with its units
    _same_as_xarray(combine(files, concat_dims="time"), files, parts="time_bnds")
    # hours in a standard calendar re-encoded in days of a proleptic_gregorian first input
    plain = [_file(tmp_path / "p.nc", 0, calendar="proleptic_gregorian", bounds=False),
             _file(tmp_path / "q.nc", 1, units="hours since 2024-01-01", bounds=False)]
    rs = combine(plain, concat_dims="time")
    assert json.loads(rs["time/.zattrs"])["calendar"] == "proleptic_gregorian"
    got = refset.open_dataset(rs).load()
    np.testing.assert_array_equal(got.time.values, _mf(plain).time.values)


def test_calendars_that_disagree_before_1582_are_refused(tmp_path: Path) -> None:
    a = _file(tmp_path / "a.nc", 0, units="days since 1500-01-01", calendar="proleptic_gregorian")
    b = _file(tmp_path / "b.nc", 1, units="days since 1500-01-01", calendar="standard")
    with pytest.raises(Unsupported, match=r"concat dim 'time': input '.*b\.nc' uses calendar 'standard'.*"
                                          r"agree only from 1582-10-15 on"):
        combine([a, b], concat_dims="time")
    c = _file(tmp_path / "c.nc", 1, units="days since 1500-01-01", calendar="noleap")
    with pytest.raises(Unsupported, match="calendar 'noleap'"):
        combine([a, c], concat_dims="time")


@pytest.mark.parametrize("selector", [None, "cf:time"])
def test_coo_dtypes_datetime64_decodes_cf_units(tmp_path: Path, selector) -> None:
    """kerchunk's ``coo_dtypes={"time": "M8[s]"}``: the times decoded with their units and calendar
    (before, "days since 2024-01-01" 0 and 1 became 1970-01-01T00:00:00 and :01), in any input units;
    the coordinate then has no units; fsspec + zarr read the same dates."""
    files = [_file(tmp_path / "a.nc", 3), _file(tmp_path / "b.nc", 1, bounds_units="days since 2024-01-01")]
    coo_map = {"time": selector} if selector else None
    rs = combine(files, concat_dims="time", coo_map=coo_map, coo_dtypes={"time": "M8[s]"})
    want = np.array(["2024-01-02", "2024-01-04"], "M8[s]")
    assert json.loads(rs["time/.zarray"])["dtype"] == "<M8[s]"
    assert "units" not in json.loads(rs["time/.zattrs"])
    got = refset.open_dataset(rs).load()
    np.testing.assert_array_equal(got.time.values, want.astype("M8[ns]"))
    # the bounds inherited time's units: they are theirs now, and decode to the same dates as from the files
    assert json.loads(rs["time_bnds/.zattrs"])["units"] == "days since 2024-01-01"
    np.testing.assert_array_equal(got.time_bnds.values, _mf(files[::-1]).time_bnds.values)
    hours = [_file(tmp_path / f"h{d}.nc", d, units="hours since 2024-01-01", bounds=False) for d in (3, 1)]
    rs = combine(hours, concat_dims="time", coo_map=coo_map, coo_dtypes={"time": "M8[s]"})
    np.testing.assert_array_equal(refset.open_dataset(rs).time.values, want.astype("M8[ns]"))
    fsspec = pytest.importorskip("fsspec")
    peer = xr.open_dataset(fsspec.get_mapper("reference://", fo=rs.to_dict()), engine="zarr",
                           consolidated=False, zarr_format=2)
    np.testing.assert_array_equal(peer.time.values, want.astype(peer.time.dtype))
    days360 = [_file(tmp_path / f"d{d}.nc", d, calendar="360_day") for d in (58, 59)]  # Feb 29, Feb 30
    with pytest.raises(Unsupported, match=re.escape("coo_dtypes['time']=datetime64[s]: the times of 'time'")):
        combine(days360, concat_dims="time", coo_dtypes={"time": "M8[s]"})
