"""Encoding of the packed format's blocks: chunk-table segments, the URL table and the other-keys
table (see docs/packed-format.md, "Segment block", "URL block", "Other block").

A segment holds the chunk references of a contiguous range of flat chunk indices of one array. Its
idea is the blog's custom generator, made lossless and vectorised: chunks are grouped in *runs* of
consecutive located chunks (range or whole-file) in the same file; each run stores its file and first
offset once; every later chunk's offset is predicted as the end of the chunk before it, so only the
*gap* (0 almost always; negative for out-of-order chunks) is stored; lengths are stored as differences
from a base (the median); absent chunks are a bitmap (or, in sparse grids, the present positions). Decoding is numpy cumsum/repeat, never a
per-chunk Python loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from refset.errors import InvalidReferences
from refset.formats.packed.codec import BlockReader, BlockWriter, unzigzag, zigzag
from refset.model.builder import check_ends
from refset.model.table import ABSENT, INLINE, MAX_END, RANGE, WHOLE, KeyTable

__all__ = [
    "Segment",
    "encode_segment",
    "decode_segment",
    "SegmentPlanes",
    "encode_strings",
    "decode_strings",
    "encode_other",
    "decode_other",
    "array_stats",
]

ALL_PRESENT, ALL_RANGE, POSITIONS = 1, 2, 4
_U64 = np.uint64


class Segment(NamedTuple):
    """The present cells of one segment: positions ``rel`` (ascending, relative to the segment's
    first cell) and their columns; ``inline`` keys are global flat indices."""

    rel: np.ndarray
    kind: np.ndarray
    path_id: np.ndarray
    offset: np.ndarray
    length: np.ndarray
    inline: dict[int, bytes]


def _located(kind: np.ndarray) -> np.ndarray:
    out: np.ndarray = (kind == RANGE) | (kind == WHOLE)
    return out


def encode_segment(
    w: BlockWriter,
    ncells: int,
    rel: np.ndarray,
    kind: np.ndarray,
    path_id: np.ndarray,
    offset: np.ndarray,
    length: np.ndarray,
    inline: Mapping[int, bytes],
    lo: int,
) -> dict[str, int]:
    """Write the segment of cells ``lo..lo+ncells`` from its present cells (positions ``rel`` relative
    to ``lo``, ascending, and their columns); return gap counts. Presence is a bitmap, or a list of
    positions when that is smaller (a sparse grid)."""
    npresent = len(rel)
    kp = np.asarray(kind)
    positions = npresent != ncells and 32 * npresent < ncells
    flags = ((ALL_PRESENT if npresent == ncells else 0) | (ALL_RANGE if bool((kp == RANGE).all()) else 0)
             | (POSITIONS if positions else 0))
    w.u64(ncells)
    w.u8(flags)
    if not flags & (ALL_PRESENT | POSITIONS):
        present = np.zeros(ncells, bool)
        present[rel] = True
        w.blob(np.packbits(present, bitorder="little").tobytes())
    w.u64(npresent)
    if positions:
        w.ints((np.diff(rel, prepend=-1) - 1).astype(_U64))
    if not flags & ALL_RANGE:
        w.ints(kp.astype(np.uint64))
    loc = np.flatnonzero(_located(kp))
    rng = kp[loc] == RANGE
    pid = np.asarray(path_id)[loc].astype(np.int64)
    off = np.where(rng, np.asarray(offset)[loc].astype(_U64), _U64(0))
    ln = np.where(rng, np.asarray(length)[loc].astype(_U64), _U64(0))
    n = len(loc)
    start = np.ones(n, bool)
    if n > 1:
        start[1:] = pid[1:] != pid[:-1]
    spos = np.flatnonzero(start)
    runlen = np.diff(np.append(spos, n))
    rpid = pid[spos]
    w.u64(len(spos))
    w.ints(zigzag(np.diff(rpid, prepend=0).view(_U64)))
    w.ints((runlen - 1).astype(_U64))
    w.ints(off[spos])
    base = _U64(np.partition(ln, n // 2)[n // 2]) if n else _U64(0)
    w.u64(int(base))
    w.sparse_ints(zigzag(ln - base))
    # gap before each chunk: offset - end of the chunk before it; 0 at run starts (unused)
    gaps = np.zeros(n, _U64)
    if n > 1:
        gaps[1:] = off[1:] - (off[:-1] + ln[:-1])
    gaps[spos] = 0
    w.sparse_ints(zigzag(gaps))
    iflat = np.asarray(rel)[kp == INLINE]
    blobs = [inline[lo + int(i)] for i in iflat]
    w.ints(np.fromiter((len(b) for b in blobs), _U64, len(blobs)))
    w.blob(b"".join(blobs))
    sg = gaps.view(np.int64)
    return {"runs": len(spos), "gaps": int(np.count_nonzero(sg)), "negative_gaps": int((sg < 0).sum())}


def _presence(r: BlockReader, ncells: int, every: bool = True) -> tuple[int, np.ndarray | None, int]:
    """(flags, positions of present cells, npresent); with ``every`` False the positions of a segment
    whose every cell is present are not made (None)."""
    flags = r.u8()
    if flags & ~(ALL_PRESENT | ALL_RANGE | POSITIONS) or (flags & ALL_PRESENT and flags & POSITIONS):
        raise r.fail(f"unknown segment flags {flags:#x}")
    rel = None
    if flags & ALL_PRESENT:
        rel = np.arange(ncells, dtype=np.int64) if every else None
    elif not flags & POSITIONS:
        bits = np.frombuffer(r.blob((ncells + 7) // 8), np.uint8)
        rel = np.flatnonzero(np.unpackbits(bits, count=ncells, bitorder="little").view(bool))
    npresent = r.count(ncells, "present count")
    if flags & ALL_PRESENT:
        if npresent != ncells:
            raise r.fail(f"present count {npresent} in a segment of {ncells} cells all present")
    elif rel is None:
        rel = np.cumsum(r.ints(npresent).astype(np.int64) + 1) - 1
        if npresent and rel[-1] >= ncells:
            raise r.fail(f"present position {int(rel[-1])} outside the segment of {ncells} cells")
    elif npresent != len(rel):
        raise r.fail(f"present count {npresent} disagrees with the bitmap ({len(rel)})")
    return flags, rel, npresent


def _cells(r: BlockReader, cells: int) -> int:
    """The segment's cell count, which the index's grid fixes (checked before any allocation)."""
    ncells = r.u64()
    if ncells != cells:
        raise r.fail(f"cell count is {ncells}, the index's grid says {cells}")
    return ncells


def decode_segment(r: BlockReader, lo: int, nurls: int, cells: int) -> Segment:
    """Read one segment block written by :func:`encode_segment` for ``cells`` grid cells: its present
    cells."""
    ncells = _cells(r, cells)
    flags, rel, npresent = _presence(r, ncells)
    assert rel is not None
    if flags & ALL_RANGE:
        kp = np.full(npresent, RANGE, np.uint8)
    else:
        kp64 = r.ints(npresent)
        if npresent and (kp64.min() < RANGE or kp64.max() > INLINE):
            raise r.fail("kind code outside 1..3")
        kp = kp64.astype(np.uint8)
    located = None if flags & ALL_RANGE else _located(kp)
    every = located is None or bool(located.all())  # every present cell is a file reference
    n = npresent if located is None or every else int(np.count_nonzero(located))
    nruns = r.count(n, "run count")
    if (nruns == 0) != (n == 0):
        raise r.fail(f"{nruns} runs for {n} located chunks")
    rpid = np.cumsum(unzigzag(r.ints(nruns)).view(np.int64))
    runlen = r.ints(nruns).astype(np.int64) + 1
    if int(runlen.sum()) != n:
        raise r.fail(f"runs cover {int(runlen.sum())} chunks, expected {n}")
    if nruns and (rpid.min() < 0 or rpid.max() >= nurls):
        raise r.fail(f"file index outside the URL table of {nurls}")
    starts = r.ints(nruns)
    base = _U64(r.u64())
    ln = unzigzag(r.sparse_ints(n)) + base
    # offset = previous chunk's end + gap, restarting at each run's first offset: with d the
    # increments (previous length + gap; 0 at run starts), c = cumsum(d), a run start k gets the step
    # that moves c to starts[k], i.e. d[spos] = diff(starts - c[spos]); then offset = cumsum(d).
    d = unzigzag(r.sparse_ints(n))
    spos = np.cumsum(runlen) - runlen
    if n > 1:
        d[1:] += ln[:-1]
    d[spos] = 0
    c = np.cumsum(d, dtype=_U64)
    corr = starts - c[spos]
    d[spos] = np.diff(corr, prepend=_U64(0))
    off = np.cumsum(d, dtype=_U64)
    if every:  # the common case: no scatter
        pid_all, off_all, ln_all = np.repeat(rpid, runlen), off, ln
    else:
        pid_all = np.zeros(npresent, np.int64)
        off_all = np.zeros(npresent, _U64)
        ln_all = np.zeros(npresent, _U64)
        pid_all[located] = np.repeat(rpid, runlen)
        off_all[located] = off
        ln_all[located] = ln
    bad = check_ends(kp, off_all, ln_all)
    if bad >= 0:
        raise r.fail(f"cell {lo + int(rel[bad])}: offset {int(off_all[bad])} + length {int(ln_all[bad])} "
                     "must be below 2**63")
    iflat = rel[kp == INLINE] if not flags & ALL_RANGE else rel[:0]
    sizes = r.ints(len(iflat)).astype(np.int64)
    data = r.blob(int(sizes.sum()))
    ends = np.cumsum(sizes).tolist()
    inline = {lo + i: data[e - s : e] for i, s, e in zip(iflat.tolist(), sizes.tolist(), ends, strict=True)}
    r.end()
    return Segment(rel, kp, pid_all, off_all, ln_all, inline)


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` (non-negative) in the smallest unsigned type that holds it."""
    if not a.size:
        return a.astype(np.uint8)
    top = int(a.max())
    dt = np.uint8 if top < 1 << 8 else np.uint16 if top < 1 << 16 else np.uint32 if top < 1 << 32 else np.uint64
    return a.astype(dt)


