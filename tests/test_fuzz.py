"""Fuzzing (issue 12): random and mutated reference sets for every reader end in a loaded set that reads
whole, or in a ``refset.errors`` error; never another exception, never a hang (:mod:`.fuzzing`).

Structured mutations change Version 0/1 documents (mappings and JSON text): values of wrong types,
huge, negative or NaN numbers, deep nesting, odd keys, broken ``.zarray`` fields, templates and
``gen`` blocks. Byte mutations (flips, truncations, insertions, deletions, overwrites) change files
written by ``refset.save`` in every format: JSON V0/V1, ``.json.gz``, ``.json.zst``, a parquet directory
(any of its files, also with its checksums removed so that the parser itself is reached) and packed
(also with a mutated index re-sealed under valid CRCs). Examples are derandomized, so every run tries
the same inputs; FUZZ_SCALE=N multiplies their number for a longer hunt. Each crash found is kept in
tests/hostile/ and replayed by tests/test_hostile_corpus.py.
"""

from __future__ import annotations

import atexit
import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fuzzing import (
    FORMATS,
    exercise,
    exercise_json,
    packed_index,
    save_valid,
    valid_refs,
    valid_v1,
    with_packed_index,
)

SCALE = int(os.environ.get("FUZZ_SCALE", "1"))


def fuzz(n: int) -> Any:
    return settings(max_examples=n * SCALE, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


# -- values and keys -----------------------------------------------------------------------------------
DEEP = "\x00deep:"  # placeholder for a nested list, expanded in the JSON text (json.dumps would recurse)

EDGE = [0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1,
        10**30, 10**400, 0.5, -0.0, 1e308, float("nan"), float("inf"), float("-inf"), True, False, None,
        "", " ", "..", "/", "\x00", "base64:", "base64:!!!=", "base64:AA", "{{", "{{ x }}", "}}", "a" * 300,
        "\u00e9", "s3://", "file:///etc/passwd", [], {}, [None], ["u"], ["u", 0], ["u", 0, 1, 2],
        ["u", -1, 5], ["u", 2**63 - 1, 1], ["u", 0, 2**64], [1, 2, 3], ["u", "0", "1"], ["u", 1.5, 2]]

scalars = st.one_of(
    st.sampled_from(EDGE), st.integers(), st.floats(), st.text(max_size=12), st.booleans(), st.none(),
    st.sampled_from([10, 1000, 100_000]).map(lambda d: f"{DEEP}{d}"),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)
keys = st.one_of(
    st.sampled_from(["a/0", "a/9", "a/-1", "a/0.0", "a/00", "a/.zarray", "b/0/0", "b/0.0", ".zgroup",
                     "a/.zattrs", "../x", "/abs", "a//0", "", "a/", "x/.zarray", "x/1", "x/.zgroup",
                     ".zmetadata", "a/1e3", "a/0x1", "a/+1", "a/ 1", "a/\x00", "\u00e9/0"]),
    st.text(max_size=10),
)
ZARRAY_FIELDS = ["shape", "chunks", "dtype", "compressor", "fill_value", "filters", "order", "zarr_format",
                 "dimension_separator"]


def _expand_deep(text: str) -> str:
    """Each ``"\\u0000deep:N"`` string in JSON text becomes a list nested N deep."""
    marker = json.dumps(DEEP)[:-1]
    while marker in text:
        i = text.index(marker)
        j = text.index('"', i + len(marker))
        n = int(text[i + len(marker):j])
        text = text[:i] + "[" * n + "]" * n + text[j + 1:]
    return text


def _nest(v: Any) -> Any:
    """The Python value of a placeholder (a nested list; 100 000 deep only in JSON text)."""
    if isinstance(v, str) and v.startswith(DEEP):
        out: list = []
        for _ in range(min(int(v[len(DEEP):]), 1000)):
            out = [out]
        return out
    if isinstance(v, list):
        return [_nest(x) for x in v]
    if isinstance(v, dict):
        return {k: _nest(x) for k, x in v.items()}
    return v


@st.composite
def mutated_zarray(draw: Any, text: str) -> Any:
    try:
        meta = json.loads(text)
    except ValueError:  # an earlier change made it something else
        meta = None
    if not isinstance(meta, dict):
        meta = {}
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(ZARRAY_FIELDS))
        if draw(st.integers(0, 5)) == 0:
            meta.pop(field, None)
        elif field in ("shape", "chunks") and draw(st.booleans()):
            meta[field] = draw(st.lists(st.one_of(st.sampled_from(EDGE[:16]), st.integers(-3, 10)), max_size=3))
        else:
            meta[field] = draw(values)
    if draw(st.integers(0, 4)) == 0:
        return meta  # a dict, not text
    return json.dumps(meta, allow_nan=True)


