"""``InlineBytes``: a chunk table's inline bytes held column-wise, read as a ``Mapping[int, bytes]``
exactly as the dict it replaces, and refusing what is not inline data with a clear error."""

from __future__ import annotations

import pickle
import random
from array import array
from collections.abc import Mapping

import numpy as np
import pytest

from refset.errors import InvalidReferences
from refset.model import inline as inline_mod
from refset.model.inline import InlineBytes, concat_inline
from refset.model.keys import ChunkGrid
from refset.model.table import INLINE, ChunkTable


def _random_values(rng: random.Random, n: int) -> dict[int, bytes]:
    sizes = [0, 1, 2, 7, 60, 300]
    return {rng.randrange(10 * n + 1): bytes(rng.randrange(256) for _ in range(rng.choice(sizes)))
            for _ in range(n)}


def test_reads_as_the_dict_it_holds() -> None:
    rng = random.Random(3)
    for n in (0, 1, 5, 200):
        d = _random_values(rng, n)
        ib = InlineBytes.of(d)
        want = dict(sorted(d.items()))
        assert isinstance(ib, Mapping) and len(ib) == len(want) and bool(ib) == bool(want)
        assert list(ib) == list(want) and list(reversed(ib)) == list(reversed(want))
        assert list(ib.values()) == list(want.values()) and list(ib.items()) == list(want.items())
        assert ib.keys() & {1, 2, 3} == want.keys() & {1, 2, 3}
        assert ib == want and dict(ib) == want and ib.to_dict() == want
        for k in [*want, -1, 10 * n + 5]:
            assert (k in ib) == (k in want) and ib.get(k) == want.get(k)
            assert (float(k) in ib) == (float(k) in want) and (np.int32(k) in ib) == (k in want)
        assert 0.5 not in ib and "0" not in ib and None not in ib
        with pytest.raises(KeyError):
            ib[-1]
        flat = np.array([*want, -3, 10 * n + 9], np.int64)
        assert ib.get_many(flat) == [*want.values(), None, None]
        assert pickle.loads(pickle.dumps(ib)) == ib


def test_later_repeats_win_when_built_moved_and_concatenated() -> None:
    ib = InlineBytes.from_values(np.array([5, 1, 5, 3]), [b"a", b"b", b"c", b""])
    assert ib.to_dict() == {1: b"b", 3: b"", 5: b"c"}
    moved = ib.moved(np.array([9, 0, 4]))
    assert moved.to_dict() == {0: b"", 4: b"c", 9: b"b"}
    both = concat_inline([ib, InlineBytes.of({0: b"x", 1: b"yy"})], [ib.flat + 1, np.array([4, 6])])
    assert both.to_dict() == {2: b"b", 4: b"x", 6: b"yy"}  # 4 came from both: the later part's
    assert concat_inline([], []) == {} and concat_inline([InlineBytes.empty()], [np.zeros(0, np.int64)]) == {}


@pytest.mark.parametrize("block", [1, 3, 1 << 20])
def test_reordering_copies_exact_bytes_in_blocks(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    monkeypatch.setattr(inline_mod, "_GATHER_BLOCK", block)
    rng = random.Random(block)
    values = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 5, 30]))) for _ in range(300)]
    flat = np.array(rng.sample(range(1000), 300), np.int64)
    got = InlineBytes.from_values(flat, values)
    assert got.to_dict() == dict(zip(flat.tolist(), values, strict=True))
    pos = np.flatnonzero(np.arange(300) % 3 == 0)
    assert got.take(pos).to_dict() == {k: got[k] for k in got.flat[pos].tolist()}


def test_bytes_like_values_are_copied_whole() -> None:
    mv = memoryview(array("i", [1, 2]))  # len() 2, 8 bytes
    strided = memoryview(np.arange(10, dtype=np.uint8))[::2]
    ib = InlineBytes.of({0: mv, 1: b"hello", 2: bytearray(b"world"), 3: strided})
    assert ib.to_dict() == {0: bytes(mv), 1: b"hello", 2: b"world", 3: bytes([0, 2, 4, 6, 8])}
    t = ChunkTable(ChunkGrid((2,), (1,)), np.array([INLINE, INLINE], np.uint8), *[np.zeros(2, np.uint8)] * 3,
                   {1: mv, 0: b"z"})
    assert t.inline.to_dict() == {0: b"z", 1: bytes(mv)}


@pytest.mark.parametrize("given, words", [
    ({"0": b"a"}, "key '0'"),
    ({b"0": b"a"}, "key b'0'"),
    ({0.0: b"a"}, "key 0.0"),
    ({True: b"a"}, "key True"),
    ({2**70: b"a"}, "too large"),
    ({-1: b"a"}, "-1"),
    ({0: "text"}, "must be bytes, got str"),
    ({0: np.array([7])}, "must be bytes, got ndarray"),
    ({0: None}, "must be bytes, got NoneType"),
    (5, "got int"),
])
def test_what_is_not_inline_data_is_named(given: object, words: str) -> None:
    with pytest.raises(InvalidReferences, match=words.replace("(", r"\(")):
        InlineBytes.of(given)  # type: ignore[arg-type]
    if isinstance(given, dict):
        grid = ChunkGrid((1,), (1,))
        with pytest.raises(InvalidReferences):
            ChunkTable(grid, np.array([INLINE], np.uint8), *[np.zeros(1, np.uint8)] * 3, given)


@pytest.mark.parametrize("flat, offsets, data", [
    ([0, 0], [0, 1, 2], b"ab"),
    ([1, 0], [0, 1, 2], b"ab"),
    ([-1], [0, 1], b"a"),
    ([0, 1], [0, 5, 2], b"ab"),
    ([0, 1], [0, 1, 3], b"ab"),
    ([0, 1], [0, 2], b"ab"),
    ([0], [0, 1], "a"),
])
def test_columns_that_do_not_make_a_store_are_refused(flat, offsets, data) -> None:
    with pytest.raises(InvalidReferences, match="InlineBytes"):
        InlineBytes(np.array(flat), np.array(offsets), data)


def test_a_table_checks_the_store_against_its_inline_chunks() -> None:
    grid = ChunkGrid((3,), (1,))
    kind = np.array([INLINE, 0, INLINE], np.uint8)
    z = np.zeros(3, np.uint8)
    ok = ChunkTable(grid, kind, z, z, z, InlineBytes(np.array([0, 2]), np.array([0, 1, 3]), b"abc"))
    assert ok.row(2)[4] == b"bc" and ok.row(1)[4] is None
    for store in ({0: b"a"}, {0: b"a", 1: b"b", 2: b"c"}, {0: b"a", 1: b"b"}):
        with pytest.raises(InvalidReferences, match="inline"):
            ChunkTable(grid, kind, z, z, z, InlineBytes.of(store))
