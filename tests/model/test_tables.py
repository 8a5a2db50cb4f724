"""The producers' API: ReferenceSet.from_arrays (checked), chunk tables dense and sparse, and the
vectorised table operations combine builds on (union_urls, concat_tables, grid views)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import refset
from refset.errors import InvalidReferences, Unsupported
from refset.model.keys import ChunkGrid
from refset.model.table import ABSENT, INLINE, RANGE, ChunkTable, KeyTable, concat_tables, union_urls
from tests.servedata import raw_array_set

URLS = ["s3://b/f0.nc", "s3://b/f1.nc"]


def _meta(shape, chunks, name="v"):
    return {".zgroup": {"zarr_format": 2},
            f"{name}/.zarray": {"shape": shape, "chunks": chunks, "dtype": "<f4", "compressor": None,
                                "fill_value": None, "filters": None, "order": "C", "zarr_format": 2},
            f"{name}/.zattrs": '{"_ARRAY_DIMENSIONS": ["t", "x"]}'}


def _arrays(grid=(2, 3)):
    pid = np.array([[0, 1, -1], [1, -1, 0]])
    off = np.arange(6).reshape(grid) * 100
    ln = np.full(grid, 100)
    return {"path_id": pid, "offset": off, "length": ln}


def test_from_arrays_builds_the_set():
    rs = refset.ReferenceSet.from_arrays(
        {**_meta([4, 6], [2, 2]), "w/.zarray": json.dumps(_meta([3], [1])["v/.zarray"])},
        {"v": {**_arrays(), "inline": {(1, 1): b"abc"}}}, URLS)
    assert set(rs.grids) == {"v", "w"}
    assert rs["v/0.0"] == (URLS[0], 0, 100) and rs["v/1.2"] == (URLS[0], 500, 100)
    assert rs["v/1.1"] == b"abc" and "v/0.2" not in rs
    assert rs.table("w").count() == 0  # described but never written: every chunk is the fill value
    assert json.loads(rs["v/.zarray"])["shape"] == [4, 6] and rs["v/.zattrs"].startswith(b'{"_ARRAY')
    assert len(rs) == 3 + 1 + 5
    assert refset.load(rs.to_dict()).to_dict() == rs.to_dict()
    # the columns are the set's own: changing the caller's arrays later changes nothing
    a = _arrays()
    rs2 = refset.ReferenceSet.from_arrays(_meta([4, 6], [2, 2]), {"v": a}, URLS)
    a["offset"][0, 0] = 999
    assert rs2["v/0.0"] == (URLS[0], 0, 100)


def test_from_arrays_accepts_any_integer_dtype_and_scalars():
    grid = (2, 3)
    arrays = {"path_id": np.zeros(grid, np.int8), "offset": np.arange(6, dtype=np.uint64).reshape(grid),
              "length": np.full(grid, 7, np.uint16)}
    rs = refset.ReferenceSet.from_arrays(_meta([4, 6], [2, 2]), {"v": arrays}, URLS[:1])
    assert rs["v/1.2"] == (URLS[0], 5, 7)
    s = refset.ReferenceSet.from_arrays(
        {"s/.zarray": {"shape": [], "chunks": [], "dtype": "<f4", "compressor": None, "fill_value": 0,
                       "filters": None, "order": "C", "zarr_format": 2}},
        {"s": {"path_id": np.array(0), "offset": np.array(4), "length": np.array(4)}}, URLS[:1])
    assert s["s/0"] == (URLS[0], 4, 4)


@pytest.mark.parametrize("change, message", [
    ({"offset": np.zeros((3, 2), int)}, r'arrays\["v"\]\["offset"\]: shape \(3, 2\) does not match the chunk grid \(2, 3\)'),
    ({"offset": np.zeros((2, 3), np.float64)}, r'arrays\["v"\]\["offset"\]: must be an integer array, got dtype float64'),
    ({"path_id": np.array([[0, 0, 0], [0, -2, 0]])}, r'arrays\["v"\]\["path_id"\]\[1, 1\]: must be -1 \(absent\) or an index'),
    ({"path_id": np.array([[0, 0, 0], [0, 0, 2]])}, r'arrays\["v"\]\["path_id"\]\[1, 2\]: 2 is outside the URL table of 2'),
    ({"offset": np.array([[0, 0, 0], [-5, -7, 0]])}, r'arrays\["v"\]\["offset"\]\[1, 0\]: must be a non-negative integer, got -5'),
    ({"length": np.array([[0, -1, 0], [0, 0, 0]])}, r'arrays\["v"\]\["length"\]\[0, 1\]: must be a non-negative'),
    ({"offset": np.array([[0, 2**62, 0], [0, 0, 0]]), "length": np.full((2, 3), 2**62)},
     r'arrays\["v"\]\["offset"\]\[0, 1\]: offset 4611686018427387904 \+ length 4611686018427387904 must be below 2\*\*63'),
    ({"offset": np.array([[0, 0, 0], [0, 0, 2**63]], np.uint64)}, r'\[1, 2\]: offset 9223372036854775808'),
    ({"extra": np.zeros((2, 3))}, r'arrays\["v"\]: unknown field "extra"'),
    ({"inline": {(5, 5): b"x"}}, r'arrays\["v"\]\["inline"\]\[\(5, 5\)\]: not a chunk index'),
    ({"inline": {0: "text"}}, r"inline data must be bytes, got str"),
])
def test_from_arrays_problems_name_array_and_chunk(change, message):
    with pytest.raises(InvalidReferences, match=message):
        refset.ReferenceSet.from_arrays(_meta([4, 6], [2, 2]), {"v": {**_arrays(), **change}}, URLS)


def test_from_arrays_problems_outside_the_arrays():
    a = {"v": _arrays()}
    with pytest.raises(InvalidReferences, match=r'arrays\["v"\]: "length" is required'):
        refset.ReferenceSet.from_arrays(_meta([4, 6], [2, 2]), {"v": {"path_id": 0, "offset": 0}}, URLS)
    with pytest.raises(InvalidReferences, match=r'arrays\["q"\]: no chunk grid: metadata has no "q/.zarray"'):
        refset.ReferenceSet.from_arrays(_meta([4, 6], [2, 2]), {"q": _arrays()}, URLS)
    with pytest.raises(InvalidReferences, match=r"urls\[1\]: must be a string, got int"):
        refset.ReferenceSet.from_arrays(_meta([4, 6], [2, 2]), a, ["u", 5])
    with pytest.raises(InvalidReferences, match=r'metadata\["v/0.0"\]: a chunk key of array \'v\''):
        refset.ReferenceSet.from_arrays({**_meta([4, 6], [2, 2]), "v/0.0": b"x"}, a, URLS)
    with pytest.raises(InvalidReferences, match=r'metadata\["x"\]: must be a dict, JSON text or bytes'):
        refset.ReferenceSet.from_arrays({**_meta([4, 6], [2, 2]), "x": 5}, a, URLS)


def _table_pair(rng, grid_shape, fill):
    """The same references as a dense and as a sparse table."""
    g = ChunkGrid(tuple(grid_shape), (1,) * len(grid_shape))
    n = g.nchunks
    flat = np.flatnonzero(rng.random(n) < fill)
    kind = np.where(rng.random(flat.size) < 0.1, INLINE, RANGE).astype(np.uint8)
    pid = rng.integers(0, 3, flat.size)
    off = rng.integers(0, 2**40, flat.size)
    ln = rng.integers(1, 2**20, flat.size)
    inline = {int(f): bytes([int(f) % 251]) for f in flat[kind == INLINE]}
    dense = ChunkTable.from_entries(g, flat, kind, pid, off, ln, inline)
    sparse = ChunkTable(g, kind, pid, off, ln, inline, flat=flat)
    return dense, sparse


def test_dense_and_sparse_tables_answer_alike():
    rng = np.random.default_rng(1)
    dense, sparse = _table_pair(rng, (30, 40), 0.3)
    assert not dense.is_sparse and sparse.is_sparse
    for a, b in zip(dense.entries(), sparse.entries(), strict=True):
        np.testing.assert_array_equal(a, b)
    probe = rng.integers(0, 1200, 500)
    for a, b in zip(dense.take(probe), sparse.take(probe), strict=True):
        np.testing.assert_array_equal(a, b)
    for f in probe.tolist():
        assert dense.row(f) == sparse.row(f)
    np.testing.assert_array_equal(dense.kind, sparse.kind)
    np.testing.assert_array_equal(dense.kind_counts(), sparse.kind_counts())
    assert dense.count() == sparse.count()
    gv = dense.grid_view()
    assert gv.offset.shape == (30, 40) and (gv.path_id[gv.kind != RANGE] == -1).all()
    with pytest.raises(ValueError):
        dense.offset[0] = 1  # read-only columns


def test_representation_follows_the_fill():
    g = ChunkGrid((2**31,), (1,))
    t = ChunkTable.from_entries(g, np.array([7, 2**31 - 1, 7]), np.array([RANGE] * 3), np.array([0, 0, 1]),
                                np.array([1, 2, 3]), np.array([4, 5, 6]))
    assert t.is_sparse and t.present().tolist() == [7, 2**31 - 1] and t.row(7) == (RANGE, 1, 3, 6, None)
    assert t.row(8)[0] == ABSENT and t.nbytes() < 200
    with pytest.raises(Unsupported, match="sparse"):
        t.offset  # noqa: B018 - 2**31 cells would not fit
    small = ChunkTable.from_entries(ChunkGrid((100,), (1,)), np.array([3]), np.array([RANGE]),
                                    np.array([0]), np.array([1]), np.array([1]))
    assert not small.is_sparse


def test_union_urls_and_concat_along_each_axis():
    u, maps = union_urls([["a", "b"], ["c", "a"], []])
    assert u == ("a", "b", "c") and [m.tolist() for m in maps] == [[0, 1], [2, 0], []]
    rng = np.random.default_rng(2)
    parts = []
    for _ in range(3):
        g = ChunkGrid((2, 6, 4), (1, 2, 2))
        flat = np.flatnonzero(rng.random(g.nchunks) < 0.7)
        parts.append(ChunkTable.from_entries(g, flat, np.full(flat.size, RANGE), np.zeros(flat.size, int),
                                             rng.integers(0, 1000, flat.size), np.full(flat.size, 9)))
    for axis in range(3):
        out = concat_tables(parts, axis, path_maps=[np.array([i]) for i in range(3)])
        want_shape = [2, 6, 4]
        want_shape[axis] *= 3
        assert out.grid.shape == tuple(want_shape)
        for name in ("kind", "offset", "length"):
            expect = np.concatenate([getattr(p.grid_view(), name) for p in parts], axis=axis)
            np.testing.assert_array_equal(getattr(out.grid_view(), name), expect)
        expect_pid = np.concatenate([np.where(p.grid_view().path_id >= 0, i, -1) for i, p in enumerate(parts)],
                                    axis=axis)
        np.testing.assert_array_equal(out.grid_view().path_id, expect_pid)
    # sparse tables concatenate through their entries
    big = [ChunkTable.from_entries(ChunkGrid((2**21, 4), (1, 1)), np.array([i, 5]), np.full(2, RANGE),
                                   np.zeros(2, int), np.array([i, 1]), np.array([1, 1])) for i in range(2)]
    out = concat_tables(big, 0)
    assert out.is_sparse and out.grid.shape == (2**22, 4)
    assert out.present().tolist() == [0, 5, 2**23 + 1, 2**23 + 5]


def test_concat_refuses_tables_that_do_not_fit():
    a = ChunkTable.empty(ChunkGrid((3, 4), (2, 2)))
    b = ChunkTable.empty(ChunkGrid((4, 4), (2, 2)))
    with pytest.raises(InvalidReferences, match="table 0: length 3 along axis 0 is not a multiple of the chunk length 2"):
        concat_tables([a, b], 0)
    with pytest.raises(InvalidReferences, match=r"table 1: chunks \(1, 2\) differ"):
        concat_tables([b, ChunkTable.empty(ChunkGrid((4, 4), (1, 2)))], 0)
    with pytest.raises(InvalidReferences, match="table 1: shape"):
        concat_tables([b, ChunkTable.empty(ChunkGrid((4, 6), (2, 2)))], 0)
    assert concat_tables([b, a], 0).grid.shape == (7, 4)  # the last one may end inside a chunk


def test_concatenated_sets_read_back_the_concatenated_data(tmp_path):
    """Two real files combined along t with the table operations read as np.concatenate does."""
    xr = pytest.importorskip("xarray")
    sets, datas = [], []
    for i in range(2):
        d = tmp_path / f"f{i}"
        d.mkdir()
        rs, data = raw_array_set(d, shape=(3, 20, 30), chunks=(1, 10, 10), seed=i)
        sets.append(rs)
        datas.append(data)
    urls, maps = union_urls([rs.urls for rs in sets])
    table = concat_tables([rs.table("v") for rs in sets], 0, path_maps=maps)
    meta = {k: bytes(sets[0][k]) for k in (".zgroup", "v/.zattrs")}
    meta["v/.zarray"] = {**json.loads(sets[0]["v/.zarray"]), "shape": list(table.grid.shape)}
    gv = table.grid_view()
    combined = refset.ReferenceSet.from_arrays(meta, {"v": {"path_id": gv.path_id, "offset": gv.offset,
                                                            "length": gv.length}}, urls)
    ds = refset.open_dataset(combined)
    np.testing.assert_array_equal(ds.v.values, np.concatenate(datas))
    assert isinstance(ds, xr.Dataset)


def test_sparse_grid_of_2_31_cells_stays_small(tmp_path):
    """A 2**31-cell grid holding 10 chunks: a sparse table, through every format, in under 64 MB."""
    script = textwrap.dedent(f"""
        import json, resource, sys
        import io, jinja2, pyarrow as pa, pyarrow.parquet as pq, zstandard
        import refset
        # libraries first, pyarrow's first write included (~50 MB of its own): the figure is the data's
        pq.write_table(pa.table({{"a": [1]}}), io.BytesIO(), compression="zstd")
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        d = {{"x/.zarray": json.dumps({{"shape": [2**31], "chunks": [1], "dtype": "<f4", "compressor": None,
                                       "fill_value": 0, "filters": None, "order": "C", "zarr_format": 2}})}}
        cells = [i * 214748363 for i in range(10)]
        d.update({{f"x/{{c}}": ["s3://b/f.nc", c, 10] for c in cells}})
        out = {str(tmp_path)!r}
        json.dump(d, open(out + "/s.json", "w"))
        for src in (d, out + "/s.json"):
            rs = refset.load(src)
            assert "x" in rs.grids and rs.table("x").is_sparse
            assert rs["x/214748363"] == ("s3://b/f.nc", 214748363, 10) and "x/5" not in rs
        for fmt in ("json", "v1", "parquet", "packed"):
            dest = f"{{out}}/s.{{fmt}}"
            refset.save(rs, dest, format=fmt)
            back = refset.load(dest)
            norm = lambda d: {{k: json.loads(v) if k.endswith(".zarray") else v for k, v in d.items()}}
            assert norm(back.to_dict()) == norm(rs.to_dict()), fmt
            assert back["x/1932735267"] == ("s3://b/f.nc", 1932735267, 10) and "x/6" not in back
            assert back.table("x").is_sparse and len(back) == 11
        rs = refset.load(out + "/s.json", lazy=True)
        assert rs.table("x").count() == 10
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print((peak - base) // 1024)
    """)
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    assert int(got.stdout.strip()) < 64, f"peak grew by {got.stdout.strip()} MB"


def test_constructors_refuse_inconsistent_tables():
    g = ChunkGrid((4,), (1,))
    z = np.zeros(2, np.int64)
    with pytest.raises(InvalidReferences, match="must ascend"):
        ChunkTable(g, np.array([RANGE, RANGE], np.uint8), z, z, z, flat=np.array([3, 0]))
    with pytest.raises(InvalidReferences, match="every inline chunk needs its bytes"):
        ChunkTable(g, np.array([RANGE, INLINE, 0, 0], np.uint8), *(np.zeros(4, int),) * 3)
    with pytest.raises(InvalidReferences, match="code 7"):
        ChunkTable(g, np.array([7, 0, 0, 0], np.uint8), *(np.zeros(4, int),) * 3)
    t = ChunkTable.from_entries(g, np.array([1]), np.array([RANGE]), np.array([0]), np.array([5]), np.array([6]))
    with pytest.raises(InvalidReferences, match="outside the grid"):
        t.take(np.array([4]))
    assert t.row(-1)[0] == ABSENT and t.row(4)[0] == ABSENT
    meta = refset.load(_meta_doc()).key_table()  # the documents and the other keys
    with pytest.raises(InvalidReferences, match="path id 0 outside the URL table of 0"):
        refset.ReferenceSet.from_arrays({}, {"v": _v_table()}, [], other=meta)
    with pytest.raises(InvalidReferences, match="not the one its metadata describes"):
        refset.ReferenceSet.from_arrays({}, {"v": _v_table(ChunkGrid((6, 6), (2, 2)))}, URLS, other=meta)
    rows = {k: (INLINE, 0, 0, 0, v.encode()) for k, v in {**_meta_doc(), "v/1.1": "x"}.items()}
    with pytest.raises(InvalidReferences, match="is a chunk key of array 'v'"):
        refset.ReferenceSet.from_arrays({}, {"v": _v_table()}, URLS, other=KeyTable.from_items(rows))
    assert refset.ReferenceSet.from_arrays({}, {"v": _v_table()}, URLS, other=meta)["v/0.1"] == (URLS[0], 7, 8)
    # documents given as metadata: the same set
    docs = {k: v for k, v in _meta_doc().items()}
    assert refset.ReferenceSet.from_arrays(docs, {"v": _v_table()}, URLS).to_dict() == \
        refset.ReferenceSet.from_arrays({}, {"v": _v_table()}, URLS, other=meta).to_dict()


def _meta_doc():
    return {k: json.dumps(v) if isinstance(v, dict) else v for k, v in _meta([4, 6], [2, 2]).items()}


def _v_table(grid=None):
    g = grid or ChunkGrid((4, 6), (2, 2))
    return ChunkTable.from_entries(g, np.array([1]), np.array([RANGE]), np.array([0]), np.array([7]),
                                   np.array([8]))


def test_bad_arguments_are_refset_errors():
    t = _v_table()
    with pytest.raises(InvalidReferences, match="axis"):
        concat_tables([t, t], "0")  # type: ignore[arg-type]
    with pytest.raises(InvalidReferences, match="table 1 is a dict"):
        concat_tables([t, {}], 0)  # type: ignore[list-item]
    with pytest.raises(InvalidReferences, match="outside the remap"):
        concat_tables([t, t], 0, path_maps=[np.array([0]), np.zeros(0, int)])
    with pytest.raises(InvalidReferences, match="must be a mapping of chunk index"):
        refset.ReferenceSet.from_arrays(_meta([4, 6], [2, 2]), {"v": {**_arrays(), "inline": [b"x"]}}, URLS)
    with pytest.raises(Unsupported, match=r"options \['foo'\]"):
        refset.load(b"{}", foo=1)
    with pytest.raises(Unsupported, match=r"options \['foo'\]"):
        refset.load({}, foo=1)
    unsigned = {k: np.asarray(v).clip(0).astype(np.uint32) for k, v in _arrays().items()}
    rs = refset.ReferenceSet.from_arrays(_meta([4, 6], [2, 2]), {"v": unsigned}, URLS)
    assert rs.table("v").count() == 6  # unsigned path ids: every chunk present


def test_grids_beyond_int64_keep_their_keys_generic():
    d = {".zarray": json.dumps({"shape": [2**40, 2**40], "chunks": [1, 1], "dtype": "<f4", "compressor": None,
                                "fill_value": 0, "filters": None, "order": "C", "zarr_format": 2}),
         "0.0": ["u", 0, 1]}
    rs = refset.load(d)
    assert not rs.grids and rs["0.0"] == ("u", 0, 1)
