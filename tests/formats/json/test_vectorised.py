"""The vectorised JSON reader (formats/json/scan.py, doc.py, plan.py, lazy.py) must agree exactly with the generic parser on every document."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

import refset
from refset.errors import InvalidReferences
from refset.formats.json.generic import from_document
from refset.formats.json.plan import MIN_SIZE, plan_document
from refset.formats.json.read import document_problems
from refset.formats.json.scan import QUOTE_BLOCK, Fallback
from tests.helpers import zarray


def fast_load(text: bytes) -> refset.ReferenceSet | None:
    """The vectorised reader alone: a set, or None when it hands the document to the generic parser."""
    plan = plan_document(text)
    if plan is None:
        return None
    try:
        urls, tables, other = plan.finish()
    except Fallback:
        return None
    return refset.ReferenceSet.from_arrays({}, tables, urls, other=other)


def _doc(n_files: int = 60, seed: int = 0, sep: str = ".") -> dict:
    rng = np.random.default_rng(seed)
    d = {".zgroup": '{"zarr_format": 2}', ".zattrs": '{"title": "t \\"quoted\\" \\\\ x"}'}
    for v in ("a", "bb", "grp/sub/ccc"):
        d[f"{v}/.zarray"] = zarray([n_files, 40, 30], [1, 10, 10], sep=sep)
        d[f"{v}/.zattrs"] = '{"_ARRAY_DIMENSIONS": ["t", "y", "x"]}'
    for f in range(n_files):
        url = f"s3://bucket/some/dir/file-{f:05d}.nc"
        off = int(rng.integers(0, 10**6))
        for v in ("a", "bb", "grp/sub/ccc"):
            for j in range(4):
                for k in range(3):
                    if rng.random() < 0.2:
                        continue
                    ln = int(rng.integers(1, 10**5))
                    d[f"{v}/{f}{sep}{j}{sep}{k}"] = [url, off, ln]
                    off += ln
    return d


def _check(text: bytes, fast_expected: bool = True) -> refset.ReferenceSet:
    assert len(text) >= MIN_SIZE
    fast = fast_load(text)
    if fast_expected:
        assert fast is not None, "fast path not taken"
    generic = from_document(json.loads(text))
    got = refset.load(text)
    assert got.to_dict() == generic.to_dict()
    lazy = refset.load(text, lazy=True)
    assert sorted(lazy.other.keys.tolist()) == sorted(generic.other.keys.tolist())  # before tables
    assert lazy.to_dict() == generic.to_dict()
    if fast is not None:
        assert fast.to_dict() == generic.to_dict()
        assert set(fast.grids) == set(generic.grids)
    return got


@pytest.mark.parametrize("dumps", [
    lambda d: json.dumps(d),
    lambda d: json.dumps(d, separators=(",", ":")),
    lambda d: json.dumps(d, indent=2),
    lambda d: json.dumps(d, indent="\t"),
    lambda d: json.dumps({"version": 1, "refs": d}),
    lambda d: json.dumps({"version": 1, "templates": {"x": "y"}, "refs": d}, indent=1),
])
def test_layouts(dumps):
    rs = _check(dumps(_doc()).encode())
    assert rs.table("grp/sub/ccc").count() > 0


def test_chunk_columns_are_used():
    rs = fast_load(json.dumps(_doc()).encode())
    assert rs is not None and set(rs.grids) == {"a", "bb", "grp/sub/ccc"}
    assert len(rs.key_table()) == 8 and len(rs.other) == 2  # metadata only: 6 array documents


def test_inline_chunks_whole_files_and_odd_keys():
    d = _doc()
    d["a/0.0.0"] = "base64:AAAAAQ=="  # an inline chunk overriding nothing (was maybe absent)
    d["a/1.1.1"] = ["s3://bucket/whole.bin"]
    d["a/01.0.0"] = ["u", 1, 2]  # non-canonical: generic key
    d["a/999.0.0"] = ["u", 1, 2]  # out of the grid: generic key
    d["a/1.0"] = ["u", 1, 2]  # wrong ndim
    d["nogrid/3.4"] = ["u", 5, 6]
    d["0.1"] = ["root-like", 7, 8]
    d["esc\\/aped/0"] = ["s3:\\/\\/b\\/k", 1, 2]
    d["unicode-é"] = ["s3://b/é.nc", 3, 4]
    rs = _check(json.dumps(d).encode())
    assert rs["a/1.1.1"] == ("s3://bucket/whole.bin",)
    assert rs["esc\\/aped/0"] == ("s3:\\/\\/b\\/k", 1, 2)
    text = json.dumps(d).replace("s3://bucket/some", "s3:\\/\\/bucket\\/some").encode()
    _check(text)


def test_inline_chunks_all_base64_interleaved_arrays():
    """Every inline chunk base64 (the reader then takes their lengths from the text): values of every
    padding, empty ones included, two arrays whose members interleave, must read as the generic
    parser reads them; one value that is not strict base64 sends the batch the value-by-value way."""
    d = _doc(n_files=5)
    rng = np.random.default_rng(3)
    for v in ("p", "q"):
        d[f"{v}/.zarray"] = zarray([2000], [1], sep=".")
    raw = {}
    for i in range(2000):
        for v in ("q", "p"):  # q's members first, then p's: the arrays' rows interleave
            raw[f"{v}/{i}"] = rng.integers(0, 256, int(rng.integers(0, 9)), dtype=np.uint8).tobytes()
            d[f"{v}/{i}"] = "base64:" + base64.b64encode(raw[f"{v}/{i}"]).decode()
    text = json.dumps(d).encode()
    rs = _check(text)
    assert all(rs[k] == b for k, b in raw.items())
    assert any(not b for b in raw.values()) and {len(b) % 3 for b in raw.values()} == {0, 1, 2}
    for k, extra in (("q/3", "AAAA="), ("q/4", "AAAA=="), ("p/9", "AAAA====")):  # strict mode takes
        d[k] = "base64:" + extra  # "=" after a complete quad (3 bytes): lengths from the values
        raw[k] = b"\0\0\0"
    rs = _check(json.dumps(d).encode())
    assert all(rs[k] == b for k, b in raw.items())
    d["p/7"] = "plain"  # one inline value that is text: lengths taken from the values themselves
    assert _check(json.dumps(d).encode())["p/7"] == b"plain"
    d["p/7"] = "base64:AAA"  # not strict base64: the generic parser's meaning (an error) decides
    with pytest.raises(InvalidReferences, match="p/7"):
        refset.load(json.dumps(d).encode())


def test_many_inline_chunks_route_as_key_by_key():
    """Thousands of inline chunks (a combine of small files): their keys are parsed per array in one
    vectorised pass, which must find what the key-by-key route finds, odd keys included; strings
    with escapes, non-ASCII text and a raw control character (refused) keep their JSON meaning."""
    d = _doc(n_files=5)
    d["s/.zarray"] = zarray([], [], sep=".")  # a scalar array: its chunk key is "s/0"
    d["s/0"] = "base64:AAAAAQ=="
    d["root/.zarray"] = zarray([3000, 4], [1, 2], sep=".")
    for i in range(3000):
        for j in range(2):
            d[f"root/{i}.{j}"] = f"base64:{i:04d}" if (i + j) % 3 else f"text {i}\n\u00e9 \"q\""
    for odd in ("root/01.0", "root/3000.0", "root/1.2", "root/1", "root/1.0.0", "root/1.-1", "root/²",
                "root/0 .1", "s/00", "s/1"):
        d[odd] = "base64:AAAA"
    text = json.dumps(d, ensure_ascii=False).encode()
    rs = _check(text)
    assert rs["root/6.0"] == "text 6\n\u00e9 \"q\"".encode()
    assert rs["root/1.0"] == base64.b64decode("0001")
    assert "root/01.0" in rs.other.keys.tolist() and rs.table("root").count() == 6000
    assert rs["s/0"] == b"\0\0\0\1"
    bad = text.replace(b"text 6", b"text\x016", 1)  # a raw control character inside a string
    with pytest.raises(InvalidReferences, match="invalid JSON"):
        refset.load(bad)


@pytest.mark.parametrize(("extra", "fast"), [
    (b', "root/1.0": "base64:AAAB", "root/1.0": "base64:AAAC"', True),  # an inline chunk twice: the later wins
    (b', "root\\/2.0": "base64:AAAB"', False),  # an inline chunk spelled with an escape, after the plain one
    (b', "root/3.0": ["u", 1, 2]', False),  # an inline chunk also given as a list, after it
    (b', "root/0.1": "x", "root/0.1": ["u", 1, 2], "root/0.1": "y"', False),  # inline, list, inline again
    (b', "root/\\u0034.0": "base64:AAAB"', False),  # an escape that ends in a digit, naming an inline chunk
    (b', "root/5.0": "tab\\tand \\"quote\\" \\u00e9"', True),  # inline text with escapes, not base64
])
def test_inline_chunks_read_column_wise_keep_json_order(extra, fast):
    """Inline chunks of the grids are read column-wise: whatever order and spelling they come in,
    the result is the generic parser's."""
    d = _doc(n_files=5)
    d["root/.zarray"] = zarray([3000, 2], [1, 1], sep=".")
    for i in range(3000):
        for j in range(2):
            d[f"root/{i}.{j}"] = f"base64:{i:04d}"
    text = json.dumps(d).encode()
    _check(text[:-1] + extra + b"}", fast_expected=fast)


