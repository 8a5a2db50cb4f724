"""refset.io.magic.describe: what a file or directory is, from its first bytes or what it holds, for
every message that names a mistaken input; the built-in scanners tell their files by the same
signatures (each scanner's sniff agrees with describe on every kind)."""

from __future__ import annotations

import gzip

import pytest

from refset.io.magic import PACKED_MAGIC, describe, describe_directory, not_a_set
from refset.scan.registry import scanners

HDF5 = b"\x89HDF\r\n\x1a\n"
FILES = {  # name -> (first bytes, what describe says)
    "hdf5": (HDF5 + bytes(100), "a NetCDF/HDF5 file"),
    "hdf5-userblock": (b"made by a tool\n".ljust(512, b"\0") + HDF5 + bytes(100), "a NetCDF/HDF5 file"),
    "netcdf3": (b"CDF\x02" + bytes(100), "a NetCDF/HDF5 file"),
    "grib": (b"GRIB\0\0\0\x01" + bytes(100), "a GRIB file"),
    "tiff": (b"MM\0+" + bytes(100), "a TIFF file"),
    "fits": (f"{'SIMPLE  =':<10}{'T':>20}".encode().ljust(2880), "a FITS file"),
    "hdf4": (b"\x0e\x03\x13\x01" + bytes(100), "an HDF4 file"),
    "dmrpp": (b'  <?xml version="1.0"?><Dataset xmlns:dmrpp="http://xml.opendap.org/dap/dmrpp/1.0.0#">',
              "a DMR++ sidecar"),
    "json": (b'\n {"version": 1}', "a reference set (JSON)"),
    "json-list": (b"[{}]", "a list of reference sets (JSON)"),
    "packed": (PACKED_MAGIC + bytes(10), "a reference set (packed)"),
    "compressed": (gzip.compress(b"{}"), "a gzip-compressed reference set (JSON)"),
    "parquet-record": (b"PAR1" + bytes(10), "one record file of a parquet reference set"),
    "idx": (b"1:0:d=2024010100:TMP:500 mb:anl:\n2:9:d=2024010100:UGRD:500 mb:anl:\n",
            "a GRIB inventory (a .idx sidecar)"),
    "text": ("une ligne d'\u00e9t\u00e9\n".encode(), "a text file"),
    "empty": (b"", "an empty file"),
    "unknown": (b"GRIB\0\0\0\0" + bytes(10), "a file of no kind refset knows (first bytes b'GRIB\\x00\\x00\\x00\\x00')"),
}


def _read(data: bytes):  # type: ignore[no-untyped-def]
    return lambda offset, n: data[offset:offset + n]


@pytest.mark.parametrize("name", FILES)
def test_describe_names_every_kind(name: str) -> None:
    data, text = FILES[name]
    kind = describe(_read(data), len(data))
    assert (kind.name, kind.text) == (name.removesuffix("-userblock"), text)
    takers = [cls.name for cls in scanners() if not cls.directory and cls.probe(_read(data), len(data))]
    assert takers == ([kind.name] if kind.scanned else []), takers  # the scanners' own sniffs agree


def test_directories_and_the_advice_given_where_a_set_was_expected() -> None:
    files = {".zgroup": b"{}", ".zmetadata": b'{"metadata": {}}'}
    kind = describe_directory(files.__contains__, files.__getitem__)
    assert (kind.name, kind.text, kind.scanned) == ("zarr", "a zarr store (.zgroup)", True)
    files[".zmetadata"] = b'{"record_size": 100000}'
    assert describe_directory(files.__contains__, files.__getitem__).name == "parquet"
    assert describe_directory(lambda n: False, files.__getitem__).text == "a directory"
    grib = describe(_read(FILES["grib"][0]), 100)
    assert not_a_set("s3://b/fc.grib2", grib) == ("s3://b/fc.grib2: is a GRIB file, not a reference set: make one "
                                                  "with `refset scan s3://b/fc.grib2 -o fc.json` (in Python: "
                                                  "refset.scan)")
    json_set = describe(_read(b"{}"), 2)
    assert not_a_set("a.json", json_set) is None  # a set: its reader says what is wrong with it
