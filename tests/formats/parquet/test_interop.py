"""Parquet reference sets against the real peers: fsspec's LazyReferenceMapper / ReferenceFileSystem,
kerchunk's refs_to_dataframe and SingleHdf5ToZarr, fastparquet, pyarrow, zarr and xarray.

Data are real: a zarr v2 store written to a local directory (some chunks deleted, so zarr must use
the fill value) and a NetCDF4 file with unwritten chunks, referenced chunk by chunk.
"""

from __future__ import annotations

import base64
import json
import os
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refset
from tests.helpers import zarray

fsspec = pytest.importorskip("fsspec")
zarr = pytest.importorskip("zarr")
from fsspec.implementations.reference import LazyReferenceMapper  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning",
                                        "ignore:The 'fastparquet' engine:Warning",
                                        "ignore::zarr.errors.ZarrUserWarning")


def _norm(d: dict) -> dict:
    return {k: json.loads(v) if k.rpartition("/")[2].startswith(".z") else v for k, v in d.items()}


def _v0(refs: dict) -> dict:
    """Source references in the V0 value forms refset produces (lists stay lists, text stays text)."""
    return _norm(refset.load(refs).to_dict())


# -- real data ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zarr_source(tmp_path_factory):
    """A zarr v2 store on disk with groups, several grids and deleted chunks; refs to its files."""
    d = tmp_path_factory.mktemp("src") / "src.zarr"
    g = zarr.open_group(str(d), mode="w", zarr_format=2)
    t = g.create_array("t", shape=(10, 12), chunks=(3, 4), dtype="f4", fill_value=-1.0)
    t[:] = np.arange(120, dtype="f4").reshape(10, 12)
    one = g.create_array("one", shape=(50,), chunks=(7,), dtype="i2", fill_value=-7)
    one[:] = np.arange(50, dtype="i2")
    sub = g.create_group("deep")
    name = sub.create_array("name", shape=(2, 3, 4, 5), chunks=(1, 2, 2, 3), dtype="u1", fill_value=9)
    name[:] = (np.arange(120) % 200).astype("u1").reshape(2, 3, 4, 5)
    s = g.create_array("s", shape=(), dtype="f8", fill_value=0.0)
    s[()] = 3.5
    g.create_array("empty", shape=(0, 4), chunks=(2, 2), dtype="f4", fill_value=0.0)
    g.create_array("missing", shape=(30,), chunks=(2,), dtype="f4", fill_value=42.0)  # no chunks
    for key in ["t/0.1", "t/2.2", "one/3", "deep/name/1.0.1.1"]:
        os.remove(d / key)
    refs: dict = {}
    for root, _, files in os.walk(d):
        for f in files:
            full = os.path.join(root, f)
            key = os.path.relpath(full, d)
            if f.startswith(".z"):
                refs[key] = open(full).read()
            elif key == "t/1.1":
                refs[key] = ["file://" + full]  # whole file
            elif key == "one/0":
                refs[key] = "base64:" + base64.b64encode(open(full, "rb").read()).decode()  # inline
            else:
                refs[key] = ["file://" + full, 0, os.path.getsize(full)]
    return d, refs


def _open_fsspec_group(parq):
    from zarr.storage import FsspecStore

    fs = fsspec.filesystem("reference", fo=str(parq), remote_protocol="file")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        store = FsspecStore(fs, read_only=True, path="")
    return zarr.open_group(store, mode="r", zarr_format=2)


def _arrays(g, prefix=""):
    for name, a in g.arrays():
        yield prefix + name, a
    for name, sub in g.groups():
        yield from _arrays(sub, prefix + name + "/")


# -- refset writes, fsspec reads --------------------------------------------------------------------
@pytest.mark.parametrize("record_size,pad", [(3, False), (4, True), (20_000, False)])
def test_refset_written_read_by_fsspec_and_zarr(zarr_source, tmp_path, record_size, pad):
    d, refs = zarr_source
    out = tmp_path / "refs.parq"
    refset.save(refs, out, record_size=record_size, pad=pad)
    expect = zarr.open_group(str(d), mode="r", zarr_format=2)
    got = _open_fsspec_group(out)
    want = dict(_arrays(expect))
    have = dict(_arrays(got))
    assert sorted(have) == sorted(want)
    for name, a in want.items():
        np.testing.assert_array_equal(have[name][...], a[...], err_msg=name)
    # missing chunks came back as fill values through fsspec, not as errors
    assert (have["t"][0:3, 4:8] == -1).all() and (have["missing"][:] == 42).all()


