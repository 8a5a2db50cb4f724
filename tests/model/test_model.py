"""The columnar model: chunk grids from metadata, lookups, iteration, to_dict, losslessness."""

from __future__ import annotations

import numpy as np
import pytest

import refset
from refset.model.keys import ChunkGrid, grid_from_metadata
from refset.model.refset import ABSENT, INLINE, RANGE, WHOLE
from tests.helpers import zarr_json, zarray


def test_chunk_refs_go_into_columns():
    d = {
        ".zgroup": '{"zarr_format": 2}',
        "x/.zarray": zarray([10, 10], [5, 5]),
        "x/0.0": ["file:///a.nc", 0, 100],
        "x/1.1": ["file:///b.nc", 100, 50],
        "x/0.1": "base64:AAEC",
        "x/1.0": ["file:///whole.bin"],
    }
    rs = refset.load(d)
    assert list(rs.grids) == ["x"]
    t = rs.table("x")
    assert t.kind.tolist() == [RANGE, INLINE, WHOLE, RANGE]
    assert rs.urls[t.path_id[3]] == "file:///b.nc"
    assert t.offset.tolist() == [0, 0, 0, 100] and t.length.tolist() == [100, 0, 0, 50]
    assert rs["x/0.1"] == b"\x00\x01\x02"
    assert rs["x/1.0"] == ("file:///whole.bin",)
    assert rs["x/1.1"] == ("file:///b.nc", 100, 50)
    # only metadata is in the generic table
    assert rs.other.keys.tolist() == [".zgroup"] and rs.key_table().keys.tolist() == [".zgroup", "x/.zarray"]
    assert len(rs) == 6 and set(rs) == set(d)


def test_absent_and_out_of_grid_keys():
    d = {"x/.zarray": zarray([10, 10], [5, 5]), "x/0.0": ["u", 1, 2]}
    rs = refset.load(d)
    assert "x/1.1" not in rs
    with pytest.raises(KeyError):
        rs["x/1.1"]
    for bad in ("x/2.0", "x/0", "x/0.0.0", "x/00.0", "x/-1.0", "x/0.1 ", "y/0.0"):
        assert bad not in rs
    assert rs.table("x").kind[3] == ABSENT


def test_non_canonical_chunk_like_keys_are_kept_losslessly():
    d = {
        "x/.zarray": zarray([10], [5]),
        "x/0": ["u", 0, 5],
        "x/01": ["u", 5, 5],  # not a canonical chunk key: generic
        "x/7": ["u", 9, 9],  # outside the grid: generic
    }
    rs = refset.load(d)
    assert rs.to_dict() == {k: v for k, v in d.items() if k != "x/.zarray"} | {"x/.zarray": d["x/.zarray"]}
    assert rs["x/01"] == ("u", 5, 5) and rs["x/7"] == ("u", 9, 9)
    assert "x/01" in rs.other.keys.tolist()


def test_slash_separator_scalar_root_and_nested_arrays():
    d = {
        "a/b/c/.zarray": zarray([4, 4], [2, 2], sep="/"),
        "a/b/c/1/0": ["u", 0, 1],
        "s/.zarray": zarray([], []),
        "s/0": "base64:AACAPw==",
        ".zarray": zarray([3], [1]),
        "2": ["root.bin", 3, 4],
    }
    rs = refset.load(d)
    assert set(rs.grids) == {"a/b/c", "s", ""}
    assert rs.locate("a/b/c/1/0") == ("a/b/c", 2)
    assert rs.locate("2") == ("", 2)
    assert rs["s/0"] == b"\x00\x00\x80?"
    assert rs.to_dict()["2"] == ["root.bin", 3, 4]
    assert set(rs) == set(d)


def test_zarr_v3_metadata_and_key_encodings():
    d = {
        "v/zarr.json": zarr_json([4, 6], [2, 3]),
        "v/c/1/1": ["u", 10, 20],
        "w/zarr.json": zarr_json([4], [2], encoding="v2", sep="."),
        "w/1": ["u", 0, 1],
        "d/zarr.json": zarr_json([4, 4], [2, 2], sep="."),
        "d/c.0.1": ["u", 5, 6],
    }
    rs = refset.load(d)
    assert set(rs.grids) == {"v", "w", "d"}
    assert rs.locate("v/c/1/1") == ("v", 3)
    assert rs.locate("w/1") == ("w", 1)
    assert rs.locate("d/c.0.1") == ("d", 1)
    assert rs.to_dict() == d


