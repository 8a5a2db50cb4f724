"""combine compares what decoding needs: inputs whose packing, fill, valid range or time encoding differ are
refused naming the variable, the attribute and both inputs (never decoded with the first input's); inputs that
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


@pytest.mark.parametrize(("attr", "first", "second"), [
    ("scale_factor", 0.01, 0.02),
    ("add_offset", 200.0, 210.0),
    ("missing_value", -1, -2),
    ("valid_range", [0, 100], [0, 200]),
    ("valid_min", 0, 1),
    ("_Unsigned", "true", "false"),
])
def test_a_decoding_attribute_that_differs_is_refused_naming_both_inputs(tmp_path: Path, attr, first,
                                                                         second) -> None:
    a = _file(tmp_path / "a.nc", 0, attrs={**PACKED, attr: first})
    b = _file(tmp_path / "b.nc", 1, attrs={**PACKED, attr: second})
    with pytest.raises(Unsupported, match=rf"variable 'tas': {attr} .* in input '.*b\.nc' differs from .* in "
                                          rf"input '.*a\.nc'"):
        combine([a, b], concat_dims="time")
    c = _file(tmp_path / "c.nc", 2, attrs={k: v for k, v in PACKED.items() if k != attr})  # absent: differs
    with pytest.raises(Unsupported, match=rf"variable 'tas': {attr} absent in input '.*c\.nc'"):
        combine([a, c], concat_dims="time")


def test_per_file_packing_is_refused_in_every_combine_path(tmp_path: Path) -> None:
    """The ERA5 case: each file packed with its own scale and offset. Before, every file was decoded
    with the first file's (215.0 where xarray reads 263.0). Refused for data files, for their sets
    in memory, as JSON files (combine's batch reader) and on a process cluster."""
    packs = [(0.01, 200.0), (0.02, 210.0), (0.01, 250.0), (0.005, 260.0)]
    files = [_file(tmp_path / f"era{i}.nc", i, attrs={"scale_factor": s, "add_offset": o})
             for i, (s, o) in enumerate(packs)]
    pattern = r"variable 'tas': add_offset 210\.0 in input '.*era1\.nc' differs from 200\.0 in input '.*era0\.nc'"
    with pytest.raises(Unsupported, match=pattern):
        combine(files, concat_dims="time")
    with pytest.raises(Unsupported, match=r"variable 'tas': add_offset"):
        combine([refset.scan(f) for f in files], concat_dims="time")
    jsons = []
    for f in files:
        jsons.append(f.replace(".nc", ".json"))
        refset.save(refset.scan(f), jsons[-1])
    with pytest.raises(Unsupported, match=r"variable 'tas': add_offset 210\.0 in input '.*era1\.json'"):
        combine(jsons, concat_dims="time")
    # the same packing in every file combines, equal to xarray
    same = [_file(tmp_path / f"same{i}.nc", i, attrs=dict(PACKED)) for i in range(3)]
    got = refset.open_dataset(combine(same, concat_dims="time")).load()
    xr.testing.assert_allclose(got.tas, _mf(same).tas)


def test_per_file_packing_is_refused_on_a_process_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    files = [_file(tmp_path / f"era{i}.nc", i, attrs={"scale_factor": 0.01, "add_offset": 200.0 + 10 * (i == 3)})
             for i in range(4)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        # batches of two: the difference lies between the batches, found by the final combine
        with pytest.raises(Unsupported, match=r"variable 'tas': add_offset 210\.0 in input .* differs from 200\.0"):
            combine(files, concat_dims="time", client=client, batch_size=2)


def test_bounds_inherit_the_time_units_of_their_parent(tmp_path: Path) -> None:
    """time_bnds has no units of its own: xarray decodes it with time's. Files in days and in hours
    re-encode time, but time_bnds' raw numbers cannot be re-encoded: refused, not mixed."""
    a = _file(tmp_path / "a.nc", 0)
    b = _file(tmp_path / "b.nc", 1, units="hours since 2024-01-01")
    with pytest.raises(Unsupported, match=r"variable 'time_bnds': units 'hours since 2024-01-01' in input "
                                          r"'.*b\.nc' differs from 'days since 2024-01-01' in input '.*a\.nc' "
                                          r"\(inherited from 'time', whose bounds it is\)"):
        combine([a, b], concat_dims="time")
    c = _file(tmp_path / "c.nc", 1, bounds_units="days since 2024-01-01")  # own units equal: fine
    combine([_file(tmp_path / "a2.nc", 0, bounds_units="days since 2024-01-01"), c], concat_dims="time")


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
    with pytest.raises(Unsupported, match="time_bnds"):  # its own hourly units: cannot be re-encoded
        combine(files, concat_dims="time")
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
