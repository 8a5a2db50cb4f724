"""Every format to every format, from eager and lazily opened sources, on synthetic sets and on every
real reference set of ../shared/corpus (and sets kerchunk makes from its real files), checked by
reading each output back with refset and, where they read the format, with fsspec and kerchunk."""

from __future__ import annotations

import base64
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidReferences, Unsupported
from tests.helpers import zarr_json, zarray

FORMATS = ("json", "json.gz", "v1", "v1-gen", "parquet", "packed")
META = (".zarray", ".zattrs", ".zgroup", "zarr.json")


def _canon(v: str) -> str:
    return json.dumps(json.loads(v), sort_keys=True)  # NaN stays "NaN": equal to itself


def norm(d: dict) -> dict:
    """A V0 dict with JSON metadata in one spelling (parquet stores documents parsed)."""
    return {k: _canon(v) if k.rpartition("/")[2] in META and isinstance(v, str) else v
            for k, v in d.items()}


def save(rs, dest: Path, fmt: str) -> Path:
    if fmt == "json.gz":
        dest = dest.with_name(dest.name + ".json.gz")
        refset.save(rs, dest)
    elif fmt == "v1-gen":
        refset.save(rs, dest, format="v1", gen=True)
    else:
        refset.save(rs, dest, format=fmt.split(".")[0])
    return dest


def opened(path: Path, fmt: str) -> list[refset.ReferenceSet]:
    """The ways a stored set is opened: as load does by default, and lazily for JSON."""
    out = [refset.load(str(path))]
    if fmt.startswith(("json", "v1")):
        out.append(refset.load(str(path), lazy=True))
    return out


# -- synthetic sets ------------------------------------------------------------------------------------
def _dense(n_t: int = 30) -> dict:
    d = {".zgroup": '{"zarr_format": 2}', ".zattrs": '{"title": "t", "missing": NaN, "hi": Infinity}',
         "g/.zgroup": '{"zarr_format": 2}',
         "t/.zarray": zarray([n_t, 40, 30], [1, 10, 10]), "t/.zattrs": '{"_ARRAY_DIMENSIONS": ["t", "y", "x"]}',
         "g/s/.zarray": zarray([6, 6], [2, 3], sep="/"), "g/s/.zattrs": '{"_ARRAY_DIMENSIONS": ["y", "x"]}'}
    rng = np.random.default_rng(0)
    for i in range(n_t):
        url = f"s3://bucket/path/file-{i:04d}.nc"
        off = 4096
        for j in range(4):
            for k in range(3):
                r = rng.random()
                if r < 0.1:
                    continue  # absent
                if r < 0.15:
                    d[f"t/{i}.{j}.{k}"] = "base64:" + base64.b64encode(bytes([i % 256, j, k, 255])).decode()
                    continue
                ln = 1000 if r < 0.8 else int(rng.integers(1, 5000))
                d[f"t/{i}.{j}.{k}"] = [url, off, ln]
                off += ln
    d["g/s/0/0"] = ["https://h/whole.bin"]
    d["g/s/2/1"] = ["https://h/x y.bin", 5, 7]
    d["g/s/1/0"] = "ascii inline"
    return d


def _sparse() -> dict:
    d = {".zgroup": '{"zarr_format": 2}', "big/.zarray": zarray([2**22, 8], [1, 1])}
    for c in (0, 5, 2**20 * 8 + 3, 2**22 * 8 - 1):
        d[f"big/{c // 8}.{c % 8}"] = ["s3://b/s.nc", c, 10]
    return d


def _generic() -> dict:
    """What fsspec's parquet layout cannot hold: plain keys, zarr v3, a root array."""
    return {"key0": "data", "gen_key1": ["http://h/u_1", 2000, 1000], "v3/zarr.json": zarr_json([4], [2]),
            "v3/c/1": ["s3://b/f", 0, 10], "zarr.json": json.dumps({"zarr_format": 3, "node_type": "group"})}


SYNTHETIC = {"dense": _dense(), "dense-large": _dense(400), "sparse": _sparse(), "generic": _generic()}


def _holds(name: str, fmt: str) -> bool:
    return not (name == "generic" and fmt == "parquet")


