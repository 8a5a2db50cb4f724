"""refset.scan of NetCDF3 files (CDF-1, CDF-2, CDF-5): every variable reads back equal to what
netCDF4-python (and scipy, for CDF-1/2) reads from the file, and ``refset.open_dataset(scan(f))``
equals ``xr.open_dataset(f)``; corrupt headers raise InvalidFile naming what is wrong.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidFile, RefsetError, Unsupported
from refset.scan import scan

nc4 = pytest.importorskip("netCDF4")
zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")

from tests.conftest import CORPUS, corpus_files  # noqa: E402
from tests.scan_oracle import check_against_xarray  # noqa: E402

FORMATS = {"NETCDF3_CLASSIC": b"CDF\x01", "NETCDF3_64BIT_OFFSET": b"CDF\x02", "NETCDF3_64BIT_DATA": b"CDF\x05"}
BAD = {"nc_test_bad_cdf5_begin.nc"}  # a corrupt CDF-5 header: netCDF-C refuses it too


def _netcdf3_corpus() -> list[Path]:
    return corpus_files(lambda p, head: head[:4] in FORMATS.values() and p.name not in BAD)


def meta(rs: refset.ReferenceSet, key: str) -> dict:
    return json.loads(rs[key])


def check_against_netcdf4(path: Path, rs: refset.ReferenceSet) -> int:
    """Every variable read through zarr equals netCDF4-python's raw read (no masking or scaling),
    and scipy's read where scipy opens the file; dtype as stored (big-endian)."""
    g = zarr.open_group(refset.ZarrStore(rs), mode="r")
    scipy_file = None
    if path.read_bytes()[3] in (1, 2):
        from scipy.io import netcdf_file

        scipy_file = netcdf_file(path, "r", mmap=False, maskandscale=False)
    n = 0
    with nc4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)
        ds.set_auto_chartostring(False)
        for name, var in ds.variables.items():
            got = g[name][...]
            want = var[...]
            want = np.asarray(want.data if np.ma.isMaskedArray(want) else want)
            if want.dtype.kind == "S":  # a scalar char variable: numpy.bytes_ from both sides
                got, want = np.asarray(got, "S1"), np.asarray(want, "S1")
            assert got.dtype == want.dtype.newbyteorder(">") or got.dtype == want.dtype, (name, got.dtype)
            assert got.shape == want.shape, (path.name, name, got.shape, want.shape)
            assert np.array_equal(got, want, equal_nan=want.dtype.kind == "f"), f"{path.name}: {name}"
            if scipy_file is not None:
                sp = scipy_file.variables[name].data
                assert np.array_equal(got, sp, equal_nan=sp.dtype.kind == "f"), f"{path.name}: {name} vs scipy"
            n += 1
    if scipy_file is not None:
        scipy_file.close()
    return n


def oracle(path: Path, **kw) -> tuple[int, bool]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rs = scan(path, **kw)
        return check_against_netcdf4(path, rs), check_against_xarray(path, rs)


@pytest.mark.parametrize("path", _netcdf3_corpus() or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"shared corpus not found at {CORPUS} (CI provides it; a user's clone does not)"))],
    ids=lambda p: p.name if p else "corpus")
def test_corpus_file_reads_back_equal(path: Path) -> None:
    n, with_xr = oracle(path)
    assert n and with_xr


def test_corpus_corrupt_cdf5_header_names_the_variable(corpus: Path) -> None:
    with pytest.raises(InvalidFile, match="variable 'var_big': its data ends at byte 8589934810, past the end"):
        scan(corpus / "samples/netcdf-c/nc_test_bad_cdf5_begin.nc")


# -- files made here ---------------------------------------------------------------------------------

