"""Version 0 JSON: every value form, envelopes, compression, round trips, interop with real peers."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import InvalidReferences
from tests.helpers import zarray

SPEC_V0 = {
    ".zgroup": '{\n    "zarr_format": 2\n}',
    ".zattrs": '{\n    "Conventions": "UGRID-0.9.0\n"}',
    "x/.zattrs": '{\n    "_ARRAY_DIMENSIONS": [\n        "node"\n ...',
    "x/.zarray": '{\n    "chunks": [\n        9228245\n    ],\n    "compressor": null,\n    "dtype": "<f8",\n  ...',
    "x/0": ["s3://bucket/path/file.nc", 294094376, 73825960],
}

SPEC_V0_OBJECTS = {
    ".zgroup": {"zarr_format": 2},
    ".zattrs": {"Conventions": "UGRID-0.9.0\n"},
    "x/.zattrs": {"_ARRAY_DIMENSIONS": ["node"]},
    "x/.zarray": {"chunks": [9228245], "compressor": None, "dtype": "<f8"},
    "x/0": ["s3://bucket/path/file.nc", 294094376, 73825960],
}


def test_spec_v0_example_every_value_kept():
    rs = refset.load(SPEC_V0)
    assert rs.to_dict() == SPEC_V0
    assert rs["x/0"] == ("s3://bucket/path/file.nc", 294094376, 73825960)
    assert rs[".zgroup"] == SPEC_V0[".zgroup"].encode()


def test_spec_v0_objects_are_json_files():
    rs = refset.load(SPEC_V0_OBJECTS)
    for k in (".zgroup", ".zattrs", "x/.zattrs", "x/.zarray"):
        assert json.loads(rs[k]) == SPEC_V0_OBJECTS[k]
    assert rs.to_dict()[".zgroup"] == json.dumps({"zarr_format": 2})


def test_value_forms():
    d = {
        "text": "data",
        "bin": "base64:" + base64.b64encode(bytes(range(256))).decode(),
        "whole": ["memory://f.bin"],
        "range": ["memory://f.bin", 3, 4],
        "unicode": "température",
        "empty": "",
    }
    rs = refset.load(d)
    assert rs["text"] == b"data"
    assert rs["bin"] == bytes(range(256))
    assert rs["whole"] == ("memory://f.bin",)
    assert rs["range"] == ("memory://f.bin", 3, 4)
    assert rs["unicode"] == "température".encode()
    assert rs["empty"] == b""
    out = rs.to_dict()
    assert out["text"] == "data" and out["bin"] == d["bin"] and out["range"] == d["range"]
    assert refset.load(out).to_dict() == out


def test_kerchunk_envelope_is_accepted():
    d = {"version": 1, "refs": SPEC_V0}
    assert refset.load(d).to_dict() == SPEC_V0


def _big_refs(n_files: int = 3) -> dict:
    d = {".zgroup": '{"zarr_format": 2}', "v/.zarray": zarray([n_files, 8, 8], [1, 4, 4]),
         "v/.zattrs": '{"_ARRAY_DIMENSIONS": ["t", "y", "x"]}'}
    rng = np.random.default_rng(1)
    for f in range(n_files):
        off = 100
        for j in range(2):
            for k in range(2):
                if (f + j + k) % 4 == 3:
                    continue
                ln = int(rng.integers(50, 90))
                d[f"v/{f}.{j}.{k}"] = [f"s3://bucket/dir/file_{f:03d}.nc", off, ln]
                off += ln
    return d


@pytest.mark.parametrize("name", ["refs.json", "refs.json.gz", "refs.json.zst", "no-suffix"])
def test_save_and_load_files_with_compression(tmp_path: Path, name: str):
    d = _big_refs()
    dest = tmp_path / name
    refset.save(d, dest)
    raw = dest.read_bytes()
    if name.endswith(".gz"):
        assert raw[:2] == b"\x1f\x8b"
    elif name.endswith(".zst"):
        assert raw[:4] == b"\x28\xb5\x2f\xfd"
    else:
        assert json.loads(raw) == d
    assert refset.load(dest).to_dict() == d
    assert refset.load(str(dest)).to_dict() == d
    assert refset.load("file://" + str(dest)).to_dict() == d


def test_compression_is_sniffed_not_named(tmp_path: Path):
    d = _big_refs()
    p = tmp_path / "looks-plain.json"
    p.write_bytes(gzip.compress(json.dumps(d).encode()))
    assert refset.load(p).to_dict() == d
    import zstandard

    p2 = tmp_path / "looks-gzip.json.gz"
    p2.write_bytes(zstandard.ZstdCompressor().compress(json.dumps(d).encode()))
    assert refset.load(p2).to_dict() == d


def test_load_from_fsspec_url_and_bytes():
    import fsspec

    d = _big_refs()
    with fsspec.open("memory://refs/test.json", "wb") as f:
        f.write(json.dumps(d).encode())
    assert refset.load("memory://refs/test.json").to_dict() == d
    assert refset.load(json.dumps(d).encode()).to_dict() == d


def test_atomic_save_leaves_no_partial_file(tmp_path: Path):
    dest = tmp_path / "out.json"
    dest.write_text("previous")

    class FailingSource:
        """A lazily read source whose storage fails after the metadata was read."""

        def __init__(self, inner):
            self.inner, self.metadata = inner, inner.metadata

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def table(self, path):
            raise OSError("remote store went away")

    broken = refset.ReferenceSet(FailingSource(refset.load(_big_refs()).source))
    for fmt in ("json", "v1"):
        with pytest.raises(OSError, match="went away"):
            refset.save(broken, dest, format=fmt)
        assert dest.read_text() == "previous"
        assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    with pytest.raises(InvalidReferences):
        refset.save({"a": ["u", -1, 2]}, dest)
    assert dest.read_text() == "previous"


def test_invalid_json_is_reported(tmp_path: Path):
    p = tmp_path / "bad.json"
    p.write_text('{"a": ["u", 1, 2],')
    with pytest.raises(InvalidReferences, match="invalid JSON"):
        refset.load(p)
    p.write_text("[1, 2]")
    with pytest.raises(InvalidReferences, match="must be a JSON object"):
        refset.load(p)


# -- interoperability with the real peers ------------------------------------------------------------

def _netcdf(path: Path) -> np.ndarray:
    import netCDF4

    data = np.arange(6 * 40 * 30, dtype="f4").reshape(6, 40, 30) % 97
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("t", None)
        ds.createDimension("y", 40)
        ds.createDimension("x", 30)
        v = ds.createVariable("v", "f4", ("t", "y", "x"), zlib=True, chunksizes=(1, 20, 15),
                              fill_value=-1.0)
        v[0:5] = data[0:5]  # the last time step is never written: absent chunks
        ds.createVariable("y", "f8", ("y",))[:] = np.linspace(0, 1, 40)
    return data


def _kerchunk_refs(path: Path) -> dict:
    from kerchunk.hdf import SingleHdf5ToZarr

    return SingleHdf5ToZarr(str(path), inline_threshold=100).translate()


def _read_range(url: str, off: int, ln: int) -> bytes:
    with open(url.removeprefix("file://"), "rb") as f:
        f.seek(off)
        return f.read(ln)


def test_kerchunk_output_is_read_exactly(tmp_path: Path):
    nc = tmp_path / "data.nc"
    _netcdf(nc)
    kc = _kerchunk_refs(nc)
    p = tmp_path / "kc.json"
    p.write_text(json.dumps(kc))
    rs = refset.load(p)
    refs = kc["refs"] if "refs" in kc else kc
    assert set(rs) == set(refs)
    for k, v in refs.items():
        got = rs[k]
        if isinstance(v, list):
            assert list(got) == v
        elif isinstance(v, str) and v.startswith("base64:"):
            assert got == base64.b64decode(v[7:])
        else:
            assert got == (v.encode() if isinstance(v, str) else json.dumps(v).encode())
    assert "v" in rs.grids and rs.table("v").count() == 5 * 2 * 2


@pytest.mark.parametrize("fmt", ["json", "v1"])
def test_fsspec_reads_refset_output_with_identical_bytes(tmp_path: Path, fmt: str):
    import fsspec

    nc = tmp_path / "data.nc"
    _netcdf(nc)
    rs = refset.load(_kerchunk_refs(nc))
    out = tmp_path / f"out.{fmt}.json"
    refset.save(rs, out, format=fmt)
    fs = fsspec.filesystem("reference", fo=str(out), simple_templates=False)
    keys = list(rs)
    got = fs.cat(keys)
    for k in keys:
        ref = rs[k]
        want = ref if isinstance(ref, bytes) else _read_range(*ref) if len(ref) == 3 else None
        assert got[k] == want, k


def test_fsspec_save_json_is_read(tmp_path: Path):
    import fsspec

    nc = tmp_path / "data.nc"
    _netcdf(nc)
    kc = _kerchunk_refs(nc)
    fs = fsspec.filesystem("reference", fo=kc)
    out = tmp_path / "fsspec.json"
    fs.save_json(str(out))
    rs = refset.load(out)
    assert rs.to_dict() == refset.load(kc).to_dict()


def test_shared_corpus_reference_sets(corpus: Path):
    # kerchunk's GRIB scanner writes a JSON list of Version 1 sets (one per message), with templates
    for name in ("hrrr.wrfsfcf.subset.json", "hrrr.wrfsubhf.subset.json"):
        path = corpus / "kerchunk-fixtures" / name
        docs = json.loads(path.read_text())
        assert isinstance(docs, list)
        with pytest.raises(InvalidReferences, match=r"is a list of \d+ reference sets, not one: combine them"):
            refset.load(path)
        for doc in docs:
            rs = refset.load(doc)
            tmpl = doc.get("templates", {})
            for k, v in doc["refs"].items():
                if isinstance(v, list):
                    url = v[0].replace("{{u}}", tmpl.get("u", ""))
                    assert list(rs[k]) == [url, *v[1:]]
                elif v.startswith("base64:"):
                    assert rs[k] == base64.b64decode(v[7:])
                else:
                    assert rs[k] == v.encode()
            assert refset.load(rs.to_dict()).to_dict() == rs.to_dict()


def test_large_local_file_is_mapped_not_copied(tmp_path: Path):
    from refset.io.store import read_bytes

    d = {"v/.zarray": zarray([60000], [1])}
    for i in range(60000):
        d[f"v/{i}"] = [f"s3://bucket/a/rather/long/path/to/the/data/file-{i // 50:05d}.nc", i * 997, 997]
    p = tmp_path / "big.json"
    p.write_text(json.dumps(d))
    assert p.stat().st_size > 1 << 22
    assert not isinstance(read_bytes(str(p)), bytes)  # a memory map
    rs = refset.load(p)
    assert rs.to_dict() == d and rs.table("v").count() == 60000
    p.write_text(json.dumps(d)[:-3])  # truncated: the generic parser reports it
    with pytest.raises(InvalidReferences, match="invalid JSON"):
        refset.load(p)


@pytest.mark.parametrize(("block", "small"), [(3, 0), (1 << 16, 0), (1 << 16, 64)])
def test_writer_text_is_the_dict_encoded(monkeypatch, tmp_path: Path, block: int, small: int):
    """The column-wise writer spells every reference as the Version 0 dict does: paths and URLs that
    need JSON escapes, inline text, inline binary, inline text that starts with "base64:", whole
    files, sparse and scalar arrays, and references written in several blocks; ASCII told from
    binary per value (an empty value, a high byte only at a value's end), and "base64:" looked for
    in the value only (not in the bytes of the next one)."""
    import msgspec

    from refset.formats.json import v0 as _json_v0

    monkeypatch.setattr(_json_v0, "WRITE_BLOCK", block)
    monkeypatch.setattr(_json_v0, "SMALL_TABLE", small)  # 0: every array column-wise
    refs = {
        ".zgroup": '{"zarr_format": 2}',
        'we"ird\\ é/.zarray': zarray([6, 3], [2, 2]),
        'we"ird\\ é/0.0': ['s3://b/"q"\\é\n.nc', 10, 20],
        'we"ird\\ é/0.1': ["file:///tmp/whole.bin"],
        'we"ird\\ é/1.0': "base64:" + base64.b64encode(b"\x00\xffbin").decode(),
        'we"ird\\ é/1.1': "text with \"quotes\" and \\ and \t",
        'we"ird\\ é/2.0': "",
        'we"ird\\ é/2.1': "base64:" + base64.b64encode(b"abc\x80").decode(),
        "p/.zarray": zarray([4], [1]),  # short text values: the one after completes "base64:"
        "p/0": "base",
        "p/1": "64:xyz",
        "p/2": "",
        "p/3": "base64:" + base64.b64encode(b"base64:x").decode(),
        "s/.zarray": zarray([], []),
        "s/0": "base64:" + base64.b64encode(b"base64:not really").decode(),
        "big/.zarray": zarray([10**6], [1]),
        "big/999999": ["u.nc", 2**40, 7],
        "big/5": ["u.nc", 0, 0],
    }
    rs = refset.load(refs)
    text = _json_v0.dumps_v0(rs)
    assert text == msgspec.json.encode(rs.to_dict())
    assert refset.load(text).to_dict() == rs.to_dict()
    assert json.loads(text)['we"ird\\ é/0.0'] == ['s3://b/"q"\\é\n.nc', 10, 20]
    empty = refset.load({"a/.zarray": zarray([2], [1]), "a/0": ["u", 1, 2]})
    assert json.loads(_json_v0.dumps_v0(empty)) == empty.to_dict()
    assert json.loads(_json_v0.dumps_v0(refset.load({"a/.zarray": zarray([2], [1])}))) == {
        "a/.zarray": zarray([2], [1])}
    # an array inside a "/"-separated one: both name "a/0/1", which the text holds once
    nested = refset.load({"version": 1, "refs": {"a/.zarray": zarray([2, 2], [1, 1], sep="/"),
                                                 "a/0/.zarray": zarray([2], [1])},
                          "gen": [{"key": "a/{{i}}/{{j}}", "url": "x.nc",
                                   "dimensions": {"i": {"stop": 2}, "j": {"stop": 2}}},
                                  {"key": "a/0/{{j}}", "url": "y.nc", "dimensions": {"j": {"stop": 2}}}]})
    assert _json_v0.dumps_v0(nested) == msgspec.json.encode(nested.to_dict())
