"""The native HDF5 metadata reader (scan/hdf5/native.py) against the h5py path: for every corpus file
and files made here, the scan through the native reader equals the scan through h5py (every key,
every byte range, every inlined byte), and the files the native reader supports do not fall back.
Corrupted metadata never gives a different set: the native reader falls back (or both raise)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.abc.scanner import DropList
from refset.io.scanfile import Broken, ScanFile
from refset.io.store import LocalStore
from refset.model.setwriter import SetWriter
from refset.scan import Scan
from refset.scan.hdf5.scanner import HDF5Scanner

h5py = pytest.importorskip("h5py")

from tests.conftest import CORPUS, hdf5_corpus  # noqa: E402

# Corpus files the native reader must take (no fallback): netCDF-C/h5py files of the supported kinds.
NATIVE_CORPUS = {
    "nc_test4_ref_hdf5_compat2.nc", "nc_test4_ref_tst_dims.nc", "nc_test4_tdset.h5",
    "nc_test_f03tst_open_mem.nc", "ncdump_ref_no_ncproperty.nc", "ncdump_ref_provenance_v1.nc",
    "issue1152.nc", "chunked.hdf5", "compressed.hdf5", "compressed_v1.hdf5", "dataset_datatypes.hdf5",
    "dataset_multidim.hdf5", "dim_scales.hdf5", "earliest.hdf5", "fillvalue_earliest.hdf5",
    "fillvalue_latest.hdf5", "filter_pipeline_v2.hdf5", "fletcher32.hdf5", "groups.hdf5",
    "issue23_A.nc", "issue23_A_contiguous.nc", "latest.hdf5", "netcdf4_classic.nc", "resizable.hdf5",
    "test_ds_non_datetime_time.nc", "empty-test.h5", "hdf5_compression_zstd.h5",
    "hdf5_mini_zstd.h5", "hdf5_mini_shuffle_zstd.h5", "hdf5_compression_blosc_lz4_bitshuffle.h5",
    # dense links or attributes (fractal heap + v2 B-tree)
    "nc_test4_ref_tst_interops4.nc", "20171025_2056.Cloud_Top_Height.nc",
    "issue23_B.nc", "new_style_groups.hdf5", "test_ds_netcdf4_full_time.nc", "test_ds_netcdf4_group.nc",
    "test_ds_netcdf4_split_time1.nc", "test_ds_netcdf4_split_time2.nc", "basin_mask.nc",
}


def _scan(path: Path, native: bool, **kw) -> tuple[str, object, HDF5Scanner]:
    """("ok", set as a dict, the scanner) or ("error", message, the scanner), by a run of one file with
    the native reader on or off."""
    run = Scan(native=native, **kw)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out: tuple[str, object] = ("ok", run(str(path)).to_dict())
    except Exception as e:
        out = ("error", f"{type(e).__name__}: {e}")
    return (*out, run.scanner(HDF5Scanner))  # type: ignore[return-value]


LAST: list[str] = [""]  # why the last native pass of check_same declined, for the assertions after it


def check_same(path: Path, *, must_be_native: bool, **kw) -> None:
    kind, got, scanner = _scan(path, True, **kw)
    want_kind, want, _ = _scan(path, False, **kw)
    LAST[0] = scanner.last_fallback
    assert (kind, got) == (want_kind, want), f"{path.name}: native scan differs from h5py's"
    if must_be_native:
        assert scanner.fallbacks == 0, f"{path.name}: fell back to h5py ({scanner.last_fallback})"


@pytest.mark.parametrize("path", hdf5_corpus() or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"shared corpus not found at {CORPUS}"))], ids=lambda p: p.name if p else "no-corpus")
def test_corpus_native_equals_h5py(path: Path) -> None:
    check_same(path, must_be_native=path.name in NATIVE_CORPUS)


def test_bench_corpus_goes_native() -> None:
    files = sorted(Path("/work/bench-data/corpus30").glob("*.nc"))[:3]
    if not files:
        pytest.skip("bench corpus /work/bench-data/corpus30 not present")
    for p in files:
        check_same(p, must_be_native=True)


def _h5py_file(path: Path, libver: str, order: str, track: bool, n_attrs: int, n_links: int,
               compact: bool = False) -> None:
    with h5py.File(path, "w", libver=(libver, "latest"), track_order=track) as f:
        f.attrs["title"] = "made by h5py"
        f.attrs["count"] = np.int16(3)
        f.attrs["fixed"] = np.bytes_(b"abc")
        f.attrs["array"] = np.arange(4, dtype=f"{order}f8")
        for i in range(n_attrs):
            f.attrs[f"a{i:02d}"] = np.array([i], dtype=f"{order}i4")
        x = f.create_dataset("x", data=np.arange(10, dtype=f"{order}f4"))
        x.make_scale("x")
        t = f.create_dataset("t", shape=(0,), maxshape=(None,), chunks=(4,), dtype=f"{order}i8")
        t.make_scale("t")
        v = f.create_dataset("v", data=np.arange(60, dtype=f"{order}i4").reshape(6, 10), chunks=(4, 3),
                             compression="gzip", shuffle=True, fillvalue=-1)
        v.dims[1].attach_scale(x)
        v.attrs["units"] = "K"
        v.attrs["valid"] = np.array([0, 100], dtype=f"{order}u2")
        f.create_dataset("partial", shape=(20,), chunks=(5,), dtype=f"{order}f8", fillvalue=np.nan)[:5] = 1.0
        f.create_dataset("scalar", data=np.float32(2.5))
        f.create_dataset("f32", data=np.arange(6, dtype="f4"), fletcher32=True, chunks=(3,))
        f.create_dataset("empty", shape=(3, 4), dtype=f"{order}u1")
        if compact:
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_layout(h5py.h5d.COMPACT)
            f.create_dataset("compact", data=np.arange(4, dtype="i2"), dcpl=dcpl)
        f.create_dataset("text", data=np.array([b"ab", b"cde"], dtype="S3"))
        f.create_dataset("words", data=np.array(["a", "", "é"], dtype=h5py.string_dtype()))
        f.create_dataset("ascii", data=np.array([[b"x", b"yy"]] * 2, dtype=h5py.string_dtype("ascii")))
        f.create_dataset("tags", data=np.array([f"t{i}" for i in range(5)], dtype=h5py.string_dtype()),
                         chunks=(2,), compression="gzip", shuffle=True)  # shuffle: skipped (vlen)
        f.create_dataset("unwritten", shape=(2,), dtype=h5py.string_dtype())
        g = f.create_group("g")
        g.attrs["name"] = "group"
        g.create_dataset("w", data=np.ones((3, 10), f"{order}f4")).dims[1].attach_scale(x)
        for i in range(n_links):
            g.create_dataset(f"d{i:02d}", data=np.full(2, i % 256, "u1"))
        f["g/hard_again"] = f["v"]


@pytest.mark.parametrize("libver", ["earliest", "v108", "latest"])
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("track", [False, True])
@pytest.mark.parametrize("many", [2, 12, 300])
def test_h5py_files(tmp_path: Path, libver: str, order: str, track: bool, many: int) -> None:
    """2: compact links and attributes; 12: dense (from v1.8 on), one heap block, one B-tree leaf;
    300: a heap with an indirect root block and a name index of depth 1."""
    p = tmp_path / "f.h5"
    _h5py_file(p, libver, order, track, many, many)
    check_same(p, must_be_native=True)  # latest: layout v4 (fixed and extensible array chunk indexes)


@pytest.mark.parametrize("libver", ["earliest", "v108"])
@pytest.mark.parametrize("order", ["<", ">"])
def test_compact_data_is_read_from_its_header(tmp_path: Path, libver: str, order: str) -> None:
    """Compact data (stored in the dataset's header) is read natively, as h5py reads it."""
    p = tmp_path / "f.h5"
    _h5py_file(p, libver, order, False, 2, 2, compact=True)
    check_same(p, must_be_native=True)
    with h5py.File(p) as f:
        assert f["compact"].id.get_create_plist().get_layout() == h5py.h5d.COMPACT
    got = refset.open_dataset(Scan()(str(p)))["compact"].values
    np.testing.assert_array_equal(got, np.arange(4, dtype="i2"))


@pytest.mark.parametrize("libver", ["v110", "latest"])  # layout messages of version 4 and 5
def test_compact_data_in_a_version_4_layout(tmp_path: Path, libver: str) -> None:
    p = tmp_path / "f.h5"
    _h5py_file(p, libver, "<", False, 2, 2, compact=True)
    check_same(p, must_be_native=True)


@pytest.mark.parametrize("libver", ["v110", "latest"])
def test_version_4_chunk_indexes(tmp_path: Path, libver: str) -> None:
    """The chunk indexes of HDF5 1.10+ (libver v110/latest: layout messages of version 4 and 5) are
    read natively and equal h5py's: a single chunk (plain and filtered), an implicit index (early
    allocation), fixed arrays (filtered, plain, resizable to a fixed maximum, paged past 1024
    chunks with unwritten pages), extensible arrays (empty, in the index block, in super blocks,
    paged, two-dimensional, unlimited along a later dimension); a version 2 B-tree (two unlimited
    dimensions) is read through h5py, with the same set."""
    p = tmp_path / "f.h5"
    rng = np.random.default_rng(3)
    with h5py.File(p, "w", libver=libver) as f:
        f.create_dataset("single", data=np.arange(12.0).reshape(3, 4), chunks=(3, 4))
        f.create_dataset("single_z", data=np.arange(12.0).reshape(3, 4), chunks=(3, 4), compression="gzip")
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((2, 5))
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)  # every chunk allocated: an implicit index
        sid = h5py.h5s.create_simple((4, 10))
        h5py.h5d.create(f.id, b"implicit", h5py.h5t.NATIVE_INT32, sid, dcpl=dcpl)
        f["implicit"][...] = np.arange(40, dtype="i4").reshape(4, 10)
        f.create_dataset("fixed", data=np.arange(60, dtype="<i4").reshape(6, 10), chunks=(4, 3))
        f.create_dataset("fixed_z", data=rng.random((30, 40)), chunks=(7, 9), compression="gzip", shuffle=True)
        f.create_dataset("fixed_max", shape=(5, 5), maxshape=(9, 12), chunks=(2, 2), dtype="f4",
                         fillvalue=-1)[:3, :3] = 7
        paged = f.create_dataset("paged", shape=(3000,), chunks=(1,), dtype="u1", compression="gzip")
        paged[:1500] = 1  # page 0 written, page 1 partly, page 2 never (pages of 1024 chunks)
        f.create_dataset("ea_empty", shape=(0, 3), maxshape=(None, 3), chunks=(2, 3), dtype="f8")
        f.create_dataset("ea_small", data=np.arange(18.0).reshape(6, 3), maxshape=(None, 3), chunks=(2, 3))
        f.create_dataset("ea_z", data=np.arange(6.0), maxshape=(None,), chunks=(2,), compression="gzip")
        # 2,500 chunks: the index block's data blocks, then super blocks of data blocks
        f.create_dataset("ea_super", data=np.arange(5000.0), maxshape=(None,), chunks=(2,))
        f.create_dataset("ea_2d", data=np.arange(3000.0).reshape(1000, 3), maxshape=(None, 3), chunks=(3, 3),
                         compression="gzip")
    check_same(p, must_be_native=True)
    ds = refset.open_dataset(Scan()(str(p)))
    with h5py.File(p) as f:
        for name in ds.data_vars:
            np.testing.assert_array_equal(ds[name].values, f[name][()], err_msg=name)
    from tests.httpserver import RangeServer

    with RangeServer(tmp_path) as srv:  # read remotely: the indexes' blocks read ahead, the same set
        url = f"{srv.url}/f.h5"
        remote = Scan()(url)
        assert refset.rename_urls(remote, {url: str(p)}).to_dict() == Scan()(str(p)).to_dict()
    with h5py.File(tmp_path / "b2.h5", "w", libver=libver) as f:
        f.create_dataset("b2", data=np.arange(12.0).reshape(3, 4), maxshape=(None, None), chunks=(2, 2))
    check_same(tmp_path / "b2.h5", must_be_native=False)
    assert "version 2 B-tree chunk index" in LAST[0]
    with h5py.File(tmp_path / "ea1.h5", "w", libver=libver) as f:  # unlimited along a later dimension
        f.create_dataset("late", data=np.arange(60.0).reshape(3, 4, 5), maxshape=(3, None, 5), chunks=(2, 1, 2))
    check_same(tmp_path / "ea1.h5", must_be_native=True)
    got = refset.open_dataset(Scan()(str(tmp_path / "ea1.h5")))["late"].values
    np.testing.assert_array_equal(got, np.arange(60.0).reshape(3, 4, 5))