@st.composite
def mutated_document(draw: Any, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with one to four changes at random places."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 4))):
        refs = doc["refs"] if "refs" in doc and isinstance(doc["refs"], dict) else doc
        how = draw(st.integers(0, 9))
        if how <= 2 and refs:  # a reference replaced
            k = draw(st.sampled_from(sorted(refs)))
            refs[k] = draw(mutated_zarray(refs[k])) if k.endswith(".zarray") and isinstance(refs[k], str) \
                and how == 0 else draw(values)
        elif how == 3 and refs:  # a reference's element replaced
            k = draw(st.sampled_from(sorted(refs)))
            if isinstance(refs[k], list) and refs[k]:
                refs[k][draw(st.integers(0, len(refs[k]) - 1))] = draw(values)
        elif how == 4 and refs:
            del refs[draw(st.sampled_from(sorted(refs)))]
        elif how == 5:
            refs[draw(keys)] = draw(values)
        elif how == 6 and "version" in doc:  # a V1 field replaced or removed
            field = draw(st.sampled_from(["version", "templates", "refs", "gen"]))
            if draw(st.booleans()):
                doc.pop(field, None)
            else:
                doc[field] = draw(values)
        elif how == 7 and isinstance(doc.get("templates"), dict):
            doc["templates"][draw(st.sampled_from(["u", "n", "i", "", "{{u}}"]))] = draw(
                st.one_of(values, st.sampled_from(TEMPLATE_TEXT)))
        elif how in (8, 9) and isinstance(doc.get("gen"), list) and doc["gen"] and isinstance(doc["gen"][0], dict):
            g = doc["gen"][0]
            field = draw(st.sampled_from(["key", "url", "offset", "length", "dimensions"]))
            if field == "dimensions" and isinstance(g.get("dimensions"), dict):
                g["dimensions"]["i"] = draw(st.one_of(values, st.fixed_dictionaries(
                    {}, optional={f: st.sampled_from(EDGE[:16]) for f in ("start", "stop", "step")})))
            elif draw(st.booleans()):
                g[field] = draw(st.sampled_from(TEMPLATE_TEXT))
            else:
                g[field] = draw(values)
    return doc


TEMPLATE_TEXT = ["{{i}}", "{{ i * 2**64 }}", "{{ i*4294967296*4294967296 }}", "{{ -i }}", "{{ 10**30 }}",
                 "{{ i / 0 }}", "{{ i // 0 }}", "{{ 1.5 }}", "{{ 'a' * 10**9 }}", "{{ 7**(7**9) }}",
                 "{{ nope }}", "{{", "{% for x in range(10**9) %}{% endfor %}", "{{ u.__class__ }}",
                 "{{ ''.__class__.__mro__ }}", "{{ lipsum(10**7) }}", "{{ i|int }}", "{{ u }}{{ i }}",
                 "", "x", "{{ i }}.{{ i }}", "{{ (i, i) }}", "{{ range(3) }}", "{{ i ~ 'x' }}"]


def _as_text(doc: Any) -> bytes:
    return _expand_deep(json.dumps(doc, allow_nan=True)).encode("utf-8", "surrogatepass")


@fuzz(400)
@given(st.data())
def test_v0_documents(data):
    doc = data.draw(mutated_document(valid_refs()))
    assert exercise_json(_as_text(doc)) in ("ok", "error")
    assert exercise(_nest(doc)) in ("ok", "error")


@fuzz(400)
@given(st.data())
def test_v1_documents(data):
    doc = data.draw(mutated_document(valid_v1()))
    assert exercise_json(_as_text(doc)) in ("ok", "error")
    assert exercise(_nest(doc)) in ("ok", "error")


@fuzz(200)
@given(st.dictionaries(keys, values, max_size=6), st.booleans())
def test_random_documents(doc, v1):
    if v1:
        doc = {"version": 1, "refs": doc}
    assert exercise_json(_as_text(doc)) in ("ok", "error")
    assert exercise(_nest(doc)) in ("ok", "error")


# -- byte mutations of saved files ---------------------------------------------------------------------
_VALID = Path(tempfile.mkdtemp(prefix="refset-fuzz-"))  # valid files, made once per process
atexit.register(shutil.rmtree, _VALID, True)


def _valid(name: str) -> Path:
    p = _VALID / name
    if not p.exists():
        save_valid(p)
    return p


@st.composite
def byte_mutation(draw: Any, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        n = len(out)
        pos = draw(st.integers(0, max(0, n - 1)))
        how = draw(st.integers(0, 5))
        if how == 0 and n:
            out[pos] ^= 1 << draw(st.integers(0, 7))
        elif how == 1:
            del out[pos:]
        elif how == 2:
            out[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif how == 3:
            del out[pos:pos + draw(st.integers(1, 16))]
        elif how == 4:
            blob = draw(st.binary(min_size=1, max_size=8))
            out[pos:pos + len(blob)] = blob
        else:
            out[pos:pos] = out[draw(st.integers(0, max(0, n - 1))):][:draw(st.integers(1, 64))]
    return bytes(out)


def _copy(src: Path, tmp: Path) -> Path:
    dest = tmp / src.name
    if src.is_dir():
        shutil.copytree(src, dest)
    else:
        shutil.copyfile(src, dest)
    return dest


@pytest.mark.parametrize("name", [f for f in FORMATS if f not in ("out.parq",)])
@fuzz(100)
@given(data=st.data())
def test_byte_mutations_of_files(name, data):
    src = _valid(name)
    with tempfile.TemporaryDirectory() as tmp:
        dest = _copy(src, Path(tmp))
        dest.write_bytes(data.draw(byte_mutation(src.read_bytes())))
        assert exercise(str(dest)) in ("ok", "error")


def _strip_checksums(root: Path) -> None:
    """``root/.zmetadata`` as fsspec writes it: without refset's checksums (record files are then read
    without their CRC-32, so a mutation reaches pyarrow and the record decoder)."""
    from refset.formats.parquet.reader import CHECKSUMS, SEAL

    raw = (root / ".zmetadata").read_bytes()
    raw = raw[:raw.rfind(SEAL)] + b"}"
    doc = json.loads(raw)
    doc.pop(CHECKSUMS)
    (root / ".zmetadata").write_text(json.dumps(doc))


@fuzz(150)
@given(data=st.data(), sealed=st.booleans())
def test_byte_mutations_of_parquet(data, sealed):
    src = _valid("out.parq")
    with tempfile.TemporaryDirectory() as tmp:
        dest = _copy(src, Path(tmp))
        if not sealed:
            _strip_checksums(dest)
        files = sorted(p for p in dest.rglob("*") if p.is_file())
        victim = data.draw(st.sampled_from(files))
        victim.write_bytes(data.draw(byte_mutation(victim.read_bytes())))
        assert exercise(str(dest)) in ("ok", "error")


@fuzz(150)
@given(data=st.data())
def test_parquet_zmetadata_structure(data):
    """``.zmetadata`` changed as JSON (fsspec's form, unsealed): record_size, metadata entries, paths."""
    src = _valid("out.parq")
    with tempfile.TemporaryDirectory() as tmp:
        dest = _copy(src, Path(tmp))
        _strip_checksums(dest)
        doc = json.loads((dest / ".zmetadata").read_text())
        where = data.draw(st.sampled_from(["record_size", "metadata", "entry", "zarray", "top"]))
        if where == "record_size":
            doc["record_size"] = data.draw(values)
        elif where == "metadata":
            doc["metadata"] = data.draw(values)
        elif where == "entry":
            doc["metadata"][data.draw(keys)] = data.draw(values)
        elif where == "zarray":
            k = data.draw(st.sampled_from(["a/.zarray", "b/.zarray"]))
            z = data.draw(mutated_zarray(json.dumps(doc["metadata"][k])))
            doc["metadata"][k] = z if isinstance(z, dict) else json.loads(z)
        else:
            doc = data.draw(values)
        (dest / ".zmetadata").write_bytes(_as_text(doc))
        assert exercise(str(dest)) in ("ok", "error")


@fuzz(150)
@given(data=st.data())
def test_packed_index_structure(data):
    """The packed index changed as JSON and sealed again (header sizes and CRCs fixed): counts, blocks,
    grids and segments that lie, under valid checksums."""
    src = _valid("out.packed")
    raw = src.read_bytes()
    index = packed_index(raw)
    for _ in range(data.draw(st.integers(1, 3))):
        node: Any = index
        path = []
        while isinstance(node, dict | list) and node and data.draw(st.integers(0, 3)):
            k = data.draw(st.sampled_from(sorted(node)) if isinstance(node, dict)
                          else st.integers(0, len(node) - 1))
            path.append(k)
            node = node[k]
        if not path:
            continue
        parent = index
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = data.draw(st.one_of(values, st.sampled_from(EDGE[:16])))
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "out.packed"
        dest.write_bytes(with_packed_index(raw, index))
        assert exercise(str(dest)) in ("ok", "error")


@st.composite
def record_table(draw: Any, rows: int) -> Any:
    """A parquet record table of ``rows`` rows whose columns may have any type, nulls and values."""
    import pyarrow as pa

    n = draw(st.sampled_from([0, 1, rows - 1, rows, rows + 1, 3 * rows]))
    cols = {}
    for name in ("path", "offset", "size", "raw"):
        kind = draw(st.sampled_from(["absent", "int64", "uint64", "float", "string", "binary", "dict", "null"]))
        ints = st.one_of(st.sampled_from([0, 1, 100, 2**62, 2**63 - 1]), st.integers(-(2**63), 2**63 - 1))
        if kind == "absent":
            continue
        if kind == "int64":
            cols[name] = pa.array(draw(st.lists(st.one_of(st.none(), ints), min_size=n, max_size=n)), pa.int64())
        elif kind == "uint64":
            cols[name] = pa.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)), pa.uint64())
        elif kind == "float":
            cols[name] = pa.array(draw(st.lists(st.floats(), min_size=n, max_size=n)), pa.float64())
        elif kind == "string":
            cols[name] = pa.array(draw(st.lists(st.one_of(st.none(), st.text(max_size=8)), min_size=n,
                                                max_size=n)), pa.string())
        elif kind == "binary":
            cols[name] = pa.array(draw(st.lists(st.one_of(st.none(), st.binary(max_size=8)), min_size=n,
                                                max_size=n)), pa.binary())
        elif kind == "dict":
            cols[name] = pa.array(draw(st.lists(st.one_of(st.none(), st.sampled_from(["u", "v", ""])),
                                                min_size=n, max_size=n)), pa.string()).dictionary_encode()
        else:
            cols[name] = pa.nulls(n)
    return pa.table(cols) if cols else pa.table({"other": pa.array([1] * n, pa.int8())})