def _make(path: Path, fmt: str, *, nrec: int = 5, record_vars: str = "many") -> None:
    """Fixed and record variables of every type the format has, attributes of every type."""
    types = ["i1", "S1", "i2", "i4", "f4", "f8"]
    if fmt == "NETCDF3_64BIT_DATA":
        types += ["u1", "u2", "u4", "i8", "u8"]
    rng = np.random.default_rng(7)
    with nc4.Dataset(path, "w", format=fmt) as ds:
        ds.createDimension("time", None)
        ds.createDimension("y", 3)
        ds.createDimension("x", 5)  # odd: short/byte records need padding
        ds.createDimension("nchar", 4)
        ds.title = "refset netcdf3 test"
        ds.history = "line one\nline two"
        ds.numbers = np.array([1.5, np.nan, np.inf], "f8")
        ds.count = np.int32(7)
        ds.shorts = np.array([1, -2], "i2")
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t.calendar = "noleap"
        t[:] = np.arange(nrec) + 0.5
        for tp in types:
            dt = np.dtype(tp)
            if dt.kind == "S":
                v = ds.createVariable("fixed_S1", "S1", ("y", "nchar"))
                v[:] = np.array([list("abcd"), list("ef\0\0"), list("ghij")], "S1")
                r = ds.createVariable("rec_S1", "S1", ("time", "nchar")) if record_vars == "many" else None
                if r is not None:
                    r[:] = np.array([list(f"r{i:03d}") for i in range(nrec)], "S1")
                continue
            info = np.iinfo(dt) if dt.kind in "iu" else np.finfo(dt)
            data = rng.uniform(max(info.min, -1e6), min(info.max, 1e6), (3, 5)).astype(dt)
            v = ds.createVariable(f"fixed_{tp}", tp, ("y", "x"), fill_value=data[0, 0])
            v.long_name = f"a fixed {tp}"
            v.valid_range = np.array([info.min, info.max], dt)
            v[:] = data
            if record_vars == "many":
                r = ds.createVariable(f"rec_{tp}", tp, ("time", "x"))
                r.scale_factor = np.float32(0.5) if dt.kind == "f" else np.float64(2.0)
                r[:] = rng.uniform(0, 100, (nrec, 5)).astype(dt)
        s = ds.createVariable("scalar", "f8", ())
        s[...] = 3.25
        if record_vars == "one_byte":
            r = ds.createVariable("only_rec", "i1", ("time", "x"))  # the one record variable: no padding
            r[:] = (np.arange(nrec * 5).reshape(nrec, 5) % 100).astype("i1")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("record_vars", ["many", "one_byte"])
def test_every_type_fixed_and_record(tmp_path: Path, fmt: str, record_vars: str) -> None:
    p = tmp_path / f"{fmt}.nc"
    _make(p, fmt, record_vars=record_vars)
    assert p.read_bytes()[:4] == FORMATS[fmt]
    n, with_xr = oracle(p)
    assert with_xr and n >= (12 if record_vars == "many" else 8)
    rs = scan(p)
    zarray = meta(rs, "rec_i2/.zarray") if record_vars == "many" else meta(rs, "only_rec/.zarray")
    assert zarray["chunks"][0] == 1 and zarray["shape"][0] == 5  # one chunk per record
    fixed = meta(rs, "fixed_i4/.zarray")
    assert fixed["dtype"] == ">i4" and fixed["chunks"] == [3, 5]
    assert fixed["fill_value"] == int(nc4.Dataset(p)["fixed_i4"]._FillValue)
    assert "_FillValue" not in meta(rs, "fixed_i4/.zattrs")
    assert meta(rs, "time/.zarray")["fill_value"] is None  # netCDF's default fills are not masked
    assert meta(rs, "time/.zattrs")["_ARRAY_DIMENSIONS"] == ["time"]
    assert meta(rs, ".zattrs")["numbers"] == [1.5, "NaN", "Infinity"] or np.isnan(
        meta(rs, ".zattrs")["numbers"][1])


def test_no_records_and_large_records(tmp_path: Path) -> None:
    p = tmp_path / "empty.nc"
    _make(p, "NETCDF3_CLASSIC", nrec=0)
    n, with_xr = oracle(p)
    assert with_xr and n
    assert meta(scan(p), "rec_f8/.zarray")["shape"] == [0, 5]
    p = tmp_path / "long.nc"
    _make(p, "NETCDF3_64BIT_OFFSET", nrec=300)
    rs = scan(p, inline_threshold=0)
    assert oracle(p, inline_threshold=0)[1]
    ref = rs["rec_f8/299.0"]
    assert ref[0] == str(p) and ref[2] == 40  # one record's slab, not padded


def test_streaming_numrecs_from_the_file_size(tmp_path: Path) -> None:
    """A header written while streaming says numrecs = 0xFFFFFFFF: the records are counted from the
    file size, as netCDF-C does."""
    p = tmp_path / "stream.nc"
    _make(p, "NETCDF3_CLASSIC", nrec=7)
    want = scan(p).to_dict()
    raw = bytearray(p.read_bytes())
    raw[4:8] = b"\xff\xff\xff\xff"
    q = tmp_path / "streamed.nc"
    q.write_bytes(raw)
    got = refset.rename_urls(scan(q), {str(q): str(p)}).to_dict()
    assert got == want


