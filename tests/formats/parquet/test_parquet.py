"""Parquet reference sets (fsspec's LazyReferenceMapper layout): refset's reader and writer on their own.

Interoperability with the real peers (fsspec, kerchunk, fastparquet, zarr) is in test_interop.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refset
from refset.errors import InvalidReferences, Unsupported
from refset.formats.parquet import writer as _parquet_write
from tests.helpers import zarr_json, zarray

URL = "s3://bucket/data/file-{}.nc"


def _norm(d: dict) -> dict:
    """A V0 dict with JSON metadata parsed, so that formatting differences do not matter."""
    out = {}
    for k, v in d.items():
        if k.rpartition("/")[2].startswith(".z"):
            out[k] = json.loads(v)
        else:
            out[k] = v
    return out


def roundtrip(refs: dict, tmp_path, **kw) -> refset.ReferenceSet:
    dest = tmp_path / "out.parq"
    refset.save(refs, dest, **kw)
    back = refset.load(str(dest))
    assert _norm(back.to_dict()) == _norm(refset.load(refs).to_dict())
    return back


def grid_refs(name: str, shape, chunks, *, sep=None, every=1, inline_every=0, nurls=3) -> dict:
    refs = {f"{name}/.zarray": zarray(list(shape), list(chunks), sep=sep),
            f"{name}/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": [f"d{i}" for i in range(len(shape))]})}
    gshape = tuple(-(-s // c) for s, c in zip(shape, chunks, strict=True))
    for flat, idx in enumerate(np.ndindex(*gshape) if gshape else [()]):
        if flat % every:
            continue
        key = f"{name}/" + ((sep or ".").join(map(str, idx)) if idx else "0")
        if inline_every and flat % inline_every == 0:
            refs[key] = f"inline-{flat}"
        else:
            refs[key] = [URL.format(flat % nurls), 1000 + 10 * flat, 10 + flat % 7]
    return refs


BASE = {".zgroup": json.dumps({"zarr_format": 2}), ".zattrs": json.dumps({"title": "t"})}


# -- round trips and edge cases ---------------------------------------------------------------------
@pytest.mark.parametrize("record_size", [1, 3, 7, 100, 20_000])
def test_roundtrip_2d_many_records(tmp_path, record_size):
    refs = {**BASE, **grid_refs("a", (10, 13), (2, 3), every=2, inline_every=5)}
    back = roundtrip(refs, tmp_path, record_size=record_size)
    nrec = -(-25 // record_size)
    names = sorted(os.listdir(tmp_path / "out.parq" / "a"))
    assert names == sorted(f"refs.{i}.parq" for i in range(nrec))
    assert back.format_info()["record_size"] == record_size


def test_scalar_1d_4d_nested_slash(tmp_path):
    refs = {**BASE, ".zgroup": json.dumps({"zarr_format": 2}),
            **grid_refs("scalar", (), ()),
            **grid_refs("one", (100,), (7,), every=3),
            **grid_refs("four", (3, 4, 5, 6), (2, 2, 2, 2), every=2),
            **grid_refs("deep/name", (5, 5), (2, 2)),
            **grid_refs("slash", (6, 6), (2, 4), sep="/"),
            "deep/.zgroup": json.dumps({"zarr_format": 2})}
    back = roundtrip(refs, tmp_path, record_size=4)
    out = tmp_path / "out.parq"
    assert (out / "deep" / "name" / "refs.0.parq").is_file()
    assert (out / "scalar" / "refs.0.parq").is_file()
    assert back["scalar/0"] == (URL.format(0), 1000, 10)
    assert back["slash/1/1"] == tuple(refs["slash/1/1"])
    assert back["four/1.1.2.1"] == tuple(refs["four/1.1.2.1"])


def test_empty_array_and_all_missing(tmp_path):
    refs = {**BASE, "empty/.zarray": zarray([0, 10], [5, 5]),
            "missing/.zarray": zarray([40], [1]),
            **grid_refs("some", (40,), (1,), every=30)}
    back = roundtrip(refs, tmp_path, record_size=10)
    out = tmp_path / "out.parq"
    assert not (out / "empty").exists()  # no chunks, no records
    assert not (out / "missing").exists()  # a grid without chunks is held sparse: no records either
    assert "missing/3" not in back and "some/30" in back and "some/31" not in back
    assert back.table("missing").count() == 0
    with pytest.raises(KeyError):
        back["missing/0"]


def test_all_inline_array(tmp_path):
    refs = {**BASE, **grid_refs("x", (30,), (1,), inline_every=1)}
    refs["x/3"] = "base64:" + "AAEC"  # binary inline data
    back = roundtrip(refs, tmp_path, record_size=8)
    assert back["x/3"] == b"\x00\x01\x02"
    assert back["x/4"] == b"inline-4"
    t = pq.read_table(tmp_path / "out.parq" / "x" / "refs.0.parq")
    assert t.column("path").null_count == t.num_rows


def test_whole_file_and_zero_length_range(tmp_path):
    refs = {**BASE, "a/.zarray": zarray([4], [1]), "a/0": [URL.format(0)], "a/1": [URL.format(1), 0, 0],
            "a/2": [URL.format(2), 5, 0], "a/3": [URL.format(3), 0, 8]}
    dest = tmp_path / "o.parq"
    refset.save(refs, dest)
    back = refset.load(str(dest))
    assert back["a/0"] == (URL.format(0),)
    assert back["a/3"] == (URL.format(3), 0, 8)
    # a zero-length range would read back as a whole file (size 0): it is stored as empty inline data
    assert back["a/1"] == b"" and back["a/2"] == b""


@pytest.mark.parametrize("pad", [False, True])
def test_padding(tmp_path, pad):
    refs = {**BASE, **grid_refs("a", (25,), (1,))}
    back = roundtrip(refs, tmp_path, record_size=10, pad=pad)
    rows = pq.ParquetFile(tmp_path / "out.parq" / "a" / "refs.2.parq").metadata.num_rows
    assert rows == (10 if pad else 5)
    info = back.format_info()
    assert info["rows_stored"] == (30 if pad else 25)
    assert info["rows_padding"] == (5 if pad else 0)
    assert info["rows_used"] == 25 and info["records"] == 3 and info["record_size"] == 10


def test_bad_keys_are_key_errors(tmp_path):
    refs = {**BASE, **grid_refs("a", (4, 6), (2, 3))}  # grid 2 x 2
    refset.save(refs, tmp_path / "o.parq", record_size=3)
    rs = refset.load(str(tmp_path / "o.parq"))
    assert rs["a/1.1"] == tuple(refs["a/1.1"])
    for bad in ["a/0.2", "a/2.0", "a/0.3", "a/1", "a/0.0.0", "a/01.1", "a/-1.0", "a/1/1", "b/0.0",
                "a/.zgroup", "a/x.y", ""]:
        assert bad not in rs
        with pytest.raises(KeyError):
            rs[bad]
    assert 5 not in rs


def test_lazy_reads_only_what_it_needs(tmp_path, monkeypatch):
    refs = {**BASE, **grid_refs("a", (100,), (1,)), **grid_refs("b", (100,), (1,))}
    refset.save(refs, tmp_path / "o.parq", record_size=10)
    from refset.io.store import LocalStore

    read: list[str] = []
    orig = LocalStore.read

    def recorded(self, path="", start=None, end=None):
        read.append(path)
        return orig(self, path, start, end)

    monkeypatch.setattr(LocalStore, "read", recorded)  # every read of the set goes through the byte layer
    rs = refset.load(str(tmp_path / "o.parq"), cache_size=2)
    assert read == [".zmetadata"]
    assert rs["a/55"] == tuple(refs["a/55"])
    assert rs["a/59"] == tuple(refs["a/59"])
    assert read[1:] == ["a/refs.5.parq"]
    rs["a/1"], rs["b/1"], rs["a/99"]
    assert len(rs._blocks) == 2  # LRU bound
    assert read[2:] == ["a/refs.0.parq", "b/refs.0.parq", "a/refs.9.parq"]
    rs["a/99"]
    assert len(read) == 5


def test_metadata_keys_and_len(tmp_path):
    refs = {**BASE, **grid_refs("a", (10,), (1,), every=2)}
    back = roundtrip(refs, tmp_path)
    assert json.loads(back[".zattrs"]) == {"title": "t"}
    assert len(back) == len(refs)
    assert sorted(back) == sorted(refs)
    doc = json.loads((tmp_path / "out.parq" / ".zmetadata").read_text())
    assert doc["record_size"] == _parquet_write.DEFAULT_RECORD_SIZE
    assert doc["metadata"]["a/.zarray"]["shape"] == [10]


def test_categorical_threshold(tmp_path):
    refs = {**BASE, **grid_refs("a", (100,), (1,), nurls=2)}
    refset.save(refs, tmp_path / "d.parq", record_size=100)
    refset.save(refs, tmp_path / "s.parq", record_size=100, categorical_threshold=1000)
    assert pa.types.is_dictionary(pq.read_schema(tmp_path / "d.parq/a/refs.0.parq").field("path").type)
    assert pa.types.is_string(pq.read_schema(tmp_path / "s.parq/a/refs.0.parq").field("path").type)
    assert refset.load(str(tmp_path / "d.parq")).to_dict() == refset.load(str(tmp_path / "s.parq")).to_dict()


def test_sparse_array_written_and_read_sparsely(tmp_path):
    # a grid far larger than what it holds: a sparse table; only records holding chunks are written
    refs = {**BASE, "big/.zarray": zarray([4_000_000], [1]), "big/3999999": [URL.format(0), 1, 2],
            "big/17": [URL.format(1), 3, 4]}
    rs = refset.load(refs)
    back = roundtrip(rs.to_dict(), tmp_path, record_size=1_000_000)
    assert sorted(os.listdir(tmp_path / "out.parq" / "big")) == ["refs.0.parq", "refs.3.parq"]
    assert back["big/17"] == (URL.format(1), 3, 4)
    assert "big/18" not in back
    assert rs.table("big").is_sparse and back.table("big").is_sparse


# -- refused input ----------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, match", [
    ({"key0": "data"}, "outside any zarr v2 chunk grid"),
    ({"ref": ["s3://b/f", 0, 10]}, "outside any zarr v2 chunk grid"),
    ({"v3/zarr.json": zarr_json([4], [2]), "v3/c/0": ["s3://b/f", 0, 10]}, "zarr v3"),
    ({".zarray": zarray([4], [2]), "0": ["s3://b/f", 0, 10]}, "root"),
])
def test_refused(tmp_path, extra, match):
    with pytest.raises(Unsupported, match=match):
        refset.save({**BASE, **extra}, tmp_path / "o.parq")
    assert not (tmp_path / "o.parq").exists()
    assert os.listdir(tmp_path) == []


def test_unknown_options(tmp_path):
    with pytest.raises(Unsupported):
        refset.save(BASE, tmp_path / "o.parq", bogus=1)
    with pytest.raises(Unsupported):
        refset.save(BASE, tmp_path / "o.parq", record_size=0)


def test_invalid_directories(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(InvalidReferences, match=r"\.zmetadata"):
        refset.load(str(tmp_path / "d"))
    (tmp_path / "d" / ".zmetadata").write_text('{"metadata": {}, "record_size": 0}')
    with pytest.raises(InvalidReferences, match="record_size"):
        refset.load(str(tmp_path / "d"))
    (tmp_path / "d" / ".zmetadata").write_text("not json")
    with pytest.raises(InvalidReferences):
        refset.load(str(tmp_path / "d"))
    refs = {**BASE, **grid_refs("a", (4,), (1,))}
    refset.save(refs, tmp_path / "o.parq")
    (tmp_path / "o.parq" / "a" / "refs.0.parq").write_bytes(b"garbage")
    rs = refset.load(str(tmp_path / "o.parq"))
    with pytest.raises(InvalidReferences, match=r"refs\.0\.parq"):
        rs["a/0"]


# -- atomic writing ---------------------------------------------------------------------------------
def test_failure_leaves_nothing_and_keeps_old_output(tmp_path, monkeypatch):
    refs = {**BASE, **grid_refs("a", (50,), (1,))}
    dest = tmp_path / "o.parq"
    refset.save(refs, dest, record_size=10)
    before = refset.load(str(dest)).to_dict()
    calls = {"n": 0}
    real = pq.write_table

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real(*a, **k)

    monkeypatch.setattr(pq, "write_table", flaky)
    changed = {**refs, "a/0": [URL.format(9), 1, 1]}
    with pytest.raises(OSError, match="disk full"):
        refset.save(changed, dest, record_size=10)
    assert sorted(os.listdir(tmp_path)) == ["o.parq"]
    assert refset.load(str(dest)).to_dict() == before
    calls["n"] = 0
    with pytest.raises(OSError, match="disk full"):
        refset.save(changed, tmp_path / "new.parq", record_size=10)
    assert sorted(os.listdir(tmp_path)) == ["o.parq"]


def test_overwrite_replaces(tmp_path):
    dest = tmp_path / "o.parq"
    refset.save({**BASE, **grid_refs("a", (50,), (1,))}, dest, record_size=10)
    refset.save({**BASE, **grid_refs("b", (5,), (1,))}, dest, record_size=10)
    assert sorted(os.listdir(dest)) == [".zmetadata", "b"]
    assert sorted(os.listdir(tmp_path)) == ["o.parq"]
    assert oct(os.stat(dest).st_mode & 0o777) != oct(0o700) or os.umask(0o022) == 0o077


def test_fsspec_url_memory(tmp_path):
    refs = {**BASE, **grid_refs("a", (30,), (1,), every=2)}
    refset.save(refs, "memory://refset-test/o.parq", format="parquet", record_size=7)
    back = refset.load("memory://refset-test/o.parq")
    assert _norm(back.to_dict()) == _norm(refset.load(refs).to_dict())


def test_a_set_at_a_filesystem_root(tmp_path, monkeypatch):
    """A parquet set written at the root of a filesystem (``memory:///``) loads from there, not as
    a local path (issue 30, one of fsspec's own tests)."""
    import fsspec

    from refset.errors import Unsupported

    monkeypatch.chdir(tmp_path)  # where a local path "memory:" would be made
    mem = fsspec.filesystem("memory")
    before = set(mem.ls("/", detail=False))
    refs = {**BASE, **grid_refs("a", (30,), (1,), every=2)}
    try:
        refset.save(refs, "memory:///made-elsewhere", format="parquet", record_size=7)
        for p in mem.find("/made-elsewhere"):  # put at the root, as fsspec's LazyReferenceMapper can
            mem.cp_file(p, p.replace("/made-elsewhere", "", 1))
        mem.rm("/made-elsewhere", recursive=True)
        assert mem.exists("/.zmetadata") and not os.listdir(tmp_path)
        assert _norm(refset.load("memory:///").to_dict()) == _norm(refset.load(refs).to_dict())
        with pytest.raises(Unsupported, match="not at the root of a filesystem"):  # it would clear the root
            refset.save(refs, "memory:///", format="parquet")
        assert _norm(refset.load("memory:///").to_dict()) == _norm(refset.load(refs).to_dict())
    finally:
        for p in set(mem.ls("/", detail=False)) - before:
            mem.rm(p, recursive=True)


def test_save_infers_parquet_and_converts_from_parquet(tmp_path):
    refs = {**BASE, **grid_refs("a", (30,), (1,), every=2)}
    refset.save(refs, tmp_path / "o.parquet", record_size=7)
    rs = refset.load(str(tmp_path / "o.parquet"))
    refset.save(rs, tmp_path / "again.parq", record_size=4)  # parquet -> parquet
    refset.save(rs, tmp_path / "o.json")
    assert _norm(refset.load(str(tmp_path / "again.parq")).to_dict()) == _norm(
        refset.load(str(tmp_path / "o.json")).to_dict())


def test_needs_neither_pandas_nor_fastparquet(tmp_path):
    refs = {**BASE, **grid_refs("a", (30,), (1,), inline_every=4)}
    code = (
        "import sys\n"
        "class Block:  # make pandas and fastparquet unimportable\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('pandas', 'fastparquet'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import refset\n"
        f"refset.save({refs!r}, {str(tmp_path / 'o.parq')!r}, record_size=7)\n"
        f"rs = refset.load({str(tmp_path / 'o.parq')!r})\n"
        "assert rs['a/3'] == ('s3://bucket/data/file-0.nc', 1030, 13), rs['a/3']\n"
        "assert rs['a/4'] == b'inline-4'\n"
        "rs.to_dict(); rs.format_info()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_open_does_not_import_pyarrow(tmp_path):
    refs = {**BASE, **grid_refs("a", (30,), (1,))}
    refset.save(refs, tmp_path / "o.parq", record_size=7)
    code = (
        "import sys, refset\n"
        f"rs = refset.load({str(tmp_path / 'o.parq')!r})\n"
        "rs['.zgroup']; rs['a/.zarray']\n"
        "assert 'pyarrow' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
