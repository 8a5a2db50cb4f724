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


def test_builder_refuses_columns_past_the_bound():
    from refset.builder import Builder

    b = Builder()
    with pytest.raises(InvalidReferences, match=r"array 'x', chunk 1 .*offset 9223372036854775808"):
        b.add_chunks("x", np.arange(2), np.ones(2, np.uint8), np.zeros(2, np.int64),
                     np.array([0, 2**63], np.uint64), np.ones(2, np.uint64))
    with pytest.raises(InvalidReferences, match=r"refs\['k1'\]: offset 4611686018427387904 \+ length"):
        b.add_keys(np.array(["k0", "k1"]), np.ones(2, np.uint8), np.zeros(2, np.int64),
                   np.array([0, 2**62], np.uint64), np.array([0, 2**62], np.uint64))
