"""refset.scan of HDF5 / NetCDF4 files: every variable reads back equal to what h5py reads, and
``refset.open_dataset(scan(f))`` equals ``xr.open_dataset(f)``; or the scan refuses the variable with
a documented error. Real files: the shared corpus and files made here for each layout, filter and dtype.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import Unsupported
from refset.scan import scan

h5py = pytest.importorskip("h5py")
zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")

from tests.conftest import CORPUS, hdf5_corpus  # noqa: E402
from tests.scan_oracle import check_against_xarray, texts  # noqa: E402

# Corpus variables the scan refuses, and the words of the reason (docs/scan.md lists them).
REFUSED = {
    "vlen2.h5": ({"vlen_str"}, "variable-length"),
    "ncdump_ref_tst_compounds2.nc": ({"phony_compound_var"}, "itself a compound"),
    "references.hdf5": ({"chunked_ref_dataset", "chunked_regionref_dataset", "ref_dataset",
                         "regionref_dataset"}, "references"),
}


def _is_variable(ds) -> bool:
    name = ds.attrs.get("NAME") if "NAME" in ds.attrs else None
    return not (isinstance(name, bytes | np.bytes_) and bytes(name).startswith(b"This is a netCDF dimension"))


def _undefined(ds) -> bool:
    """A dataset never written in a file created without fill values: its values are undefined."""
    plist = ds.id.get_create_plist()
    return plist.get_fill_time() == h5py.h5d.FILL_TIME_NEVER and not ds.id.get_storage_size()


def check_against_h5py(path: Path, rs: refset.ReferenceSet, skip: set[str] = frozenset()) -> int:
    """Every dataset (netCDF-4 dimension-only datasets aside) read through zarr equals h5py's read."""
    g = zarr.open_group(refset.ZarrStore(rs), mode="r")
    n = 0
    with h5py.File(path, "r") as f:
        names: list[str] = []
        f.visititems(lambda k, o: names.append(k) if isinstance(o, h5py.Dataset) and _is_variable(o) else None)
        for k in names:
            if k in skip or k.split("/")[-1] in skip:
                continue
            out = k.replace("_nc4_non_coord_", "")
            got, want = g[out][...], f[k][()]
            if _undefined(f[k]):
                continue
            if want.dtype.kind == "O":
                got, want = texts(got), texts(want)
            else:
                assert got.dtype == want.dtype.newbyteorder("=") or got.dtype == want.dtype or (
                    want.dtype.names and got.dtype.names == want.dtype.names), (k, got.dtype, want.dtype)
            eq = np.array_equal(got, want, equal_nan=want.dtype.kind in "fc")
            assert eq, f"{path.name}: {k} differs"
            n += 1
    return n


# The values of this variable are undefined: written without fill, never written (netCDF's nofill).
UNDEFINED = {"nc_test_f03tst_open_mem.nc": {"var2"}}


