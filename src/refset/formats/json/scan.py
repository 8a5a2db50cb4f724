"""Byte scanning for the vectorised JSON reader: numpy passes over the text, never a Python object per
reference.

String boundaries come from the quote positions; integers are parsed eight digits at a time (SWAR on
unaligned 64-bit words); chunk indices are read from a key's tail; runs of identical byte spans are
found without decoding them. Anything unexpected raises :class:`Fallback`, and the caller hands the
document to the generic parser, which reports problems precisely.
"""

from __future__ import annotations

import numpy as np

from refset.model.keys import key_tails, tails_in_grid
from refset.model.swar import HI, U8, ZEROS, byte_lt, is_digits, masked, swar8, top_byte, words
from refset.parallel import parallel_map

__all__ = [
    "Fallback", "words", "skip_ws", "parse_uints", "same_spans", "decode_string", "key_tails", "quotes",
    "tails_in_grid",
    "digits_end", "check_end", "word", "byte_lt", "top_byte", "masked", "swar8", "is_digits",
    "WS", "U8", "HI", "ZEROS", "LOW8", "QUOTE_BLOCK",
]

WS = np.zeros(256, bool)
WS[[9, 10, 13, 32]] = True

class Fallback(Exception):
    """The document needs the generic parser."""


def skip_ws(a: np.ndarray, pos: np.ndarray, step: int) -> np.ndarray:
    """First non-whitespace position at or after ``pos`` (``step`` 1; at or before it with -1);
    Fallback when the text ends first or a control character stands outside strings."""
    if pos.size and pos[-1] >= a.size:  # positions ascend
        raise Fallback
    idx = np.flatnonzero(a[pos] <= 32)
    if not idx.size:
        return pos
    pos = pos.copy()
    for _ in range(SHORT_WS):  # the usual indentation: a few bytes, one numpy step each
        c = a[pos[idx]]
        if not WS[c].all():
            raise Fallback  # a control character outside strings is not JSON
        pos[idx] += step
        if pos[idx].max() >= a.size or pos[idx].min() < 0:
            raise Fallback
        idx = idx[a[pos[idx]] <= 32]
        if not idx.size:
            return pos
    pos[idx] = _skip_runs(a, pos[idx], step)
    return pos


SHORT_WS = 8  # whitespace runs longer than this are skipped window by window (_skip_runs)
_WS_BUDGET = 1 << 24  # bytes gathered per step of _skip_runs


