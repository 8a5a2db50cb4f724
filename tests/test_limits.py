"""Memory bounds on hostile input (issue 12): decompression bombs, crafted packed counts, ``gen``
estimates. A bomb runs in a subprocess under ``RLIMIT_AS`` with a timeout, so that a regression ends in
a failed test instead of a machine out of memory."""

from __future__ import annotations

import gzip
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import zstandard

import refset
from refset.errors import InvalidReferences

from .helpers import zarray

MiB = 1 << 20
SPACES = b" " * MiB


def _gzip_bomb(n_mib: int) -> bytes:
    """A valid JSON document of ``n_mib`` MiB of spaces inside, as gzip members (no 1 GiB in memory)."""
    member = gzip.compress(SPACES, compresslevel=9, mtime=0)
    return (gzip.compress(b'{"version": 1, "refs": {"a": "b"', mtime=0) + member * n_mib
            + gzip.compress(b"}}", mtime=0))


def _zstd_bomb(n_mib: int) -> bytes:
    c = zstandard.ZstdCompressor(level=19, write_checksum=True)
    return c.compress(b'{"version": 1, "refs": {"a": "b"') + c.compress(SPACES) * n_mib + c.compress(b"}}")


def _run(code: str, *args: str, cap: int = 1 << 30) -> str:
    """Run ``code`` in a Python with this refset under a ``cap``-byte address space; its stdout."""
    env = {"PYTHONPATH": str(Path(refset.__file__).parents[1]), "PATH": "/usr/bin:/bin"}
    prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))\n"
    r = subprocess.run([sys.executable, "-c", prelude + code, *args], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


_LOAD = """
import sys, refset
path, limit = sys.argv[1], int(sys.argv[2])
try:
    rs = refset.load(path, limits=refset.Limits(decompressed=limit) if limit else None)
    print("LOADED", len(rs))
except refset.errors.InvalidReferences as e:
    print("REFUSED", e)
"""


@pytest.mark.parametrize("kind", ["gzip", "zstd"])
def test_json_bomb_of_1_gib(tmp_path, kind):
    path = tmp_path / f"bomb.json.{'gz' if kind == 'gzip' else 'zst'}"
    path.write_bytes(_gzip_bomb(1024) if kind == "gzip" else _zstd_bomb(1024))
    assert path.stat().st_size < 2 * MiB
    out = _run(_LOAD, str(path), str(256 * MiB))
    assert out.startswith(f"REFUSED {path}: {kind} data expands to more than 268435456 bytes, the "
                          "decompression limit (limits=refset.Limits(decompressed=...) allows more)"), out
    # the default limit (4 GiB) is above the 1 GiB cap: running out of memory is the same kind of error
    out = _run(_LOAD, str(path), "0")
    assert out.startswith(f"REFUSED {path}: out of memory decompressing {kind} data after "), out


def test_small_bomb_within_the_limit_is_read(tmp_path):
    path = tmp_path / "b.json.gz"
    path.write_bytes(_gzip_bomb(8))
    assert refset.load(str(path))["a"] == b"b"
    small = refset.Limits(decompressed=4 * MiB)
    with pytest.raises(InvalidReferences, match=r"b.json.gz: gzip data expands to more than 4194304 bytes"):
        refset.load(str(path), limits=small)
    assert refset.load(str(path))["a"] == b"b"  # passed, not set: other loads keep the defaults
    with pytest.raises(InvalidReferences, match=r"b.json.gz: gzip data expands"):  # a lazy set keeps its own
        refset.ReferenceFileSystem(str(path), limits=small)


def test_limits_check_their_values():
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ValueError, match="expected a positive integer"):
            refset.Limits(decompressed=bad)
    with pytest.raises(ValueError, match="template_seconds: expected a positive number"):
        refset.Limits(template_seconds=0)
    with pytest.raises(AttributeError):
        refset.Limits().gen_memory = 1  # frozen: one value, passed where it is needed


@pytest.mark.parametrize("tail", [b"x", b"\x1f"])
def test_gzip_trailing_garbage_and_truncation(tmp_path, tail):
    data = gzip.compress(json.dumps({"version": 1, "refs": {"a": "b"}}).encode())
    for bad, why in [(data + tail, "trailing data"), (data[:-6], "ended before")]:
        (tmp_path / "t.json.gz").write_bytes(bad)
        with pytest.raises(InvalidReferences, match=f"t.json.gz: corrupt gzip data .*{why}"):
            refset.load(str(tmp_path / "t.json.gz"))


