"""The packed format: lossless round trips, the blog's failure cases, corruption, remote range reads."""

from __future__ import annotations

import json
import zlib

import fsspec
import numpy as np
import pytest
from fsspec.implementations.memory import MemoryFileSystem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refset
from refset.errors import InvalidReferences
from refset.formats.packed.file import MAGIC, PackedSource, pack
from refset.model.refset import ReferenceSet


def zarray(shape: list[int], chunks: list[int], sep: str = ".") -> str:
    return json.dumps({"shape": shape, "chunks": chunks, "dtype": "<f4", "compressor": None,
                       "fill_value": None, "filters": None, "order": "C", "zarr_format": 2,
                       "dimension_separator": sep})


def roundtrip(rs: ReferenceSet | dict, tmp_path, **kw) -> ReferenceSet:
    rs = refset.load(rs)
    dest = tmp_path / "x.packed"
    refset.save(rs, dest, **kw)
    back = refset.load(str(dest))
    assert isinstance(back.source, PackedSource)
    assert len(back) == len(rs)
    assert back.to_dict() == rs.to_dict()
    return back


def file_layout(nfiles: int, grid: tuple[int, ...], lengths: np.ndarray, swap: float = 0.0,
                seed: int = 0) -> dict:
    """One array, time-chunked over files; chunks contiguous in each file, optionally with a
    fraction of neighbouring chunks swapped on disk."""
    rng = np.random.default_rng(seed)
    per = int(np.prod(grid))
    refs: dict = {"v/.zarray": zarray([nfiles * 1, *[g * 10 for g in grid]], [1, *[10] * len(grid)])}
    k = 0
    for f in range(nfiles):
        ln = lengths[k : k + per]
        order = np.arange(per)
        for i in np.flatnonzero(rng.random(per - 1) < swap):
            order[i], order[i + 1] = order[i + 1], order[i]
        off = np.empty(per, np.int64)
        off[order] = 1000 + np.concatenate([[0], np.cumsum(ln[order])[:-1]])
        for c in range(per):
            idx = np.unravel_index(c, grid)
            refs["v/" + ".".join(map(str, (f, *idx)))] = [f"s3://b/file{f}.nc", int(off[c]), int(ln[c])]
        k += per
    return refs


# -- the blog's failure cases ----------------------------------------------------------------------
def test_all_lengths_equal(tmp_path):
    refs = file_layout(10, (4, 6), np.full(240, 4096))
    back = roundtrip(refs, tmp_path)
    st_ = back.format_info()["packed_arrays"]["v"]
    assert st_["unique"] == 0 and st_["modal_length"] == 4096 and st_["gfactor"] == 1.0


def test_swapped_neighbours(tmp_path):
    # 3,840 references with 5% of neighbouring chunks swapped on disk (the blog's code got 3,742 wrong)
    rng = np.random.default_rng(1)
    refs = file_layout(10, (16, 24), rng.integers(1000, 9000, 3840), swap=0.05)
    back = roundtrip(refs, tmp_path)
    assert back.format_info()["packed_arrays"]["v"]["negative_gaps"] > 0


def test_mostly_modal_lengths_are_stored_sparsely(tmp_path):
    # the blog's typical case: a modal length with "unique" exceptions (gfactor ~0.9)
    rng = np.random.default_rng(4)
    ln = np.where(rng.random(4000) < 0.1, rng.integers(100, 9000, 4000), 8192)
    back = roundtrip(file_layout(40, (10, 10), ln), tmp_path)
    st_ = back.format_info()["packed_arrays"]["v"]
    assert st_["modal_length"] == 8192 and 0.85 < st_["gfactor"] < 0.95
    assert st_["bytes_per_ref"] < 0.6


def test_four_d_grid_and_partial_edge_chunks(tmp_path):
    rng = np.random.default_rng(2)
    refs = {"x/.zarray": zarray([5, 7, 3, 11], [2, 3, 2, 4], sep="/")}
    for idx in np.ndindex(3, 3, 2, 3):
        if rng.random() < 0.8:
            refs["x/" + "/".join(map(str, idx))] = ["f.nc", int(rng.integers(0, 2**40)),
                                                    int(rng.integers(1, 5000))]
    back = roundtrip(refs, tmp_path)
    assert back.grids["x"].grid_shape == (3, 3, 2, 3)
    for k in ("x/2/2/1/2", "x/0/0/0/0", "x/1/2/0/1"):
        assert k not in refs or list(back[k]) == refs[k]