@pytest.mark.parametrize("gen", [
    # keys that name chunks directly
    [{"key": "root/{{i}}", "url": "g.nc", "offset": "{{i}}", "length": "1", "dimensions": {"i": {"stop": 3}}}],
    # keys expanded one by one (a filter the vectorised expansion does not take)
    [{"key": "root/{{ i|string }}", "url": "g.nc", "dimensions": {"i": {"stop": 3}}}],
    # keys of which one is off the grid (added as a batch of keys, routed when the tables are built)
    [{"key": "root/{{i}}", "url": "g.nc", "dimensions": {"i": {"stop": 3001}}}],
])
@pytest.mark.parametrize("lists", [False, True])
def test_generated_keys_naming_chunks_of_the_refs(gen, lists):
    """Version 1 ``gen`` keys that name chunks the ``refs`` hold (inline, or as lists): the generated
    reference wins, as in the generic parser, however the keys are generated."""
    refs = {"root/.zarray": zarray([3000], [1], sep=".")}
    for i in range(3000):
        refs[f"root/{i}"] = ["x.nc", i, 1] if lists else f"base64:{i:04d}"
    text = json.dumps({"version": 1, "gen": gen, "refs": refs}).encode()
    generic = from_document(json.loads(text))
    assert generic["root/2"][0] == "g.nc"
    assert refset.load(text).to_dict() == generic.to_dict()
    assert refset.load(text, lazy=True).to_dict() == generic.to_dict()
    assert refset.load(text, lazy=True)["root/2"] == generic["root/2"]