@fuzz(150)
@given(data=st.data())
def test_parquet_record_structure(data):
    """A record file replaced by one with columns of any type, nulls, huge or negative values and too few
    or too many rows (the directory unsealed, as fsspec writes it, so that the record is decoded)."""
    import pyarrow.parquet as pq

    src = _valid("out.parq")
    with tempfile.TemporaryDirectory() as tmp:
        dest = _copy(src, Path(tmp))
        _strip_checksums(dest)
        rows = json.loads((dest / ".zmetadata").read_text())["record_size"]
        victim = data.draw(st.sampled_from(sorted(dest.rglob("refs.*.parq"))))
        pq.write_table(data.draw(record_table(rows)), victim)
        assert exercise(str(dest)) in ("ok", "error")


# -- the vectorised reader of large JSON documents -----------------------------------------------------
JSONISH = st.binary(min_size=1, max_size=6) | st.lists(
    st.sampled_from([b'"', b"\\", b"[", b"]", b"{", b"}", b",", b":", b"0", b"9", b"-", b"e", b"E", b"+", b".",
                     b" ", b"\n", b"\\u", b"\\ud800", b"\\u0000", b"null", b"true", b"1e400", b"18446744073709551616",
                     b"\xff", b"\xc3", b"\x00", b"\x01"]), min_size=1, max_size=4).map(b"".join)