def _skip_runs(a: np.ndarray, p: np.ndarray, step: int) -> np.ndarray:
    """:func:`skip_ws` for positions inside long whitespace runs: each step gathers a window of bytes
    per position and finds the run's end in it; windows double, so a run of n bytes takes
    log2(n) numpy steps, never a step per byte."""
    from numpy.lib.stride_tricks import as_strided

    out = p.copy()
    live = np.arange(p.size)
    width = 64
    while live.size:
        width = int(min(width, a.size, max(64, _WS_BUDGET // live.size)))
        view = as_strided(a, shape=(a.size - width + 1, width), strides=(1, 1))
        cur = out[live]
        if step > 0:
            s = np.minimum(cur, a.size - width)
            w = ~WS[view[s]]
            w &= np.arange(width) >= (cur - s)[:, None]  # bytes before the position do not count
            found = w.any(axis=1)
            hit = s + np.argmax(w, axis=1)
            ended = ~found & (s + width >= a.size)
            nxt = s + width
        else:
            s = np.maximum(cur - width + 1, 0)
            w = ~WS[view[s]]
            w &= np.arange(width) <= (cur - s)[:, None]  # bytes after the position do not count
            found = w.any(axis=1)
            hit = s + width - 1 - np.argmax(w[:, ::-1], axis=1)
            ended = ~found & (s == 0)
            nxt = s - 1
        if ended.any():
            raise Fallback
        out[live[found]] = hit[found]
        out[live[~found]] = nxt[~found]
        live = live[~found]
        width *= 2
    if np.any(a[out] <= 32):
        raise Fallback  # a control character outside strings is not JSON
    return out


def parse_uints(W: np.ndarray, a: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Decimal integers in spans [s, e) of 1..16 digits; raises Fallback on anything else."""
    n = e - s
    if n.size == 0:
        return np.zeros(0, np.uint64)
    if n.min() < 1 or n.max() > 16 or e.min() < 16:
        raise Fallback
    if np.any((a[s] == 48) & (n > 1)):
        raise Fallback  # leading zeros are not JSON
    n_lo = np.minimum(n, 8)
    lo = masked(W[e - 8], n_lo)
    hi = masked(W[e - 16], n - n_lo)
    if not (np.all(is_digits(lo)) and np.all(is_digits(hi))):
        raise Fallback
    out: np.ndarray = swar8(hi) * U8(100_000_000) + swar8(lo)
    return out


SAME_BLOCK = 1 << 23  # bytes of spans gathered at once by same_spans: its temporaries stay small


def same_spans(a: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``same[i]``: span i has the same bytes as span i-1 (``same[0]`` False).

    Only a span as long as the one before it can be the same; those are compared in groups of one
    length L, each span gathered as one fixed-width ``S{L}`` item and the items compared whole, so
    a comparison is a single pass however long the spans are (URLs of 100+ characters cost what
    short ones do; the spans' bytes are read once). Two items of one length that differ only in
    trailing NULs cannot compare equal: both would need the same number of them."""
    n = e - s
    same = np.zeros(n.size, bool)
    cand = np.flatnonzero(n[1:] == n[:-1]) + 1
    if not cand.size:
        return same
    lengths = n[cand]
    if lengths.min() != lengths.max():
        order = np.argsort(lengths, kind="stable")
        cand, lengths = cand[order], lengths[order]
    cuts = np.flatnonzero(np.diff(lengths)) + 1
    buf = np.ascontiguousarray(a)
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), cand.size]):
        L = int(lengths[lo])
        if L == 0:
            same[cand[lo:hi]] = True
            continue
        items = np.ndarray((buf.size - L + 1,), dtype=f"S{L}", buffer=buf, strides=(1,))
        step = max(1, SAME_BLOCK // L)
        for b in range(lo, hi, step):
            rows = cand[b : min(b + step, hi)]
            same[rows] = items[s[rows]] == items[s[rows - 1]]
    return same


def decode_string(data: bytes | bytearray, s: int, e: int) -> str:
    """The JSON string whose raw text (without quotes) is ``data[s:e]``; Fallback if invalid."""
    import msgspec

    try:
        return str(msgspec.json.decode(b'"' + data[s:e] + b'"'))
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise Fallback from None


QUOTE_BLOCK = 1 << 22  # bytes scanned per task: its temporaries stay small and are reused


def quotes(data: bytes | bytearray, a: np.ndarray) -> np.ndarray:
    """Positions of the unescaped quotes."""
    dt = np.int32 if a.size < 2**31 - 64 else np.int64

    def scan(o: int) -> np.ndarray:
        q: np.ndarray = np.flatnonzero(a[o : o + QUOTE_BLOCK] == 34).astype(dt) + o
        cand = np.flatnonzero(a[np.maximum(q - 1, 0)] == 92)  # quotes after a backslash
        if not cand.size:
            return q
        # a quote is escaped when an odd number of backslashes precede it
        count = np.ones(cand.size, np.int64)
        cur = q[cand].astype(np.int64) - 1
        live = np.arange(cand.size)
        while live.size:
            prev = cur[live] - 1
            more = (prev >= 0) & (a[np.maximum(prev, 0)] == 92)
            live = live[more]
            cur[live] -= 1
            count[live] += 1
        return np.delete(q, cand[count % 2 == 1])

    parts = parallel_map(scan, list(range(0, a.size, QUOTE_BLOCK)))
    q = np.concatenate(parts) if parts else np.zeros(0, dt)
    if (q.size and q[0] == 0) or q.size % 2:
        raise Fallback
    return q


def check_end(a: np.ndarray, rest: int, closers: int) -> None:
    for _ in range(closers - 1):
        rest = int(skip_ws(a, np.array([rest]), 1)[0])
        if a[rest] != 125:
            raise Fallback
        rest += 1
    if rest < a.size and not np.all(WS[a[rest:]]):
        raise Fallback


LOW8 = [np.uint64((1 << (8 * n)) - 1) for n in range(9)]  # the first n bytes of a word


def word(part: bytes) -> np.uint64:
    return np.uint64(int.from_bytes(part, "little"))


def digits_end(W: np.ndarray, a: np.ndarray, s: np.ndarray) -> np.ndarray:
    """End (exclusive) of the run of digits starting at each ``s`` (runs of up to 16 digits)."""
    e = s.copy()
    live = np.arange(s.size)
    far = s <= W.size - 17
    if not far.all():
        live = np.flatnonzero(far)
        for i in np.flatnonzero(~far).tolist():  # the last few bytes of the text: byte by byte
            j = int(s[i])
            while j < a.size and 48 <= a[j] <= 57:
                j += 1
            e[i] = j
    for _ in range(3):
        if not live.size:
            break
        w = W[np.minimum(e[live], W.size - 1)]
        nondig = ~byte_lt(w ^ ZEROS, 10) & HI
        # lowest flagged byte = first non-digit
        low = nondig & (~nondig + U8(1))
        first = np.where(nondig == 0, 8, top_byte(low))
        e[live] += first
        live = live[first == 8]
    if live.size:
        raise Fallback
    return e