@pytest.mark.parametrize("z2", [zarray([2, 3000], [1, 1], sep="."), '{"shape": "not a grid"}'])
def test_metadata_key_spelled_with_an_escape_ending_in_a_digit(z2):
    """``.zarra\\u0079`` is ``.zarray``: read after the inline chunks were placed in the grid of
    ``zarr.json``, it would change the grid under them; the generic parser reads it."""
    z3 = json.dumps({"zarr_format": 3, "node_type": "array", "shape": [3000, 2], "data_type": "uint8",
                     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 1]}},
                     "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
                     "codecs": [], "fill_value": 0})
    parts = ['"root/zarr.json": ' + json.dumps(z3), '"root/.zarra\\u0079": ' + json.dumps(z2)]
    parts += [f'"root/{i}.{j}": "base64:{i:04d}"' for i in range(3000) for j in range(2)]
    _check(("{" + ", ".join(parts) + "}").encode(), fast_expected=False)


def test_duplicate_keys_last_wins():
    d = _doc()
    text = json.dumps(d)
    body = text[:-1] + ', "a/0.0.0": ["dup", 1, 2], "a/0.0.1": "inline", "a/0.0.1": ["again", 3, 4]}'
    rs = _check(body.encode(), fast_expected=False)
    assert rs["a/0.0.0"] == ("dup", 1, 2) and rs["a/0.0.1"] == ("again", 3, 4)
    body2 = text[:-1] + ', "a/0.0.0": ["dup", 1, 2], "a/0.0.0": ["dup2", 5, 6]}'
    rs = _check(body2.encode())
    assert rs["a/0.0.0"] == ("dup2", 5, 6)


def test_slash_separator_and_v3_go_through_per_key_path():
    _check(json.dumps(_doc(60, sep="/")).encode())


def test_big_numbers():
    d = _doc()
    d["a/0.0.0"] = ["u", 2**62 + 11, 2**40]
    d["a/0.0.1"] = ["u", 10**15 + 1, 0]
    rs = _check(json.dumps(d).encode(), fast_expected=False)
    assert rs["a/0.0.0"] == ("u", 2**62 + 11, 2**40)
    d["a/0.0.0"] = ["u", 1234567890123456, 1]
    _check(json.dumps(d).encode())