def oracle(path: Path) -> tuple[int, int, list[str]]:
    """Scan ``path`` and check it: (variables equal to h5py, of them also checked against
    xarray + netCDF4, refused variables). Refused variables must be named one after the other."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refused, words = REFUSED.get(path.name, (set(), ""))
        dropped: set[str] = set()
        while True:
            try:
                rs = scan(path, drop_variables=dropped)
                break
            except Unsupported as e:
                assert words and words in str(e), str(e)
                dropped |= {v for v in refused if repr(v) in str(e)}
                assert len(dropped) <= len(refused), str(e)
        assert dropped == refused
        n = check_against_h5py(path, rs, skip=refused)
        with_xr = path.name not in UNDEFINED and not refused and check_against_xarray(path, rs)
    return n, n if with_xr else 0, sorted(refused)


@pytest.mark.parametrize("path", hdf5_corpus() or [pytest.param(None, marks=pytest.mark.skip(
    reason=f"shared corpus not found at {CORPUS} (CI provides it; a user's clone does not)"))],
    ids=lambda p: p.name if p else "corpus")
def test_corpus_file_reads_back_equal(path: Path) -> None:
    n, _, refused = oracle(path)
    assert n or refused or path.name in EMPTY


# Files with no dataset that is a netCDF variable.
EMPTY = {"attr_datatypes.hdf5", "groups.hdf5", "new_style_groups.hdf5", "empty-test.h5",
         "nc_test4_ref_tst_dims.nc", "nc_test4_ref_tst_xplatform2_1.nc", "nc_test4_ref_tst_xplatform2_2.nc",
         "ncdump_ref_tst_compounds4.nc"}


# -- files made here, one per layout, filter and dtype ---------------------------------------------

def _roundtrip(path: Path, **kw) -> refset.ReferenceSet:
    rs = scan(path, **kw)
    check_against_h5py(path, rs)
    return rs


def test_layouts(tmp_path: Path) -> None:
    p = tmp_path / "layouts.h5"
    data = np.arange(240, dtype="f8").reshape(12, 20)
    with h5py.File(p, "w") as f:
        f.create_dataset("contiguous", data=data)
        f.create_dataset("compact", data=np.arange(10, dtype="i4"),
                         dcpl=_compact_plist((10,), np.dtype("i4")))
        d = f.create_dataset("partly_written", shape=(12, 20), chunks=(4, 5), dtype="f4",
                             fillvalue=-7.5, compression="gzip")
        d[0:4, 0:5] = 1.0
        f.create_dataset("never_written", shape=(6, 5), dtype="i2", fillvalue=42)
        f.create_dataset("never_written_chunked", shape=(6, 5), chunks=(2, 5), dtype="i2", fillvalue=3)
        f.create_dataset("scalar", data=np.float32(2.5))
        f.create_dataset("empty", shape=(0, 4), dtype="f4", chunks=(1, 4), maxshape=(None, 4))
    rs = _roundtrip(p, inline_threshold=0)
    meta = json.loads(rs["contiguous/.zarray"])
    assert meta["chunks"] == [12, 20] and rs["contiguous/0.0"][1:] == (_offset(p, "contiguous"), 240 * 8)
    assert isinstance(rs["compact/0"], bytes)  # compact data has no range of its own: it is stored
    # unwritten chunks read the HDF5 fill value, not zeros
    g = zarr.open_group(refset.ZarrStore(rs), mode="r")
    assert (g["partly_written"][4:, :] == -7.5).all() and (g["never_written"][...] == 42).all()
    assert (g["never_written_chunked"][...] == 3).all()
    # the scanner builds each table on its own grid: the one its .zarray describes, as a reader finds
    again = refset.ReferenceSet.from_items(rs.items())
    assert again.grids == rs.grids and set(rs.grids) >= {"contiguous", "compact", "scalar", "empty"}
    for path in rs.grids:
        for a, b in zip(again.table(path).entries(), rs.table(path).entries(), strict=True):
            np.testing.assert_array_equal(a, b)
        assert again.table(path).inline == rs.table(path).inline


def _compact_plist(shape, dtype):
    plist = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    plist.set_layout(h5py.h5d.COMPACT)
    return plist


def _offset(path: Path, name: str) -> int:
    with h5py.File(path, "r") as f:
        return int(f[name].id.get_offset())


def test_fill_values_exact_and_masks_as_netcdf(tmp_path: Path) -> None:
    nc4 = pytest.importorskip("netCDF4")
    p = tmp_path / "fill.nc"
    with nc4.Dataset(p, "w") as ds:
        ds.createDimension("x", 8)
        v = ds.createVariable("big_fill", "f4", ("x",), fill_value=np.float32(1e37), chunksizes=(2,))
        v[:4] = np.arange(4)
        w = ds.createVariable("nan_fill", "f8", ("x",), fill_value=np.nan)
        w[:] = [1, np.nan, 3, 4, 5, 6, 7, 8]
        ds.createVariable("unwritten_default_fill", "i4", ("x",), chunksizes=(4,))
        u = ds.createVariable("no_fill", "i2", ("x",), fill_value=False)
        u[:] = np.arange(8)
    rs = _roundtrip(p)
    meta = json.loads(rs["big_fill/.zarray"])
    assert np.float32(meta["fill_value"]) == np.float32(1e37)  # exact, no drift through float64 text
    assert json.loads(rs["nan_fill/.zarray"])["fill_value"] == "NaN"
    assert check_against_xarray(p, rs)
    got = refset.open_dataset(rs)
    # netCDF's default fill is not a mask unless declared: the never-written variable reads it
    assert (got.unwritten_default_fill.values == nc4.default_fillvals["i4"]).all()


@pytest.mark.parametrize("kw,plugin", [
    ({"compression": "gzip", "shuffle": True, "fletcher32": True}, None),
    ({"compression": "lzf"}, None),
    ({"scaleoffset": 0}, None),
    ({"compression": 32015, "compression_opts": (3,)}, "Zstd"),
    ({"compression": 32001}, "Blosc"),
    ({"compression": 32004}, "LZ4"),
    ({"compression": 32008}, "Bitshuffle"),
])
def test_filters(tmp_path: Path, kw, plugin) -> None:
    if plugin:
        hdf5plugin = pytest.importorskip("hdf5plugin")
        kw = {**getattr(hdf5plugin, plugin)()} if plugin != "Zstd" else {**hdf5plugin.Zstd(clevel=3)}
    p = tmp_path / "f.h5"
    data = (np.arange(40 * 30, dtype="i4").reshape(40, 30) % 97).astype("i4")
    with h5py.File(p, "w") as f:
        f.create_dataset("v", data=data, chunks=(10, 10), **kw)
    rs = _roundtrip(p, inline_threshold=0)
    filters = json.loads(rs["v/.zarray"])["filters"] or []
    ids = [c["id"] for c in filters]
    with h5py.File(p, "r") as f:
        codes = [f["v"].id.get_create_plist().get_filter(i)[0] for i in
                 range(f["v"].id.get_create_plist().get_nfilters())]
    exact = {1: "zlib", 2: "shuffle", 3: "fletcher32", 32001: "blosc", 32015: "zstd"}
    if all(c in exact for c in codes):  # referenced: chunks are ranges into the file
        assert ids == [exact[c] for c in codes] and isinstance(rs["v/0.0"], tuple)
    else:  # read through h5py and stored
        assert isinstance(rs["v/0.0"], bytes)


def test_filter_skipped_for_some_chunks(tmp_path: Path) -> None:
    import zlib

    p = tmp_path / "mask.h5"
    with h5py.File(p, "w") as f:
        d = f.create_dataset("v", shape=(4, 4), chunks=(2, 4), dtype="i4", compression="gzip")
        d.id.write_direct_chunk((0, 0), zlib.compress(np.arange(8, dtype="i4").tobytes()), filter_mask=0)
        d.id.write_direct_chunk((2, 0), np.arange(8, 16, dtype="i4").tobytes(), filter_mask=1)
    rs = _roundtrip(p, inline_threshold=0)
    assert isinstance(rs["v/0.0"], tuple) and isinstance(rs["v/1.0"], bytes)


def test_dtypes(tmp_path: Path) -> None:
    p = tmp_path / "types.h5"
    rng = np.random.default_rng(0)
    with h5py.File(p, "w") as f:
        for dt in ("<i2", ">i4", "<u8", ">f4", "<f8", ">f8", "|i1", "<c8", ">c16", "<f2"):
            f.create_dataset(f"t{dt[1:]}{'be' if dt[0] == '>' else ''}",
                             data=(rng.standard_normal(50) * 100).astype(dt), chunks=(10,))
        f.create_dataset("bool", data=np.array([True, False, True]))
        f.create_dataset("fixed", data=np.array([b"ab", b"cde", b""], dtype="S3"))
        f.create_dataset("vlen", data=["a", "ünïcode", ""], dtype=h5py.string_dtype())
        f.create_dataset("vlen_ascii", data=[b"x", b"yz"], dtype=h5py.string_dtype("ascii"))
        cmp = np.array([(1, 2.5), (3, -1.0)], dtype=[("a", "<i4"), ("b", ">f8")])
        f.create_dataset("compound", data=cmp)
        padded = np.dtype({"names": ["a", "b"], "formats": ["i1", "<f8"], "offsets": [0, 8], "itemsize": 16})
        f.create_dataset("padded", data=np.array([(1, 2.0), (3, 4.0)], dtype=padded))
        enum = h5py.enum_dtype({"RED": 0, "GREEN": 1}, basetype="i1")
        f.create_dataset("enum", data=np.array([0, 1, 1], dtype="i1"), dtype=enum)
        f.create_dataset("opaque", data=np.frombuffer(b"abcdefgh", dtype="V4"))
    _roundtrip(p)


@pytest.mark.parametrize("make,words", [
    (lambda f: f.create_dataset("r", data=[f.ref], dtype=h5py.ref_dtype), "references"),
    (lambda f: f.create_dataset("s", data=np.array([np.array([1, 2]), np.array([3])], dtype=object),
                                dtype=h5py.vlen_dtype("i4")), "variable-length sequences"),
    (lambda f: f.create_dataset("n", shape=(2,), dtype=[("x", [("a", "i4"), ("b", "i4")])]),
     "itself a compound"),
])
def test_refused_variables_name_the_variable_and_the_reason(tmp_path: Path, make, words) -> None:
    p = tmp_path / "bad.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("ok", data=np.arange(3))
        make(f)
        bad = next(k for k in f if k != "ok")
    with pytest.raises(Unsupported, match=words) as e:
        scan(p)
    assert repr(bad) in str(e.value) and "drop_variables" in str(e.value)
    check_against_h5py(p, scan(p, drop_variables=[bad]), skip={bad})


def test_external_and_virtual_datasets_are_refused(tmp_path: Path) -> None:
    raw = tmp_path / "raw.bin"
    raw.write_bytes(np.arange(10, dtype="i4").tobytes())
    p = tmp_path / "ext.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("ext", shape=(10,), dtype="i4", external=[(str(raw), 0, 40)])
    with pytest.raises(Unsupported, match="external files"):
        scan(p)
    src = tmp_path / "src.h5"
    with h5py.File(src, "w") as f:
        f.create_dataset("a", data=np.arange(4))
    v = tmp_path / "virt.h5"
    layout = h5py.VirtualLayout(shape=(4,), dtype="i8")
    layout[:] = h5py.VirtualSource(str(src), "a", shape=(4,))
    with h5py.File(v, "w") as f:
        f.create_virtual_dataset("v", layout)
    with pytest.raises(Unsupported, match="virtual dataset"):
        scan(v)


def test_groups_links_user_block_and_group_option(tmp_path: Path) -> None:
    p = tmp_path / "ub.h5"
    with h5py.File(p, "w", userblock_size=1024) as f:
        g = f.create_group("grp/sub")
        g.attrs["title"] = "inner"
        g.create_dataset("x", data=np.arange(20, dtype="i8"), chunks=(5,))
        f["hard"] = g["x"]
        f["soft"] = h5py.SoftLink("/grp/sub/x")
    with open(p, "r+b") as fh:
        fh.write(b"user block text")
    rs = _roundtrip(p, inline_threshold=0)
    assert json.loads(rs["grp/sub/.zattrs"]) == {"title": "inner"}
    sub = scan(p, group="grp/sub")
    assert "x/.zarray" in sub and json.loads(sub[".zattrs"]) == {"title": "inner"}
    np.testing.assert_array_equal(zarr.open_group(refset.ZarrStore(sub), mode="r")["x"][...], np.arange(20))


def test_subchunk_splits_contiguous_data(tmp_path: Path) -> None:
    p = tmp_path / "big.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("v", data=np.arange(100 * 30, dtype="f4").reshape(100, 30))
    rs = _roundtrip(p, subchunk=2000)
    chunks = json.loads(rs["v/.zarray"])["chunks"]
    assert chunks == [10, 30]  # the largest divisor of 100 whose rows fit in 2000 bytes
    assert len([k for k in rs if k.startswith("v/") and not k.endswith((".zarray", ".zattrs"))]) == 10


def test_inline_threshold(tmp_path: Path) -> None:
    p = tmp_path / "i.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("small", data=np.arange(10, dtype="i2"))
        f.create_dataset("large", data=np.arange(1000, dtype="i8"))
    rs = _roundtrip(p, inline_threshold=100)
    assert isinstance(rs["small/0"], bytes) and isinstance(rs["large/0"], tuple)
    assert all(isinstance(rs[k], bytes) for k in ("small/0", "large/0")) is False
    rs = _roundtrip(p, inline_threshold=10**6)
    assert isinstance(rs["large/0"], bytes)


def test_fsspec_and_kerchunk_read_our_output(tmp_path: Path) -> None:
    """Interop: fsspec's ReferenceFileSystem + xarray's zarr engine read our scan output with values
    identical to the file's."""
    nc4 = pytest.importorskip("netCDF4")
    fsspec = pytest.importorskip("fsspec")
    p = tmp_path / "interop.nc"
    with nc4.Dataset(p, "w") as ds:
        ds.createDimension("t", None)
        ds.createDimension("y", 6)
        t = ds.createVariable("t", "f8", ("t",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(5)
        v = ds.createVariable("v", "f4", ("t", "y"), zlib=True, shuffle=True, chunksizes=(2, 3),
                              fill_value=np.float32(-999))
        v[:] = np.arange(30, dtype="f4").reshape(5, 6)
        v[1, 1] = -999
    rs = scan(p)
    out = tmp_path / "refs.json"
    refset.save(rs, str(out))
    fs = fsspec.filesystem("reference", fo=str(out))
    peer = xr.open_dataset(fs.get_mapper(""), engine="zarr", consolidated=False, zarr_format=2).load()
    want = xr.open_dataset(p).load()
    xr.testing.assert_identical(peer[["v", "t"]].drop_attrs(), want[["v", "t"]].drop_attrs())
    assert np.isnan(peer.v.values[1, 1])


def test_remote_scans_equal_the_local_scan(tmp_path: Path, s3) -> None:
    """Over HTTP (a real server on 127.0.0.1) and S3 (moto) the set equals the local one, with only
    the URL changed. A file smaller than ``head_bytes`` takes one GET and no HEAD; a bigger one is
    not read whole."""
    import fsspec

    from tests.httpserver import RangeServer

    p = tmp_path / "r.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("v", data=np.random.default_rng(1).random((400, 500)), chunks=(50, 100),
                         compression="gzip")
        f.create_dataset("small", data=np.arange(5))
        f.create_dataset("late", data=np.arange(7.0), chunks=(2,))  # inline chunks past the head
    local = scan(p)
    size = p.stat().st_size
    assert size > 1_000_000

    def same(remote: refset.ReferenceSet, url: str) -> None:
        assert remote.urls == (url,)
        assert refset.rename_urls(remote, {url: str(p)}).to_dict() == local.to_dict()

    with RangeServer(tmp_path) as srv:
        url = f"{srv.url}/r.h5"
        srv.reset()
        same(scan(url, head_bytes=4 << 20), url)
        assert (srv.requests, srv.bytes) == (1, size)  # a file smaller than the head: one GET
        srv.reset()
        same(scan(url), url)  # by default the head, then the chunk index and the chunks to inline
        assert srv.requests <= 3 and srv.bytes < size / 10  # the metadata, not the 40 chunks
    s3fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3)
    s3fs.put_file(str(p), "refs/scan/r.h5")
    for head in (2**22, 2**16, 0):
        same(scan("s3://refs/scan/r.h5", storage_options=s3, head_bytes=head), "s3://refs/scan/r.h5")