def _large_json(v1: bool) -> bytes:
    """A document over the vectorised reader's threshold (64 KiB): 3000 chunk references, escapes in
    some keys and URLs, inline values, metadata; as V0 or V1 with templates."""
    refs: dict[str, Any] = {".zgroup": '{"zarr_format":2}', "a/.zarray": json.dumps(
        {"shape": [3000], "chunks": [1], "dtype": "<f4", "compressor": None, "fill_value": None, "filters": None,
         "order": "C", "zarr_format": 2}), 'q"uote\\d/\u00e9': "base64:AAE=", "t\nab": "inline \"text\""}
    for i in range(3000):
        url = "{{u}}/f\\" + str(i % 5) if v1 else f"s3://bucket/f\\{i % 5}\u00e9.nc"
        refs[f"a/{i}"] = [url, 1000 * i, 1000] if i % 7 else f"base64:{'AAEC' * (i % 3)}"
    doc = {"version": 1, "templates": {"u": "s3://bucket"}, "refs": refs} if v1 else refs
    return json.dumps(doc).encode()


_LARGE = {v1: _large_json(v1) for v1 in (False, True)}  # both taken by _jsonplan.plan_document


@fuzz(60)
@given(data=st.data(), v1=st.booleans(), lazy=st.booleans())
def test_mutations_of_large_json(data, v1, lazy):
    from refset.formats.json.read import document_problems

    text = bytearray(_LARGE[v1])
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(text) - 1))
        how = data.draw(st.integers(0, 3))
        if how == 0:
            text[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif how == 1:
            text[pos:pos] = data.draw(JSONISH)
        elif how == 2:
            del text[pos:pos + data.draw(st.integers(1, 8))]
        else:
            blob = data.draw(JSONISH)
            text[pos:pos + len(blob)] = blob
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "big.json"
        p.write_bytes(bytes(text))
        outcome = exercise(str(p), lazy=lazy)
    problems = document_problems(bytes(text))  # refset validate
    assert (outcome == "ok") == (not problems), (outcome, problems[:3])