@pytest.mark.parametrize("bad,message", [
    ('"a/0.0.0": ["u", -5, 10]', 'refs["a/0.0.0"][1]: offset must be a non-negative integer, got -5'),
    ('"a/0.0.0": ["u", 5, 1.5]', 'refs["a/0.0.0"][2]: length must be a non-negative integer, got 1.5'),
    ('"a/0.0.0": ["u", 5, 1e3]', 'refs["a/0.0.0"][2]: length must be a non-negative integer'),
    ('"a/0.0.0": ["u", 5]', 'refs["a/0.0.0"]: a reference list must have 1 item'),
    ('"a/0.0.0": ["u", 5, 6, 7]', 'refs["a/0.0.0"]: a reference list must have 1 item'),
    ('"a/0.0.0": [5, 5, 6]', 'refs["a/0.0.0"][0]: url must be a string'),
    ('"a/0.0.0": "base64:%%"', 'refs["a/0.0.0"]: bad base64 data'),
    ('"a/0.0.0": null', 'refs["a/0.0.0"]: value must be a string'),
])
def test_bad_values_are_reported_precisely(bad: str, message: str):
    text = json.dumps(_doc())[:-1] + ", " + bad + "}"
    with pytest.raises(InvalidReferences) as e:
        refset.load(text.encode())
    assert any(p.startswith(message) for p in e.value.problems), e.value.problems


@pytest.mark.parametrize("tail", ["}}", "} x", ",}", ""])
def test_malformed_json_is_refused(tail: str):
    text = json.dumps(_doc())[:-1] + tail
    with pytest.raises(InvalidReferences, match="invalid JSON"):
        refset.load(text.encode())


def test_v1_envelope_with_templates_and_gen():
    d = _doc()
    refs = {k: (["{{b}}" + v[0][len("s3://bucket"):], *v[1:]] if isinstance(v, list) else v)
            for k, v in d.items()}
    doc = {"version": 1, "templates": {"b": "s3://bucket"},
           "gen": [{"key": "gen/{{i}}", "url": "{{b}}/g", "offset": "{{i * 10}}", "length": "10",
                    "dimensions": {"i": {"stop": 3}}}],
           "refs": refs}
    rs = _check(json.dumps(doc).encode())
    assert rs["gen/2"] == ("s3://bucket/g", 20, 10)
    assert rs.to_dict() == {**d, "gen/0": ["s3://bucket/g", 0, 10], "gen/1": ["s3://bucket/g", 10, 10],
                            "gen/2": ["s3://bucket/g", 20, 10]}


def test_envelope_with_refs_not_last_and_unknown_version():
    d = _doc()
    text = json.dumps({"refs": d, "version": 1}).encode()
    _check(text, fast_expected=False)
    with pytest.raises(InvalidReferences, match="unknown version 3"):
        refset.load(json.dumps({"version": 3, "refs": d}).encode())