def test_empty_and_single(tmp_path):
    roundtrip({}, tmp_path)
    roundtrip({"a": ["u", 1, 2]}, tmp_path)
    roundtrip({"a/.zarray": zarray([1], [1]), "a/0": ["u", 0, 7]}, tmp_path)
    roundtrip({"a/.zarray": zarray([], [])}, tmp_path)
    roundtrip({"a/.zarray": zarray([0, 4], [1, 2])}, tmp_path)


def test_root_array_and_zarr_v3_keys(tmp_path):
    refs = {".zarray": zarray([4, 4], [2, 2]), "0.0": ["u", 0, 9], "1.1": ["u", 9, 9]}
    back = roundtrip(refs, tmp_path)
    assert "" in back.grids and back["1.1"] == ("u", 9, 9)
    meta = {"zarr_format": 3, "node_type": "array", "shape": [4, 6],
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 3]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "data_type": "float32", "fill_value": 0, "codecs": []}
    refs = {"g/v/zarr.json": json.dumps(meta), "g/v/c/0/1": ["u", 5, 5], "g/v/c/1/0": "x",
            "zarr.json": json.dumps({"zarr_format": 3, "node_type": "group"})}
    back = roundtrip(refs, tmp_path)
    assert back.grids["g/v"].prefix == "c" and back["g/v/c/0/1"] == ("u", 5, 5)


def test_extremes_and_mixed_kinds(tmp_path):
    big = 2**62
    refs = {
        "a/.zarray": zarray([6], [1]),
        "a/0": ["u", big, big - 1], "a/1": ["u", 0, 2**63 - 1], "a/2": ["v"], "a/3": "inline text",
        "a/4": "base64:AAEC/w==", "a/5": ["u", 2**63 - 2, 1],
        "k/x": ["w", 2**63 - 1, 0], "k/y": "base64:gA==", "k/z": ["w"], "é/ü": "ß",
    }
    # up to the bound offset + length < 2**63 (the reader refuses more: test_hostile.py)
    items = [(k, tuple(v) if isinstance(v, list) else
              __import__("base64").b64decode(v[7:]) if v.startswith("base64:") else v.encode())
             for k, v in refs.items()]
    roundtrip(ReferenceSet.from_items(items), tmp_path)


def test_files_shared_by_arrays_and_many_files(tmp_path):
    refs = {"a/.zarray": zarray([3000], [1]), "b/.zarray": zarray([3000], [1])}
    for i in range(3000):
        refs[f"a/{i}"] = [f"https://h/f{i % 2500}.nc", 10 * i, 10]
        refs[f"b/{i}"] = [f"https://h/f{(i * 7) % 2500}.nc", 5 * i, 4]
    back = roundtrip(refs, tmp_path, segment_chunks=700)
    assert len(back.urls) == 2500


