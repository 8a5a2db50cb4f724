"""Every scanner's output written to Icechunk reads back with plain zarr and xarray (no refset import in
the reading code: the codecs refset names resolve through zarr's ``zarr.codecs`` entry points), equal
to the format's own reader: tifffile (TIFF codecs and predictors, imagecodecs' numcodecs codecs),
cfgrib (GRIB, refset's GRIB codec), astropy (tile-compressed FITS: Rice), pyhdf (HDF4), scipy
(NetCDF3). Issue 41, item 5."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from tests.conftest import CORPUS

icechunk = pytest.importorskip("icechunk")
xr = pytest.importorskip("xarray")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

#: What reads a repository in a process of its own: zarr and xarray over Icechunk's store (refset's
#: codec classes are found by zarr through their entry points; the script imports nothing of refset).
READER = """
import sys, json, warnings
warnings.simplefilter("ignore")
import icechunk, numpy as np, xarray as xr, zarr
storage = icechunk.local_filesystem_storage(sys.argv[1])
config = icechunk.Repository.fetch_config(storage)
containers = (config.virtual_chunk_containers or {}) if config is not None else {}
repo = icechunk.Repository.open(storage, authorize_virtual_chunk_access=icechunk.containers_credentials(
    {p: None for p in containers}))
store = repo.readonly_session(branch="main").store
raw = zarr.open_group(store, mode="r")
out = {}
for name, arr in raw.arrays():
    np.save(sys.argv[2] + "/" + name.replace("/", "__") + ".npy", arr[...])
ds = xr.open_zarr(store, consolidated=False)
print(json.dumps(sorted(ds.data_vars)))
"""


def _read_back(rs: refset.ReferenceSet, tmp_path: Path) -> dict[str, np.ndarray]:
    """``rs`` written to an Icechunk repository and read back in a fresh process by zarr (raw values of
    every array)."""
    dest = tmp_path / "repo"
    refset.save(rs, f"icechunk://{dest}")
    out = tmp_path / "arrays"
    out.mkdir()
    got = subprocess.run([sys.executable, "-c", READER, str(dest), str(out)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-3000:]
    return {p.stem.replace("__", "/"): np.load(p) for p in out.glob("*.npy")}


TIFFS = {
    "lzw-predictor": ((64, 64), "uint16", {"tile": (16, 32), "compression": "lzw", "predictor": True}),
    "packbits-strips": ((60, 40), "uint8", {"rowsperstrip": 12, "compression": "packbits"}),
    "zstd-float-predictor": ((48, 64), "float32", {"tile": (16, 16), "compression": "zstd", "predictor": 3}),
    "jpeg-rgb": ((64, 64, 3), "uint8", {"tile": (32, 32), "compression": "jpeg", "photometric": "rgb"}),
    "lzma": ((64, 40), "uint16", {"rowsperstrip": 16, "compression": "lzma"}),
    "webp-rgb": ((64, 64, 3), "uint8", {"tile": (32, 32), "compression": "webp"}),
}


@pytest.mark.parametrize("case", list(TIFFS))
def test_tiff_codecs_read_back_as_tifffile_reads_them(case: str, tmp_path: Path) -> None:
    tifffile = pytest.importorskip("tifffile")
    pytest.importorskip("imagecodecs")
    from tests.scan.tiff.test_tiff import _image

    shape, dtype, kw = TIFFS[case]
    f = tmp_path / f"{case}.tif"
    try:
        tifffile.imwrite(f, _image(shape, dtype), **kw)
    except (ValueError, ImportError, RuntimeError) as e:  # a codec this imagecodecs lacks
        pytest.skip(f"tifffile cannot write {case} here: {e}")
    rs = refset.scan(f)
    codecs = {s.get("id") for m in rs.metadata.values() for s in [*m.filters, m.compressor] if s}
    got = _read_back(rs, tmp_path)
    name = next(p for p in rs.metadata if p in got and rs.metadata[p].ndim >= 2)
    want = tifffile.imread(f)
    np.testing.assert_array_equal(got[name].reshape(want.shape), want)
    assert codecs  # the case exercises a codec of the set


@pytest.mark.parametrize("name", ["tinygrib.grb2", "CMC_reg_DEPR_ISBL_10_ps10km_2022072000_P000.grib2"])
def test_grib_reads_back_as_cfgrib_reads_it(name: str, tmp_path: Path) -> None:
    cfgrib = pytest.importorskip("cfgrib")
    path = CORPUS / "kerchunk-fixtures" / name
    if not path.exists():
        pytest.skip(f"the shared corpus is not at {CORPUS}")
    rs = refset.scan(path)
    got = _read_back(rs, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = {n: ds[n].values for ds in cfgrib.open_datasets(str(path), backend_kwargs={"indexpath": ""})
                for n in ds.data_vars}
    checked = 0
    for n, w in want.items():
        ours = next((p for p in got if p.rsplit("/", 1)[-1] == n), None)
        if ours is not None and got[ours].size == w.size:
            np.testing.assert_allclose(got[ours].reshape(w.shape), w, equal_nan=True, err_msg=n)
            checked += 1
    assert checked >= 1


def test_fits_rice_tiles_read_back_as_astropy_reads_them(tmp_path: Path) -> None:
    fits = pytest.importorskip("astropy.io.fits")
    data = (np.arange(64 * 80, dtype=np.int32).reshape(64, 80) % 977 - 300).astype(np.int32)
    f = tmp_path / "rice.fits"
    fits.HDUList([fits.PrimaryHDU(), fits.CompImageHDU(data, compression_type="RICE_1", tile_shape=(16, 40),
                                                      name="IMG")]).writeto(f)
    got = _read_back(refset.scan(f), tmp_path)
    with fits.open(f) as h:
        np.testing.assert_array_equal(got["IMG"], h["IMG"].data)


def test_hdf4_reads_back_as_pyhdf_reads_it(tmp_path: Path) -> None:
    pyhdf = pytest.importorskip("pyhdf.SD")
    path = CORPUS / "kerchunk-fixtures" / "MOD14.hdf4"
    if not path.exists():
        pytest.skip(f"the shared corpus is not at {CORPUS}")
    got = _read_back(refset.scan(path), tmp_path)
    sd = pyhdf.SD(str(path))
    checked = 0
    for n in sd.datasets():
        ours = next((p for p in got if p.rsplit("/", 1)[-1] == n), None)
        try:
            want = sd.select(n).get()
        except ValueError:  # pyhdf cannot read it either (an empty dataset)
            continue
        if ours is not None:
            np.testing.assert_array_equal(got[ours], want, err_msg=n)
            checked += 1
    assert checked >= 1


def test_netcdf3_reads_back_as_scipy_reads_it(tmp_path: Path) -> None:
    scipy_io = pytest.importorskip("scipy.io")
    f = tmp_path / "classic.nc"
    with scipy_io.netcdf_file(f, "w") as nc:
        nc.createDimension("t", 5)
        nc.createDimension("x", 700)
        v = nc.createVariable("v", "f4", ("t", "x"))
        v[:] = np.arange(3500, dtype="f4").reshape(5, 700)
        w = nc.createVariable("w", "i2", ("x",))
        w[:] = np.arange(700, dtype="i2")
    got = _read_back(refset.scan(f), tmp_path)
    with scipy_io.netcdf_file(f, "r", mmap=False) as nc:
        for n in ("v", "w"):
            np.testing.assert_array_equal(got[n], nc.variables[n][:], err_msg=n)