def test_synthetic_benchmark_shape(shared_bench, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "refs.json"
    subprocess.run([sys.executable, str(shared_bench / "synth_refs.py"), str(out), "--files", "30"],
                   check=True, capture_output=True)
    rs = _check(out.read_bytes())
    assert len(rs.urls) == 30 and set(rs.grids) == {"lst", "lst_uncertainty", "n", "qual"}


def _members(extra: list[str], n: int = 3000) -> bytes:
    meta = '"s/.zarray": ' + json.dumps(zarray([n], [1], sep="/"))
    mem = [meta] + [f'"s/{i}": ["s3://b/f.nc", {i * 100}, 100]' for i in range(n)]
    mem += [f'"x{i}/0.0": ["s3://b/g.nc", {i}, 1]' for i in range(n)]
    return ("{" + ", ".join(mem + extra) + "}").encode()


@pytest.mark.parametrize("extra,key,want", [
    (['"s/5": "inline"'], "s/5", b"inline"),  # list earlier, text later (per-key path)
    (['"x": ["u"]', '"x": "text"'], "x", b"text"),
    (['"x": "text"', '"x": ["u"]'], "x", ("u",)),
])
def test_duplicates_across_value_kinds_keep_document_order(extra, key, want):
    text = _members(extra)
    assert refset.load(text)[key] == want
    assert from_document(json.loads(text))[key] == want


def test_escaped_slash_in_a_chunk_key():
    d = _doc()
    text = json.dumps(d)[:-1] + ', "a\\/1.0.0": ["u", 1, 2]}'
    rs = _check(text.encode(), fast_expected=False)
    assert rs["a/1.0.0"] == ("u", 1, 2)


@pytest.mark.parametrize("head", [b"{xx ", b"{, ", b"{} ", b"[ "])
def test_text_before_the_first_key_is_refused(head: bytes):
    body = json.dumps(_doc()).encode()[1:]
    with pytest.raises(InvalidReferences, match="invalid JSON"):
        refset.load(head + body)
    assert document_problems(head + body)


@pytest.mark.parametrize("bad", [b'"a/0.0.0": ["u\xff", 0, 1]', b'"y": "bad \\q"', b'"\x01k": ["u", 0, 1]'])
def test_undecodable_text_is_invalid_references(bad: bytes):
    text = json.dumps(_doc()).encode()[:-1] + b", " + bad + b"}"
    with pytest.raises(InvalidReferences, match="invalid JSON"):
        refset.load(text)
    with pytest.raises(InvalidReferences, match="invalid JSON"):
        refset.load(b"{" + bad + b"}")


def test_lazy_reads_chunk_tables_on_first_use():
    d = _doc()
    text = json.dumps(d).encode()
    lazy = refset.load(text, lazy=True)
    assert lazy.source.steps_left and set(lazy.grids) == {"a", "bb", "grp/sub/ccc"}
    assert lazy["a/.zarray"] == d["a/.zarray"].encode()  # metadata without building tables
    assert lazy.source.steps_left
    key = next(k for k in d if k.startswith("bb/") and not k.endswith((".zarray", ".zattrs")))
    assert list(lazy[key]) == d[key]
    # bb holds a third of the list keys: its table is read from its own members, the others wait
    assert lazy.source.steps_left and lazy.cached_table("bb") is not None and lazy.cached_table("a") is None
    assert lazy.to_dict() == refset.load(text).to_dict() == d
    fewer = {k: v for k, v in d.items() if not (k.startswith(("bb/", "grp/")) and isinstance(v, list)
                                                 and k != key and k.endswith(("1", "2")))}
    one = refset.load(json.dumps(fewer).encode(), lazy=True)
    assert list(one[key]) == d[key] and one.source.steps_left  # bb: a few of the list keys now
    akey = next(k for k in d if k.startswith("a/") and not k.endswith((".zarray", ".zattrs")))
    assert list(one[akey]) == d[akey]
    assert not one.source.steps_left  # a holds over half: its first chunk built every table, released the text


def test_lazy_reports_bad_chunk_references_at_first_use():
    text = json.dumps(_doc())[:-1] + ', "a/0.0.0": ["u", -5, 10]}'
    rs = refset.load(text.encode(), lazy=True)
    assert json.loads(rs["a/.zarray"])["shape"][0] == 60
    with pytest.raises(InvalidReferences, match=r'refs\["a/0.0.0"\]\[1\]: offset must be'):
        rs["a/0.0.1"]


_TRICKY = {
    "plain": b"",
    "root list key": b', "extra": ["s3://x/y.nc", 0, 5]',
    "odd key under an array": b', "a/01.0.0": ["u", 0, 1], "a/5": ["u", 1, 2], "a/x/9": ["u"]',
    "metadata key also a list": b', "a/.zattrs": ["u", 0, 3]',
    "escape ending in a digit": b', "a/x\\u0031": ["u", 0, 3], "bb/\\u00e9": ["u", 3, 4]',
    "inline chunk also a list": b', "a/0.0.0": "base64:AAAA"',
    "string key ending in a digit": b', "a/foo1": "text", "grp/sub/n2": "x"',
    "small array, a chunk inline and as a list": b', "t/.zarray": ' + json.dumps(zarray([4], [1])).encode()
    + b', "t/0": ["u", 0, 1], "t/1": ["u", 1, 1], "t/0": "base64:AAAA", "t/01": ["u", 9, 9]',
}
_KEYS = [".zgroup", ".zattrs", "a/.zarray", "a/.zattrs", "grp/sub/ccc/.zarray", "a/0.0.0", "a/0.1.2",
         "a/01.0.0", "a/5", "a/x/9", "a/x1", "bb/é", "a/foo1", "grp/sub/n2", "extra", "nope", "a/nope",
         "a/99.0.0", "grp/sub/x", "grp/sub/ccc/3.1.1", "t/0", "t/1", "t/01"]
_DIRS = ["", "a", "a/x", "bb", "grp", "grp/sub", "grp/sub/ccc", "nope", "a/0.0.0", "t"]


def _answer(fs, query: str, path: str):
    try:
        if query == "get":
            return fs.refs[path], fs.exists(path)
        if query == "ls":
            return sorted((e["name"], e["type"], e["size"]) for e in fs.ls(path, detail=True))
        return fs.isdir(path), fs.exists(path)
    except (FileNotFoundError, KeyError) as e:
        return type(e).__name__


@pytest.mark.parametrize("extra", list(_TRICKY.values()), ids=list(_TRICKY))
def test_lazy_answers_before_classifying_agree_with_eager(extra: bytes):
    """Each query on a fresh lazy set (so it is answered at the earliest step the reader allows)
    gives what the fully read set gives."""
    text = json.dumps(_doc(sep=".")).encode()[:-1] + extra + b"}"
    eager = refset.ReferenceFileSystem(fo=refset.load(text))
    queries = [("get", k) for k in _KEYS] + [(q, d) for d in _DIRS for q in ("ls", "dir")]
    for query, path in queries:
        lazy = refset.load(text, lazy=True)
        got = _answer(refset.ReferenceFileSystem(fo=lazy), query, path)
        assert got == _answer(eager, query, path), (query, path)


def test_metadata_and_root_listing_do_not_classify_keys():
    text = json.dumps(_doc()).encode()
    lazy = refset.load(text, lazy=True)
    fs = refset.ReferenceFileSystem(fo=lazy)
    assert fs.ls("", detail=False) == [".zattrs", ".zgroup", "a", "bb", "grp"]
    assert fs.ls("grp/sub", detail=False) == ["grp/sub/ccc"]
    assert fs.cat_file("a/.zarray") == _doc()["a/.zarray"].encode()
    assert "a/.zgroup" not in lazy and "zarr.json" not in lazy and fs.exists(".zattrs")
    assert not lazy.source.classified  # all answered from the string values alone
    assert "a/x1" not in lazy and lazy.source.classified  # might be a list key: classified first
    assert lazy.source.steps_left  # ... but the chunk tables are not read yet
    assert "a/0.0.0" in fs.ls("a", detail=False) and not lazy.source.steps_left  # listing a needs its table


def test_lazy_reads_a_small_array_on_its_own():
    """A coordinate's chunks are read from its own members; the big arrays wait (the text stays)."""
    d = _doc()
    d["t/.zarray"] = zarray([60], [60])
    d["t/0"] = ["s3://bucket/coords.nc", 100, 240]
    d["y/.zarray"] = zarray([40], [10])
    d.update({f"y/{i}": ["s3://bucket/coords.nc", 400 + 40 * i, 40] for i in (0, 1, 3)})
    d["y/2"] = "base64:" + "A" * 56  # inline, beside list members of the same array
    text = json.dumps(d).encode()
    eager, lazy = refset.load(text), refset.load(text, lazy=True)
    assert lazy.table("t").kind.tolist() == [1]
    assert lazy.source.steps_left and not lazy.source.classified  # neither read everything nor classified
    for path in ("t", "y"):
        assert list(lazy.items_of(path)) == list(eager.items_of(path))
    assert lazy["y/1"] == eager["y/1"] and lazy["y/2"] == eager["y/2"] and lazy.source.steps_left
    assert lazy.to_dict() == eager.to_dict()


def test_lazy_sparse_grid_keeps_its_keys():
    """A grid too sparse for a dense table stays a grid (a sparse table) and its keys are found."""
    d = _doc()
    d["s/.zarray"] = zarray([10**9], [1])
    d["s/5"], d["s/77"] = ["u", 0, 1], ["u", 1, 2]
    text = json.dumps(d).encode()
    lazy = refset.load(text, lazy=True)
    assert "s" in lazy.grids
    assert lazy.table("s").is_sparse and lazy.table("s").present().tolist() == [5, 77]
    assert lazy["s/5"] == ("u", 0, 1) and "s/6" not in lazy
    assert refset.ReferenceFileSystem(fo=refset.load(text, lazy=True)).ls("s", detail=False) == [
        "s/.zarray", "s/5", "s/77"]
    assert lazy.to_dict() == refset.load(text).to_dict()


def test_reading_in_a_forked_child_does_not_hang():
    """The reader's thread pool is per process: a child forked after the parent used it (say by
    multiprocessing or Dask's process scheduler) gets its own instead of waiting forever."""
    import multiprocessing

    text = json.dumps(_doc(n_files=4000)).encode()
    assert len(text) > 2 * QUOTE_BLOCK  # scanned on the pool
    want = len(refset.load(text, lazy=True))
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=lambda: queue.put(len(refset.load(text, lazy=True))))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("the forked child hung")
    assert queue.get(timeout=5) == want