def test_subchunk_splits_fixed_variables(tmp_path: Path) -> None:
    p = tmp_path / "big.nc"
    with nc4.Dataset(p, "w", format="NETCDF3_64BIT_OFFSET") as ds:
        ds.createDimension("y", 120)
        ds.createDimension("x", 1000)
        v = ds.createVariable("v", "f8", ("y", "x"))
        v[:] = np.arange(120_000, dtype="f8").reshape(120, 1000)
    rs = scan(p, subchunk=100_000)
    assert meta(rs, "v/.zarray")["chunks"] == [12, 1000]  # the largest divisor of 120 under 100 kB
    assert oracle(p, subchunk=100_000) == (1, True)
    assert meta(scan(p), "v/.zarray")["chunks"] == [120, 1000]


def test_drop_variables_and_options(tmp_path: Path) -> None:
    p = tmp_path / "d.nc"
    _make(p, "NETCDF3_CLASSIC")
    rs = scan(p, drop_variables=["rec_f4", "fixed_i2"], max_inline=10)  # max_inline: an HDF5 option
    keys = {k.split("/")[0] for k in rs.to_dict()}
    assert "rec_f4" not in keys and "fixed_i2" not in keys and "rec_f8" in keys
    with pytest.raises(Unsupported, match="NetCDF3 files have no groups"):
        scan(p, group="g")
    with pytest.raises(ValueError, match=r"unknown option.*'chunks'"):
        scan(p, chunks=3)


def test_fsspec_and_xarray_read_our_output(tmp_path: Path) -> None:
    fsspec = pytest.importorskip("fsspec")
    p = tmp_path / "i.nc"
    _make(p, "NETCDF3_64BIT_OFFSET")
    out = tmp_path / "refs.json"
    refset.save(scan(p), str(out))
    fs = fsspec.filesystem("reference", fo=str(out))
    peer = xr.open_dataset(fs.get_mapper(""), engine="zarr", consolidated=False, zarr_format=2).load()
    want = xr.open_dataset(p).load()
    names = ["time", "rec_S1", "fixed_i2", "fixed_f4", "fixed_S1", "scalar"]  # no float32 scale_factor
    xr.testing.assert_identical(peer[names].drop_attrs(), want[names].drop_attrs())


def test_float_fill_values_on_integer_variables(tmp_path: Path) -> None:
    """NetCDF3 writers other than netCDF-C (scipy; ERA-Interim's ``eraint_uvz.nc``) give integer
    variables a float ``_FillValue``. xarray drops NaN (no integer equals it), masks an integral value,
    and masks nothing for 1e20 but decodes to floats. Before, NaN was cast to a fill value of 0, and
    every stored 0 read as NaN."""
    scipy_io = pytest.importorskip("scipy.io")
    p = tmp_path / "fills.nc"
    with scipy_io.netcdf_file(p, "w") as f:
        f.createDimension("x", 5)
        for name, code, fill, extra in (("nan16", "h", np.float32(np.nan), {}),
                                        ("big16", "h", np.float64(1e20), {}),
                                        ("packed", "h", np.float64(1e20), {"scale_factor": np.float64(0.5)}),
                                        ("int32", "i", np.float64(-999.0), {}),
                                        ("frac", "b", np.float64(0.5), {})):
            v = f.createVariable(name, code, ("x",))
            v[:] = [0, 1, 2, -999 if code == "i" else -1, 4]
            v._FillValue = fill
            for k, x in extra.items():
                setattr(v, k, x)
    rs = scan(p)
    assert meta(rs, "nan16/.zarray")["fill_value"] is None and "_FillValue" not in meta(rs, "nan16/.zattrs")
    assert meta(rs, "big16/.zarray")["fill_value"] is None and meta(rs, "big16/.zattrs")["_FillValue"] == 1e20
    assert meta(rs, "int32/.zarray")["fill_value"] == -999
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = xr.open_dataset(p, engine="scipy").load()
        got = refset.open_dataset(rs).load()
        fsspec = pytest.importorskip("fsspec")
        peer = xr.open_dataset(fsspec.get_mapper("reference://", fo=rs.to_dict()), engine="zarr",
                               consolidated=False, zarr_format=2).load()
    for name in ("nan16", "big16", "int32", "frac"):
        for ds in (got, peer):
            assert ds[name].dtype == want[name].dtype, name
            np.testing.assert_array_equal(ds[name].values, want[name].values, err_msg=name)
    assert got["nan16"].values[0] == 0 and got["int32"].isnull().sum() == 1
    # xarray decodes float32 attributes to float32; JSON keeps no attribute dtype (docs/compat.md)
    np.testing.assert_array_equal(got["packed"].values, want["packed"].values.astype(got["packed"].dtype))


