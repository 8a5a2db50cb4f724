"""The fingerprints table (issue 40): what a set's files were when scanned, keyed by URL, columnar;
its serialised form, its spelling among a JSON set's keys (byte for byte around the root ``.zgroup``),
and how tables join (combine) and are renamed (``rename_urls``)."""

from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest

from refset.errors import InvalidReferences, RefsetError, SourceChanged, Unsupported
from refset.io.fingerprint import Fingerprint, changed, conditions
from refset.model.fingerprints import KEY, Fingerprints, spelled, split
from refset.model.table import INLINE, KeyTable

LOCAL = (21263, 1795907472502110345, None, None)
REMOTE = (5, None, '"5f3-1a"', "Sat, 28 Nov 2026 22:48:39 GMT")


def _table() -> Fingerprints:
    return Fingerprints.of({"/data/a.nc": LOCAL, "http://h/b.grib2": REMOTE,
                            "http://h/b.grib2.idx": (40, None, '"9-28"', None)},
                           {"http://h/b.grib2.idx": "http://h/b.grib2"})


def test_records_columns_and_the_stored_form() -> None:
    t = _table()
    assert len(t) == 3 and t.url.tolist() == sorted(t.url.tolist())
    assert t.get("/data/a.nc") == LOCAL and t.get("http://h/b.grib2") == REMOTE and t.get("/nope") is None
    assert t.recorded_via("http://h/b.grib2") == ["http://h/b.grib2.idx"]
    assert t.scanned() == ["/data/a.nc", "http://h/b.grib2"]
    assert t.size.dtype == np.int64 and not t.size.flags.writeable
    doc = t.to_json()
    assert json.loads(json.dumps(doc)) == doc and doc["mtime_ns"] == [LOCAL[1], None, None]
    assert Fingerprints.from_json(doc) == t
    assert pickle.loads(pickle.dumps(t)) == t
    assert Fingerprints.from_json(Fingerprints.empty().to_json()) == Fingerprints.empty()


def test_bad_stored_forms_are_named() -> None:
    with pytest.raises(InvalidReferences, match=r"x: size\[1\]: expected a non-negative integer or null, got -3"):
        Fingerprints.from_json({"version": 1, "url": ["a", "b"], "size": [1, -3]}, "x")
    with pytest.raises(InvalidReferences, match="url 'a' is listed twice"):
        Fingerprints.from_json({"version": 1, "url": ["a", "a"]})
    with pytest.raises(InvalidReferences, match="etag has 1 values for 2 URLs"):
        Fingerprints.from_json({"version": 1, "url": ["a", "b"], "etag": ["x"]})
    with pytest.raises(Unsupported, match="fingerprints version 2"):
        Fingerprints.from_json({"version": 2, "url": []})


def test_the_stored_form_fuzzed_gives_a_table_or_a_refset_error() -> None:
    """Seeded mutations of the stored document: a table (that round-trips) or a refset error naming
    the field, never a bare exception."""
    rng = random.Random(40)
    base = _table().to_json()
    junk = [None, -1, 2**63, 1.5, "x", [], {}, True, [None], ["a", "a", "a"]]
    outcomes = {"table": 0, "error": 0}
    for _ in range(400):
        doc = json.loads(json.dumps(base))
        for _ in range(rng.randrange(1, 4)):
            field = rng.choice(["version", "url", "size", "mtime_ns", "etag", "last_modified", "via"])
            if field in doc and isinstance(doc[field], list) and doc[field] and rng.random() < 0.6:
                doc[field][rng.randrange(len(doc[field]))] = rng.choice(junk)
            elif rng.random() < 0.5:
                doc[field] = rng.choice(junk)
            else:
                doc.pop(field, None)
        try:
            got = Fingerprints.from_json(doc)
        except RefsetError:
            outcomes["error"] += 1
            continue
        assert Fingerprints.from_json(got.to_json()) == got
        outcomes["table"] += 1
    assert outcomes["table"] > 30 and outcomes["error"] > 100, outcomes


@pytest.mark.parametrize("zgroup", [b'{"zarr_format":2}', b'{"zarr_format": 2}\n', b"{}", b' { "zarr_format" : 2 , "x": [1, {"refsets": 2}] } ',
                                    b'{"zarr_format":2,"refset_parts":1}'])