def _agree(text: bytes, keys: list[str], dirs: tuple[str, ...] = ()) -> None:
    """Fresh lazy sets answer each query like the generic parser (first query on each)."""
    generic = from_document(json.loads(text))
    want = {k: generic.get(k) for k in keys}
    for k in keys:
        assert refset.load(text, lazy=True).get(k) == want[k], k
        assert refset.load(text).get(k) == want[k], k
    for d in dirs:
        got = refset.ReferenceFileSystem(fo=refset.load(text, lazy=True)).ls(d, detail=False)
        assert got == refset.ReferenceFileSystem(fo=generic).ls(d, detail=False), d
    assert refset.load(text, lazy=True).to_dict() == generic.to_dict()


def test_review_cases_of_the_lazy_reader():
    """Each document broke the lazy (and some the eager) reader at one point."""
    # a key near the end sharing only its first 8 bytes with a long array path
    d = _doc()
    long = "abcdefgh/" + "x" * 40
    d[long + "/.zarray"], d[long + "/0"], d["abcdefgh1"] = zarray([4], [1]), ["u", 0, 1], ["u", 5, 6]
    _agree(json.dumps(d, separators=(",", ":")).encode(), ["abcdefgh1", long + "/0"])
    # a small array's chunk spelled with an escape, read first through its table
    d = {"t/.zarray": zarray([60], [1]), **_doc(), "t/0": ["s3://b/c.nc", 100, 240]}
    text = json.dumps(d).encode()[:-1] + b', "t/\\u00312": ["s3://b/c.nc", 400, 8]}'
    lazy = refset.load(text, lazy=True)
    assert len(list(lazy.items_of("t"))) == 2 and lazy["t/12"] == ("s3://b/c.nc", 400, 8)
    _agree(text, ["t/12", "t/0"], ("t",))
    # a chunk of an inner array whose escaped spelling matches only the outer array's path
    d = {**_doc(), "a/b/.zarray": zarray([4], [1]), "a/b/0": ["u", 0, 1]}
    _agree(json.dumps(d).encode()[:-1] + b', "a/\\u0062/1": ["u", 1, 1]}', ["a/b/1", "a/b/0"], ("a/b",))
    # a missing chunk of a small 3-D array none of whose keys has three indices
    d = {**_doc(), "t/.zarray": zarray([4, 4, 4], [1, 1, 1]), "t/5": ["u", 0, 1]}
    _agree(json.dumps(d).encode(), ["t/0.0.0", "t/5"])
    # a batch in which no key reaches a grid's number of dimensions
    d = {"big/.zarray": zarray([5000], [1]), "t/.zarray": zarray([4, 4, 4], [1, 1, 1]), "t/5": ["u", 0, 1]}
    d.update({f"big/{i}": ["s3://b/f.nc", i, 1] for i in range(3000)})
    _agree(json.dumps(d).encode(), ["t/5", "big/7"])
    # a sparse grid beside a list key outside the arrays (classified at open)
    d = {**_doc(), "s/.zarray": zarray([10**9], [1]), "s/5": ["u", 0, 1], "extra": ["s3://x", 0, 5]}
    _agree(json.dumps(d).encode(), ["s/5", "s/6", "extra"], ("s", ""))