def test_zstd_truncated_frame_and_checksum(tmp_path):
    data = zstandard.ZstdCompressor(write_checksum=True).compress(b'{"version":1,"refs":{"a":"b"}}' * 1)
    p = tmp_path / "t.json.zst"
    p.write_bytes(data[:-2])
    with pytest.raises(InvalidReferences, match=r"t.json.zst: corrupt zstd data .*truncated"):
        refset.load(str(p))
    bad = bytearray(data)
    bad[-1] ^= 1  # the content checksum
    p.write_bytes(bytes(bad))
    with pytest.raises(InvalidReferences, match=r"t.json.zst: corrupt zstd data .*checksum"):
        refset.load(str(p))


def test_json_zst_written_with_a_content_checksum(tmp_path):
    refset.save(refset.load({"version": 1, "refs": {"a": "b"}}), tmp_path / "o.json.zst")
    params = zstandard.get_frame_parameters((tmp_path / "o.json.zst").read_bytes())
    assert params.has_checksum


# -- crafted packed files: valid CRCs, lying counts ----------------------------------------------------

def _packed(tmp_path: Path, refs: dict | None = None) -> Path:
    refs = refs or {"a/.zarray": zarray([40], [1]), **{f"a/{i}": ["f.nc", 100 * i, 100] for i in range(40)}}
    dest = tmp_path / "x.packed"
    refset.save(refset.load(refs), dest, segment_chunks=16)
    return dest


def _parts(data: bytes) -> tuple[dict, bytes]:
    from refset.formats.packed.file import HEADER, HEADER_SIZE

    index_size = HEADER.unpack_from(data)[3]
    index = json.loads(zstandard.ZstdDecompressor().decompress(data[HEADER_SIZE : HEADER_SIZE + index_size]))
    return index, data[HEADER_SIZE + index_size :]


def _assemble(index: dict | bytes, body: bytes) -> bytes:
    """A packed file with valid CRCs around ``index`` (a dict, or its compressed bytes) and ``body``."""
    from refset.formats.packed.file import HEADER, HEADER_SIZE, MAGIC, VERSION

    raw = index if isinstance(index, bytes) else zstandard.ZstdCompressor().compress(json.dumps(index).encode())
    start = HEADER_SIZE + len(raw)
    head = HEADER.pack(MAGIC, VERSION, 0, len(raw), zlib.crc32(raw), 0, start, start + len(body), bytes(12), 0)
    return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4])) + raw + body


def _with_block(index: dict, body: bytes, block: bytes) -> tuple[list[int], bytes]:
    """``block`` appended to ``body``: its index entry and the new body."""
    return [len(body), len(block), zlib.crc32(block)], body + block


def test_packed_index_bomb_of_1_gib(tmp_path):
    index, body = _parts(_packed(tmp_path).read_bytes())
    c = zstandard.ZstdCompressor(level=19)
    raw = c.compress(json.dumps(index).encode()) + c.compress(SPACES) * 1024
    path = tmp_path / "bomb.packed"
    path.write_bytes(_assemble(raw, body))
    assert path.stat().st_size < MiB
    out = _run(_LOAD, str(path), str(256 * MiB))
    assert out.startswith(f"REFUSED {path}: packed block index: zstd data expands to more than 268435456 "
                          "bytes, the decompression limit"), out
    out = _run(_LOAD, str(path), "0")
    assert out.startswith(f"REFUSED {path}: packed block index: out of memory decompressing zstd data"), out


def _segment(*fields: bytes) -> bytes:
    return b"".join(fields)


def u64(n: int) -> bytes:
    return struct.pack("<Q", n)


def _crafted(tmp_path: Path, segment: bytes, *, cells: int = 40, present: int = 40, refs: int | None = None,
             step: int | None = None) -> Path:
    index, body = _parts(_packed(tmp_path).read_bytes())
    a = index["arrays"][0]
    entry, body = _with_block(index, body, segment)
    if cells != 40:  # the metadata describes the crafted grid too (else the file is refused at open)
        (tmp_path / "meta").mkdir(exist_ok=True)
        meta_index, meta_body = _parts(_packed(tmp_path / "meta", {"a/.zarray": zarray([cells], [1]),
                                                                   "a/0": ["f.nc", 0, 100]}).read_bytes())
        off, size, _ = meta_index["other"]["block"]
        index["other"]["block"], body = _with_block(index, body, meta_body[off:off + size])
    a["shape"], a["chunks"], a["segment_chunks"] = [cells], [1], step or cells
    a["segments"], a["present"] = [entry], present
    index["refs"] = present + index["other"]["count"] if refs is None else refs
    path = tmp_path / "crafted.packed"
    path.write_bytes(_assemble(index, body))
    return path