@pytest.mark.parametrize("fmt", ["NETCDF3_CLASSIC", "NETCDF3_64BIT_OFFSET"])
def test_chunk_references_equal_kerchunks(tmp_path: Path, fmt: str) -> None:
    """kerchunk's NetCDF3ToZarr (scipy's header reader) references the same byte ranges."""
    pytest.importorskip("kerchunk")
    from kerchunk.netCDF3 import NetCDF3ToZarr

    p = tmp_path / "k.nc"
    _make(p, fmt, nrec=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = NetCDF3ToZarr(str(p), inline_threshold=0).translate()["refs"]
    ours = scan(p, inline_threshold=0).to_dict()
    chunks = {k: v for k, v in theirs.items() if not k.rsplit("/", 1)[-1].startswith(".")}
    assert len(chunks) == 35  # 6 fixed, 7 record variables x 4 records, the scalar
    assert {k: ours.get(k) for k in chunks} == chunks


def test_remote_scans_equal_the_local_scan(tmp_path: Path, s3) -> None:
    import fsspec

    from tests.httpserver import RangeServer

    p = tmp_path / "r.nc"
    with nc4.Dataset(p, "w", format="NETCDF3_64BIT_OFFSET") as ds:
        ds.createDimension("time", None)
        ds.createDimension("y", 200)
        ds.createDimension("x", 300)
        ds.createVariable("time", "f8", ("time",))[:] = np.arange(20)
        ds.createVariable("v", "f4", ("time", "y", "x"))[:] = np.ones((20, 200, 300), "f4")
    local = scan(p)

    def same(remote: refset.ReferenceSet, url: str) -> None:
        assert remote.urls == (url,)
        assert refset.rename_urls(remote, {url: str(p)}).to_dict() == local.to_dict()

    with RangeServer(tmp_path) as srv:
        url = f"{srv.url}/r.nc"
        srv.reset()
        same(scan(url), url)
        assert srv.requests <= 24  # size, the header, the 20 inlined time values; not the 4.8 MB
    s3fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3)
    s3fs.put_file(str(p), "refs/scan/r.nc")
    same(scan("s3://refs/scan/r.nc", storage_options=s3), "s3://refs/scan/r.nc")


# -- corrupt files: a clear InvalidFile, never a crash or a hang --------------------------------------

def test_truncated_files(tmp_path: Path) -> None:
    p = tmp_path / "t.nc"
    _make(p, "NETCDF3_CLASSIC")
    raw = p.read_bytes()
    q = tmp_path / "cut.nc"
    q.write_bytes(raw[:-100])
    with pytest.raises(InvalidFile, match=r"variable 'rec_\w+': its data ends at byte \d+, past the end"):
        scan(q)
    q.write_bytes(raw[:60])
    with pytest.raises(InvalidFile, match=r"NetCDF3 header: the file ends .* while reading"):
        scan(q)
    q.write_bytes(b"CDF\x03" + raw[4:])
    with pytest.raises(Unsupported, match="not a NetCDF3, NetCDF4 or HDF5 file"):
        scan(q)


def test_mutated_headers_give_refset_errors(tmp_path: Path) -> None:
    """Random bytes of a header changed: the scan succeeds or raises a RefsetError, nothing else."""
    p = tmp_path / "m.nc"
    _make(p, "NETCDF3_64BIT_DATA")
    raw = p.read_bytes()
    header_size = min(int(v.begin) for v in _header(p).variables)
    rng = np.random.default_rng(0)
    q = tmp_path / "mut.nc"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        b = bytearray(raw)
        for i in rng.integers(4, header_size, 3):
            b[i] = int(rng.integers(0, 256))
        q.write_bytes(b)
        try:
            scan(q)
            outcomes["ok"] += 1
        except RefsetError:
            outcomes["error"] += 1
    assert outcomes["error"] > 50, outcomes


