"""What is not a reference set is named where one was expected: a NetCDF/HDF5 file, one parquet record
file, a zarr store, a list of sets. Through refset.load, xarray's engine, ReferenceFileSystem, the CLI,
locally and over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidReferences

from .httpserver import RangeServer

SCAN = "is a NetCDF/HDF5 file, not a reference set: make one with `refset scan "
ZARR = "is a zarr store ({}), not a reference set: open it with zarr or xarray.open_zarr"
RECORD = "is one record file of a parquet reference set, not a set: load the set's directory"
LIST = "is a list of 2 reference sets, not one: combine them with `refset combine`"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every kind of wrong input, made by the libraries that write them."""
    h5py = pytest.importorskip("h5py")
    nc4 = pytest.importorskip("netCDF4")
    zarr = pytest.importorskip("zarr")
    d = tmp_path_factory.mktemp("wrong")
    for name, fmt in [("nc4.nc", "NETCDF4"), ("nc3.nc", "NETCDF3_CLASSIC"), ("nc3_64.nc", "NETCDF3_64BIT_OFFSET")]:
        with nc4.Dataset(d / name, "w", format=fmt) as ds:
            ds.createDimension("x", 4)
            ds.createVariable("v", "f4", ("x",))[:] = np.arange(4)
    with h5py.File(d / "userblock.h5", "w", userblock_size=512) as f:
        f["v"] = np.arange(10)
    with open(d / "userblock.h5", "r+b") as fh:  # a user block holding text, as tools write there
        fh.write(b"written by some tool\n")
    rs = refset.scan(d / "nc4.nc")
    refset.save(rs, d / "set.parq")
    (d / "list.json").write_text(json.dumps([rs.to_dict(), rs.to_dict()]))
    g = zarr.open_group(d / "v3.zarr", mode="w", zarr_format=3)
    g.create_array("a", shape=(4,), dtype="f4")
    for name in ("v2.zarr", "v2c.zarr"):
        g = zarr.open_group(d / name, mode="w", zarr_format=2)
        g.create_array("a", shape=(4,), dtype="f4")
    zarr.consolidate_metadata(d / "v2c.zarr")  # a .zmetadata without record_size
    assert (d / "v2c.zarr" / ".zmetadata").exists() and not (d / "v2.zarr" / ".zmetadata").exists()
    # the other kinds refset scans, as their first bytes tell them (refset.io.magic.describe)
    (d / "fc.grib2").write_bytes(b"GRIB\0\0\0\x02" + bytes(200))
    (d / "img.tif").write_bytes(b"II*\0" + bytes(200))
    (d / "sky.fits").write_bytes(f"{'SIMPLE  =':<10}{'T':>20}".encode().ljust(2880))
    (d / "mod.hdf").write_bytes(b"\x0e\x03\x13\x01" + bytes(200))
    (d / "g.dmrpp").write_text('<?xml version="1.0"?><Dataset xmlns:dmrpp="http://xml.opendap.org/dap/dmrpp/1.0.0#"/>')
    (d / "fc.grib2.idx").write_text("1:0:d=2024010100:TMP:500 mb:anl:\n")
    return d


CASES = [
    ("nc4.nc", SCAN),
    ("nc3.nc", SCAN),
    ("nc3_64.nc", SCAN),
    ("userblock.h5", SCAN),
    ("set.parq/v/refs.0.parq", RECORD),
    ("v3.zarr", ZARR.format("zarr.json")),
    ("v2.zarr", ZARR.format(".zgroup")),
    ("v2c.zarr", ZARR.format(".zgroup")),
    ("list.json", LIST),
    ("fc.grib2", "is a GRIB file, not a reference set: make one with `refset scan "),
    ("img.tif", "is a TIFF file, not a reference set: make one with `refset scan "),
    ("sky.fits", "is a FITS file, not a reference set: make one with `refset scan "),
    ("mod.hdf", "is an HDF4 file, not a reference set: make one with `refset scan "),
    ("g.dmrpp", "is a DMR++ sidecar, not a reference set: make one with `refset scan "),
    ("fc.grib2.idx", "is a GRIB inventory (a .idx sidecar), not a reference set: `refset scan` its GRIB file"),
]


def _opens(how: str, source: str) -> None:
    if how == "load":
        refset.load(source)
    elif how == "lazy":
        refset.load(source, lazy=True)
    elif how == "xarray":
        xr = pytest.importorskip("xarray")
        xr.open_dataset(source, engine="refset")
    else:
        refset.ReferenceFileSystem(source)


@pytest.mark.parametrize("how", ["load", "lazy", "xarray", "fs"])
@pytest.mark.parametrize("name,says", CASES, ids=[c[0] for c in CASES])
def test_library_names_what_it_got(inputs: Path, name: str, says: str, how: str):
    source = str(inputs / name)
    with pytest.raises(InvalidReferences) as e:
        _opens(how, source)
    msg = str(e.value)
    assert says in msg and "\n" not in msg
    if says is SCAN or "make one with `refset scan" in says:
        assert msg.startswith(f"{source}: ") and f"`refset scan {source} -o {Path(source).stem}.json`" in msg
    if says is RECORD:
        assert msg.endswith(str(inputs / "set.parq"))  # the directory to load instead
    if says.startswith("is a zarr"):
        assert msg.startswith(f"{source}: ")


@pytest.mark.parametrize("name,says", CASES, ids=[c[0] for c in CASES])
def test_over_http(inputs: Path, name: str, says: str):
    with RangeServer(str(inputs)) as srv:
        with pytest.raises(InvalidReferences) as e:
            refset.load(f"{srv.url}/{name}")
        assert says in str(e.value)
        if says is RECORD:
            assert str(e.value).endswith(f"{srv.url}/set.parq")
        assert refset.load(f"{srv.url}/set.parq").keys() == refset.load(inputs / "set.parq").keys()


@pytest.mark.parametrize("name,says", CASES, ids=[c[0] for c in CASES])
def test_cli_one_line_exit_1(inputs: Path, name: str, says: str):
    r = subprocess.run([sys.executable, "-m", "refset.cli", "info", str(inputs / name)], capture_output=True,
                       text=True)
    assert r.returncode == 1 and r.stdout == "", r.stderr
    assert r.stderr.startswith("refset info: invalid input: ") and says in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_combine_still_scans_data_files(inputs: Path):
    """combine takes data files (a user block too) and scans them; a list of sets as its items."""
    out = refset.combine([inputs / "userblock.h5", inputs / "userblock.h5"], concat_dims=["run"],
                         coo_map={"run": "INDEX"}, identical_dims=[])
    # the same file twice: v is alike in both, kept as it is (as xr.open_mfdataset's data_vars="different")
    assert out.grids["v"].shape == refset.scan(inputs / "userblock.h5").grids["v"].shape
    assert out.grids["run"].shape == (2,)
    out = refset.combine([inputs / "list.json", inputs / "nc4.nc"], concat_dims=["run"], coo_map={"run": "INDEX"})
    assert out.grids["run"].shape == (len(json.loads((inputs / "list.json").read_text())) + 1,)
