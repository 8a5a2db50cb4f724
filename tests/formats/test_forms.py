"""Every built-in stored form passes the forms' conformance suite (refset.testing.FormTests)."""

from __future__ import annotations

import pytest

from refset.formats.registry import FORMATS
from refset.testing import FormTests

pytest.importorskip("pyarrow")


class TestJson(FormTests):
    form = FORMATS["json"]


class TestJsonV1(FormTests):
    form = FORMATS["v1"]


class TestParquet(FormTests):
    form = FORMATS["parquet"]


class TestPacked(FormTests):
    form = FORMATS["packed"]


def test_writer_options_of_free_text_and_mappings() -> None:
    """A text option without choices takes any text as given (a commit message keeps its case); a
    mapping option takes a dict, or JSON on the command line; anything else names what it takes."""
    from refset.abc.format import Option
    from refset.errors import InvalidOption

    text, mapping = Option("message", str, "a message"), Option("remote_options", dict, "options")
    assert text.check("Day 3, 2024", "f") == "Day 3, 2024"
    assert text.parse("Day 3", "f") == "Day 3"
    assert mapping.check({"anon": True}, "f") == {"anon": True}
    assert mapping.parse('{"endpoint_url": "http://x"}', "f") == {"endpoint_url": "http://x"}
    with pytest.raises(InvalidOption, match=r"f option remote_options='\{nope': expected a mapping"):
        mapping.parse("{nope", "f")
    with pytest.raises(InvalidOption, match="expected text"):
        text.check(3, "f")
    choice = Option("level", str, "x", choices=("a", "b"))
    with pytest.raises(InvalidOption, match="expected one of a, b"):
        choice.check("c", "f")