@pytest.mark.parametrize("engine", ["fastparquet", "pyarrow"])
def test_refset_written_every_key_through_lazy_reference_mapper(zarr_source, tmp_path, engine):
    _d, refs = zarr_source
    out = tmp_path / "refs.parq"
    refset.save(refs, out, record_size=5)
    lz = LazyReferenceMapper(str(out), engine=engine)
    src = refset.load(refs)
    for key, ref in src.items():
        got = lz[key]
        if key.rpartition("/")[2].startswith(".z"):
            assert json.loads(got) == json.loads(ref), key
        elif isinstance(ref, bytes):
            assert got == ref, key
        else:
            assert list(got) == list(ref), key
            assert all(type(v) is not float for v in got[1:]), key  # ints, not floats
    if engine == "fastparquet":  # fsspec's default: absent keys are KeyErrors (fill values in zarr)
        for key in ["t/0.1", "t/2.2", "one/3", "missing/0"]:
            with pytest.raises(KeyError):
                lz[key]


def test_xarray_opens_refset_parquet_through_fsspec(tmp_path):
    xr = pytest.importorskip("xarray")
    netCDF4 = pytest.importorskip("netCDF4")
    kh = pytest.importorskip("kerchunk.hdf")
    nc = tmp_path / "data.nc"
    with netCDF4.Dataset(nc, "w") as ds:
        ds.createDimension("time", 6)
        ds.createDimension("x", 8)
        v = ds.createVariable("v", "f4", ("time", "x"), chunksizes=(2, 4), zlib=True, fill_value=-9.0)
        v[0:2, :] = np.arange(16, dtype="f4").reshape(2, 8)
        v[4:6, 0:4] = 7.0  # chunks (1, *) and (2, 1) are never written
        w = ds.createVariable("w", "i4", ("x",), chunksizes=(3,))
        w[:] = np.arange(8)
        ds.title = "netcdf source"
    refs = kh.SingleHdf5ToZarr(str(nc), inline_threshold=0).translate()
    out = tmp_path / "nc.parq"
    refset.save(refs, out, record_size=2)
    # refset read back equals kerchunk's references
    assert _norm(refset.load(str(out)).to_dict()) == _v0(refs)
    opts = {"fo": str(out), "remote_protocol": "file"}
    got = xr.open_dataset("reference://", engine="zarr", consolidated=False,
                          backend_kwargs={"storage_options": opts}, zarr_format=2)
    want = xr.open_dataset(nc, engine="netcdf4")
    xr.testing.assert_identical(got.load(), want.load())
    assert np.isnan(got["v"].values[2:4]).all()  # unwritten chunks -> fill value -> NaN


# -- fsspec / kerchunk write, refset reads ----------------------------------------------------------
@pytest.mark.parametrize("record_size", [1, 4, 10_000])
def test_kerchunk_refs_to_dataframe_read_by_refset(zarr_source, tmp_path, record_size):
    kdf = pytest.importorskip("kerchunk.df")
    _d, refs = zarr_source
    # fsspec's layout has no room for root keys other than metadata: .zgroup/.zattrs are metadata
    out = tmp_path / "k.parq"
    kdf.refs_to_dataframe(dict(refs), str(out), record_size=record_size)
    rs = refset.load(str(out))
    assert _norm(rs.to_dict()) == _v0(refs)
    # bounds and ndim are checked (fsspec's mapper returns another chunk's reference for these)
    for bad in ["t/0.4", "t/0.1.0", "t/4.0", "t/0.1"]:
        with pytest.raises(KeyError):
            rs[bad]
    info = rs.format_info()
    assert info["record_size"] == record_size and info["rows_used"] == len(rs) - len(rs.key_table())


def test_lazy_reference_mapper_pyarrow_engine_written(tmp_path):
    refs = {".zgroup": json.dumps({"zarr_format": 2}), "a/.zarray": zarray([9, 9], [2, 2]),
            "a/0.0": ["s3://b/f1", 10, 20], "a/4.4": ["s3://b/f2"], "a/2.3": "inline text",
            "a/1.1": ["s3://b/f1", 30, 40]}
    lz = LazyReferenceMapper.create(str(tmp_path / "p.parq"), record_size=6, engine="pyarrow")
    for k in sorted(refs):
        lz[k] = refs[k]
    lz.flush()
    rs = refset.load(str(tmp_path / "p.parq"))
    assert _norm(rs.to_dict()) == _v0(refs)
    assert "a/0.1" not in rs