def test_string_variables_are_read_natively(tmp_path: Path) -> None:
    """A netCDF4 string variable (variable-length, as netCDF-C writes them: contiguous, chunked and
    compressed on an unlimited dimension, scalar) is read by the native reader: its heap ids from the
    file or its chunks, each string from its global heap collection, as h5py reads them."""
    netCDF4 = pytest.importorskip("netCDF4")
    p = tmp_path / "s.nc"
    with netCDF4.Dataset(p, "w") as ds:
        ds.createDimension("n", 5)
        ds.createDimension("t", None)
        ds.createVariable("names", str, ("n",))[:] = np.array(["a", "bcd", "", "ünï", "x" * 50], dtype=object)
        w = ds.createVariable("tags", str, ("t",), zlib=True)
        for i in range(7):
            w[i] = f"tag{i}"
        ds.createVariable("one", str, ())[...] = "scalar"
    check_same(p, must_be_native=True)
    got = refset.open_dataset(Scan()(str(p)))
    assert list(got.tags.values) == [f"tag{i}" for i in range(7)] and got.one.values[()] == "scalar"
    assert list(got.names.values) == ["a", "bcd", "", "ünï", "x" * 50]


def _netcdf4_file(path: Path, n_attrs: int, fmt: str = "NETCDF4") -> None:
    netCDF4 = pytest.importorskip("netCDF4")
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.title = "made by netCDF4"
        ds.createDimension("time", None)
        ds.createDimension("lat", 5)
        ds.createDimension("lon", 8)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(3)
        lat = ds.createVariable("lat", "f4", ("lat",))
        lat[:] = np.linspace(-10, 10, 5)
        v = ds.createVariable("v", "i2", ("time", "lat", "lon"), zlib=True, shuffle=True,
                              fill_value=np.int16(-999), chunksizes=(1, 5, 4))
        v.scale_factor = 0.5
        v.long_name = "a variable"
        for i in range(n_attrs):
            setattr(v, f"extra{i}", i)
        v[:2] = np.arange(80).reshape(2, 5, 8)
        ds.createVariable("nofill", "f4", ("lat", "lon"), fill_value=False)
        be = ds.createVariable("be", "f8", ("lon",), endian="big")
        be[:] = np.arange(8)
        s = ds.createVariable("s", "i4")
        s.comment = "scalar"
        s.assignValue(7)
        if fmt == "NETCDF4":
            g = ds.createGroup("sub")
            g.createDimension("n", 3)
            w = g.createVariable("w", "u1", ("n", "lat"))
            w[:] = 1
            w.flags = np.array([1, 2], "u1")