class SegmentPlanes:
    """One segment's columns decompressed and kept narrow (a length in 2 bytes where it fits, the
    gaps as stored: mostly none), each cell's reference computed when asked: a file run's first offset
    plus the lengths and gaps before the cell in its run. A random lookup costs a few microseconds,
    and the segment about 2-4 bytes a cell, where :func:`decode_segment` builds ~33 bytes a cell (what
    reading a whole table wants)."""

    __slots__ = ("base", "ends", "gap_pos", "gap_val", "gaps", "iflat", "inline", "kind", "lens", "lo", "locrank",
                 "nbytes", "ncells", "nurls", "rel", "rpid", "runlen", "starts")

    rel: np.ndarray | None
    kind: np.ndarray | None
    locrank: np.ndarray | None
    gaps: np.ndarray | None
    gap_pos: np.ndarray | None
    gap_val: np.ndarray | None

    def __init__(self, r: BlockReader, lo: int, nurls: int, cells: int) -> None:
        ncells = _cells(r, cells)
        flags, rel, npresent = _presence(r, ncells, every=False)
        self.lo, self.ncells, self.nurls = lo, ncells, nurls
        self.rel = None if rel is None else rel.astype(np.uint32 if ncells < 1 << 32 else np.int64)
        if flags & ALL_RANGE:
            kp = None
        else:
            kp64 = r.ints(npresent)
            if npresent and (kp64.min() < RANGE or kp64.max() > INLINE):
                raise r.fail("kind code outside 1..3")
            kp = kp64.astype(np.uint8)
        self.kind = kp
        located = None if kp is None else _located(kp)
        every = located is None or bool(located.all())
        n = npresent if located is None or every else int(np.count_nonzero(located))
        # the rank of each present cell among the located ones (only when some are inline)
        self.locrank = None if every or located is None else (np.cumsum(located) - 1).astype(np.int64)
        nruns = r.count(n, "run count")
        if (nruns == 0) != (n == 0):
            raise r.fail(f"{nruns} runs for {n} located chunks")
        self.rpid = np.cumsum(unzigzag(r.ints(nruns)).view(np.int64))
        self.runlen = r.ints(nruns).astype(np.int64) + 1
        self.ends = np.cumsum(self.runlen)
        if int(self.runlen.sum()) != n:
            raise r.fail(f"runs cover {int(self.runlen.sum())} chunks, expected {n}")
        if nruns and (self.rpid.min() < 0 or self.rpid.max() >= nurls):
            raise r.fail(f"file index outside the URL table of {nurls}")
        self.starts = r.ints(nruns)
        self.base = _U64(r.u64())
        lens = unzigzag(r.sparse_ints(n)) + self.base  # the lengths themselves (uint64, mod 2**64)
        self.lens = _narrow(lens)
        got = r.sparse_pairs(n)
        if isinstance(got, tuple):
            self.gaps, self.gap_pos, self.gap_val = None, got[0], unzigzag(got[1])
        else:
            self.gaps, self.gap_pos, self.gap_val = unzigzag(got), None, None
        if kp is None:
            self.iflat = np.zeros(0, np.int64)
        else:
            cells_at = np.arange(ncells, dtype=np.int64) if rel is None else rel
            self.iflat = cells_at[kp == INLINE].astype(np.int64)
        sizes = r.ints(len(self.iflat)).astype(np.int64)
        data = r.blob(int(sizes.sum()))
        ends = np.cumsum(sizes).tolist()
        self.inline = [data[e - s : e] for s, e in zip(sizes.tolist(), ends, strict=True)]
        r.end()
        cols = [a for a in (self.rel, self.kind, self.locrank, self.lens, self.gaps, self.gap_pos, self.gap_val,
                            self.rpid, self.runlen, self.ends, self.starts, self.iflat) if a is not None]
        self.nbytes = sum(a.nbytes for a in cols) + len(data) + 50 * len(self.inline) + 200

    def row(self, j: int) -> tuple[int, int, int, int, bytes | None]:
        """``(kind, path_id, offset, length, inline data)`` of cell ``j`` (ABSENT when it is not)."""
        if self.rel is None:
            rank = j
        else:
            rank = int(np.searchsorted(self.rel, j))
            if rank >= len(self.rel) or int(self.rel[rank]) != j:
                return ABSENT, 0, 0, 0, None
        kind = RANGE if self.kind is None else int(self.kind[rank])
        if kind == INLINE:
            i = int(np.searchsorted(self.iflat, j))
            return INLINE, 0, 0, 0, self.inline[i]
        q = rank if self.locrank is None else int(self.locrank[rank])
        k = int(np.searchsorted(self.ends, q, side="right"))
        pid = int(self.rpid[k])
        if kind == WHOLE:
            return WHOLE, pid, 0, 0, None
        s = int(self.ends[k] - self.runlen[k])
        ln = self.lens[s : q + 1].astype(_U64)
        if self.gaps is not None:
            gap = np.sum(self.gaps[s + 1 : q + 1], dtype=_U64)
        else:
            assert self.gap_pos is not None and self.gap_val is not None
            a, b = np.searchsorted(self.gap_pos, [s + 1, q + 1])
            gap = np.sum(self.gap_val[a:b], dtype=_U64)
        off = (int(self.starts[k]) + int(np.sum(ln[:-1], dtype=_U64)) + int(gap)) % (1 << 64)  # modulo 2**64
        length = int(ln[-1])
        if off >= MAX_END or length >= MAX_END or off + length >= MAX_END:
            raise InvalidReferences(f"packed block: cell {self.lo + j}: offset {off} + length {length} must be "
                                    "below 2**63")
        return RANGE, pid, off, length, None