def _write_record(path, columns: dict, writer: str):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if writer == "fastparquet":
        fastparquet = pytest.importorskip("fastparquet")
        pd = pytest.importorskip("pandas")
        df = pd.DataFrame({k: pd.Series(v, dtype=object if k in ("path", "raw") else "int64")
                           for k, v in columns.items()})
        fastparquet.write(str(path), df, compression="ZSTD", object_encoding={"path": "utf8", "raw": "bytes"},
                          has_nulls=["path", "raw"], stats=False)
    else:
        typ = {"string": pa.string(), "large": pa.large_string(),
               "dict": pa.dictionary(pa.int32(), pa.string())}[writer]
        arrays = {"path": pa.array(columns["path"], pa.string()).cast(typ),
                  "offset": pa.array(columns["offset"], pa.int64()),
                  "size": pa.array(columns["size"], pa.int64())}
        if "raw" in columns:
            arrays["raw"] = pa.array(columns["raw"], pa.binary())
        pq.write_table(pa.table(arrays), str(path), compression="zstd")


@pytest.mark.parametrize("writer", ["fastparquet", "string", "large", "dict"])
@pytest.mark.parametrize("padded", [False, True])
def test_hand_written_records(tmp_path, writer, padded):
    """Records from other writers: fastparquet and pyarrow, string/large_string/dictionary paths,
    padded to record_size or not, with and without a raw column; spec's "size 0" = whole file."""
    root = tmp_path / "h.parq"
    meta = {"metadata": {".zgroup": {"zarr_format": 2}, "a/.zarray": json.loads(zarray([7], [1])),
                         "b/.zarray": json.loads(zarray([3], [1]))}, "record_size": 4}
    os.makedirs(root)
    (root / ".zmetadata").write_text(json.dumps(meta))
    n1 = 4 if padded else 3
    _write_record(root / "a" / "refs.0.parq", {
        "path": ["s3://x/1", None, "s3://x/2", "s3://x/1"],
        "offset": [5, 0, 0, 7], "size": [10, 0, 0, 0], "raw": [None, b"\xffraw", None, None]}, writer)
    _write_record(root / "a" / "refs.1.parq", {
        "path": ["s3://x/3", None, None, None][:n1],
        "offset": [1, 0, 0, 0][:n1], "size": [2, 0, 0, 0][:n1],
        "raw": [None, None, b"", None][:n1]}, writer)
    cols = {"path": ["s3://x/1", "s3://x/1", None], "offset": [0, 3, 0], "size": [1, 1, 0]}
    if writer == "fastparquet":
        cols["raw"] = [None, None, None]
    _write_record(root / "b" / "refs.0.parq", cols, writer)
    rs = refset.load(str(root))
    assert rs.to_dict() == {
        ".zgroup": '{"zarr_format":2}', "a/.zarray": json.dumps(meta["metadata"]["a/.zarray"],
                                                                 separators=(",", ":")),
        "b/.zarray": json.dumps(meta["metadata"]["b/.zarray"], separators=(",", ":")),
        "a/0": ["s3://x/1", 5, 10], "a/1": "base64:/3Jhdw==", "a/2": ["s3://x/2"],
        "a/3": ["s3://x/1"],  # path with size 0 (offset 7): whole file, as the spec words it
        "a/4": ["s3://x/3", 1, 2], "a/6": "",
        "b/0": ["s3://x/1", 0, 1], "b/1": ["s3://x/1", 3, 1],
    }
    assert "a/5" not in rs and "a/7" not in rs and "b/2" not in rs


def test_spec_example_layout(tmp_path):
    """The spec's example: LazyReferenceMapper.create + zarr writes name and deep/name."""
    lz = LazyReferenceMapper.create(str(tmp_path / "ref.parquet"), record_size=10)
    refs = {".zgroup": json.dumps({"zarr_format": 2}), "name/.zarray": zarray([1], [1]),
            "name/0": ["memory://x", 0, 4], "deep/.zgroup": json.dumps({"zarr_format": 2}),
            "deep/name/.zarray": zarray([1], [1]), "deep/name/0": "abcd"}
    for k, v in refs.items():
        lz[k] = v
    lz.flush()
    assert (tmp_path / "ref.parquet" / "deep" / "name" / "refs.0.parq").is_file()
    rs = refset.load(str(tmp_path / "ref.parquet"))
    assert _norm(rs.to_dict()) == _v0(refs)
    out = tmp_path / "again.parquet"
    refset.save(rs, out)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        ".zmetadata", "deep/name/refs.0.parq", "name/refs.0.parq"]