@pytest.mark.parametrize("fmt", ["NETCDF4", "NETCDF4_CLASSIC"])
def test_netcdf4_files_go_native(tmp_path: Path, fmt: str) -> None:
    p = tmp_path / "f.nc"
    _netcdf4_file(p, 0, fmt)
    check_same(p, must_be_native=True)
    if fmt == "NETCDF4":  # its dimension lat is outside the group: named through h5py (fallback)
        check_same(p, must_be_native=False, group="sub")
    check_same(p, must_be_native=True, inline_threshold=0, drop_variables=["lat"])


def test_netcdf4_dense_attributes_equal(tmp_path: Path) -> None:
    p = tmp_path / "f.nc"
    _netcdf4_file(p, 12)
    check_same(p, must_be_native=True)



def _daily_file(path: Path, day: int, n_attrs: int = 0) -> None:
    """One day of a product: the same variables and attributes every day, but its own data
    (compressed: chunks of other sizes at other addresses), dates and history strings."""
    netCDF4 = pytest.importorskip("netCDF4")
    rng = np.random.default_rng(day)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
        ds.date = f"2020-01-{day:02d}"  # fixed-length text of one length every day
        ds.setncattr_string("history", f"made on day {day:02d}")  # a variable-length string
        ds.createDimension("time", None)
        ds.createDimension("lat", 6)
        ds.createDimension("lon", 10)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = f"days since 2020-01-{day:02d}"
        t[:] = [0.0]
        for name in ("a", "b"):
            v = ds.createVariable(name, "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(1, 3, 5))
            if name == "a":  # its header: the same bytes every day (the string is in the global heap)
                v.setncattr_string("comment", f"a of day {day:02d}")
            else:
                v.actual_max = np.float32(day)  # per file, and no attribute decoding reads
            for i in range(n_attrs):
                v.setncattr(f"extra{i}", i * day)
            v[:] = rng.integers(0, 10 ** (day % 5 + 1), (1, 6, 10)).astype("f4")


@pytest.mark.parametrize("n_attrs", [0, 12])  # 12: dense attributes (a fractal heap)
def test_files_of_one_layout_reuse_parsed_headers_exactly(tmp_path: Path, n_attrs: int) -> None:
    """Headers parsed for one file serve the next file that repeats their bytes outside the data
    addresses; its own data addresses, attribute values and variable-length strings are read. The
    metadata texts made from them are kept per header and what else they were read from."""
    from refset.scan.hdf5 import meta as m
    from refset.scan.hdf5.native import open_native

    paths = []
    for day in (1, 2, 3):
        paths.append(tmp_path / f"day{day}.nc")
        _daily_file(paths[-1], day, n_attrs)
    for p in paths:  # a run of one file each: nothing to reuse, but the set is the h5py one
        check_same(p, must_be_native=True)
    run = Scan()  # a run of the three files: each after the one before has left its headers
    sets = [run(str(p)) for p in paths]
    scanner = run.scanner(HDF5Scanner)
    assert scanner.fallbacks == 0
    with ScanFile(LocalStore(str(paths[2]))) as f:
        root = open_native(f, 0, None, dict(scanner.templates))
        reused = {name for name, _kind, node, _t in root.links() if isinstance(node.hdr, m._Reused)}
    assert {"time", "a"} <= reused  # headers that differ only in data addresses
    assert [s.to_dict() for s in sets] == [refset.scan(str(p)).to_dict() for p in paths]  # as without a memo
    assert [s["a/0.0.0"] for s in sets] != [sets[0]["a/0.0.0"]] * 3  # each file's own chunks
    zattrs = [json.loads(s[".zattrs"]) for s in sets]
    assert [z["history"] for z in zattrs] == ["made on day 01", "made on day 02", "made on day 03"]
    assert [z["date"] for z in zattrs] == ["2020-01-01", "2020-01-02", "2020-01-03"]
    assert [json.loads(s["a/.zattrs"])["comment"] for s in sets] == ["a of day 01", "a of day 02", "a of day 03"]
    assert [json.loads(s["b/.zattrs"])["actual_max"] for s in sets] == [1.0, 2.0, 3.0]
    # the metadata texts are kept with the headers: one for "time" (the same in every file), one
    # per comment for "a" (read from the global heap), none where attributes are dense (outside
    # the header); day 1 again gets its own comment back
    stores = [t.memo["zarr"] for t in scanner.templates.values() if "zarr" in t.memo]
    kept = [k for st in stores for k in st]
    assert sum(k[0] == "time" for k in kept) == 1
    comments = sorted(dict(k[2])["comment"] for k in kept if k[0] == "a")  # (shape, values) of each
    assert comments == ([((1,), (f"a of day {d:02d}",)) for d in (1, 2, 3)] if not n_attrs else [])
    assert json.loads(run(str(paths[0]))["a/.zattrs"])["comment"] == "a of day 01"
    assert run(str(paths[0])).to_dict() == sets[0].to_dict()
    assert not Scan().scanner(HDF5Scanner).templates  # a new run starts afresh


def test_user_block(tmp_path: Path) -> None:
    p = tmp_path / "ub.h5"
    with h5py.File(p, "w", userblock_size=1024, libver="earliest") as f:
        f.create_dataset("v", data=np.arange(10), chunks=(4,))
        f.create_dataset("c", data=np.arange(10))
    check_same(p, must_be_native=True)


def _h5py_scan_in_child(path: Path) -> tuple[str, object] | None:
    """The h5py path's answer in a child process (libhdf5 can hang on corrupt files); None if it
    takes more than 30 s."""
    import json
    import subprocess
    import sys

    code = ("import json, sys, warnings; warnings.simplefilter('ignore'); import refset; "
            "\n"
            "try:\n    print(json.dumps(['ok', refset.scan(sys.argv[1], inline_threshold=0, native=False).to_dict()],"
            " default=repr))\n"
            "except Exception as e:\n    print(json.dumps(['error', f'{type(e).__name__}: {e}']))")
    try:
        r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return None
    kind, value = json.loads(r.stdout)
    return kind, value


def _native_only(path: Path) -> tuple[str, object] | None:
    """The native pass alone, in-process (never h5py: libhdf5 can hang on corrupt files): None
    when it declines (NotNative or any error, which makes ``scan`` fall back to h5py)."""
    try:
        with ScanFile(LocalStore(str(path))) as f, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = SetWriter(str(path), 0)
            HDF5Scanner(inline_threshold=0).walk_native(f, w, DropList(()))
            return "ok", w.build(lambda offsets, lengths: []).to_dict()
    except Exception:
        return None


@pytest.mark.parametrize("kind", ["netcdf4", "h5py-compact", "h5py-latest"])
def test_corrupt_metadata_never_gives_a_different_set(tmp_path: Path, kind: str) -> None:
    """Flip one byte at a time across the file's metadata (every 7th byte outside the data): the
    native pass declines (the scan then gives h5py's answer, by construction) or returns the
    uncorrupted file's set (the byte does not matter to the set); where it returns anything else,
    h5py (in a child process: libhdf5 can hang on such files) must return that same set. The h5py
    files hold compact data (values in a header) too; the latest one version 5 layouts (fixed and
    extensible array chunk indexes)."""
    import json

    q = tmp_path / "f.nc"
    if kind == "netcdf4":
        _netcdf4_file(q, 0)
    else:
        _h5py_file(q, "latest" if kind == "h5py-latest" else "earliest", "<", False, 2, 2, compact=True)
    good = q.read_bytes()
    want_clean = _native_only(q)
    assert want_clean is not None and want_clean[1] == _scan(q, False, inline_threshold=0)[1]
    data = set()
    for v in want_clean[1].values():
        if isinstance(v, list) and len(v) == 3:
            data.update(range(v[1], v[1] + v[2]))
    positions = [i for i in range(0, len(good), 7) if i not in data]
    assert len(positions) > 100
    differs, declined = [], 0
    for i in positions:
        bad = bytearray(good)
        bad[i] ^= 0x5A
        q.write_bytes(bytes(bad))
        got = _native_only(q)
        if got is None:
            declined += 1
            continue
        if got == want_clean:
            continue
        other = _h5py_scan_in_child(q)
        if other is None or other != (got[0], json.loads(json.dumps(got[1], default=repr))):
            differs.append(i)
    assert declined > 10, "the native reader never noticed a corrupt byte"
    assert not differs, f"native scan differs from h5py's after flipping bytes at {differs[:10]}"


def test_chunks_along_a_later_unlimited_dimension_are_placed_right(tmp_path: Path) -> None:
    """libhdf5 2.0 indexes the chunks of a dataset unlimited along a dimension other than the first
    with an extensible array in "swizzled" order, and its chunk iteration (h5py's chunk_iter and
    get_chunk_info, which kerchunk reads) reports their positions wrong: chunks land in the wrong
    places or past the grid (kerchunk's set reads wrong values). The native reader decodes the
    index; so does the h5py path for such a dataset when the file goes to h5py for another reason
    (an enum dataset here): both give h5py's values."""
    p = tmp_path / "late.h5"
    want = np.arange(60.0).reshape(3, 4, 5)
    with h5py.File(p, "w", libver="latest") as f:
        f.create_dataset("late", data=want, maxshape=(3, None, 5), chunks=(2, 1, 2))
    with h5py.File(p) as f:  # what libhdf5 reports: positions past the grid (4 along dimension 1)
        reported = [f["late"].id.get_chunk_info(i).chunk_offset for i in range(f["late"].id.get_num_chunks())]
    assert max(o[1] for o in reported) >= 4
    for native in (True, False):
        got = refset.open_dataset(Scan(native=native)(str(p)))["late"].values
        np.testing.assert_array_equal(got, want)
    with h5py.File(p, "a") as f:
        f.create_dataset("kind", data=np.array([0, 1], "i1"), dtype=h5py.enum_dtype({"a": 0, "b": 1}, basetype="i1"))
    run = Scan()
    got = refset.open_dataset(run(str(p)), drop_variables=["kind"])["late"].values
    assert run.scanner(HDF5Scanner).fallbacks == 1  # the enum: read through h5py
    np.testing.assert_array_equal(got, want)


def test_extensible_array_pages(tmp_path: Path) -> None:
    """140,000 chunks under an extensible array: from entry 131,060 on its data blocks (2,048
    entries) are paged (1,024 a page), some pages never written, the written ones marked by one bit
    string in their super block (bit block x pages + page: reading it as a bitmap per block lost
    chunks 139,000 on). The native set equals h5py's and reads h5py's values."""
    p = tmp_path / "paged.h5"
    with h5py.File(p, "w", libver="latest") as f:
        d = f.create_dataset("ea_paged", shape=(140_000,), maxshape=(None,), chunks=(1,), dtype="u1",
                             compression="gzip")
        d[:133_000] = 1
        d[139_000:] = 2
    check_same(p, must_be_native=True, inline_threshold=0)
    part = slice(130_000, 140_000)  # the paged blocks (decoding every chunk would take ~15 s)
    got = refset.open_dataset(Scan(inline_threshold=0)(str(p)))["ea_paged"][part].values
    with h5py.File(p) as f:
        np.testing.assert_array_equal(got, f["ea_paged"][part])


def test_corrupt_chunk_indexes_with_valid_checksums(tmp_path: Path) -> None:
    """The version 4 chunk indexes' blocks (fixed array header, data block and pages, extensible
    array header, index block, super blocks and data blocks) with a byte changed and their checksum made right again, so that
    the change reaches the parser instead of the checksum (seeded): the native pass declines, or
    gives the clean set, or gives what h5py (in a child) gives for the same bytes."""
    import json
    import random

    from refset.scan.hdf5.checksum import checksum

    q = tmp_path / "f.h5"
    with h5py.File(q, "w", libver="latest") as f:
        f.create_dataset("fixed", data=np.arange(60, dtype="<i4").reshape(6, 10), chunks=(4, 3))
        f.create_dataset("fixed_z", data=np.arange(200.0), chunks=(7,), compression="gzip")
        f.create_dataset("paged", shape=(2100,), chunks=(1,), dtype="u1", compression="gzip")[:1500] = 1
        f.create_dataset("ea", data=np.arange(600.0), maxshape=(None,), chunks=(2,), compression="gzip")
    good = q.read_bytes()
    clean = _native_only(q)
    assert clean is not None
    blocks = []  # (start, length) of each checksummed block of a chunk index
    for sig in (b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EASB", b"EADB"):
        pos = good.find(sig)
        while pos >= 0:
            for n in range(16, 1 << 15):  # its extent: where its checksum matches
                if pos + n <= len(good) and checksum(good[pos:pos + n - 4]) == int.from_bytes(
                        good[pos + n - 4:pos + n], "little"):
                    blocks.append((pos, n))
                    break
            pos = good.find(sig, pos + 1)
    assert {good[b:b + 4] for b, _ in blocks} == {b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EASB", b"EADB"}
    rnd = random.Random(11)
    differs = []
    for _ in range(80):
        b, n = rnd.choice(blocks)
        i = rnd.randrange(b + 4, b + n - 4)  # the signature stays: a block is still found
        bad = bytearray(good)
        bad[i] ^= 1 << rnd.randrange(8)
        bad[b + n - 4:b + n] = checksum(bytes(bad[b:b + n - 4])).to_bytes(4, "little")
        q.write_bytes(bytes(bad))
        got = _native_only(q)
        if got is None or got == clean:
            continue
        other = _h5py_scan_in_child(q)
        if other is None or other != (got[0], json.loads(json.dumps(got[1], default=repr))):
            differs.append(i)
    assert not differs, f"native scan differs from h5py's after changing bytes at {differs[:10]}"


def test_metadata_checksum_matches_libhdf5s_on_every_tail_length() -> None:
    """The pure-Python lookup3 (used where libhdf5's cannot be found) equals libhdf5's own on
    every length modulo 12, and on the known value of the empty input."""
    import os

    from refset.scan.hdf5 import checksum as m

    c = m._libhdf5_lookup3()
    assert c is not None, "H5_checksum_lookup3 not found through h5py"
    assert m.lookup3(b"") == c(b"") == 0xDEADBEEF
    for n in [*range(1, 40), 4096, 4097]:
        data = os.urandom(n)
        assert m.lookup3(data) == c(data) == m.checksum(data), n


def test_local_scan_imports_neither_fsspec_nor_h5py(tmp_path: Path) -> None:
    """A local NetCDF4 file read natively needs neither fsspec nor h5py: a fresh process (a Dask
    worker's first task) does not pay their imports (~0.1 s and ~20 ms); the checksum comes from
    libhdf5 all the same. A path with ``~`` names the file by its absolute path."""
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    _daily_file(home / "day.nc", 1)
    code = (
        "import json, sys, refset\n"
        "from refset.scan import Scan\n"
        "from refset.scan.hdf5 import checksum as _h5checksum\n"
        "from refset.scan.hdf5.scanner import HDF5Scanner\n"
        "run = Scan()\n"
        "rs = run('~/day.nc')\n"
        "print(json.dumps([run.scanner(HDF5Scanner).fallbacks, _h5checksum._checksum in (None, _h5checksum.lookup3),\n"
        "                  sorted(m for m in ('fsspec', 'h5py') if m in sys.modules),\n"
        "                  sorted({rs.urls[0]})]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "HOME": str(home)}, cwd=tmp_path)
    fallbacks, pure_checksum, imported, urls = json.loads(out.stdout)
    assert fallbacks == 0 and not pure_checksum
    assert imported == []
    assert urls == [str(home / "day.nc")]
    rs = refset.scan(home / "day.nc")
    assert refset.open_dataset(rs)["a"].values.tolist() == refset.open_dataset(
        refset.scan(os.path.relpath(home / "day.nc")))["a"].values.tolist()


def test_local_paths_chained_urls_and_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths as fsspec takes them: ``~`` expanded by scan, combine and load alike; a chained URL
    (``simplecache::/...``) scanned through fsspec and named as given; a directory refused by name,
    with storage options too."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for day in (1, 2):
        _daily_file(tmp_path / f"day{day}.nc", day)
    rs = refset.combine(["~/day1.nc", "~/day2.nc"], concat_dims="time")
    assert set(rs.urls) == {str(tmp_path / "day1.nc"), str(tmp_path / "day2.nc")}
    refset.save(rs, tmp_path / "both.json")
    again = refset.load("~/both.json")
    assert again.to_dict() == rs.to_dict()
    assert refset.open_dataset(again)["a"].shape == (2, 6, 10)
    chained = f"simplecache::{tmp_path / 'day1.nc'}"  # read through fsspec, named as given (as
    got = refset.scan(chained).to_dict()  # kerchunk does), the same references as the plain path's
    plain = refset.scan(tmp_path / "day1.nc").to_dict()
    assert got.keys() == plain.keys()
    assert all(got[k] == (v if not isinstance(v, list) else [chained, *v[1:]]) for k, v in plain.items())
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / ".zgroup").write_text('{"zarr_format": 2}')
    for so in (None, {"auto_mkdir": False}):  # a zarr store is scanned as one (tests/scan/test_zarrstore.py)
        assert refset.scan(tmp_path / "store", storage_options=so).to_dict() == {".zgroup": '{"zarr_format": 2}'}


def test_reference_attributes_other_than_dimension_list_fall_back(tmp_path: Path) -> None:
    """h5py gives reference objects for them, not the addresses the file holds."""
    p = tmp_path / "refs.h5"
    with h5py.File(p, "w", libver="earliest") as f:
        x = f.create_dataset("x", data=np.arange(3.0))
        y = f.create_dataset("y", data=np.arange(3.0))
        refs = np.empty(2, object)
        refs[0] = np.array([x.ref], dtype=h5py.ref_dtype)
        refs[1] = np.array([x.ref, y.ref], dtype=h5py.ref_dtype)
        y.attrs.create("myrefs", refs, dtype=h5py.vlen_dtype(h5py.ref_dtype))
        y.attrs["one_ref"] = x.ref
    check_same(p, must_be_native=False)
    assert "attribute type" in LAST[0]


def _amplified(tmp_path: Path, kind: str) -> Path:
    """A small file whose group B-tree (``kind`` "group") or chunk B-tree ("chunks") lists the
    same or overlapping nodes over and over: 1000 x 1000 group entries from 58 KB, 200 leaves of
    20,000 claimed chunks from 0.66 MB."""
    import struct

    from refset.scan.hdf5 import meta as m
    from refset.scan.hdf5.base import UNDEF

    src = tmp_path / "src.h5"
    with h5py.File(src, "w", libver="earliest") as f:
        f.create_dataset("v", data=np.arange(8.0), chunks=(4,))
    buf = bytearray(src.read_bytes())
    with ScanFile(LocalStore(str(src))) as fh:
        h5 = m.H5File(fh, 0)
        root = m.read_header(h5, h5.root)
        st = root.find(0x11)
        btree = struct.unpack("<QQ", st)[0]
        layout = m.read_header(h5, h5.symbol_table_links(*struct.unpack("<QQ", st))[0][1]).find(0x08)
    if kind == "group":
        snod = struct.unpack_from("<Q", buf, btree + 24 + 8)[0]
        entry = bytes(buf[snod + 8:snod + 48])
        new_snod = len(buf)
        buf += b"SNOD\x01\x00" + struct.pack("<H", 1000) + entry * 1000
        new_tree = len(buf)
        buf += b"TREE\x00\x00" + struct.pack("<H", 1000) + struct.pack("<QQ", UNDEF, UNDEF)
        buf += struct.pack("<Q", 0) + b"".join(struct.pack("<QQ", new_snod, 0) for _ in range(1000))
        i = 0
        while (i := buf.find(st, i)) >= 0:  # the root's header and the superblock's cached copy
            struct.pack_into("<Q", buf, i, new_tree)
            i += 1
    else:
        n_inner, n_leaf = 200, 20_000
        inner = len(buf)
        leaves = inner + 24 + 32 * n_inner + 40
        buf += b"TREE\x01\x01" + struct.pack("<H", n_inner) + struct.pack("<QQ", UNDEF, UNDEF)
        buf += b"".join(struct.pack("<IIQQQ", 0, 0, 0, 0, leaves + 32 * k) for k in range(n_inner)) + b"\0" * 40
        region = bytearray(32 * (n_inner + n_leaf) + 64)
        for k in range(n_inner):
            region[32 * k:32 * k + 8] = b"TREE\x01\x00" + struct.pack("<H", n_leaf)
        buf += region
        struct.pack_into("<Q", buf, buf.find(layout) + 3, inner)
    out = tmp_path / f"{kind}.h5"
    out.write_bytes(bytes(buf))
    return out


@pytest.mark.parametrize("kind", ["group", "chunks"])
def test_amplifying_b_trees_are_declined_without_reading_them_out(tmp_path: Path, kind: str) -> None:
    """Reading more metadata than twice the file's size ends the native pass (before, these took
    215 MB and 455 MB, and ~100 GB at the format's maxima from a 4 MB file)."""
    p = _amplified(tmp_path, kind)
    with ScanFile(LocalStore(str(p))) as f, pytest.raises(Broken, match="read more than twice over"):
        HDF5Scanner(inline_threshold=0).walk_native(f, SetWriter(str(p), 0), DropList(()))


def _btree_nodes(data: bytes, node_type: int) -> list[tuple[int, int]]:
    """(address, level) of every version 1 B-tree node of ``node_type`` in a file (no user block)."""
    out, at = [], data.find(b"TREE")
    while at >= 0:
        if data[at + 4] == node_type:
            out.append((at, data[at + 5]))
        at = data.find(b"TREE", at + 1)
    return out


@pytest.mark.parametrize("how", ["cycle", "past the end", "bad signature"])
def test_broken_structures_are_refused_not_handed_to_libhdf5(tmp_path: Path, how: str) -> None:
    """A chunk B-tree whose child points back at its root (libhdf5 crashed on such a file when the
    scan handed it over), at an address past the end of the file, or at bytes that are no node:
    ``InvalidFile`` naming the file and what is broken, and h5py is never imported (in a fresh
    process)."""
    import subprocess
    import sys

    h5py = pytest.importorskip("h5py")
    q = tmp_path / "broken.h5"
    with h5py.File(q, "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(20_000, dtype="i4"), chunks=(10,))  # 2000 chunks: 2 levels
    data = bytearray(q.read_bytes())
    root = next(a for a, level in _btree_nodes(bytes(data), 1) if level == 1)
    child0 = root + 24 + 24  # node header, then the first key (chunk size, filter mask, 2 offsets)
    target = {"cycle": root, "past the end": len(data) + 4096, "bad signature": 0}[how]
    data[child0:child0 + 8] = target.to_bytes(8, "little")
    q.write_bytes(bytes(data))
    code = (
        "import sys, refset\n"
        "from refset.errors import InvalidFile\n"
        f"try:\n    refset.scan({str(q)!r})\n"
        "except InvalidFile as e:\n    print(str(e)); print('h5py' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    message, imported = out.stdout.strip().splitlines()
    assert message.startswith(f"{q}: not a valid HDF5 file: "), message
    assert {"cycle": "B-tree cycle", "past the end": "past the end", "bad signature": "chunk B-tree node"}[how] \
        in message
    assert imported == "False"


def test_library_errors_of_the_h5py_path_are_invalid_file_naming_it(tmp_path: Path) -> None:
    """What the native reader declines goes to h5py; what libhdf5 then raises (here: its own error
    on a superblock version it does not know either) is ``InvalidFile`` naming the file and the
    library's error, from the child process and in this one (where it is kept as the cause)."""
    from refset.errors import InvalidFile

    h5py = pytest.importorskip("h5py")
    q = tmp_path / "odd.h5"
    with h5py.File(q, "w", libver="earliest") as f:
        f["x"] = np.arange(4)
    data = bytearray(q.read_bytes())
    data[8] = 9  # superblock version 9: neither reader knows it
    q.write_bytes(bytes(data))
    with pytest.raises(InvalidFile) as e:
        refset.scan(q)
    assert str(e.value).startswith(f"{q}: cannot be scanned: OSError: ") and "superblock" in str(e.value)
    with pytest.raises(InvalidFile) as e:
        refset.scan(q, h5py_timeout=None)
    assert str(e.value).startswith(f"{q}: cannot be scanned: OSError: ")
    assert isinstance(e.value.__cause__, OSError)


def test_the_h5py_walk_runs_in_a_child_under_a_deadline(tmp_path: Path) -> None:
    """Files the native reader declines are walked by h5py in a child process: a file on which
    libhdf5 crashes (a chunk B-tree whose child is its root, read with ``native=False``: SIGSEGV in
    libhdf5) and a walk over its deadline (``h5py_timeout``) end in ``InvalidFile`` naming the file,
    and this process goes on scanning (a new child) with the same answers as h5py in process."""
    from refset.errors import InvalidFile

    h5py = pytest.importorskip("h5py")
    q = tmp_path / "cycle.h5"
    with h5py.File(q, "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(20_000, dtype="i4"), chunks=(10,))
    good = tmp_path / "good.h5"
    good.write_bytes(q.read_bytes())
    data = bytearray(q.read_bytes())
    root = next(a for a, level in _btree_nodes(bytes(data), 1) if level == 1)
    data[root + 48:root + 56] = root.to_bytes(8, "little")
    q.write_bytes(bytes(data))
    with pytest.raises(InvalidFile, match=r"libhdf5 crashed reading it \(signal SIGSEGV\)") as e:
        refset.scan(q, native=False)
    assert str(e.value).startswith(f"{q}: ")
    want = refset.scan(good, native=False, h5py_timeout=None).to_dict()  # h5py in this process
    assert refset.scan(good, native=False).to_dict() == want
    many = tmp_path / "many.h5"
    with h5py.File(many, "w", libver="earliest") as f:  # ~1 s of h5py: 20 times the deadline
        for i in range(3000):
            f.create_dataset(f"v{i}", data=np.arange(3), chunks=(3,))
    with pytest.raises(InvalidFile, match=r"did not finish reading it within 0.05 s \(h5py_timeout\)"):
        refset.scan(many, native=False, h5py_timeout=0.05)
    assert refset.scan(good, native=False).to_dict() == want
    with pytest.raises(ValueError, match="h5py_timeout"):
        refset.scan(good, h5py_timeout=0)


@pytest.mark.parametrize("native", [True, False])
def test_a_huge_never_written_dataset_is_counted_not_allocated(tmp_path: Path, native: bool) -> None:
    """A contiguous dataset claiming 2**62 one-byte elements that was never written (as h5py
    leaves it): the scan ends at once under a 2 GiB memory cap (it looped for 2**31 divisors and
    allocated its chunk grid), the array has its shape and no references, and reads as its fill."""
    import subprocess
    import sys

    h5py = pytest.importorskip("h5py")
    q = tmp_path / "huge.h5"
    with h5py.File(q, "w") as f:
        f.create_dataset("x", shape=(2**62,), dtype="i1", fillvalue=7)
    code = (
        "import resource, json, sys, warnings, refset\n"
        "resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))\n"
        "warnings.simplefilter('ignore')\n"
        f"rs = refset.scan({str(q)!r}, native={native}, subchunk=2**20)\n"
        "z = json.loads(rs['x/.zarray'])\n"
        "print(json.dumps([z['shape'], rs.table('x').count(), int(refset.open_dataset(rs, decode_cf=False).x[-3:].values.sum())]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    shape, count, tail = json.loads(out.stdout)
    assert shape == [2**62] and count == 0 and tail == 21


def _eight_chunks(q: Path) -> tuple[Path, bytearray, int]:
    """A dataset ``x`` of 80 int32 in 8 unfiltered chunks (a v1 B-tree of one leaf) written to ``q``:
    (q, its bytes, the position of the second chunk's key: size, filter mask, offsets)."""
    h5py = pytest.importorskip("h5py")
    with h5py.File(q, "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(80, dtype="i4"), chunks=(10,))
    data = bytearray(q.read_bytes())
    leaf = next(a for a, level in _btree_nodes(bytes(data), 1) if level == 0)
    return q, data, leaf + 24 + (24 + 8)  # after the node's header, the first key and its child address


@pytest.mark.parametrize("how", ["twice", "off the grid"])
def test_chunk_keys_libhdf5_would_not_find_are_refused(tmp_path: Path, how: str) -> None:
    """A chunk key repeated in the B-tree, or not on the chunk grid: libhdf5 lists the chunk but its
    reads, which look keys up, do not place it there (h5py's values differ from the listing), so
    the file is refused, not scanned by the listing (found by the scan fuzz probe, seeds 482/594)."""
    from refset.errors import InvalidFile

    h5py = pytest.importorskip("h5py")
    q, data, key1 = _eight_chunks(tmp_path / "keys.h5")
    data[key1 + 8:key1 + 16] = (0 if how == "twice" else 13).to_bytes(8, "little")
    q.write_bytes(bytes(data))
    if how == "twice":
        with h5py.File(q, "r") as f:  # libhdf5 lists chunk 0 twice; its read finds only one of them
            listed = [f["x"].id.get_chunk_info(i).chunk_offset for i in range(f["x"].id.get_num_chunks())]
            assert listed[:2] == [(0,), (0,)] and (f["x"][10:20] != np.arange(10, 20)).any()
    with pytest.raises(InvalidFile, match={"twice": "chunk listed twice", "off the grid": "chunk position"}[how]):
        refset.scan(q)
    with pytest.raises(InvalidFile, match={"twice": "listed twice", "off the grid": "bad coordinate offset"}[how]):
        refset.scan(q, native=False)  # h5py's listing: the same


def test_the_h5py_child_dies_with_its_process(tmp_path: Path) -> None:
    """The h5py child lives as long as its process, also when the first scan ran on a pool thread
    that has ended since (Linux kills a child whose parent-death signal is set when the thread that
    started it ends), and a process killed outright (a test's timeout, the OOM killer) takes the
    child with it."""
    import signal
    import subprocess
    import sys
    import time

    h5py = pytest.importorskip("h5py")
    q = tmp_path / "f.h5"
    with h5py.File(q, "w") as f:
        f["x"] = np.arange(3)
    code = (
        "import time, refset\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from refset.scan.hdf5 import isolated\n"
        "with ThreadPoolExecutor(1) as ex:\n"
        f"    ex.submit(refset.scan, {str(q)!r}, native=False).result()\n"
        "first = isolated._child.pid\n"
        "time.sleep(0.3)\n"
        f"refset.scan({str(q)!r}, native=False)\n"
        "assert isolated._child.pid == first  # the child outlived the pool's thread\n"
        "print(first, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    os.kill(child, 0)  # alive
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        try:  # reaped by init once it exits; a zombie counts as gone
            with open(f"/proc/{child}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        pytest.fail("the h5py child outlived its process")


@pytest.mark.parametrize("h5py_timeout", [60, None])
def test_an_optional_filter_skipped_in_every_chunk_is_dropped_not_copied(tmp_path: Path, h5py_timeout) -> None:
    """Blosc on incompressible data: libhdf5 stores every chunk raw and marks the (optional) filter
    skipped. The chunks are referenced with the filter left out of the codecs, as kerchunk does
    (refset copied them into the set, re-encoded: an 8 MB file gave an 11 MB JSON); where only some
    chunks skipped it, those are re-encoded. Values as h5py reads them, natively and through h5py."""
    h5py = pytest.importorskip("h5py")
    hdf5plugin = pytest.importorskip("hdf5plugin")
    noise = np.random.default_rng(0).integers(0, 256, 40_000, dtype=np.uint8)
    mixed = noise.copy()
    mixed[:20_000] = 0  # these chunks compress: stored filtered
    p = tmp_path / "blosc.h5"
    with h5py.File(p, "w") as f:
        for name, data in (("noise", noise), ("mixed", mixed)):
            f.create_dataset(name, data=data, chunks=(4000,), **hdf5plugin.Blosc(cname="lz4", clevel=9, shuffle=0))
    with h5py.File(p) as f:
        masks = {n: [f[n].id.get_chunk_info(i).filter_mask for i in range(10)] for n in ("noise", "mixed")}
    assert masks["noise"] == [1] * 10 and masks["mixed"] == [0] * 5 + [1] * 5
    for native in (True, False):
        rs = refset.scan(p, native=native, h5py_timeout=h5py_timeout)
        assert json.loads(rs["noise/.zarray"])["filters"] is None
        assert all(isinstance(rs[f"noise/{i}"], tuple) for i in range(10))  # referenced, 4000 bytes each
        assert [rs[f"noise/{i}"][2] for i in range(10)] == [4000] * 10
        assert json.loads(rs["mixed/.zarray"])["filters"][0]["id"] == "blosc"
        got = refset.open_dataset(rs)
        np.testing.assert_array_equal(got.noise.values, noise)
        np.testing.assert_array_equal(got.mixed.values, mixed)


@pytest.mark.parametrize("native", [True, False])
def test_groups_nested_too_deep_are_refused_by_name(tmp_path: Path, native: bool) -> None:
    """3000 nested groups (h5py writes them in 0.1 s): Unsupported naming the file and the limit, on
    both readers (was a RecursionError)."""
    from refset.errors import Unsupported
    from refset.scan.hdf5.walk import MAX_DEPTH

    h5py = pytest.importorskip("h5py")
    q = tmp_path / "deep.h5"
    with h5py.File(q, "w") as f:
        g = f
        for _ in range(3000):
            g = g.create_group("g")
        g["x"] = [1, 2, 3]
    with pytest.raises(Unsupported, match=rf"^{q}: groups nested more than {MAX_DEPTH} deep \(g/g/g"):
        refset.scan(q, native=native)


@pytest.mark.parametrize("size", [20, 80])
def test_an_unfiltered_chunk_of_the_wrong_size_is_refused(tmp_path: Path, size: int) -> None:
    """An unfiltered chunk whose index entry gives 20 (or 80) bytes where its shape holds 40: libhdf5
    reads that many bytes into the chunk (with 20, the rest of h5py's values are whatever memory
    held); refset referenced the wrong length as given. Now InvalidFile naming the file, the
    variable and the chunk, on both readers."""
    from refset.errors import InvalidFile

    q, data, key1 = _eight_chunks(tmp_path / "size.h5")  # the second chunk's key starts with its size
    assert int.from_bytes(data[key1:key1 + 4], "little") == 40
    data[key1:key1 + 4] = size.to_bytes(4, "little")
    q.write_bytes(bytes(data))
    for native in (True, False):
        with pytest.raises(InvalidFile, match=rf"^{q}: variable 'x': chunk 1 \(of 1 such\) is listed with {size} "
                                              r"bytes, not the 40 of its shape and type"):
            refset.scan(q, native=native)


def test_chunk_data_pointing_into_metadata_is_refused(tmp_path: Path) -> None:
    """A chunk address corrupted to point into the file's own metadata (its B-tree node; the scan
    fuzz probe's seed 5886, where libhdf5 reads zeros there and refset read the node's bytes as
    values): InvalidFile, since no valid file's data overlaps its metadata."""
    from refset.errors import InvalidFile

    h5py = pytest.importorskip("h5py")
    q = tmp_path / "into.h5"
    with h5py.File(q, "w", libver="earliest") as f:
        f.create_dataset("x", data=np.arange(16, dtype=">f8").reshape(4, 4), chunks=(2, 2))
    data = bytearray(q.read_bytes())
    leaf = next(a for a, level in _btree_nodes(bytes(data), 1) if level == 0)
    key = 8 + 8 * 3  # size, mask, then 3 offsets (2 dims and the element's)
    child3 = leaf + 24 + 3 * (key + 8) + key  # the fourth chunk's address
    data[child3:child3 + 8] = leaf.to_bytes(8, "little")
    q.write_bytes(bytes(data))
    assert refset.scan(q, native=False)["x/1.1"][:4] == b"TREE"  # h5py's listing takes the node as data
    with pytest.raises(InvalidFile, match=rf"^{q}: not a valid HDF5 file: data overlaps the file's metadata"):
        refset.scan(q)


def test_an_interrupted_h5py_walk_does_not_answer_the_next_file(tmp_path: Path) -> None:
    """A walk interrupted in this process (Ctrl-C) while the child works: the child is stopped, so
    its late answer cannot be taken for the next file's (the next scan got the first file's set
    under its own name). And a forked process scans through a child of its own."""
    import multiprocessing
    import signal

    h5py = pytest.importorskip("h5py")
    many, one = tmp_path / "many.h5", tmp_path / "one.h5"
    with h5py.File(many, "w", libver="earliest") as f:
        for i in range(3000):
            f.create_dataset(f"v{i}", data=np.arange(3), chunks=(3,))
    with h5py.File(one, "w") as f:
        f["temperature"] = np.arange(4.0)
    refset.scan(one, native=False)  # the child started

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.05)
    try:
        with pytest.raises(KeyboardInterrupt):
            refset.scan(many, native=False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert sorted(refset.scan(one, native=False)) == [".zgroup", "temperature/.zarray", "temperature/.zattrs",
                                                       "temperature/0"]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:  # the parent's child and its spawner thread are not the fork's
        assert pool.apply_async(_scan_keys, (str(one),)).get(timeout=60) == sorted(refset.scan(one, native=False))


def _scan_keys(path: str) -> list[str]:
    return sorted(refset.scan(path, native=False))


def test_a_fallback_does_not_repeat_the_native_walks_warnings(tmp_path: Path) -> None:
    """The native walk's warnings, numpy's floating-point ones included (a float64 _FillValue that a
    float32 cannot hold), are held until it succeeds: when it hands the file to h5py (an lzf dataset),
    each is warned once, by h5py's walk, in this process or in the child that runs it."""
    import warnings

    from refset.scan.hdf5.scanner import HDF5Scanner

    path = tmp_path / "dup.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("a", data=np.arange(10, dtype="f4")).attrs["_FillValue"] = np.float64(1e40)
        f.create_dataset("b", data=np.arange(100, dtype="f4"), chunks=(10,), compression="lzf")
    for timeout in (None, 60.0):
        scanner = HDF5Scanner(h5py_timeout=timeout)
        with warnings.catch_warnings(record=True) as log, ScanFile(LocalStore(str(path))) as f:
            warnings.simplefilter("always")
            scanner.walk(f, SetWriter(str(path), 0), DropList(()))
        assert scanner.fallbacks == 1, scanner.last_fallback
        said = [str(w.message) for w in log if issubclass(w.category, RuntimeWarning)]
        assert len(said) == 1 and "overflow" in said[0], (timeout, said)
