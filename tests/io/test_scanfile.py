"""The scan's remote file reader: whatever the order of reads, prefetches and range reads, every byte it
gives equals the file's (a seeded property test against the bytes themselves), it holds what it has
read once, and it fetches each byte once."""

from __future__ import annotations

import random

import fsspec
import pytest

from refset.io.scanfile import ScanFile
from refset.io.store import FsspecStore


class _Counting(FsspecStore):
    """A memory:// store counting the bytes it is asked for."""

    asked = 0

    def read_ranges(self, path, starts, ends):  # type: ignore[no-untyped-def]
        type(self).asked += sum(e - s for s, e in zip(starts, ends, strict=True))
        return super().read_ranges(path, starts, ends)


@pytest.mark.parametrize("seed", range(12))
def test_every_read_gives_the_file_bytes(seed: int) -> None:
    rnd = random.Random(seed)
    size = rnd.choice([1, 100, 70_000, 300_000, 1_000_003])
    data = rnd.randbytes(size)
    path = f"memory://scanfile-{seed}.bin"
    with fsspec.open(path, "wb") as f:
        f.write(data)
    _Counting.asked = 0
    head = rnd.choice([0, 1, 4096, 65536, 2 << 20])
    sf = ScanFile(_Counting(path), head)
    assert sf.size == size and not sf.local
    for _ in range(200):
        op = rnd.random()
        o = rnd.randrange(size)
        n = rnd.randrange(min(size - o, 100_000) + 1)
        if op < 0.2:
            sf.prefetch([(a, a + rnd.randrange(5000)) for a in rnd.sample(range(size), min(size, 5))])
        elif op < 0.4:
            got = sf.cached(o, n)
            assert got is None or got == data[o:o + n]
        elif op < 0.6:
            assert sf.read_at(o, n) == data[o:o + n]
        elif op < 0.8:
            offs = [rnd.randrange(size) for _ in range(rnd.randrange(1, 6))]
            lens = [rnd.randrange(min(size - x, 3000) + 1) for x in offs]
            assert sf.read_ranges(offs, lens) == [data[x:x + m] for x, m in zip(offs, lens, strict=True)]
        else:
            sf.file.seek(o)
            assert sf.file.read(n) == data[o:o + n]
        if sf.cached(o, n) is not None:  # what it holds stays right
            assert sf.cached(o, n) == data[o:o + n]
    # the spans it holds do not overlap, so no byte was fetched twice past the head
    ends = [s + len(b) for s, b in zip(sf._starts, sf._spans, strict=True)]
    assert all(e <= s for e, s in zip(ends, sf._starts[1:], strict=False))
    assert _Counting.asked <= size
    sf.close()


def test_a_read_across_the_head_and_a_span() -> None:
    data = bytes(range(256)) * 1000
    with fsspec.open("memory://scanfile-edge.bin", "wb") as f:
        f.write(data)
    sf = ScanFile(FsspecStore("memory://scanfile-edge.bin"), 1000)
    sf.prefetch([(1000, 3000)])
    assert sf.cached(900, 300) == data[900:1200]  # head, then the span after it
    assert sf.cached(900, 2200) is None  # past the span: not in hand
    assert sf.read_ranges([990, 2990], [20, 20]) == [data[990:1010], data[2990:3010]]