def encode_strings(w: BlockWriter, items: list[str]) -> None:
    """A string column: byte lengths (ints) and the concatenated UTF-8 (blob)."""
    raw = [s.encode("utf-8", "surrogatepass") for s in items]
    w.ints(np.fromiter((len(b) for b in raw), _U64, len(raw)))
    w.blob(b"".join(raw))


def decode_strings(r: BlockReader, n: int) -> list[str]:
    r.within_limit(n, 64, "a string column")  # a Python string each, empty ones included
    sizes = r.ints(n).astype(np.int64)
    data = r.blob(int(sizes.sum()))
    ends = np.cumsum(sizes)
    if data.isascii():
        text = data.decode("ascii")
        return [text[e - s : e] for s, e in zip(sizes.tolist(), ends.tolist(), strict=True)]
    try:
        return [data[e - s : e].decode("utf-8", "surrogatepass")
                for s, e in zip(sizes.tolist(), ends.tolist(), strict=True)]
    except UnicodeDecodeError as e:
        raise r.fail(f"string is not UTF-8 ({e})") from e


def encode_other(w: BlockWriter, t: KeyTable) -> None:
    """The generic key table: keys, kind, path_id, offset, length, then inline data."""
    w.u64(len(t))
    encode_strings(w, t.keys.tolist())
    kind = np.asarray(t.kind)
    rng = kind == RANGE
    w.ints(kind.astype(_U64))
    w.ints(np.where(rng | (kind == WHOLE), np.asarray(t.path_id).astype(_U64), _U64(0)))
    w.ints(np.where(rng, np.asarray(t.offset).astype(_U64), _U64(0)))
    w.ints(np.where(rng, np.asarray(t.length).astype(_U64), _U64(0)))
    inl = np.flatnonzero(t.kind == INLINE)
    blobs = [bytes(t.data[i]) for i in inl.tolist()]
    w.ints(np.fromiter((len(b) for b in blobs), _U64, len(blobs)))
    w.blob(b"".join(blobs))


