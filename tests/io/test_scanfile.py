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


def test_a_small_rest_is_read_whole_on_the_first_miss() -> None:
    """A file whose bytes past the head fit in the block a miss fetches is read whole then: its
    later reads (here the middle, after the end) cost no request; a larger file is read by blocks."""
    data = bytes(range(256)) * 600  # 153,600 bytes: a 64 KiB head and 88 KiB after it
    with fsspec.open("memory://scanfile-small.bin", "wb") as f:
        f.write(data)
    sf = ScanFile(FsspecStore("memory://scanfile-small.bin"), 65536)
    opened = sf.requests  # the head (and the size: memory:// does not say it with the head)
    assert sf.read_at(150_000, 100) == data[150_000:150_100]
    assert sf.read_at(70_000, 5000) == data[70_000:75_000]
    assert sf.read_ranges([65_536], [100]) == [data[65_536:65_636]]
    assert (sf.requests - opened, sf.nbytes) == (1, len(data))
    big = bytes(range(256)) * 4000  # 1 MB: past the head, more than a block
    with fsspec.open("memory://scanfile-big.bin", "wb") as f:
        f.write(big)
    sf = ScanFile(FsspecStore("memory://scanfile-big.bin"), 65536)
    opened = sf.requests
    assert sf.read_at(900_000, 100) == big[900_000:900_100]
    assert sf.read_at(70_000, 100) == big[70_000:70_100]
    assert sf.requests - opened == 2 and sf.nbytes < len(big)


def test_reads_past_the_end_give_no_bytes() -> None:
    """A read at or past the end (or before the start) gives b"" without a request, as a file's read()
    does (review: a small file fetched its rest, then failed an assert)."""
    data = bytes(range(256)) * 400
    with fsspec.open("memory://scanfile-end.bin", "wb") as f:
        f.write(data)
    sf = ScanFile(FsspecStore("memory://scanfile-end.bin"), 4096)
    opened = sf.requests
    assert sf.read_at(len(data), 10) == b"" and sf.read_at(len(data) + 5, 10) == b"" and sf.read_at(-3, 2) == b""
    assert sf.requests == opened
    assert sf.read_at(len(data) - 4, 10) == data[-4:]