ALL = bytes([1 | 2])  # ALL_PRESENT | ALL_RANGE


def test_packed_segment_cell_count_must_match_the_grid(tmp_path):
    path = _crafted(tmp_path, u64(1 << 40) + ALL + u64(1 << 40))
    rs = refset.load(str(path))
    with pytest.raises(InvalidReferences, match=r"segment 0 of .*: cell count is 1099511627776, the index's "
                                                r"grid says 40"):
        rs.to_dict()
    with pytest.raises(InvalidReferences, match="cell count is 1099511627776"):
        rs["a/3"]


_HUGE = """
import sys, refset
rs = refset.load(sys.argv[1])
print("LEN", len(rs))
for how in ("lookup", "table"):
    try:
        rs["a/3"] if how == "lookup" else rs.to_dict()
        print("READ")
    except refset.errors.InvalidReferences as e:
        print("REFUSED", how, e)
"""


def test_packed_huge_grid_whose_segment_claims_every_cell(tmp_path):
    """A grid of 2**40 cells whose one tiny segment says all are present: refused, not allocated."""
    n = 1 << 40
    # cells, flags, present, one run: path ids, run lengths, starts (all width 0), base, then lengths and
    # gaps dense with width 0: every column "holds" 2**40 zeros in a few bytes
    seg = u64(n) + ALL + u64(n) + u64(1) + bytes([0, 0, 0]) + u64(0) + bytes([0, 0, 0, 0])
    path = _crafted(tmp_path, seg, cells=n, present=n)
    out = _run(_HUGE, str(path)).splitlines()
    assert out[0] == f"LEN {n + 1}"
    assert all(line.startswith("REFUSED") for line in out[1:]), out


def test_packed_refs_must_add_up(tmp_path):
    path = _crafted(tmp_path, b"", refs=10**12)
    with pytest.raises(InvalidReferences, match=r"'refs' is 1000000000000, the other keys and the arrays' "
                                                r"present chunks make 41"):
        refset.load(str(path))


def test_packed_present_count_is_checked_on_decode(tmp_path):
    good = _packed(tmp_path)
    index, body = _parts(good.read_bytes())
    a = index["arrays"][0]
    a["present"] = 39
    index["refs"] = 40
    (tmp_path / "lie.packed").write_bytes(_assemble(index, body))
    rs = refset.load(str(tmp_path / "lie.packed"))
    with pytest.raises(InvalidReferences, match=r"array 'a': 40 chunks present, the index says 39"):
        rs.to_dict()


def test_packed_blob_larger_than_its_block_can_hold(tmp_path):
    """A column blob whose zstd frame declares 16 MiB where 40 bytes are due: refused from the frame
    header before decompressing."""
    big = zstandard.ZstdCompressor(level=1).compress(b"\1" * (1 << 24))
    # 40 cells, flags 0 (a presence bitmap follows): one zstd blob that should hold 5 bytes
    seg = u64(40) + bytes([0]) + bytes([1]) + u64(len(big)) + big
    path = _crafted(tmp_path, seg)
    with pytest.raises(InvalidReferences, match=r"blob of \d+ stored bytes cannot hold the 5 expected"):
        refset.load(str(path)).to_dict()


# -- gen: refused before allocation when its estimate is over the budget --------------------------------

def _gen_doc(n: int, key: str = "gen/key{{i}}") -> dict:
    return {"version": 1, "gen": [{"key": key, "url": "s3://b/f{{i // 1000}}.nc", "offset": "{{i*100}}",
                                   "length": "100", "dimensions": {"i": {"stop": n}}}]}


_GEN = """
import json, sys, refset
try:
    refset.load(json.loads(sys.argv[1]))
    print("LOADED")
except refset.errors.InvalidReferences as e:
    print("REFUSED", e)
"""


def test_gen_over_the_memory_budget_is_refused_before_allocation():
    """50M generic keys (~13 GB expanded, under the 100M key limit) in a process capped at 1 GiB."""
    out = _run(_GEN, json.dumps(_gen_doc(50_000_000)))
    assert out.startswith("REFUSED gen: would need about "), out
    assert out.split()[6] == "bytes" and int(out.split()[5]) > 4294967296, out  # an estimate over the budget
    assert ("for its 50000000 keys, more than the gen memory budget of 4294967296 (limits=refset.Limits("
            "gen_memory=...) allows more)") in out


