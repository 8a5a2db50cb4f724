"""Hostile input (issue 12): every case ends in a ``refset.errors`` error naming where and why, or in the
right data. Bombs run in a subprocess with a memory cap and a timeout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.cli import main
from refset.errors import InvalidReferences

from .helpers import zarray

META = {".zgroup": '{"zarr_format":2}', "x/.zarray": zarray([4], [1])}


@pytest.fixture
def data_file(tmp_path: Path) -> str:
    p = tmp_path / "data.bin"
    p.write_bytes(bytes(range(256)) * 4)
    return str(p)


def _gen(key: str, offset: str | None = None, *, stop: int = 4, refs: dict | None = None,
         url: str = "u") -> dict:
    g: dict = {"key": key, "url": url, "dimensions": {"i": {"stop": stop}}}
    if offset is not None:
        g.update(offset=offset, length="4")
    return {"version": 1, "refs": {**META, **(refs or {})}, "gen": [g]}


# -- 64-bit arithmetic ---------------------------------------------------------------------------


def test_gen_offset_beyond_int64_is_refused_not_wrapped(data_file, tmp_path):
    doc = _gen("x/{{i}}", "{{ i*4294967296*4294967296 + 100 }}", url=data_file)
    with pytest.raises(InvalidReferences, match=r"gen\[0\]: offset 18446744073709551716 \+ length 4 "
                                                 r"must be below 2\*\*63.*'i': 1"):
        refset.load(doc)
    p = tmp_path / "v1.json"
    p.write_text(json.dumps(doc))
    assert main(["validate", str(p)]) == 1


def test_gen_key_beyond_int64_is_its_own_key():
    # numpy would wrap i*2**64 + 1 to 1: the key x/18446744073709551617 must not overwrite x/1
    doc = _gen("x/{{ i*4294967296*4294967296 + 1 }}", stop=2, refs={"x/1": ["a", 0, 4]})
    d = refset.load(doc).to_dict()
    assert d["x/1"] == ["u"]  # gen wins over refs for the same key (i = 0), as in fsspec
    assert d["x/18446744073709551617"] == ["u"]
    doc = _gen("x/{{ i*4294967296*4294967296 }}", stop=2)
    assert {"x/0", "x/18446744073709551616"} <= set(refset.load(doc))


def test_gen_vectorised_arithmetic_near_the_bound_is_exact():
    top = 2**63 - 1 - 4
    doc = _gen("k{{i}}", f"{{{{ {top} - i }}}}")
    doc["gen"][0]["length"] = "{{ i }}"
    rs = refset.load(doc)
    assert rs["k3"] == ("u", top - 3, 3)
    doc["gen"][0]["length"] = "{{ i + 5 }}"
    with pytest.raises(InvalidReferences, match=r"gen\[0\]: offset 9223372036854775803 \+ length 5 .*'i': 0"):
        refset.load(doc)


@pytest.mark.parametrize(("dims", "message"), [
    ({"i": {"start": 2**64, "stop": 2**64 + 2}}, r'dimensions\["i"\]\.start: must lie in \[-2\*\*63, 2\*\*63\)'),
    ({"i": {"start": 2**63 - 1, "stop": 2**63 + 1}}, r'dimensions\["i"\]\.stop: must lie in'),
    ({"i": {"stop": 2, "step": -(2**63) - 1}}, r'dimensions\["i"\]\.step: must lie in'),
    ({"i": [1, 2**64]}, r'dimensions\["i"\]: values must lie in'),
])
def test_gen_dimensions_beyond_int64(dims, message):
    doc = {"version": 1, "gen": [{"key": "k{{i}}", "url": "u", "dimensions": dims}]}
    with pytest.raises(InvalidReferences, match=r"gen\[0\]\." + message):
        refset.load(doc)


@pytest.mark.parametrize("offset", ["{{ 99999999999999999999999 }}", "{{ i + 99999999999999999999999 }}",
                                    "99999999999999999999999", "{{ 2**70 }}"])
def test_gen_big_literals(offset):
    with pytest.raises(InvalidReferences, match=r"gen\[0\]: offset \d+ \+ length 4 must be below 2\*\*63"):
        refset.load(_gen("k{{i}}", offset))


@pytest.mark.parametrize("url", ["u{{ i +", "u{{ i }", "{% for %}"])
def test_gen_url_syntax_error(url):
    doc = {"version": 1, "gen": [{"key": "k{{i}}", "url": url, "dimensions": {"i": {"stop": 2}}}]}
    with pytest.raises(InvalidReferences, match=r"gen\[0\]: template syntax error"):
        refset.load(doc)


def test_from_items_refuses_offsets_past_the_bound():
    with pytest.raises(InvalidReferences, match=r"refs\['k'\]: offset 9223372036854775807 \+ length 1"):
        refset.ReferenceSet.from_items([("k", ("u", 2**63 - 1, 1))])


def test_builder_refuses_columns_past_the_bound():
    from refset.model.builder import Builder

    b = Builder()
    with pytest.raises(InvalidReferences, match=r"array 'x', chunk 1 .*offset 9223372036854775808"):
        b.add_chunks("x", np.arange(2), np.ones(2, np.uint8), np.zeros(2, np.int64),
                     np.array([0, 2**63], np.uint64), np.ones(2, np.uint64))
    with pytest.raises(InvalidReferences, match=r"refs\['k1'\]: offset 4611686018427387904 \+ length"):
        b.add_keys(np.array(["k0", "k1"]), np.ones(2, np.uint8), np.zeros(2, np.int64),
                   np.array([0, 2**62], np.uint64), np.array([0, 2**62], np.uint64))


# -- parquet: nothing outside the target -----------------------------------------------------------


def _arrays_at(path: str) -> dict:
    return {f"{path}/.zarray": zarray([2], [1]), f"{path}/0": ["u", 0, 4]}


@pytest.mark.parametrize(("path", "why"), [
    ("../../escape", "has a '..' component"),
    ("a/../../escape", "has a '..' component"),
    ("/tmp/abs", "is absolute"),
    ("a\0b", "contains a NUL character"),
    ("x" * 300, "has a component longer than 255 bytes"),
    ("a//b", "has an empty component"),
])
def test_parquet_writer_refuses_unsafe_array_paths(tmp_path, path, why):
    out = tmp_path / "deep" / "er" / "refs.parq"
    out.parent.mkdir(parents=True)
    rs = refset.load(_arrays_at(path))
    with pytest.raises(refset.errors.Unsupported, match=f"array path .* {why}"):
        refset.save(rs, str(out), format="parquet")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["deep", "er"]  # nothing created anywhere


def _stranger(out: Path) -> dict:
    """``.zmetadata`` of ``out`` as a stranger's tool would write it: without refset's checksums."""
    doc = json.loads((out / ".zmetadata").read_text())
    doc.pop("refset_checksums")
    doc.pop("refset_crc32")
    return doc


def test_parquet_reader_refuses_dotdot_in_zmetadata(tmp_path):
    good = tmp_path / "refs.parq"
    refset.save(refset.load(_arrays_at("escape")), str(good), format="parquet")
    # a hostile directory: .zmetadata names ../escape, whose record file lies beside the directory
    (tmp_path / "escape").mkdir()
    (good / "escape" / "refs.0.parq").rename(tmp_path / "escape" / "refs.0.parq")
    doc = _stranger(good)
    doc["metadata"] = {"../escape/.zarray": doc["metadata"]["escape/.zarray"]}
    (good / ".zmetadata").write_text(json.dumps(doc))
    with pytest.raises(InvalidReferences, match=r"metadata\['../escape/.zarray'\]: array path has a '..' "
                                                r"component"):
        refset.load(str(good))


def test_parquet_reader_refuses_corrupt_zarray(tmp_path):
    out = tmp_path / "refs.parq"
    refset.save(refset.load(_arrays_at("v")), str(out), format="parquet")
    doc = _stranger(out)
    doc["metadata"]["v/.zarray"] = '{"shape": [2], "chunks": [1],'  # truncated: not JSON
    (out / ".zmetadata").write_text(json.dumps(doc))
    with pytest.raises(InvalidReferences, match=r"metadata\['v/.zarray'\]: not JSON"):
        refset.load(str(out))
    doc["metadata"]["v/.zarray"] = {"shape": [2], "chunks": [0]}
    (out / ".zmetadata").write_text(json.dumps(doc))
    with pytest.raises(InvalidReferences, match=r"metadata\['v/.zarray'\]: does not describe a regular"):
        refset.load(str(out))


def test_parquet_reader_refuses_offsets_past_the_bound(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "refs.parq"
    refset.save(refset.load(_arrays_at("v")), str(out), format="parquet")
    (out / ".zmetadata").write_text(json.dumps(_stranger(out)))
    for off, size, why in [(2**63, 4, "negative values"), (2**62, 2**62, r"row 0: offset 4611686018427387904 "
                                                                          r"\+ size 4611686018427387904")]:
        t = pa.table({"path": ["u"], "offset": pa.array([off], pa.uint64()), "size": [size],
                      "raw": pa.array([None], pa.binary())})
        pq.write_table(t, out / "v" / "refs.0.parq")
        with pytest.raises(InvalidReferences, match=why):
            refset.load(str(out))["v/0"]


def test_packed_reader_refuses_offsets_past_the_bound(tmp_path):
    from refset.model.memory import MemorySource
    from refset.model.table import ChunkTable

    rs = refset.load(_arrays_at("v"))
    # a table built without the checks of from_arrays, as a corrupt or hostile file would decode to
    g = rs.grids["v"]
    t = ChunkTable(g, np.array([1, 1], np.uint8), np.zeros(2, np.uint64), np.array([0, 2**63], np.uint64),
                   np.array([4, 4], np.uint64), {})
    with pytest.raises(InvalidReferences, match=r"array 'v', chunk 1 .*offset 9223372036854775808"):
        refset.ReferenceSet.from_arrays(dict(rs.documents), {"v": t}, rs.urls, other=rs.other)
    bad = refset.ReferenceSet(MemorySource(rs.urls, rs.metadata, {"v": t}, rs.other, {"format": "memory"}))
    for fmt in ("json", "v1", "parquet", "packed"):  # writers refuse it
        with pytest.raises(InvalidReferences, match=r"array 'v', chunk 1 .*offset 9223372036854775808"):
            refset.save(bad, str(tmp_path / f"out.{fmt}"), format=fmt)
    assert not list(tmp_path.glob("out.*"))
    from refset.formats.packed.file import write_packed

    p = tmp_path / "x.refs"
    write_packed(bad, str(p))  # the codec itself holds any uint64: the reader must refuse
    with pytest.raises(InvalidReferences, match=r"cell 1: offset 9223372036854775808 \+ length 4 must be below"):
        refset.load(str(p))["v/1"]
    with pytest.raises(InvalidReferences, match=r"cell 1: offset 9223372036854775808"):
        refset.load(str(p)).to_dict()


# -- JSON text -----------------------------------------------------------------------------------


def _big_doc(n: int = 5000) -> dict:
    doc = {".zgroup": '{"zarr_format":2}', "x/.zarray": zarray([n], [1])}
    doc.update({f"x/{i}": ["/d.bin", i, 4] for i in range(n)})
    return doc


@pytest.mark.parametrize("where", ["start", "colon", "list", "comma", "end", "many"])
def test_long_whitespace_runs_are_skipped_fast(tmp_path, where):
    import time

    doc = _big_doc()
    text = json.dumps(doc)
    sp = " \n\t\r" * 250_000  # 1 MB of whitespace
    text = {
        "start": lambda: "{" + sp + text[1:],
        "colon": lambda: text.replace('"x/7": [', '"x/7":' + sp + "["),
        "list": lambda: text.replace('"x/7": ["/d.bin", 7,', '"x/7": ["/d.bin",' + sp + "7" + sp + ","),
        "comma": lambda: text.replace('"x/7": ["/d.bin", 7, 4],', '"x/7": ["/d.bin", 7, 4]' + sp + ","),
        "end": lambda: text[:-1] + sp + "}" + sp,
        "many": lambda: text.replace('4], "x/', "4]," + " " * 300 + '"x/'),
    }[where]()
    p = tmp_path / "ws.json"
    p.write_text(text)
    t0 = time.perf_counter()
    for lazy in (False, True):
        assert refset.load(str(p), lazy=lazy).to_dict() == refset.load(doc).to_dict()
    assert time.perf_counter() - t0 < 10  # was 5-40 s per MB, one numpy step per byte
    from refset.formats.json.plan import plan_document

    assert plan_document(p.read_bytes()) is not None  # the vectorised reader took it


def test_control_character_after_a_long_run_is_refused(tmp_path):
    text = json.dumps(_big_doc()).replace('"x/7": [', '"x/7":' + " " * 100 + "\x01[")
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(InvalidReferences, match="invalid JSON"):
        refset.load(str(p))


@pytest.mark.parametrize(("old", "new"), [
    ('"x/7": [', '"x/7"; ['),  # a list member's ':' (found by fuzzing: lazy read it as valid)
    ('"x/7": ["/d.bin", 7, 4], ', '"x/7": ["/d.bin", 7, 4] '),  # a missing ','
    ('".zgroup": "{\\"zarr_format\\":2}", ', '".zgroup": "{\\"zarr_format\\":2}" '),  # after a string
    ("}", "}]"),  # after the document
])
@pytest.mark.parametrize("grid", [True, False])
def test_lazy_read_checks_the_grammar_of_what_it_serves(tmp_path, old, new, grid):
    doc = _big_doc()
    if not grid:  # no chunk grid: every member is served from the keys outside the grids
        doc["x..zarray"] = doc.pop("x/.zarray")
    text = json.dumps(doc)
    if old == "}":
        text += "]"
    else:
        assert old in text
        text = text.replace(old, new, 1)
    p = tmp_path / "bad.json"
    p.write_text(text)
    for lazy in (False, True):
        with pytest.raises(InvalidReferences, match="invalid JSON"):
            refset.load(str(p), lazy=lazy).to_dict()
    assert main(["validate", str(p)]) == 1


def test_corrupt_gzip_inside_the_stream(tmp_path):
    import gzip

    z = gzip.compress(json.dumps(_big_doc()).encode())
    p = tmp_path / "c.json.gz"
    p.write_bytes(z[:100] + b"\0" * 2000 + z[2100:])  # zlib.error, not OSError
    with pytest.raises(InvalidReferences, match="corrupt gzip data"):
        refset.load(str(p))


def test_zstd_of_several_frames(tmp_path):
    import zstandard

    text = json.dumps(_big_doc()).encode()
    z = zstandard.ZstdCompressor()
    p = tmp_path / "c.json.zst"
    p.write_bytes(z.compress(text[:1000]) + z.compress(text[1000:50_000]) + z.compress(text[50_000:]))
    assert refset.load(str(p)).to_dict() == refset.load(_big_doc()).to_dict()


@pytest.mark.parametrize("where", ["document", "value", "zarray"])
def test_deep_nesting(tmp_path, where):
    deep = "[" * 100_000 + "]" * 100_000
    text = {"document": deep,
            "value": json.dumps(_big_doc())[:-1] + ', "deep": ' + deep + "}",
            "zarray": '{"x/.zarray": ' + deep + "}"}[where]
    p = tmp_path / "deep.json"
    p.write_text(text)
    with pytest.raises(InvalidReferences, match=r"nested too deeply|value must be"):
        refset.load(str(p))


def test_numpy_values_in_a_dict():
    meta = {"shape": [np.int64(4)], "chunks": [np.int32(1)], "dtype": "<f4", "compressor": None,
            "fill_value": np.float32(0.5), "filters": None, "order": "C", "zarr_format": 2}
    rs = refset.load({"x/.zarray": meta, "x/1": ["u", np.int64(3), np.uint8(4)]})
    assert rs.grids["x"].shape == (4,)
    assert json.loads(rs["x/.zarray"])["fill_value"] == 0.5
    assert rs["x/1"] == ("u", 3, 4)
    with pytest.raises(InvalidReferences, match=r'refs\["x/.zattrs"\]: not JSON-serialisable'):
        refset.load({"x/.zattrs": {"a": object()}})
    m = refset.ReferenceSet.from_arrays({"x/.zarray": meta}, {}, [])
    assert m.grids["x"].chunks == (1,)


# -- HTTP faults -----------------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path):
    from .httpserver import RangeServer

    (tmp_path / "d.bin").write_bytes(bytes(range(256)) * 4)
    with RangeServer(tmp_path) as srv:
        yield srv


def _http_refs(srv) -> dict:
    u = srv.url + "/d.bin"
    return {**META, "x/0": [u, 100, 4], "x/1": [u, 104, 4], "x/2": [u, 500, 8], "x/3": [u, 1000, 4]}


def test_http_shifted_content_range_is_refused(served):
    from refset.errors import ReferenceNotReachable

    fs = refset.ReferenceFileSystem(_http_refs(served))
    assert fs.cat("x/0") == bytes([100, 101, 102, 103])
    served.fault = "shift"
    with pytest.raises(ReferenceNotReachable, match=r"'x/0'.*Content-Range 'bytes 101-104/1024'"):
        fs.cat("x/0")
    out = fs.cat(["x/0", "x/2"], on_error="return")  # the batched path plans and checks blocks too
    assert all(isinstance(v, ReferenceNotReachable) for v in out.values())
    served.fault = None
    assert fs.cat(["x/0", "x/2"]) == {"x/0": bytes([100, 101, 102, 103]), "x/2": bytes(range(244, 252))}


@pytest.mark.parametrize(("fault", "why"), [
    ("short", r"'x/0'.*ShortRead: .*asked for bytes 100-104 \(4\), got 3 bytes"),
    ("truncate", r"'x/0'"),
    ("500", r"'x/0'.*500"),
])
def test_http_faults_end_in_reference_not_reachable(served, fault, why):
    from refset.errors import ReferenceNotReachable

    served.fault = fault
    fs = refset.ReferenceFileSystem(_http_refs(served))
    with pytest.raises(ReferenceNotReachable, match=why):
        fs.cat("x/0")
    # batched, the two ranges are fetched as one block: a key inside what came back is served whole
    out = fs.cat(["x/0", "x/2"], on_error="return")
    assert isinstance(out["x/2"], ReferenceNotReachable), out
    assert out["x/0"] == bytes([100, 101, 102, 103]) or isinstance(out["x/0"], ReferenceNotReachable), out


def test_http_range_ignored_gives_the_right_bytes(served):
    served.fault = "ignore"  # 200 and the whole file: the range is cut from it
    fs = refset.ReferenceFileSystem(_http_refs(served))
    assert fs.cat("x/0") == bytes([100, 101, 102, 103])
    assert fs.cat(["x/0", "x/2"]) == {"x/0": bytes([100, 101, 102, 103]), "x/2": bytes(range(244, 252))}


def test_http_silent_server_times_out_with_retries(served):
    import time

    from refset.errors import ReferenceNotReachable

    served.fault = "stall"
    fs = refset.ReferenceFileSystem(_http_refs(served), timeout=0.5, retries=1)
    t0 = time.perf_counter()
    with pytest.raises(ReferenceNotReachable, match=r"'x/0'.*no answer .* within 0.5 s \(attempt 2 of 2\)"):
        fs.cat("x/0")
    assert time.perf_counter() - t0 < 5
    assert served.requests == 2


def test_default_timeouts_end_a_silent_read_within_two_minutes():
    from refset.io.fetch import DEFAULT_TIMEOUT, RETRIES, Targets

    t = Targets()
    assert (t.timeout, t.retries) == (DEFAULT_TIMEOUT, RETRIES)
    backoff = sum(0.05 * 2**a for a in range(1, RETRIES + 1))
    assert DEFAULT_TIMEOUT * (RETRIES + 1) + backoff < 120
    with pytest.raises(ValueError, match="timeout"):
        Targets(timeout=0)


def test_checked_range():
    from refset.errors import ShortRead
    from refset.io.fetch import checked_range

    assert checked_range("u", 2, 6, 206, "bytes 2-5/10", b"abcd")[0] == b"abcd"
    assert checked_range("u", 2, 6, 206, "bytes 2-5/*", b"abcd")[0] == b"abcd"
    assert checked_range("u", 2, 6, 200, None, b"0123456789")[0] == b"2345"  # range ignored
    assert checked_range("u", 2, 6, 206, "bytes 2-5/10", b"abcd")[1] == 10  # the size, from the answer
    assert checked_range("u", 2, 6, 206, "bytes 2-5/*", b"abcd")[1] is None
    for status, cr, data in [(206, "bytes 3-6/10", b"abcd"), (206, None, b"abcd"), (206, "bytes 2-5/10", b"abc"),
                             (206, "bytes 2-7/10", b"abcdef"), (204, None, b""), (206, "items 2-5/10", b"abcd")]:
        with pytest.raises(ShortRead):
            checked_range("u", 2, 6, status, cr, data)


# -- template bombs: a subprocess with a memory cap and a timeout -----------------------------------

BOMBS = [
    "{{ 7**(7**9) }}",
    "{{ 10**(10**10) }}",
    "{{ 1 }}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{{ 1 }}{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{{ lipsum(10**7) }}",
    "{{ 'a'*10**9 }}",
    "{{ 'a'.center(10**9) }}",
    "{{ 'a'|center(10**9) }}",
    "{{ '%999999999d' % 1 }}",
    "{{ '%999999999d'|format(1) }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
    "{{ 9**99999 * 9**99999 }}",
]

_BOMB_RUNNER = """
import json, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB: a bomb cannot take the machine
import refset
where, text = sys.argv[1], sys.argv[2]
doc = {"version": 1, "templates": {"f": text}, "refs": {"k": ["{{ f() }}" if where == "function" else text, 0, 1]}}
if where == "gen":
    doc = {"version": 1, "gen": [{"key": "k{{i}}", "url": text, "dimensions": {"i": {"stop": 3}}}]}