def test_a_remote_scan_takes_a_round_trip_a_level(tmp_path: Path) -> None:
    """A netCDF-4 file of four chunked variables (B-trees of two levels, written among the chunks):
    the head, the variables' object headers (one round: netCDF-C writes some of them far from the
    head, each cost a round trip of its own), the B-tree roots, their leaves: four round trips,
    every leaf of every variable in the last one, and the set equals the local scan."""
    netCDF4 = pytest.importorskip("netCDF4")
    from refset.scan import Scan
    from tests.httpserver import RangeServer

    p = tmp_path / "m.nc"
    with netCDF4.Dataset(p, "w") as ds:
        ds.createDimension("x", 300 * 256)
        for name in "abcd":
            v = ds.createVariable(name, "f4", ("x",), chunksizes=(256,))
            v.units = "K"
            v[:] = np.random.default_rng(0).random(300 * 256, dtype=np.float32)
    local = scan(p)
    with RangeServer(tmp_path) as srv:
        url = f"{srv.url}/m.nc"
        run = Scan()
        got = run(url)
        assert refset.rename_urls(got, {url: str(p)}).to_dict() == local.to_dict()
        assert run.rounds == 4
        assert run.requests == srv.requests


@pytest.mark.parametrize("head", [2**22, 2**12])  # the whole file in one GET; a head, then blocks and ranges
def test_remote_scan_checks_what_the_server_answers(tmp_path: Path, head: int) -> None:
    """A server answering ranges one byte late (saying so in Content-Range) gave garbage coordinates:
    the scan read through fsspec without checking. Now every read is checked as the read path's: a
    shifted or short answer, or HTTP 500 (after retries), is a ReferenceNotReachable naming the file;
    a server ignoring Range (200, the whole file) gives the local set."""
    from refset.errors import ReferenceNotReachable
    from tests.httpserver import RangeServer

    p = tmp_path / "r.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("v", data=np.arange(20000.0).reshape(200, 100), chunks=(20, 100), compression="gzip")
        f.create_dataset("late", data=np.arange(7.0), chunks=(2,))  # inline chunks past the head
        f.attrs["title"] = "x" * 5000  # metadata past a small head
    local = scan(p)
    with RangeServer(tmp_path) as srv:
        url = f"{srv.url}/r.h5"
        # a file smaller than the head comes whole in the first answer: no range to shift or cut
        for fault in ("shift", "short", "500") if head < p.stat().st_size else ("500",):
            srv.fault = fault
            with pytest.raises(ReferenceNotReachable, match=re.escape(url)):
                scan(url, head_bytes=head)
        srv.fault = "ignore"
        got = scan(url, head_bytes=head)
        assert refset.rename_urls(got, {url: str(p)}).to_dict() == local.to_dict()