def test_sizes_past_int64_are_refused_not_wrapped(tmp_path: Path) -> None:
    """A CDF-5 header whose variable claims 2**32 x 2**32 bytes: exact arithmetic refuses it (a
    wrapped 64-bit product would say 0 bytes and read as fill values)."""
    import struct

    def u64(n: int) -> bytes:
        return struct.pack(">Q", n)

    def name(b: bytes) -> bytes:
        return u64(len(b)) + b + b"\0" * (-len(b) % 4)

    absent = struct.pack(">I", 0) + u64(0)
    h = b"CDF\x05" + u64(0)
    h += struct.pack(">I", 10) + u64(2) + name(b"a") + u64(2**32) + name(b"b") + u64(2**32) + absent
    h += struct.pack(">I", 11) + u64(1) + name(b"v") + u64(2) + u64(0) + u64(1) + absent
    h += struct.pack(">I", 1) + u64(0)
    h += u64(len(h) + 8) + bytes(16)
    p = tmp_path / "huge.nc"
    p.write_bytes(h)
    with pytest.raises(InvalidFile, match=f"variable 'v': its data ends at byte {len(h) - 16 + 2**64}"):
        scan(p)


def _header(p: Path):
    from refset.io.scanfile import ScanFile
    from refset.io.store import LocalStore
    from refset.scan.netcdf3.header import read_header

    with ScanFile(LocalStore(str(p))) as f:
        return read_header(f)


if __name__ == "__main__":  # the NetCDF3 rows of the table in docs/scan.md
    print("| file | variables equal to netCDF4 (and scipy) | xarray + netCDF4 equal |")
    print("|---|---:|---|")
    for p in _netcdf3_corpus():
        n, x = oracle(p)
        print(f"| {p.parent.name}/{p.name} | {n} | {'yes' if x else 'no'} |")


@pytest.mark.parametrize("name", [b"..", b"a/", b"\0\0", b"/\0"])
def test_names_that_are_no_keys_are_refused(tmp_path: Path, name: bytes) -> None:
    """A variable (or dimension) named ``''``, ``..`` or with a ``/``: its key would replace the
    file's own metadata (``''``: a ``.zarray`` at the root, over the global attributes) or leave the
    set (found by the scan fuzz probe, seed 629): refused, naming the file and the name."""
    import scipy.io

    for what in ("variable", "dimension"):
        p = tmp_path / f"{what}.nc"
        with scipy.io.netcdf_file(p, "w") as f:
            f.createDimension("dd" if what == "dimension" else "x", 3)
            v = f.createVariable("vv" if what == "variable" else "y", "i4", ("dd" if what == "dimension" else "x",))
            v[:] = [1, 2, 3]
        data = p.read_bytes()
        old = b"vv" if what == "variable" else b"dd"
        assert data.count(old) == 1
        p.write_bytes(data.replace(old, name))
        with pytest.raises(InvalidFile, match=rf"{p}: NetCDF3 header: a {what} is named "):
            refset.scan(p)


def test_overlapping_variable_data_is_refused_as_netcdf_c_refuses_it(tmp_path: Path) -> None:
    """A header whose second variable's data begins inside the first's: netCDF-C refuses to open the
    file (its NC_check_voffs); refset refused nothing and read the shared bytes twice."""
    import struct

    import scipy.io

    netCDF4 = pytest.importorskip("netCDF4")
    p = tmp_path / "overlap.nc"
    with scipy.io.netcdf_file(p, "w") as f:
        f.createDimension("x", 4)
        f.createVariable("aa", "i4", ("x",))[:] = [1, 2, 3, 4]
        f.createVariable("bb", "i4", ("x",))[:] = [5, 6, 7, 8]
    data = bytearray(p.read_bytes())
    first = len(data) - 32  # the data: aa's 16 bytes, then bb's
    at = data.find(struct.pack(">i", first + 16), data.find(b"bb"))
    data[at:at + 4] = struct.pack(">i", first + 8)
    p.write_bytes(bytes(data))
    with pytest.raises(OSError):
        netCDF4.Dataset(p)
    with pytest.raises(InvalidFile, match=rf"{p}: variable 'bb': its data at byte {first + 8} overlaps variable 'aa'"):
        refset.scan(p)