def test_gen_budget_is_configurable_and_counts_chunk_keys_cheaper():
    zarr = {"x/.zarray": json.dumps({"shape": [1000], "chunks": [1], "dtype": "<f4", "compressor": None,
                                     "fill_value": None, "filters": None, "order": "C", "zarr_format": 2})}
    chunks = {**_gen_doc(1000, "x/{{i}}"), "refs": zarr}
    generic = _gen_doc(1000)
    limits = refset.Limits(gen_memory=300_000)
    assert len(refset.load(chunks, limits=limits)) == 1001  # 96 B per chunk key, 112 B per URL of 12 characters
    with pytest.raises(InvalidReferences, match="would need about 368000 bytes for its 1000 keys, more than "
                                                "the gen memory budget of 300000"):
        refset.load(generic, limits=limits)
    assert len(refset.load(generic)) == 1000


def test_metadata_only_arrays_reserve_nothing(tmp_path):
    """200 arrays of 2**20 cells and no chunk: no per-cell columns in any format (2.4 GB before)."""
    za = json.dumps({"shape": [1 << 20], "chunks": [1], "dtype": "<f4", "compressor": None,
                     "fill_value": None, "filters": None, "order": "C", "zarr_format": 2})
    refs = {".zgroup": '{"zarr_format":2}', **{f"v{i}/.zarray": za for i in range(200)}}
    for name in ("m.json", "m.parq", "m.packed"):
        refset.save(refset.load(refs), tmp_path / name)
    out = _run("""
import sys, refset
for p in sys.argv[1:]:
    rs = refset.load(p)
    assert len(rs.to_dict()) == 201
    print(p.rsplit(".", 1)[1], sum(a.table.nbytes() for a in rs.arrays.values()))
""", *(str(tmp_path / n) for n in ("m.json", "m.parq", "m.packed")), cap=512 << 20)
    assert out.split() == ["json", "0", "parq", "0", "packed", "0"], out


def test_gen_budget_counts_long_urls():
    """A URL that changes from key to key costs memory by its length (before: 96 B per chunk key
    whatever the URL; 100k keys with 2000-character URLs took 480 MB against a 50 MB budget)."""
    za = json.dumps({"shape": [100_000], "chunks": [1], "dtype": "<f4", "compressor": None, "fill_value": None,
                     "filters": None, "order": "C", "zarr_format": 2})

    def doc(prefix: int) -> dict:
        return {"version": 1, "refs": {"x/.zarray": za},
                "gen": [{"key": "x/{{i}}", "url": "s3://b/" + "p" * prefix + "{{i}}.nc", "offset": "0",
                         "length": "100", "dimensions": {"i": {"stop": 100_000}}}]}

    limits = refset.Limits(gen_memory=50_000_000)
    assert len(refset.load(doc(10), limits=limits)) == 100_001
    with pytest.raises(InvalidReferences, match="for its 100000 keys, more than the gen memory budget of 50000000"):
        refset.load(doc(2000), limits=limits)


def test_packed_string_count_without_bytes_is_bounded(tmp_path):
    """A URL table claiming 2**31 empty strings (a width-0 size column: no stored bytes) in a file of
    under 1 KB: refused by the decompression limit, not a 16 GiB allocation."""
    p = _packed(tmp_path)
    index, body = _parts(p.read_bytes())
    blk = u64(1 << 31) + bytes([0]) + bytes([0]) + u64(0)  # count, width 0, raw codec, empty blob
    index["urls"]["block"], body = _with_block(index, body, blk)
    p.write_bytes(_assemble(index, body))
    assert p.stat().st_size < 2048
    out = _run(_LOAD, str(p), "0")
    assert out.startswith(f"REFUSED packed block urls of {p}: a string column of 2147483648 would take "
                          "137438953472 bytes, more than the decompression limit"), out


def test_gzip_content_encoding_over_http_is_bounded(tmp_path):
    """A server answering with ``Content-Encoding: gzip``: the body reaches refset's bounded
    decompression, not the HTTP client's (before: 40 KB on the wire loaded as 40 MB past a 1 MiB limit)."""
    from .httpserver import RangeServer

    doc = json.dumps({"version": 1, "refs": {"x": "a" * (40 << 20)}}).encode()
    (tmp_path / "bomb.json").write_bytes(gzip.compress(doc, 9))
    small = {"version": 1, "refs": {"x": "small"}}
    (tmp_path / "small.json").write_bytes(gzip.compress(json.dumps(small).encode()))
    limits = refset.Limits(decompressed=1 << 20)
    with RangeServer(tmp_path, fault="gzip-encoding") as srv:
        assert refset.load(f"{srv.url}/small.json", limits=limits).to_dict() == {"x": "small"}
        with pytest.raises(InvalidReferences, match=r"bomb.json: gzip data expands to more than 1048576 bytes"):
            refset.load(f"{srv.url}/bomb.json", limits=limits)