def test_single_key_decodes_one_segment(tmp_path):
    refs = file_layout(20, (4, 5), np.arange(400) + 100)
    refset.save(refset.load(refs), tmp_path / "x.packed", segment_chunks=64)
    back = refset.load(str(tmp_path / "x.packed"))
    seg = ("v", (7 * 20 + 7) // 64)
    assert list(back["v/7.1.2"]) == refs["v/7.1.2"]  # looked up alone: its segment's columns, narrow
    assert list(back._blocks) == [seg] and back._blocks[seg].decoded
    assert list(back["v/7.1.3"]) == refs["v/7.1.3"]  # a second key there: from the same columns
    assert list(back._blocks) == [seg]
    assert back.cached_table("v") is None
    assert back.table("v").count() == 400


# -- property test -------------------------------------------------------------------------------------
URLS = ["s3://b/a.nc", "s3://b/b.nc", "https://h/c d.nc", "memory://x/é.nc"]


@st.composite
def reference_sets(draw):
    items: list[tuple[str, object]] = []
    for a in range(draw(st.integers(0, 3))):
        ndim = draw(st.integers(0, 4))
        shape = draw(st.lists(st.integers(0, 7), min_size=ndim, max_size=ndim))
        chunks = draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
        sep = draw(st.sampled_from([".", "/"]))
        items.append((f"arr{a}/.zarray", zarray(shape, chunks, sep).encode()))
        grid = [-(-s // c) for s, c in zip(shape, chunks, strict=True)]
        n = int(np.prod(grid))
        mode = draw(st.sampled_from(["contiguous", "random", "equal"]))
        # offset + length stays below 2**63; offsets wrap at 2**62 to exercise negative deltas
        off = draw(st.integers(0, 2**62 - 1))
        eq = draw(st.integers(0, 2**61))
        for i in range(n):
            if not draw(st.booleans()):
                continue
            idx = np.unravel_index(i, grid) if grid else ()
            key = f"arr{a}/" + (sep.join(map(str, idx)) if ndim else "0")
            kind = draw(st.sampled_from(["range"] * 6 + ["whole", "inline"]))
            url = draw(st.sampled_from(URLS))
            if kind == "whole":
                items.append((key, (url,)))
            elif kind == "inline":
                items.append((key, draw(st.binary(max_size=20))))
            else:
                if mode == "random":
                    o, ln = draw(st.integers(0, 2**62)), draw(st.integers(0, 2**62 - 1))
                else:
                    ln = eq if mode == "equal" else draw(st.integers(0, 2**20))
                    o = off
                    off = (off + ln + draw(st.sampled_from([0, 0, 0, 1, -5]))) % 2**62
                items.append((key, (url, o, ln)))
    for k in draw(st.lists(st.text(min_size=1, max_size=8), max_size=6)):
        items.append((k, draw(st.one_of(
            st.binary(max_size=10), st.tuples(st.sampled_from(URLS)),
            st.tuples(st.sampled_from(URLS), st.integers(0, 2**62), st.integers(0, 2**62 - 1)),
        ))))
    return ReferenceSet.from_items(items)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rs=reference_sets(), seg=st.sampled_from([1, 3, 1 << 18]))
def test_property_roundtrip(rs, seg):
    from refset.formats.packed.file import read_packed

    fs = MemoryFileSystem()
    fs.pipe_file("/prop/x.packed", pack(rs, segment_chunks=seg))
    back = ReferenceSet(read_packed("memory://prop/x.packed"))
    assert back.to_dict() == rs.to_dict()
    assert len(back) == len(rs)
    for k, v in list(rs.items())[:40]:  # single-key paths, before any table is decoded
        back._blocks.clear()
        assert back[k] == v  # a single lookup (SegmentPlanes)
        assert back[k] == v  # decode_segment
    for path in rs.grids:  # every cell, present or absent, on the single-key path
        for k in rs.keys_at(path, np.arange(rs.grids[path].nchunks)):
            back._blocks.clear()
            assert (k in back) == (k in rs)
    for k in [k + "x" for k in list(rs)[:3]]:
        assert k not in back


# -- real NetCDF -------------------------------------------------------------------------------------
def test_real_netcdf(tmp_path):
    netCDF4 = pytest.importorskip("netCDF4")
    hdf = pytest.importorskip("kerchunk.hdf")
    path = str(tmp_path / "t.nc")
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", 40)
        ds.createDimension("lon", 50)
        v = ds.createVariable("t", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(1, 16, 16))
        ds.createVariable("lat", "f4", ("lat",))[:] = np.arange(40)
        data = np.random.default_rng(3).normal(size=(6, 40, 50)).astype("f4")
        data[:, :8, :] = 0  # compresses to tiny chunks
        v[:] = data
    refs = hdf.SingleHdf5ToZarr(path, inline_threshold=100).translate()
    rs = refset.load(refs)
    assert "t" in rs.grids
    roundtrip(rs, tmp_path)


# -- bad input -------------------------------------------------------------------------------------
def _bench_like(tmp_path):
    refs = {"a/.zarray": zarray([40], [1]), "b/.zarray": zarray([40], [1]), "z": "meta"}
    for i in range(40):
        refs[f"a/{i}"] = ["f.nc", 100 * i, 100]
        refs[f"b/{i}"] = ["g.nc", 100 * i, 90 + i]
    dest = tmp_path / "x.packed"
    refset.save(refset.load(refs), dest, segment_chunks=16)
    return dest, refs


def test_magic_and_detection(tmp_path):
    dest, _ = _bench_like(tmp_path)
    assert dest.read_bytes().startswith(MAGIC)
    assert isinstance(refset.load(str(dest)).source, PackedSource)


def test_truncated(tmp_path):
    dest, _ = _bench_like(tmp_path)
    data = dest.read_bytes()
    dest.write_bytes(data[:-10])
    with pytest.raises(InvalidReferences, match="header"):
        refset.load(str(dest))
    # remote (no size check at open): the short block is named when read
    fs = MemoryFileSystem()
    fs.pipe_file("/trunc/x.packed", data[:-10])
    rs = refset.load("memory://trunc/x.packed")
    assert rs["a/0"] == ("f.nc", 0, 100)
    with pytest.raises(InvalidReferences, match=r"array 'b' segment 2: truncated"):
        rs.to_dict()
    dest.write_bytes(data[:30])
    with pytest.raises(InvalidReferences, match="header"):
        refset.load(str(dest))


@pytest.mark.parametrize("where", ["header", "index", "urls", "other", "a", "b"])
def test_corrupted(tmp_path, where):
    from refset.formats.packed.file import HEADER, HEADER_SIZE

    dest, _ = _bench_like(tmp_path)
    data = bytearray(dest.read_bytes())
    index_size = HEADER.unpack_from(data)[3]
    import zstandard

    index = json.loads(zstandard.ZstdDecompressor().decompress(data[HEADER_SIZE : HEADER_SIZE + index_size]))
    base = HEADER_SIZE + index_size
    if where == "header":
        pos, name = 20, "header"
    elif where == "index":
        pos, name = HEADER_SIZE + 5, "index"
    elif where in ("urls", "other"):
        pos, name = base + index[where]["block"][0] + 3, where
    else:
        arr = next(a for a in index["arrays"] if a["path"] == where)
        pos, name = base + arr["segments"][1][0] + 2, f"array '{where}' segment 1"
    data[pos] ^= 0x55
    dest.write_bytes(bytes(data))
    with pytest.raises(InvalidReferences, match=f"packed block {name}"):
        refset.load(str(dest)).to_dict()


def test_crc_is_crc32(tmp_path):
    dest, _ = _bench_like(tmp_path)
    data = dest.read_bytes()
    assert int.from_bytes(data[60:64], "little") == zlib.crc32(data[:60])


# -- remote range reads ------------------------------------------------------------------------------
class CountingFS(MemoryFileSystem):
    protocol = "countmem"
    reads: list[tuple[int, int]] = []  # noqa: RUF012

    @classmethod
    def _strip_protocol(cls, path):
        return super()._strip_protocol(path.removeprefix("countmem://"))

    def cat_file(self, path, start=None, end=None, **kw):
        CountingFS.reads.append((start, end))
        return super().cat_file(path, start=start, end=end, **kw)


def test_remote_reads_only_needed_blocks():
    fsspec.register_implementation("countmem", CountingFS, clobber=True)
    rng = np.random.default_rng(5)
    refs = {}
    for v in ("u", "v", "w"):
        one = file_layout(200, (10, 20), rng.integers(100, 1 << 20, 200 * 200), seed=len(v))
        refs.update({k.replace("v/", f"{v}/", 1): r for k, r in one.items()})
    rs = refset.load(refs)
    data = pack(rs, segment_chunks=4096)
    assert len(data) > 4 << 16
    fs = CountingFS()
    fs.pipe_file("/r/x.packed", data)
    CountingFS.reads.clear()
    back = refset.load("countmem://r/x.packed")
    assert CountingFS.reads == [(0, 1 << 16)]  # header, index, urls and other blocks in one read
    segs = {a: back.source._entries[a]["segments"] for a in back.grids}
    base = back.source._base

    def span(a: str, i: int, j: int) -> tuple[int, int]:
        return base + segs[a][i][0], base + segs[a][j][0] + segs[a][j][1]

    assert span("w", 0, 0)[0] >= 1 << 16 and span("v", 0, 0)[0] >= 1 << 16
    CountingFS.reads.clear()
    assert list(back["w/33.2.1"]) == refs["w/33.2.1"]
    assert CountingFS.reads == [span("w", 1, 1)]  # flat 33 * 200 + 21 lies in segment 1 of 4096 cells
    CountingFS.reads.clear()
    assert back.table("v").count() == 200 * 200
    assert CountingFS.reads == [span("v", 0, len(segs["v"]) - 1)]  # one read for all of v
    CountingFS.reads.clear()
    assert back.to_dict() == rs.to_dict()
    assert CountingFS.reads == [span("u", 0, len(segs["u"]) - 1), span("w", 0, len(segs["w"]) - 1)]


# -- command line ----------------------------------------------------------------------------------
def test_cli_convert_and_info(tmp_path, capsys):
    from refset.cli import main

    src = tmp_path / "r.json"
    src.write_text(json.dumps(file_layout(5, (3, 4), np.arange(60) * 7 + 100)))
    assert main(["convert", str(src), str(tmp_path / "r.packed"), "-o", "segment_chunks=16"]) == 0
    assert refset.load(str(tmp_path / "r.packed")).to_dict() == refset.load(str(src)).to_dict()
    capsys.readouterr()
    assert main(["info", "--json", str(tmp_path / "r.packed")]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["format"] == "packed (version 1)"
    s = info["packed_arrays"]["v"]
    assert (s["present"], s["skipped"], s["files"], s["unique"]) == (60, 0, 5, 59)
    assert s["gfactor"] == round(1 - 59 / 60, 4) and s["bytes_per_ref"] > 0


def test_save_to_fsspec_url_and_options():
    from refset.errors import Unsupported

    refs = {"a/.zarray": zarray([4], [1]), "a/0": ["u", 1, 2], "a/3": ["u", 3, 4]}
    refset.save(refs, "memory://out/y.packed")
    assert refset.load("memory://out/y.packed").to_dict() == refset.load(refs).to_dict()
    with pytest.raises(Unsupported):
        refset.save(refs, "memory://out/z.packed", record_size=3)
    with pytest.raises(Unsupported):
        refset.load("memory://out/y.packed", max_gen=3)


def test_newer_version_is_unsupported(tmp_path):
    from refset.errors import Unsupported

    dest, _ = _bench_like(tmp_path)
    data = bytearray(dest.read_bytes())
    data[8] = 2
    data[60:64] = zlib.crc32(bytes(data[:60])).to_bytes(4, "little")
    dest.write_bytes(bytes(data))
    with pytest.raises(Unsupported, match="version 2"):
        refset.load(str(dest))


def test_single_lookups_agree_with_the_decoded_segment_everywhere() -> None:
    """A seeded fuzz of segments (every flag: all present, a bitmap, positions; all ranges or mixed with
    whole files and inline chunks; gaps none, some or everywhere, also negative; offsets near 2**63):
    each cell's single lookup (SegmentPlanes) equals the segment decoded whole (decode_segment)."""
    import zstandard

    from refset.formats.packed.array import SegmentPlanes, decode_segment, encode_segment
    from refset.formats.packed.codec import BlockReader, BlockWriter
    from refset.model.table import INLINE, RANGE, WHOLE

    rng = np.random.default_rng(41)
    cctx = zstandard.ZstdCompressor(level=3)
    for case in range(300):
        ncells = int(rng.choice([1, 7, 64, 1000, 5000]))
        density = rng.choice([1.0, 0.5, 0.02])
        rel = np.flatnonzero(rng.random(ncells) < density) if density < 1 else np.arange(ncells)
        n = len(rel)
        kind = np.full(n, RANGE, np.uint8)
        if case % 3 == 0 and n:
            kind[rng.random(n) < 0.2] = WHOLE
            kind[rng.random(n) < 0.2] = INLINE
        files = int(rng.integers(1, 6))
        pid = np.sort(rng.integers(0, files, n))
        ln = rng.integers(0, 50_000 if case % 5 else 2**40, n).astype(np.uint64)
        off = np.zeros(n, np.uint64)
        base = int(rng.integers(0, 2**62 if case % 7 == 0 else 10**9))
        pos = base
        for i in range(n):
            if i and pid[i] != pid[i - 1]:
                pos = int(rng.integers(0, 10**12))
            pos += int(rng.integers(-64, 64)) if rng.random() < 0.1 and pos > 64 else 0
            off[i] = pos
            pos += int(ln[i])
        inline = {int(r): rng.bytes(int(rng.integers(0, 20))) for r, k in zip(rel, kind, strict=True) if k == INLINE}
        lo = int(rng.integers(0, 10**6))
        w = BlockWriter(cctx)
        encode_segment(w, ncells, rel, kind, pid, off, ln, {lo + r: v for r, v in inline.items()}, lo)
        raw = w.getvalue()
        seg = decode_segment(BlockReader(raw, "t"), lo, files, ncells)
        planes = SegmentPlanes(BlockReader(raw, "t"), lo, files, ncells)
        at = {int(r): i for i, r in enumerate(seg.rel.tolist())}
        for j in range(ncells):
            got = planes.row(j)
            i = at.get(j)
            if i is None:
                assert got[0] == 0, (case, j)
            elif seg.kind[i] == INLINE:
                assert got[0] == INLINE and got[4] == seg.inline[lo + j], (case, j)
            elif seg.kind[i] == WHOLE:
                assert got[:2] == (WHOLE, int(seg.path_id[i])), (case, j)
            else:
                assert got[:4] == (RANGE, int(seg.path_id[i]), int(seg.offset[i]), int(seg.length[i])), (case, j)
