"""Validation: one line per problem naming where and why; load raises, validate lists them all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import refset
from refset.cli import main
from refset.errors import InvalidReferences

CASES = [
    ({"version": 2, "refs": {}}, "version: unknown version 2, expected 1"),
    ({"x/0": ["u", -5, 10]}, 'refs["x/0"][1]: offset must be a non-negative integer, got -5'),
    ({"x/0": ["u", 5, 1.5]}, 'refs["x/0"][2]: length must be a non-negative integer, got 1.5'),
    ({"x/0": ["u", "5", 1]}, 'refs["x/0"][1]: offset must be a non-negative integer, got "5"'),
    ({"x/0": ["u", True, 1]}, 'refs["x/0"][1]: offset must be a non-negative integer, got true'),
    ({"x/0": ["u", 1]}, 'refs["x/0"]: a reference list must have 1 item [url] or 3 items'),
    ({"x/0": []}, 'refs["x/0"]: a reference list must have 1 item'),
    ({"x/0": [5, 1, 2]}, 'refs["x/0"][0]: url must be a string, got int'),
    ({"x/0": 12}, 'refs["x/0"]: value must be a string, a JSON object, [url] or [url, offset, length], got int'),
    ({"x/0": None}, 'refs["x/0"]: value must be a string'),
    ({"x/0": "base64:@@@"}, 'refs["x/0"]: bad base64 data'),
    ({"version": 1, "refs": {"k": ["{{nope}}/f", 0, 1]}}, "refs[\"k\"][0]: unknown template name: 'nope' is undefined"),
    ({"version": 1, "refs": {"k": ["{{u/f", 0, 1]}}, 'refs["k"][0]: template syntax error'),
    ({"version": 1, "templates": {"u": 5}}, 'templates["u"]: must be a string, got int'),
    ({"version": 1, "templates": []}, "templates: must be an object, got list"),
    ({"version": 1, "refs": []}, "refs: must be an object, got list"),
    ({"version": 1, "gen": {}}, "gen: must be a list, got dict"),
    ({"version": 1, "gen": [{"key": "k", "url": "u", "offset": "1", "dimensions": {"i": {"stop": 1}}}]},
     'gen[0]: "offset" given without "length"'),
    ({"version": 1, "gen": [{"url": "u", "dimensions": {"i": {"stop": 1}}}]}, 'gen[0]: "key" is required'),
    ({"version": 1, "gen": [{"key": "k", "url": "u", "dimensions": {"i": {"start": 1}}}]},
     'gen[0].dimensions["i"]: "stop" is required'),
    ({"version": 1, "gen": [{"key": "k", "url": "u", "dimensions": {"i": {"stop": 1.5}}}]},
     'gen[0].dimensions["i"].stop: must be an integer, got 1.5'),
    ({"version": 1, "gen": [{"key": "k", "url": "u", "dimensions": {"i": {"stop": 3, "step": 0}}}]},
     'gen[0].dimensions["i"].step: must not be 0'),
    ({"version": 1, "gen": [{"key": "k", "url": "u", "dimensions": {"i": ["a"]}}]},
     'gen[0].dimensions["i"]: a list dimension must hold integers only'),
    ({"version": 1, "gen": [{"key": "k", "url": "u", "dimensions": {}}]},
     "gen[0].dimensions: must be an object with at least one dimension"),
    ({"version": 1, "gen": [{"key": "k{{i}}", "url": "{{zz}}", "dimensions": {"i": {"stop": 2}}}]},
     "gen[0]: unknown template name: 'zz' is undefined"),
    ({"version": 1, "gen": [{"key": "k{{i}}", "url": "u", "offset": "{{i - 3}}", "length": "1",
                             "dimensions": {"i": {"stop": 2}}}]},
     "gen[0].offset: must be a non-negative integer, got -3 for {'i': 0}"),
    ({"version": 1, "gen": [{"key": "k{{i", "url": "u", "dimensions": {"i": {"stop": 2}}}]},
     "gen[0]: template syntax error"),
]


@pytest.mark.parametrize(("doc", "message"), CASES, ids=[c[1][:40] for c in CASES])
def test_each_problem_is_named(doc: dict, message: str, tmp_path: Path, capsys):
    with pytest.raises(InvalidReferences) as e:
        refset.load(doc)
    assert any(p.startswith(message) for p in e.value.problems), e.value.problems
    assert isinstance(e.value, ValueError)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    assert main(["validate", str(p)]) == 1
    out = capsys.readouterr().out
    assert message in out
    with pytest.raises(InvalidReferences):
        refset.load(p)


def test_non_string_key_in_a_mapping():
    with pytest.raises(InvalidReferences, match="refs: key 5 must be a string, got int"):
        refset.load({5: "x"})


def test_validate_reports_every_problem(tmp_path: Path, capsys):
    doc = {"a": ["u", -1, 2], "b": ["u", 1], "c": "base64:!!", "d": ["u", 0, 1]}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    assert main(["validate", str(p)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith('refs["a"][1]: offset must be')
    assert lines[1].startswith('refs["b"]: a reference list')
    assert lines[2].startswith('refs["c"]: bad base64')


def test_valid_file_exit_zero(tmp_path: Path, capsys):
    p = tmp_path / "ok.json"
    p.write_text(json.dumps({"a": ["u", 1, 2]}))
    assert main(["validate", str(p)]) == 0
    assert "valid" in capsys.readouterr().err


def test_validate_gen_limit(tmp_path: Path, capsys):
    p = tmp_path / "big.json"
    p.write_text(json.dumps({"version": 1, "gen": [{"key": "k{{i}}", "url": "u", "dimensions": {"i": {"stop": 1000}}}]}))
    assert main(["validate", str(p), "--max-gen", "999"]) == 1
    assert "would generate 1000 keys" in capsys.readouterr().out
    assert main(["validate", str(p)]) == 0