@pytest.mark.parametrize("name", list(SYNTHETIC))
@pytest.mark.parametrize("src_fmt", FORMATS)
def test_every_format_to_every_format(tmp_path, name, src_fmt):
    d = SYNTHETIC[name]
    want = norm(refset.load(d).to_dict())
    assert want == norm(d)
    if not _holds(name, src_fmt):
        with pytest.raises(Unsupported):
            save(refset.load(d), tmp_path / "src", src_fmt)
        return
    src = save(refset.load(d), tmp_path / "src", src_fmt)
    for i, rs in enumerate(opened(src, src_fmt)):
        for dst_fmt in FORMATS:
            dest = tmp_path / f"out{i}-{dst_fmt}"
            if not _holds(name, dst_fmt):
                with pytest.raises(Unsupported):
                    save(rs, dest, dst_fmt)
                continue
            dest = save(rs, dest, dst_fmt)  # straight from the freshly opened (lazy) source
            for back in opened(dest, dst_fmt):
                assert norm(back.to_dict()) == want, (src_fmt, i, dst_fmt)
                assert len(back) == len(want)
        assert norm(rs.to_dict()) == want


def test_sparse_grid_stays_a_grid_in_every_format(tmp_path):
    for fmt in FORMATS:
        back = refset.load(str(save(refset.load(_sparse()), tmp_path / f"s-{fmt}", fmt)))
        assert set(back.grids) == {"big"} and back.table("big").is_sparse, fmt
        assert back["big/4194303.7"] == ("s3://b/s.nc", 2**22 * 8 - 1, 10) and "big/1.1" not in back


# -- the set's own value forms -------------------------------------------------------------------------
def test_load_takes_the_sets_own_values_and_numpy_integers():
    rs = refset.load(_dense())
    again = refset.load(dict(rs))  # bytes, (url,), (url, offset, length)
    assert again.to_dict() == rs.to_dict()
    assert refset.load(rs) is rs
    d = {"x/.zarray": zarray([4], [1]), "x/0": ("u", np.int64(5), np.uint32(7)), "x/1": ["u", np.int16(1), 2],
         "k": b"\x00\xff"}
    got = refset.load(d)
    assert got["x/0"] == ("u", 5, 7) and type(got["x/0"][1]) is int and got["k"] == b"\x00\xff"
    with pytest.raises(InvalidReferences, match=r'refs\["x/0"\]\[1\]: offset must be a non-negative integer'):
        refset.load({"x/0": ("u", np.float64(5), 7)})
    with pytest.raises(InvalidReferences, match=r'must be below 2\*\*63'):
        refset.load({"x/0": ["u", 2**63 - 5, 10]})


def test_nan_and_infinity_in_attributes(tmp_path):
    d = _dense()
    for fmt in FORMATS:
        back = refset.load(str(save(refset.load(d), tmp_path / f"n-{fmt}", fmt)))
        attrs = json.loads(back[".zattrs"])
        assert math.isnan(attrs["missing"]) and attrs["hi"] == math.inf, fmt
    # fsspec reads our parquet .zmetadata with NaN as it reads its own
    from fsspec.implementations.reference import LazyReferenceMapper

    m = LazyReferenceMapper(str(tmp_path / "n-parquet"))
    assert math.isnan(json.loads(m[".zattrs"])["missing"])


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore:.*fastparquet.*", "ignore:.*infer_string.*")
def test_kerchunk_parquet_with_nan_attributes(tmp_path):
    """kerchunk's refs_to_dataframe writes NaN into .zmetadata (real: the ITS_LIVE catalog)."""
    kdf = pytest.importorskip("kerchunk.df")
    d = {k: v for k, v in _dense().items() if not k.startswith("g/")}
    kdf.refs_to_dataframe(d, str(tmp_path / "k.parq"), record_size=50)
    raw = (tmp_path / "k.parq" / ".zmetadata").read_text()
    assert "NaN" in raw
    back = refset.load(str(tmp_path / "k.parq"))
    assert norm(back.to_dict()) == norm(refset.load(d).to_dict())


