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
