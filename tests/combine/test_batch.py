"""combine's batch reader of JSON reference files (``refset.formats.json.batch``): what it accepts it reads
exactly as the generic reader does (the same combined set, key by key), and everything else it hands
to the generic reader, which gives the same result or names the problem."""

from __future__ import annotations

import base64
import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.combine import combine, expand_lists
from refset.errors import InvalidReferences
from refset.formats.json.batch import NotBatch, read_documents
from refset.model.parts import find_parts
from tests.combine.test_combine import _day, _kerchunk, _mf

xr = pytest.importorskip("xarray")


def _generic(rs):
    return rs  # a preprocess step: combine then opens every input as a set


def _write(tmp_path: Path, docs: list[dict], gz: tuple[int, ...] = ()) -> list[str]:
    paths = []
    for i, d in enumerate(docs):
        p = tmp_path / f"set{i:02d}.json{'.gz' if i in gz else ''}"
        text = json.dumps(d).encode()
        p.write_bytes(gzip.compress(text) if i in gz else text)
        paths.append(str(p))
    return paths


def _same_as_generic(paths: list[str], urls: bool = True, **kw) -> refset.ReferenceSet:
    read_documents(expand_lists(paths), {})  # the batch reader takes them
    fast = combine(paths, **kw)
    slow = combine(paths, preprocess=_generic, **kw)
    assert fast.to_dict() == slow.to_dict()
    if urls:  # (the generic reader also lists URLs that only metadata references name)
        assert fast.urls == slow.urls
    return fast


def test_kerchunk_sets_shuffled_and_compressed(tmp_path: Path) -> None:
    files = [_day(tmp_path / f"d{i}.nc", 2 * i, steps=2) for i in range(5)]
    docs = _kerchunk(files)
    assert any(isinstance(v, str) and v.startswith("base64:") for v in docs[0]["refs"].values())
    order = [3, 0, 4, 1, 2]
    paths = _write(tmp_path, [docs[i] for i in order], gz=(1, 3))
    rs = _same_as_generic(paths, concat_dims="time", identical_dims=["lat", "lon"])
    ds = refset.open_dataset(rs).load()
    want = _mf(files, concat_dim="time")
    np.testing.assert_array_equal(ds.v.values, want.v.values)
    np.testing.assert_array_equal(ds.w.values, want.w.values)
    np.testing.assert_array_equal(ds.time.values, want.time.values)


def test_inputs_of_different_lengths_and_a_missing_variable(tmp_path: Path) -> None:
    files = [_day(tmp_path / "a.nc", 0, steps=2), _day(tmp_path / "b.nc", 2, steps=3, extra=False),
             _day(tmp_path / "c.nc", 5, steps=1)]
    paths = _write(tmp_path, _kerchunk(files))
    rs = _same_as_generic(paths, concat_dims="time", identical_dims=["lat", "lon"])
    ds = refset.open_dataset(rs).load()
    np.testing.assert_array_equal(ds.v.values, _mf(files, concat_dim="time").v.values)
    # w (int16 without _FillValue) is missing from b.nc: its rows there are a part of missing values
    assert [p for p in rs.grids if p.startswith("w/")] == ["w/part0", "w/part1", "w/part2"]
    np.testing.assert_array_equal(ds.w.values, _mf(files, concat_dim="time").w.values)
    np.testing.assert_array_equal(ds.w.values[5], [5, 5, 5])


def _hand_doc(tmp_path: Path, i: int, version: int) -> dict:
    """Whole-file and inline (plain text and base64) chunks, metadata as JSON objects and text, a
    generic key, a chunk key outside the grid and a key of an array the set lacks."""
    blob = tmp_path / f"x{i}.bin"
    blob.write_bytes(np.arange(4, dtype="<i4").tobytes() + np.int32(i).tobytes())
    refs = {
        ".zgroup": {"zarr_format": 2},
        ".zattrs": json.dumps({"title": f"set {i}"}),
        "t/.zarray": {"chunks": [1], "compressor": None, "dtype": "<i4", "fill_value": None,
                      "filters": None, "order": "C", "shape": [1], "zarr_format": 2},
        "t/.zattrs": {"_ARRAY_DIMENSIONS": ["t"]},
        "t/0": "base64:" + base64.b64encode(np.int32(10 * i).tobytes()).decode(),
        "x/.zarray": json.dumps({"chunks": [1, 5], "compressor": None, "dtype": "<i4", "fill_value": 0,
                                 "filters": None, "order": "C", "shape": [1, 10], "zarr_format": 2}),
        "x/.zattrs": {"_ARRAY_DIMENSIONS": ["t", "k"]},
        "x/0.0": [str(blob)],
        "x/0.1": [str(blob), 0, 20],
        "x/0.7": [str(blob), 0, 20],
        "x/0.01": [str(blob), 4, 4],  # not canonical: a generic key, not chunk (0, 1)
        "y/0": "abcd",
        "notes/readme": "a generic key",
        "s/.zarray": json.dumps({"chunks": [], "compressor": None, "dtype": "|S4", "fill_value": None,
                                 "filters": None, "order": "C", "shape": [], "zarr_format": 2}),
        "s/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": []}),
        "s/0": "wxyz",
    }
    return {"version": 1, "refs": refs} if version else refs