def test_eager_reader_keeps_huge_sparse_grids_sparse():
    d = {**_doc(), "s/.zarray": zarray([10**12], [1]), "s/5": ["u", 0, 1]}
    rs = refset.load(json.dumps(d).encode())
    assert rs["s/5"] == ("u", 0, 1) and "s" in rs.grids and rs.table("s").is_sparse
    assert rs.table("s").nbytes() < 1000


def test_lazy_finishing_with_the_generic_parser_keeps_the_grids():
    """A duplicate given as text and as a list sends the first table read to the generic parser;
    it must finish with the grids seen at open."""
    d = {".zgroup": '{"zarr_format": 2}', "a/.zarray": zarray([2_000_000], [1]), "a/0": ["u", 0, 1]}
    d.update({f"a/x/{i}": ["u", i, 1] for i in range(130_000)})
    text = json.dumps(d).encode()[:-1] + b', "a/x/1": "text"}'
    lazy = refset.load(text, lazy=True)
    assert lazy["a/0"] == ("u", 0, 1) and lazy["a/x/1"] == b"text"


def test_odd_number_of_quotes_is_invalid_references():
    text = json.dumps(_doc()).encode()[:-1] + b', "x": "a""}'
    for lazy in (False, True):
        with pytest.raises(InvalidReferences):
            refset.load(text, lazy=lazy)