def test_not_hdf5_or_netcdf(tmp_path: Path) -> None:
    p = tmp_path / "x.nc"
    p.write_bytes(b"GRIB" + bytes(1000))
    with pytest.raises(Unsupported, match="not a NetCDF3, NetCDF4 or HDF5 file"):
        scan(p)



if __name__ == "__main__":  # the table in docs/scan.md: python -m tests.scan.hdf5.test_hdf5
    print("| file | variables equal to h5py | of them equal through xarray + netCDF4 | refused |")
    print("|---|---:|---:|---|")
    for p in hdf5_corpus():
        n, x, r = oracle(p)
        print(f"| {p.parent.name}/{p.name} | {n} | {x or '-'} | {', '.join(r) or '-'} |")


def test_an_empty_remote_file_is_what_an_empty_local_file_is(tmp_path: Path) -> None:
    """A server answers a range of an empty file with 416 and ``Content-Range: bytes */0`` (RFC
    9110; S3 does too): the scan reads it as a file of no bytes, as it reads the local one, not as
    an unreachable file."""
    from tests.httpserver import RangeServer

    (tmp_path / "empty.nc").write_bytes(b"")
    with pytest.raises(Unsupported, match="not a NetCDF3, NetCDF4 or HDF5 file") as local:
        scan(tmp_path / "empty.nc")
    with RangeServer(tmp_path) as srv, pytest.raises(Unsupported) as remote:
        scan(f"{srv.url}/empty.nc")
    assert str(remote.value).split(": ", 1)[1] == str(local.value).split(": ", 1)[1]