def test_a_json_set_keeps_them_in_its_root_zgroup_byte_for_byte(zgroup: bytes) -> None:
    other = KeyTable.from_items({".zgroup": (INLINE, 0, 0, 0, zgroup), "a/.zattrs": (INLINE, 0, 0, 0, b"{}")})
    t = _table()
    stored = spelled(other, t)
    assert stored.keys.tolist() == other.keys.tolist()  # no key added: zarr and fsspec list the same
    doc = json.loads(stored.data[stored.find(".zgroup")])
    assert doc["refset"]["fingerprints"] == t.to_json()
    back, got = split(stored)
    assert got == t and back.data[back.find(".zgroup")] == zgroup and back.keys.tolist() == other.keys.tolist()


def test_without_a_root_zgroup_they_are_a_key_of_their_own() -> None:
    other = KeyTable.from_items({"zarr.json": (INLINE, 0, 0, 0, b'{"zarr_format":3,"node_type":"group"}')})
    stored = spelled(other, _table())
    assert KEY in stored.keys.tolist()
    back, got = split(stored)
    assert got == _table() and back.keys.tolist() == ["zarr.json"]
    assert spelled(other, Fingerprints.empty()) is other


def test_keys_that_are_not_refsets_stay_keys() -> None:
    other = KeyTable.from_items({".zgroup": (INLINE, 0, 0, 0, b'{"zarr_format":2,"refset":5}'),
                                 KEY: (INLINE, 0, 0, 0, b'{"something":"else"}')})
    back, got = split(other)
    assert not got and back.keys.tolist() == other.keys.tolist() and back.data.tolist() == other.data.tolist()


def test_union_restricted_and_renamed() -> None:
    a = Fingerprints.of({"/d/a.nc": LOCAL})
    b = Fingerprints.of({"/d/a.nc": LOCAL, "/d/b.nc": (7, 8, None, None)})
    u = Fingerprints.union([a, b, Fingerprints.empty()])
    assert u.url.tolist() == ["/d/a.nc", "/d/b.nc"]
    with pytest.raises(SourceChanged, match=r"/d/a\.nc changed .* inputs 'x\.json' and 'y\.json' were scanned from "
                                            "different versions of it"):
        Fingerprints.union([a, Fingerprints.of({"/d/a.nc": (LOCAL[0], LOCAL[1] + 1, None, None)})],
                           ["x.json", "y.json"])
    t = _table()
    assert t.restricted(["http://h/b.grib2"]).url.tolist() == ["http://h/b.grib2", "http://h/b.grib2.idx"]
    assert t.without(["http://h/b.grib2"]).url.tolist() == ["/data/a.nc"]
    r = t.renamed(lambda u: u.replace("http://h/", "s3://bucket/"))
    assert r.get("s3://bucket/b.grib2") == REMOTE and r.recorded_via("s3://bucket/b.grib2") == ["s3://bucket/b.grib2.idx"]
    assert b.updated(Fingerprints.of({"/d/b.nc": (9, 9, None, None)})).get("/d/b.nc") == (9, 9, None, None)


def test_what_counts_as_a_change() -> None:
    assert not changed(LOCAL, LOCAL)
    assert changed(LOCAL, (LOCAL[0], LOCAL[1] + 1, None, None))
    assert changed(LOCAL, (LOCAL[0] + 1, LOCAL[1], None, None))
    assert not changed(LOCAL, (LOCAL[0], None, '"x"', None))  # moved to a server: its size only
    assert changed(REMOTE, (5, None, '"other"', REMOTE[3]))
    assert not changed(REMOTE, (None, None, 'W/"5f3-1a"', "another date"))  # the ETag decides, weakly
    assert changed((5, None, None, "Sat, 28 Nov 2026 22:48:39 GMT"), (5, None, None, "Sun, 29 Nov 2026 01:00:00 GMT"))
    assert conditions(REMOTE) == {"If-Match": '"5f3-1a"'}
    assert conditions((5, None, 'W/"weak"', REMOTE[3])) == {"If-Unmodified-Since": REMOTE[3]}
    assert conditions(LOCAL) == {}
    assert Fingerprint(*REMOTE).known and not Fingerprint().known


def test_source_changed_names_the_file_and_both_records_and_pickles() -> None:
    e = SourceChanged("/d/a.nc", LOCAL, None, key="v/0.0")
    text = str(e)
    assert text.startswith("reading 'v/0.0': /d/a.nc changed since its reference set was made")
    assert "recorded size 21,263, modified 2026-" in text and "now no such file" in text
    assert "refset refresh" in text and "verify_sources=False" in text
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == text and isinstance(back, OSError) and back.recorded == LOCAL