t0 = time.monotonic()
try:
    refset.load(doc)
    print("LOADED")
except refset.errors.InvalidReferences as e:
    print("REFUSED", round(time.monotonic() - t0, 2), str(e)[:300])
"""


@pytest.mark.parametrize("where", ["url", "function", "gen"])
@pytest.mark.parametrize("bomb", BOMBS)
def test_template_bombs_are_bounded(bomb, where):
    import subprocess
    import sys

    env = {"PYTHONPATH": str(Path(refset.__file__).parents[1]), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", _BOMB_RUNNER, where, bomb], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("REFUSED"), r.stdout
    seconds = float(r.stdout.split()[1])
    assert seconds < 10
    assert "template" in r.stdout


def test_template_limits_are_configurable():
    doc = {"version": 1, "refs": {"k": ["{{ 'a' * 1000 }}", 0, 1]}}
    assert refset.load(doc)["k"][0] == "a" * 1000
    with pytest.raises(InvalidReferences, match=r"refs\[\"k\"\]\[0\]: template error: a repeated sequence "
                                                 r"of 1000 bytes is over the template memory limit of 100"):
        refset.load(doc, limits=refset.Limits(template_memory=100))
    assert refset.load(doc)["k"][0] == "a" * 1000


# -- template sandbox --------------------------------------------------------------------------------

ESCAPES = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ().__class__.__bases__[0].__subclasses__() }}",
    "{{ [].__class__.__base__.__subclasses__() }}",
    "{{ ''['__cla' ~ 'ss__'] }}",
    "{{ ''|attr('__class__') }}",
    "{{ lipsum.__globals__['os'].popen('touch PWNED').read() }}",
    "{{ (lipsum|attr('__glo' ~ 'bals__'))['os'] }}",
    "{{ cycler.__init__.__globals__.os }}",
    "{{ joiner.__init__.__globals__ }}",
    "{{ namespace.__init__.__globals__ }}",
    "{{ range.__self__ }}",
    "{{ range.__init__.__globals__ }}",
    "{{ self.__init__.__globals__ }}",
    "{{ config.items() }}",
    "{{ request.application.__globals__ }}",
    "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    "{{ dict.mro() }}",
    "{{ lipsum.__code__ }}",
]


@pytest.mark.parametrize("where", ["url", "gen"])
@pytest.mark.parametrize("payload", ESCAPES)
def test_template_sandbox_escapes_are_refused(payload, where, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    doc = ({"version": 1, "refs": {"k": [payload, 0, 1]}} if where == "url" else
           {"version": 1, "gen": [{"key": "k{{i}}", "url": payload, "dimensions": {"i": {"stop": 2}}}]})
    with pytest.raises(InvalidReferences, match=r"template error: access to attribute .* is unsafe|"
                                                r"unknown template name"):
        refset.load(doc)
    assert not (tmp_path / "PWNED").exists()
