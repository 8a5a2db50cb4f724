"""Reads of what a scan referenced when bytes or types are odd (issue 30): a chunk whose bytes no
longer decode is an ``InvalidFile`` error naming the chunk and the file, never the codec's own ``zlib.error`` (h5py fails on the same file too); a scanner's error
about a variable names the file as well; compound values with big-endian fields read as h5py reads
them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidFile, SourceChanged, Unsupported

netCDF4 = pytest.importorskip("netCDF4")
xr = pytest.importorskip("xarray")


def test_a_chunk_that_does_not_decode_is_named(tmp_path: Path):
    p = tmp_path / "z.nc"
    with netCDF4.Dataset(p, "w") as ds:
        ds.createDimension("y", 40)
        ds.createDimension("x", 50)
        v = ds.createVariable("v", "f8", ("y", "x"), zlib=True, chunksizes=(20, 25))
        v[:] = np.random.default_rng(0).normal(size=(40, 50))
    rs = refset.scan(p)
    _, offset, length = rs["v/1.0"]
    data = bytearray(p.read_bytes())
    for k in range(offset + 8, offset + length - 8, 7):  # the stream's body, not its header
        data[k] ^= 0x55
    p.write_bytes(bytes(data))
    with pytest.raises(SourceChanged, match=rf"{p} changed since its reference set was made"):
        xr.open_dataset(rs, engine="refset").v.load()  # the file's fingerprint says so first
    ds = xr.open_dataset(rs, engine="refset", verify_sources=False)  # what a corrupt chunk gives
    with pytest.raises(InvalidFile, match=rf"chunk 'v/1\.0' in '{p}': its bytes do not decode .*\(zlib\.error: "):
        ds.v.load()
    with pytest.raises(InvalidFile, match=rf"chunk 'v/1\.0' in '{p}': its bytes do not decode .*\(zlib\.error: "):
        ds.v.isel(y=[0, 30], x=[1, 2]).load()  # an orthogonal selection: the same decoder names it
    np.testing.assert_array_equal(ds.v.isel(y=slice(0, 20)).values.shape, (20, 50))  # the rest reads
    h5py = pytest.importorskip("h5py")
    with h5py.File(p, "r") as f, pytest.raises(OSError):
        f["v"].read_direct(np.empty((20, 25)), np.s_[20:, :25])


def test_a_variable_refused_by_the_scanner_names_the_file(tmp_path: Path):
    h5py = pytest.importorskip("h5py")
    p = tmp_path / "virtual.h5"
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f["a"] = np.arange(4)
    layout = h5py.VirtualLayout(shape=(4,), dtype="i8")
    layout[:] = h5py.VirtualSource(str(src), "a", shape=(4,))
    with h5py.File(p, "w") as f:
        f.create_virtual_dataset("v", layout)
    with pytest.raises(Unsupported) as e:
        refset.scan(p)
    assert str(e.value).startswith(f"{p}: ") and "virtual dataset" in str(e.value)


def test_compound_values_with_big_endian_fields_read_as_h5py_reads_them(tmp_path: Path):
    """A compound (structured) variable whose fields are big-endian: read in this machine's byte
    order (xarray's endianness decoding cast it to raw bytes and raised a bare TypeError; the scan
    fuzz probe's last bare exception, seed 1227). Its default CF decoding fails in xarray on every
    engine (a structured _FillValue is unhashable): decode_cf=False reads it."""
    h5py = pytest.importorskip("h5py")
    p = tmp_path / "compound.h5"
    dt = np.dtype([("day", "i1"), ("elev", ">i2"), ("time", ">f8")])
    want = np.array([(1, 200, 3.5), (-2, 7, 1e10), (3, -9, -0.25)], dt)
    with h5py.File(p, "w") as f:
        f.create_dataset("obs", data=want, chunks=(2,))
    got = xr.open_dataset(refset.scan(p), engine="refset", decode_cf=False).obs.values
    assert got.dtype == want.dtype.newbyteorder("=")
    assert got.tolist() == want.tolist()
    assert xr.open_dataset(refset.scan(p), engine="refset", decode_cf=False).obs[1:].values.tolist() == \
        want[1:].tolist()