def test_keys_read_while_another_thread_finishes_reading():
    import threading
    import time

    d = {".zgroup": '{"zarr_format": 2}', "a/.zarray": zarray([200_000], [1])}
    d.update({f"a/{i}": ["s3://b/f.nc", i, 1] for i in range(200_000)})
    d["a/x1"] = ["s3://b/odd.nc", 7, 8]
    lazy = refset.load(json.dumps(d).encode(), lazy=True)
    plan = lazy.source._plan
    reader = threading.Thread(target=lambda: lazy["a/0"])
    reader.start()
    while plan.batches is None and reader.is_alive():  # the reader is inside the costly step
        time.sleep(0.0001)
    assert lazy["a/x1"] == ("s3://b/odd.nc", 7, 8)
    assert "a/x1" in refset.ReferenceFileSystem(fo=lazy).ls("a", detail=False)
    reader.join()


def test_documents_of_one_layout_keep_their_own_values():
    """Small documents with the same keys (a combine's inputs) share a cached routing; each set still
    holds its own values, and a change of grid or of which keys are chunk keys is routed afresh."""
    def doc(k: int, shape: int = 4) -> dict:
        d = {".zgroup": '{"zarr_format":2}', "x/.zarray": zarray([shape], [1], sep=".")}
        for i in range(4):
            d[f"x/{i}"] = f"inline {k}.{i}" if (i + k) % 2 else [f"file{k}.nc", 100 * k + i, 10 + i]
        d["x/.zattrs"] = json.dumps({"k": k})
        return d

    for k in range(4):
        rs = refset.load(doc(k))
        assert dict(rs) == {key: (v.encode() if isinstance(v, str) else tuple(v)) for key, v in doc(k).items()}
        assert rs.table("x").count() == 4
    small = refset.load(doc(1, shape=3))  # the same keys, a grid without chunk 3: "x/3" is a plain key
    assert small.table("x").count() == 3 and "x/3" in small.other.keys.tolist()
    assert small["x/3"] == ("file1.nc", 103, 13)
    renamed = doc(2)
    renamed["y/.zarray"] = renamed.pop("x/.zarray")  # same key set but x is no array now
    rs = refset.load(renamed)
    assert "x" not in rs.grids and rs["x/0"] == ("file2.nc", 200, 10)


@pytest.mark.parametrize("seed", range(6))
def test_same_spans_against_python_bytes(seed: int, monkeypatch: pytest.MonkeyPatch):
    """Each span compared with the one before it, as Python compares the bytes: runs of equal spans
    (URLs of 1-300 bytes), neighbours of one length that differ in one byte (first, middle, last,
    a NUL at the end), empty spans, and comparisons cut into blocks (SAME_BLOCK small)."""
    from refset.formats.json import scan

    rng = np.random.default_rng(seed)
    if seed % 2:
        monkeypatch.setattr(scan, "SAME_BLOCK", 64)
    text = bytearray(rng.integers(0, 4, 200_000, dtype=np.uint8) + 97)  # few letters: many equal spans
    starts, ends = [], []
    for _ in range(3000):
        L = int(rng.choice([0, 1, 7, 8, 9, 16, 91, 130, 300, int(rng.integers(0, 300))]))
        s0 = int(rng.integers(0, len(text) - L))
        for _ in range(int(rng.integers(1, 4))):  # a run naming one string, maybe at another place
            starts.append(s0)
            ends.append(s0 + L)
        if L and rng.random() < 0.5:  # a neighbour as long that differs in one byte
            s1 = int(rng.integers(0, len(text) - L))
            text[s1 : s1 + L] = text[s0 : s0 + L]
            at = s1 + int(rng.choice([0, L // 2, L - 1]))
            text[at] = 0 if rng.random() < 0.3 else text[at] ^ 1
            starts.append(s1)
            ends.append(s1 + L)
    a = np.frombuffer(bytes(text), np.uint8)
    s, e = np.asarray(starts), np.asarray(ends)
    want = [False] + [text[s[i] : e[i]] == text[s[i - 1] : e[i - 1]] for i in range(1, s.size)]
    got = scan.same_spans(a, s, e)
    assert got.tolist() == want
    assert 0 < got.sum() < got.size - 1000  # both answers are common