# -- Version 1 that fsspec reads with its defaults -----------------------------------------------------
def test_default_v1_reads_the_same_in_fsspec_with_defaults(tmp_path):
    import fsspec

    from tests.servedata import kerchunk_refs, write_netcdf

    write_netcdf(tmp_path / "a.nc")
    refs = kerchunk_refs(tmp_path / "a.nc")
    refs["extra/whole"] = [str(tmp_path / "a.nc")]
    refs["extra/text"] = "hello"
    rs = refset.load(refs)
    refset.save(rs, tmp_path / "r.v1.json", format="v1")
    doc = json.loads((tmp_path / "r.v1.json").read_text())
    assert doc["templates"] and "gen" not in doc  # URL templates only: what fsspec's defaults read
    theirs = fsspec.filesystem("reference", fo=str(tmp_path / "r.v1.json"))
    ours = refset.ReferenceFileSystem(fo=str(tmp_path / "r.v1.json"))
    keys = sorted(rs)
    assert sorted(k for k in theirs.references if not k.startswith(".")) == sorted(
        k for k in keys if not k.startswith("."))
    for k in keys:
        assert theirs.cat_file(k) == ours.cat_file(k) == refset.ReferenceFileSystem(fo=refs).cat_file(k), k
    # gen=True is smaller on regular runs; fsspec reads it with simple_templates=False
    refset.save(rs, tmp_path / "g.v1.json", format="v1", gen=True)
    jinja = fsspec.filesystem("reference", fo=str(tmp_path / "g.v1.json"), simple_templates=False)
    for k in keys:
        assert jinja.cat_file(k) == ours.cat_file(k), k


# -- real reference sets -------------------------------------------------------------------------------
KERCHUNK_FILES = ["kerchunk-fixtures/air.nc", "samples/virtualizarr/test_ds_netcdf4_full_time.nc",
                  "samples/xarray-data/basin_mask.nc", "samples/pyfive/compressed.hdf5",
                  "samples/netcdf-c/nczarr_test_ref_groups.h5", "kerchunk-fixtures/hdf5_compression_zstd.h5"]


REAL = ["hrrr.wrfsfcf.subset.json", "hrrr.wrfsubhf.subset.json", *KERCHUNK_FILES]


def _real_sets(corpus: Path, name: str) -> dict[str, dict]:
    """The real sets of one corpus entry: each set of kerchunk's GRIB scan lists, or the set kerchunk
    makes of one real HDF5/NetCDF4 file."""
    if name.endswith(".json"):
        items = json.loads((corpus / "kerchunk-fixtures" / name).read_text())
        return {f"{name}[{i}]": item for i, item in enumerate(items)}  # a list of sets, one per message
    from kerchunk.hdf import SingleHdf5ToZarr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: SingleHdf5ToZarr(str(corpus / name), inline_threshold=100).translate()}


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore:.*fastparquet.*")
@pytest.mark.parametrize("real", REAL)
def test_real_sets_every_format_to_every_format(corpus, tmp_path, real):
    kdf = pytest.importorskip("kerchunk.df")
    for name, doc in _real_sets(corpus, real).items():
        rs = refset.load(doc)
        want = norm(rs.to_dict())
        d = tmp_path / name.replace("/", "_")
        d.mkdir()
        sources = {fmt: save(rs, d / f"src-{fmt}", fmt) for fmt in FORMATS}
        if "" not in rs.grids and not any(k.endswith("zarr.json") for k in want):
            # the real parquet sets: kerchunk's refs_to_dataframe output
            kdf.refs_to_dataframe(rs.to_dict(), str(d / "kerchunk.parq"), record_size=7)
            sources["kerchunk-parquet"] = d / "kerchunk.parq"
        for src_fmt, path in sources.items():
            for dst_fmt in FORMATS:
                src = refset.load(str(path))  # fresh: nothing read before the writer asks
                if dst_fmt == "parquet" and "" in rs.grids:
                    with pytest.raises(Unsupported):
                        save(src, d / "x", dst_fmt)
                    continue
                out = save(src, d / f"{src_fmt}-to-{dst_fmt}", dst_fmt)
                for back in opened(out, dst_fmt):
                    assert norm(back.to_dict()) == want, (name, src_fmt, dst_fmt)


def test_real_netcdf_reads_the_same_through_every_format(corpus, tmp_path):
    xr = pytest.importorskip("xarray")
    path = corpus / "samples/virtualizarr/test_ds_netcdf4_full_time.nc"
    doc = _real_sets(corpus, "samples/virtualizarr/test_ds_netcdf4_full_time.nc")[
        "samples/virtualizarr/test_ds_netcdf4_full_time.nc"]
    direct = xr.open_dataset(path, engine="netcdf4").load()
    rs = refset.load(doc)
    for fmt in FORMATS:
        p = save(rs, tmp_path / f"r-{fmt}", fmt)
        via = refset.open_dataset(str(p)).load()
        xr.testing.assert_identical(via, direct)
