"""Property: any reference set survives V0 -> V1 -> V0 (and JSON text) unchanged."""

from __future__ import annotations

import base64
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refset
from refset.formats.json.v0 import dumps_v0
from refset.formats.json.v1_writer import dumps_v1
from tests.helpers import zarray

urls = st.sampled_from(["s3://b/a.nc", "s3://b/b.nc", "file:///x/{{odd}}.nc", "memory://m", "u"])
ints = st.integers(0, 2**62 - 1)  # offset + length stays below 2**63
small = st.integers(0, 5000)


@st.composite
def reference_sets(draw):
    d = {}
    shape = draw(st.lists(st.integers(0, 6), min_size=0, max_size=3))
    chunks = [draw(st.integers(1, 3)) for _ in shape]
    sep = draw(st.sampled_from([".", "/"]))
    d["v/.zarray"] = zarray(shape, chunks, sep=sep)
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    n = 1
    for g in grid:
        n *= g
    regular = draw(st.booleans())
    off = draw(small)
    for flat in range(n):
        if draw(st.integers(0, 4)) == 0:
            continue
        idx = []
        f = flat
        for g in reversed(grid):
            idx.append(f % g)
            f //= g
        key = "v/" + (sep.join(map(str, reversed(idx))) if shape else "0")
        kind = draw(st.integers(0, 5))
        if kind == 0:
            d[key] = draw(st.one_of(st.text(max_size=5), st.binary(max_size=5).map(
                lambda b: "base64:" + base64.b64encode(b).decode())))
        elif kind == 1:
            d[key] = [draw(urls)]
        else:
            ln = 100 if regular else draw(small)
            d[key] = [draw(urls) if not regular else "s3://b/a.nc", off if regular else draw(ints), ln]
            off += ln
    for _ in range(draw(st.integers(0, 3))):
        d[draw(st.text(min_size=1, max_size=6))] = [draw(urls), draw(ints), draw(ints)]
    return d


def canonical_v0(d: dict) -> dict:
    """The canonical Version 0 of ``d``, computed from the spec's rules (not by refset):
    inline data as text when it is ASCII and does not start with "base64:", else base64."""
    out = {}
    for k, v in d.items():
        if isinstance(v, str):
            data = base64.b64decode(v[7:]) if v.startswith("base64:") else v.encode()
            text = data.isascii() and not data.startswith(b"base64:")
            out[k] = data.decode() if text else "base64:" + base64.b64encode(data).decode()
        else:
            out[k] = v
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reference_sets())
def test_v0_v1_v0(d):
    rs = refset.load(d)
    canonical = rs.to_dict()
    assert canonical == canonical_v0(d)
    assert len(rs) == len(d) and set(rs) == set(d)
    assert refset.load(json.loads(dumps_v0(rs))).to_dict() == canonical
    v1 = json.loads(dumps_v1(rs))
    assert refset.load(v1).to_dict() == canonical
    assert refset.load(refset.load(v1).to_dict()).to_dict() == canonical


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reference_sets())
def test_fsspec_reads_our_v1_like_our_v0(d):
    import fsspec

    rs = refset.load(d)
    v1 = json.loads(dumps_v1(rs))
    theirs = fsspec.filesystem("reference", fo=v1, simple_templates=False, skip_instance_cache=True).references
    for k, v in rs.to_dict().items():
        if isinstance(v, list):
            assert list(theirs[k]) == v, k