def test_whole_file_inline_text_and_json_object_values(tmp_path: Path) -> None:
    docs = [_hand_doc(tmp_path, i, i % 2) for i in range(4)]
    random.Random(1).shuffle(docs)
    rs = _same_as_generic(_write(tmp_path, docs), concat_dims="t")
    assert rs["x/2.0"] == (str(tmp_path / "x2.bin"),)
    assert rs["x/3.1"] == (str(tmp_path / "x3.bin"), 0, 20)
    assert "x/0.7" not in rs and "x/0.01" not in rs and "y/0" not in rs and rs["s/0"] == b"wxyz"
    np.testing.assert_array_equal(refset.open_dataset(rs).t.values, [0, 10, 20, 30])


def _kerchunk_doc(tmp_path: Path) -> dict:
    return _kerchunk([_day(tmp_path / "k.nc", 0, steps=2)])[0]


def _edit(doc: dict, **refs) -> dict:
    d = json.loads(json.dumps(doc))
    d["refs"].update({k.replace("__", "/").replace("_", "."): v for k, v in refs.items()})
    return d


BAD = {  # what the batch reader leaves to the generic one, and what that says (None: combines)
    "templates": (lambda d: {**d, "templates": {"u": "x"}}, None),
    "bool offset": (lambda d: _edit(d, v__0_0_0=[d["refs"]["v/0.0.0"][0], True, 5]), "offset"),
    "float length": (lambda d: _edit(d, v__0_0_0=[d["refs"]["v/0.0.0"][0], 0, 5.5]), "length"),
    "string offset": (lambda d: _edit(d, v__0_0_0=[d["refs"]["v/0.0.0"][0], "12", 5]), "offset"),
    "negative offset": (lambda d: _edit(d, v__0_0_0=[d["refs"]["v/0.0.0"][0], -1, 5]), "offset"),
    "huge offset": (lambda d: _edit(d, v__0_0_0=[d["refs"]["v/0.0.0"][0], 2**63, 5]), "offset"),
    "two items": (lambda d: _edit(d, v__0_0_0=[d["refs"]["v/0.0.0"][0], 0]), "2"),
    "url not a string": (lambda d: _edit(d, v__0_0_0=[7, 0, 5]), "url"),
    "bad base64": (lambda d: _edit(d, v__0_0_0="base64:!!"), "base64"),
    "number value": (lambda d: _edit(d, v__0_0_0=5), "value"),
    "template in url": (lambda d: _edit(d, v__0_0_0=["{{u}}", 0, 5]), "template"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_unusual_documents_go_to_the_generic_reader(tmp_path: Path, case: str) -> None:
    make, problem = BAD[case]
    base = _kerchunk_doc(tmp_path)
    later = base64.b64encode(np.array([9.0, 10.0]).tobytes()).decode()
    docs = [base, make(_edit(base, time__0="base64:" + later))]
    paths = _write(tmp_path, docs)
    with pytest.raises(NotBatch):
        read_documents(expand_lists(paths), {})
    if problem is None:
        assert combine(paths, concat_dims="time").to_dict() == combine(
            paths, concat_dims="time", preprocess=_generic).to_dict()
    else:
        with pytest.raises(InvalidReferences, match=problem):
            combine(paths, concat_dims="time")


def test_data_files_and_other_formats_go_to_the_generic_reader(tmp_path: Path) -> None:
    f = _day(tmp_path / "a.nc", 0)
    packed = tmp_path / "b.packed"
    refset.save(refset.scan(_day(tmp_path / "b.nc", 2)), str(packed), format="packed")
    for items in ([str(f)], [str(packed)], [_kerchunk_doc(tmp_path)]):
        with pytest.raises(NotBatch):
            read_documents(items, {})
    rs = combine([str(packed), str(f)], concat_dims="time")
    np.testing.assert_array_equal(refset.open_dataset(rs).time.values.size, 4)


def test_escapes_and_indented_json(tmp_path: Path) -> None:
    """Escaped inline text, escaped keys and indented JSON are read by the batch reader as the
    generic reader reads them."""
    docs = [_hand_doc(tmp_path, i, 1) for i in range(3)]
    for d in docs:
        d["refs"]["s/0"] = 'a"\\z'
    paths = _write(tmp_path, docs)
    rs = _same_as_generic(paths, concat_dims="t")
    assert rs["s/0"] == b'a"\\z'
    for p, d in zip(paths, docs):
        Path(p).write_text(json.dumps(d, indent=2))
    assert _same_as_generic(paths, concat_dims="t").to_dict() == rs.to_dict()
    for p, d in zip(paths, docs):  # keys spelled with escapes: the same keys
        text = json.dumps(d).replace('"x/0.1"', '"\\u0078\\/0.1"').replace('"t/.zarray"', '"t\\/.zarray"')
        Path(p).write_text(text)
    assert '"\\u0078\\/0.1"' in Path(paths[0]).read_text()
    assert _same_as_generic(paths, concat_dims="t").to_dict() == rs.to_dict()


def test_repeated_keys_and_odd_envelopes(tmp_path: Path) -> None:
    """A key given twice (JSON parsers keep the last), a Version 1 document whose ``refs`` is not its
    last member, an empty set: the generic reader's result."""
    docs = [_hand_doc(tmp_path, i, 0) for i in range(3)]
    for d in docs:  # metadata as text: no document is normalised (which drops repeated keys)
        d.update({k: json.dumps(v) for k, v in d.items() if isinstance(v, dict)})
    paths = _write(tmp_path, docs)
    read_documents(paths, {})
    text = Path(paths[1]).read_text()
    Path(paths[1]).write_text(text[:-1] + ', "x/0.1": ["%s", 4, 8]}' % (tmp_path / "x1.bin"))
    with pytest.raises(NotBatch):
        read_documents(paths, {})
    rs = combine(paths, concat_dims="t")
    assert rs["x/1.1"] == (str(tmp_path / "x1.bin"), 4, 8)
    assert rs.to_dict() == combine(paths, concat_dims="t", preprocess=_generic).to_dict()
    Path(paths[2]).write_text(json.dumps({**docs[2], ".zgroup": {"zarr_format": 2}}))  # normalised
    assert read_documents(paths[1:], {}).rows("x").offset.tolist() == [0, 4, 0, 0]
    assert _same_as_generic(paths, concat_dims="t")["x/1.1"] == (str(tmp_path / "x1.bin"), 4, 8)
    refs = docs[1]
    Path(paths[1]).write_text(json.dumps({"refs": refs, "version": 1}))
    with pytest.raises(NotBatch):
        read_documents(paths, {})
    assert combine(paths, concat_dims="t").to_dict() == _same_as_generic(
        _write(tmp_path, docs), concat_dims="t").to_dict()
    empty = tmp_path / "empty.json"
    empty.write_text('{"version": 1, "refs": { }}')
    read_documents([*paths, str(empty)], {})
    with pytest.raises(InvalidReferences) as slow:
        combine([*paths, str(empty)], concat_dims="t", preprocess=_generic)
    with pytest.raises(InvalidReferences) as fast:
        combine([*paths, str(empty)], concat_dims="t")
    assert str(fast.value) == str(slow.value)


def test_big_indices_and_metadata_as_references(tmp_path: Path) -> None:
    """Chunk indices of more than eight digits; metadata given as a reference to a file is kept as
    that reference, a ``.zarray`` so given goes to the generic reader."""
    docs = []
    for i in range(3):
        d = _hand_doc(tmp_path, i, 1)
        d["refs"]["x/.zarray"] = json.dumps({**json.loads(d["refs"]["x/.zarray"]), "shape": [1, 10**9 * 5]})
        d["refs"]["x/0.123456789"] = [str(tmp_path / f"x{i}.bin"), 4, 4]
        docs.append(d)
    paths = _write(tmp_path, docs)
    rs = _same_as_generic(paths, concat_dims="t")
    assert rs["x/2.123456789"] == (str(tmp_path / "x2.bin"), 4, 4)
    attrs = tmp_path / "attrs.json"
    attrs.write_text(json.dumps({"_ARRAY_DIMENSIONS": ["t", "k"], "long_name": "x"}))
    docs[1]["refs"]["x/.zattrs"] = [str(attrs)]
    paths = _write(tmp_path, docs)
    assert read_documents(paths, {}).meta[1]["x/.zattrs"] == (str(attrs),)
    _same_as_generic(paths, urls=False, concat_dims="t")
    attrs.write_text(json.dumps({"_ARRAY_DIMENSIONS": ["t", "k"], "scale_factor": 2}))  # read and compared
    split = combine(paths, concat_dims="t")  # packed in one input: parts, each decoded with its own
    assert find_parts(split)["x"].bounds == (0, 1, 2, 3)
    assert json.loads(split["x/part1/.zattrs"])["scale_factor"] == 2
    docs[1]["refs"]["x/.zarray"] = [str(attrs)]
    with pytest.raises(NotBatch):
        read_documents(_write(tmp_path, docs), {})


def _tiny(tmp_path: Path, name: str, i: int, text: str = "", **refs) -> str:
    """A small Version 1 set of one ``t`` step; ``text`` is written before ``"refs"``."""
    z = {"chunks": [1], "compressor": None, "dtype": "<i4", "fill_value": None, "filters": None,
         "order": "C", "shape": [1], "zarr_format": 2}
    body = {".zgroup": '{"zarr_format": 2}', "t/.zarray": json.dumps(z),
            "t/.zattrs": '{"_ARRAY_DIMENSIONS": ["t"]}',
            "t/0": "base64:" + base64.b64encode(np.int32(i).tobytes()).decode(), **refs}
    p = tmp_path / f"{name}{i}.json"
    p.write_text('{"version": 1, ' + text + '"refs": ' + json.dumps(body) + "}")
    return str(p)


def test_a_repeated_metadata_key_keeps_its_last_value(tmp_path: Path) -> None:
    paths = []
    for i in range(2):
        p = _tiny(tmp_path, "m", i)
        text = Path(p).read_text()  # the same key as a reference first, then as text
        Path(p).write_text(text.replace('"t/.zattrs"', '"t/.zattrs": ["/nowhere/attrs.json"], "t/.zattrs"'))
        paths.append(p)
    assert read_documents(paths, {}).metadata[0]["t"].documents()[".zattrs"] == b'{"_ARRAY_DIMENSIONS": ["t"]}'
    _same_as_generic(paths, concat_dims="t")


@pytest.mark.parametrize("text", ['"templates": null, ', '"templates": [], ', '"gen": {}, ', '"gen": 0, '])
def test_version_1_fields_of_the_wrong_type_are_named(tmp_path: Path, text: str) -> None:
    paths = [_tiny(tmp_path, "v", i, text) for i in range(2)]
    with pytest.raises(NotBatch):
        read_documents(paths, {})
    with pytest.raises(InvalidReferences, match=r"templates|gen"):
        combine(paths, concat_dims="t")


@pytest.mark.parametrize("key", ["notes/readme", "t/5", "t/.zattrs"])
def test_template_urls_outside_the_chunks_are_named(tmp_path: Path, key: str) -> None:
    paths = [_tiny(tmp_path, "u", i, **{key: ["{{u}}/file.nc", 0, 4]}) for i in range(2)]
    with pytest.raises(NotBatch):
        read_documents(paths, {})
    with pytest.raises(InvalidReferences, match="u"):
        combine(paths, concat_dims="t")


@pytest.mark.parametrize("doc", [
    b'{".zgroup": {"zarr_format": 2}, "t/.zattrs": "\xff"}',  # normalised, not UTF-8
    b'{"version": 1, "templates": {"u": "\xff"}, "refs": {}}',
    b'{"version": 1, "gen": ' + b"[" * 100000 + b"]" * 100000 + b', "refs": {}}',
    b"\x1f\x8b not gzip",
])
def test_broken_documents_are_named_by_the_generic_reader(tmp_path: Path, doc: bytes) -> None:
    paths = [str(tmp_path / f"{i}.json") for i in range(2)]
    for p in paths:
        Path(p).write_bytes(doc)
    with pytest.raises(NotBatch):
        read_documents(paths, {})
    with pytest.raises(InvalidReferences) as slow:
        combine(paths, concat_dims="t", preprocess=_generic)
    with pytest.raises(InvalidReferences) as fast:
        combine(paths, concat_dims="t")
    assert str(fast.value) == str(slow.value)
    with pytest.raises(NotBatch):
        read_documents([], {})


def test_progress_is_called_once_per_input(tmp_path: Path) -> None:
    files = [_day(tmp_path / f"d{i}.nc", 2 * i) for i in range(3)]
    paths = _write(tmp_path, _kerchunk(files))
    calls: list[int] = []
    combine(paths, concat_dims="time", progress=calls.append)
    assert calls == [1, 1, 1]