def test_chunk_grid_grammar():
    g = ChunkGrid((10, 7), (5, 3), ".")
    assert g.grid_shape == (2, 3) and g.nchunks == 6
    assert g.chunk_key((1, 2)) == "1.2" and g.parse("1.2") == (1, 2)
    assert g.parse("1.3") is None and g.parse("1") is None and g.parse("+1.2") is None
    assert grid_from_metadata(".zarray", b'{"shape": [0], "chunks": [0]}') is None
    assert grid_from_metadata(".zarray", b"not json") is None
    assert grid_from_metadata(".zarray", b'{"shape": [0], "chunks": [5]}').nchunks == 0


@pytest.mark.parametrize("meta", [
    (".zarray", '{"shape": [4], "chunks": [2], "dimension_separator": 5}'),
    (".zarray", '{"shape": [4], "chunks": [2], "dimension_separator": ["/"]}'),
    (".zarray", '{"shape": [4], "chunks": [2], "dimension_separator": "./"}'),
    (".zarray", '{"shape": [4], "chunks": [0]}'),
    (".zarray", '{"shape": [4.5], "chunks": [2]}'),
    ("zarr.json", '{"zarr_format": 3, "node_type": "array", "shape": [4], '
                  '"chunk_grid": {"name": "regular", "configuration": [2]}}'),
    ("zarr.json", '{"zarr_format": 3, "node_type": "array", "shape": [4], '
                  '"chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}}, '
                  '"chunk_key_encoding": {"name": "default", "configuration": ["/"]}}'),
])
def test_malformed_metadata_means_no_grid_not_a_crash(meta):
    d = {f"a/{meta[0]}": meta[1], "a/0": ["u", 0, 1], "a/c/0": ["u", 1, 1]}
    rs = refset.load(d)
    assert "a" not in rs.grids
    assert rs.to_dict() == d


def test_later_duplicate_key_wins():
    rs = refset.ReferenceSet.from_items(
        [("x/.zarray", zarray([4], [2]).encode()), ("x/0", ("a", 0, 1)), ("x/0", ("b", 2, 3))]
    )
    assert rs["x/0"] == ("b", 2, 3)


def test_columns_use_small_dtypes_and_big_values_survive():
    big = 2**40 + 3
    d = {"x/.zarray": zarray([4], [1]), "x/0": ["u", big, 7], "x/1": ["u", 1, big]}
    rs = refset.load(d)
    t = rs.table("x")
    assert t.offset.dtype == np.uint64 and t.path_id.dtype == np.uint16
    assert rs["x/0"] == ("u", big, 7) and rs["x/1"] == ("u", 1, big)
    small = refset.load({"x/.zarray": zarray([4], [1]), "x/0": ["u", 5, 7]}).table("x")
    assert small.offset.dtype == np.uint32 and small.kind.dtype == np.uint8


def test_huge_sparse_grid_stays_a_sparse_grid():
    d = {"x/.zarray": zarray([10**9, 10**6], [1, 1]), "x/5.7": ["u", 0, 1]}
    rs = refset.load(d)
    t = rs.table("x")
    assert "x" in rs.grids and t.is_sparse and t.nbytes() < 100  # not allocated densely
    assert rs["x/5.7"] == ("u", 0, 1) and "x/5.8" not in rs and rs.locate("x/5.7") == ("x", 5 * 10**6 + 7)
    assert rs.to_dict()["x/5.7"] == ["u", 0, 1]
    assert rs.other.keys.tolist() == [] and list(rs.documents) == ["x/.zarray"]


def test_to_dict_inline_spelling():
    d = {"a": "text", "b": "base64:" + "AP8=", "c": {"k": [1, 2]}, "d": "base64:YmFzZTY0Olg="}
    out = refset.load(d).to_dict()
    assert out["a"] == "text"
    assert out["b"] == "base64:AP8="  # not ASCII: stays base64
    assert out["c"] == '{"k": [1, 2]}'  # a JSON object value is that JSON file
    # inline bytes that spell "base64:..." must stay base64 or they would decode on reload
    assert out["d"] == "base64:YmFzZTY0Olg="
    assert refset.load(out)["d"] == b"base64:X"
