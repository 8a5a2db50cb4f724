"""The one chunk key grammar: the vectorised parse of many key tails equals the parse of one, on seeded
random tails of every kind (canonical, leading zeros, out of the grid, long digit runs, non-ASCII
digits, signs, spaces, wrong rank)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from refset.model.keys import ChunkGrid, KeyRouter, flat_indices, flat_of


@pytest.mark.parametrize("seed", range(4))
def test_many_tails_parse_as_one(seed: int) -> None:
    rng = random.Random(seed)
    grid = (7, 123_456_789, 3)
    odd = ["", ".", "1..2", "1.2", "a.b.c", "1.2.3.4", "\u0661.2.1", "+1.1.1", " 1.1.1", "1.1.1 ", "-0.1.1",
           "1.1.1\n", "0.0.0", "00.0.0", "6.123456788.2", "6.123456789.2"]
    tails = []
    for _ in range(3000):
        k = rng.random()
        if k < 0.5:
            tails.append(f"{rng.randrange(7)}.{rng.randrange(123_456_789)}.{rng.randrange(3)}")
        elif k < 0.6:
            tails.append(f"0{rng.randrange(7)}.1.1")
        elif k < 0.75:
            tails.append(f"{rng.randrange(9)}.{rng.randrange(200_000_000)}.{rng.randrange(4)}")
        elif k < 0.9:
            tails.append(rng.choice(odd))
        else:
            tails.append(f"{rng.randrange(7)}.{rng.randrange(10**12)}.{rng.randrange(3)}")
    want = np.array([flat_of(t.split("."), grid) for t in tails])
    np.testing.assert_array_equal(flat_indices(tails, grid), want)
    np.testing.assert_array_equal(flat_indices(tails[:10], grid), want[:10])  # the scalar path
    g = ChunkGrid(tuple(s * c for s, c in zip(grid, (1, 1, 1))), (1, 1, 1))
    router = KeyRouter({"v": g})
    for t, w in zip(tails[:500], want[:500].tolist()):
        assert router.locate(f"v/{t}") == (None if w < 0 else ("v", w))


def test_scalars_and_other_spellings() -> None:
    assert flat_indices(["0", "1", ""], ()).tolist() == [0, -1, -1]
    g = ChunkGrid((4, 4), (2, 2), "/", "c", 3)
    assert g.flat_indices(["c/1/1", "c/0/1", "1/1", "c/2/0"]).tolist() == [3, 1, -1, -1]