def decode_other(r: BlockReader, nurls: int) -> KeyTable:
    n = r.count(1 << 40, "key count")
    names = decode_strings(r, n)
    keys = np.empty(n, object)
    keys[:] = names
    kind64, pid, off, ln = (r.ints(n) for _ in range(4))
    if n and kind64.max() > INLINE:
        raise r.fail("kind code outside 0..3")
    kind = kind64.astype(np.uint8)
    if n and int(pid[(kind == RANGE) | (kind == WHOLE)].max(initial=0)) >= max(nurls, 1):
        raise r.fail(f"file index outside the URL table of {nurls}")
    bad = check_ends(kind, off, ln)
    if bad >= 0:
        raise r.fail(f"key {names[bad]!r}: offset {int(off[bad])} + length {int(ln[bad])} must be below 2**63")
    inl = np.flatnonzero(kind == INLINE)
    sizes = r.ints(len(inl)).astype(np.int64)
    blob = r.blob(int(sizes.sum()))
    data = np.empty(n, object)
    for i, s, e in zip(inl.tolist(), sizes.tolist(), np.cumsum(sizes).tolist(), strict=True):
        data[i] = blob[e - s : e]
    r.end()
    return KeyTable(keys, kind, pid, off, ln, data)


def array_stats(total: int, kind: np.ndarray, path_id: np.ndarray, length: np.ndarray) -> dict[str, object]:
    """The blog's figures for one array of ``total`` cells, from its present chunks' columns: modal
    length, chunks of another length (``unique``), distinct lengths, skipped (absent) chunks, files and
    gfactor = 1 - (unique + skipped) / chunks."""
    rng = kind == RANGE
    ln = length[rng]
    modal, nmodal, distinct = 0, 0, 0
    if ln.size:
        top = int(ln.max())
        if top <= 4 * ln.size + (1 << 16):
            counts = np.bincount(ln.astype(np.int64))
            modal, nmodal = int(counts.argmax()), int(counts.max())
            distinct = int(np.count_nonzero(counts))
        else:
            vals, counts = np.unique(ln, return_counts=True)
            j = int(counts.argmax())
            modal, nmodal, distinct = int(vals[j]), int(counts[j]), len(vals)
    skipped = total - int(np.count_nonzero(kind != ABSENT))
    unique = int(ln.size - nmodal)
    located = _located(kind)
    files = len(np.unique(path_id[located])) if located.any() else 0
    return {
        "chunks": total,
        "present": total - skipped,
        "skipped": skipped,
        "modal_length": modal,
        "unique": unique,
        "distinct_lengths": distinct,
        "files": files,
        "gfactor": round(1 - (unique + skipped) / total, 4) if total else 1.0,
    }
