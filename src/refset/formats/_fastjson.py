"""A vectorised reader for large Version 0 documents (and the ``{"version": 1, "refs": ...}`` envelope).

It never builds a Python object per reference. The document is scanned with numpy: string
boundaries from the quote positions, members as (key string, value string) pairs, the two integers of
``[url, offset, length]`` located through the comma positions and parsed eight digits at a time
(SWAR on unaligned 64-bit words), chunk indices parsed from the key's tail, and keys grouped into runs
that share an array prefix and URLs into runs that share a URL, so only one string per run is
decoded. Everything that does not fit this common shape (inline values, keys outside chunk grids,
``/`` separators) goes through the ordinary per-key path, and any surprise returns None so the caller
falls back to a full JSON parse that reports problems precisely.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._threads import parallel_map
from ..model import RANGE, WHOLE, Builder, ChunkTable, KeyRouter, KeyTable, Ref, ReferenceSet, sparse_grid

__all__ = ["fast_load", "MIN_SIZE"]

MIN_SIZE = 1 << 16  # smaller documents parse faster with the generic parser

_WS = np.zeros(256, bool)
_WS[[9, 10, 13, 32]] = True
_U8 = np.uint64
_ONES = _U8(0x0101010101010101)
_HI = _U8(0x8080808080808080)
_LO7 = _U8(0x7F7F7F7F7F7F7F7F)
_ZEROS = _U8(0x3030303030303030)


class _Fallback(Exception):
    pass


def _words(data: bytes) -> np.ndarray:
    """``w[i]`` = the 8 bytes starting at ``i`` as a little-endian uint64 (unaligned view)."""
    return np.ndarray(shape=(len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))


def _byte_lt(w: np.ndarray, n: int) -> np.ndarray:
    """0x80 in each byte of ``w`` whose value is < n (n <= 128)."""
    return ~((w & _LO7) + _U8((128 - n) * 0x0101010101010101)) & ~w & _HI


def _top_byte(flags: np.ndarray) -> np.ndarray:
    """Index (0..7) of the highest flagged byte; -1 when none."""
    exp = np.frexp(flags.astype(np.float64))[1].astype(np.int64)  # bit_length
    return (exp - 1) // 8


def _skip_ws(a: np.ndarray, pos: np.ndarray, step: int) -> np.ndarray:
    """First non-whitespace position at or after ``pos``; _Fallback when the text ends first."""
    if pos.size and pos[-1] >= a.size:  # positions ascend
        raise _Fallback
    idx = np.flatnonzero(a[pos] <= 32)
    if not idx.size:
        return pos
    pos = pos.copy()
    while idx.size:
        c = a[pos[idx]]
        if not _WS[c].all():
            raise _Fallback  # a control character outside strings is not JSON
        pos[idx] += step
        if pos[idx].max() >= a.size:
            raise _Fallback
        idx = idx[a[pos[idx]] <= 32]
    return pos


def _swar8(w: np.ndarray) -> np.ndarray:
    x = w - _ZEROS
    x = (x * _U8(10) + (x >> _U8(8))) & _U8(0x00FF00FF00FF00FF)
    x = (x * _U8(100) + (x >> _U8(16))) & _U8(0x0000FFFF0000FFFF)
    return (x * _U8(10000) + (x >> _U8(32))) & _U8(0xFFFFFFFF)


# _LOW[n]: the low 8-n bytes of a word (the bytes before its last n), for n = 0..8
_LOW = np.array([(1 << (8 * (8 - n))) - 1 if n else (1 << 64) - 1 for n in range(9)], np.uint64)


def _masked(w: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Keep the last ``n`` (0..8) bytes of each word, the others become '0'."""
    low = _LOW[np.clip(n, 0, 8)]
    return (w & ~low) | (_ZEROS & low)


def _is_digits(w: np.ndarray) -> np.ndarray:
    hi_ok = (w & _U8(0xF0F0F0F0F0F0F0F0)) == _ZEROS
    lo_ok = (((w & _U8(0x0F0F0F0F0F0F0F0F)) + _U8(0x0606060606060606)) & _U8(0xF0F0F0F0F0F0F0F0)) == 0
    return hi_ok & lo_ok


def _parse_uints(W: np.ndarray, a: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Decimal integers in spans [s, e) of 1..16 digits; raises _Fallback on anything else."""
    n = e - s
    if n.size == 0:
        return np.zeros(0, np.uint64)
    if n.min() < 1 or n.max() > 16 or e.min() < 16:
        raise _Fallback
    if np.any((a[s] == 48) & (n > 1)):
        raise _Fallback  # leading zeros are not JSON
    n_lo = np.minimum(n, 8)
    lo = _masked(W[e - 8], n_lo)
    hi = _masked(W[e - 16], n - n_lo)
    if not (np.all(_is_digits(lo)) and np.all(_is_digits(hi))):
        raise _Fallback
    return _swar8(hi) * _U8(100_000_000) + _swar8(lo)


def _same_spans(a: np.ndarray, s: np.ndarray, e: np.ndarray, W: np.ndarray | None = None) -> np.ndarray:
    """``same[i]``: span i has the same bytes as span i-1 (``same[0]`` False)."""
    from numpy.lib.stride_tricks import as_strided

    n = e - s
    same = np.zeros(n.size, bool)
    if n.size < 2:
        return same
    if W is not None and n.max() <= 16 and e.min() >= 16:
        # short spans: the last two words, masked to the span, hold all of it
        same[1:] = n[1:] == n[:-1]
        lo = _masked(W[e - 8], np.minimum(n, 8))
        hi = _masked(W[e - 16], n - np.minimum(n, 8))
        same[1:] &= (lo[1:] == lo[:-1]) & (hi[1:] == hi[:-1])
        return same
    if n.min() == n.max():
        groups = [np.arange(n.size)]
    else:
        order = np.argsort(n, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(n[order])) + 1)
    for rows in groups:
        # spans of one length are gathered once as fixed-width rows; a row equal to the row
        # before it (which then has the same length) is the same string
        L = int(n[rows[0]])
        if rows.size < 2:
            continue
        hit = np.zeros(rows.size, bool)
        if L == 0:
            hit[1:] = True
        else:
            view = as_strided(a, shape=(a.size - L + 1, L), strides=(1, 1))
            x = view[s[rows]]
            hit[1:] = (x[1:] == x[:-1]).all(axis=1)
        hit[1:] &= rows[1:] == rows[:-1] + 1
        same[rows] = hit
    return same


def _decode(data: bytes, s: int, e: int) -> str:
    """The JSON string whose raw text (without quotes) is ``data[s:e]``; _Fallback if invalid."""
    import msgspec

    try:
        return str(msgspec.json.decode(b'"' + data[s:e] + b'"'))
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise _Fallback from None


def _key_tails(
    W: np.ndarray, a: np.ndarray, ks: np.ndarray, ke: np.ndarray, maxdim: int = 32
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Parse ``prefix/i.j.k`` from key spans: (prefix end, ndim, [last index, second last, ...]).

    ndim 0 means "not a dotted chunk key"; the prefix end is the position of the '/' (or the key
    start for a key of digits only).
    """
    N = ks.size
    ndim = np.zeros(N, np.int64)
    pend = ks.copy()
    idx: list[np.ndarray] = []
    active = np.arange(N)
    end = ke.copy()
    for d in range(maxdim):
        if active.size == 0:
            break
        e = end[active]
        kst = ks[active]
        w = W[np.maximum(e - 8, 0)]
        bad = ~_byte_lt(w ^ _ZEROS, 10) & _HI
        top = _top_byte(bad)  # highest non-digit byte; -1 if all 8 are digits
        nd = 7 - top
        # the separator and the first digit are bytes of the same word: no gathers
        shift = (top.clip(0) * 8).astype(np.uint64)
        sep = ((w >> shift) & _U8(0xFF)).astype(np.uint8)
        first = ((w >> np.minimum(shift + _U8(8), _U8(56))) & _U8(0xFF)).astype(np.uint8)
        start = e - nd
        at_key_start = start <= kst  # the key's opening quote is the "separator"
        good = (top >= 0) & (nd >= 1) & (start >= kst) & ~((first == 48) & (nd > 1))
        val = _swar8(_masked(w, nd))
        cont = good & (sep == 46) & ~at_key_start
        stop_slash = good & (sep == 47) & ~at_key_start
        stop_root = good & (start == kst)
        col = np.full(N, -1, np.int64)
        col[active[good]] = val[good].astype(np.int64)
        idx.append(col)
        done = stop_slash | stop_root
        dr = active[done]
        ndim[dr] = d + 1
        pend[dr] = np.where(stop_slash[done], start[done] - 1, ks[dr])
        end[active[cont]] = start[cont] - 1
        active = active[cont]
    return pend, ndim, idx


QUOTE_BLOCK = 1 << 22  # bytes scanned per task: its temporaries stay small and are reused


def _quotes(data: bytes, a: np.ndarray) -> np.ndarray:
    """Positions of the unescaped quotes."""
    dt = np.int32 if a.size < 2**31 - 64 else np.int64

    def scan(o: int) -> np.ndarray:
        q = np.flatnonzero(a[o : o + QUOTE_BLOCK] == 34).astype(dt) + dt(o)
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
        raise _Fallback
    return q


BATCH = 1 << 15  # members parsed together: bounds the temporary memory
KEY_BATCH = 1 << 17  # members whose keys are classified together (keys only: little memory)


class _Doc:
    """The text and its string table; member m of the body has key string ``first + 2m``."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.a = np.frombuffer(data, np.uint8)
        self.W = _words(data)
        self.q = _quotes(data, self.a)
        self.nstr = self.q.size // 2
        self.first = 0
        self.members = 0

    def s(self, j: np.ndarray) -> np.ndarray:
        return self.q[2 * j].astype(np.int64) + 1

    def e(self, j: np.ndarray) -> np.ndarray:
        return self.q[2 * j + 1].astype(np.int64)

    def spans(self, m0: int, m1: int) -> tuple[np.ndarray, ...]:
        kj = self.first + 2 * np.arange(m0, m1, dtype=np.int64)
        return self.s(kj), self.e(kj), self.s(kj + 1), self.e(kj + 1)

    def text(self, s: int, e: int) -> str:
        return _decode(self.data, s, e)


def _envelope(doc: _Doc) -> tuple[dict[str, Any] | None, int]:
    """(the rest of a {"version": 1, ..., "refs": {...}} document, closing braces after the body)."""
    from ._json import decode_json

    a, data = doc.a, doc.data
    first = int(_skip_ws(a, np.array([0]), 1)[0])
    if a[first] != 123:  # "{"
        raise _Fallback
    if int(_skip_ws(a, np.array([first + 1]), 1)[0]) != doc.q[0]:
        raise _Fallback  # only whitespace may stand between "{" and the first key
    head = np.arange(min(1 << 16, doc.nstr))
    hs, he = doc.s(head), doc.e(head)
    short = np.flatnonzero((he - hs == 7) | (he - hs == 4)).tolist()
    names = {i: data[hs[i] : he[i]] for i in short}
    if b"version" not in names.values():
        return None, 1
    # "refs" must be the last top-level member: its body runs to the end of the text
    for i in (i for i, n in names.items() if n == b"refs"):
        p = int(_skip_ws(a, np.array([he[i] + 1]), 1)[0])
        if a[p] != 58:
            continue
        p = int(_skip_ws(a, np.array([p + 1]), 1)[0])
        if a[p] != 123:
            continue
        try:
            rest = decode_json(data[: hs[i] - 1] + b'"refs": {}}')
        except ValueError:
            continue
        if isinstance(rest, dict) and rest.get("refs") == {} and "version" in rest:
            break
    else:
        raise _Fallback
    doc.first = i + 1
    return rest, 2


def _shape(doc: _Doc, m: np.ndarray) -> tuple[np.ndarray, ...]:
    """Check members ``m`` (ascending member numbers) and find their parts.

    Returns key/value spans, ``is_arr`` (value is a list), ``whole`` ([url]), offset and length.
    """
    a, W = doc.a, doc.W
    j = doc.first + 2 * m
    ks, ke, vs, ve = doc.s(j), doc.e(j), doc.s(j + 1), doc.e(j + 1)
    n = ks.size
    # between key and value: ws ':' ws ( '"' | '[' ws '"' )
    p = _skip_ws(a, ke + 1, 1)
    if not np.all(a[p] == 58):
        raise _Fallback
    p = _skip_ws(a, p + 1, 1)
    is_arr = a[p] == 91
    if not np.all(is_arr | (p == vs - 1)):
        raise _Fallback
    ai = np.flatnonzero(is_arr)
    if ai.size and not np.all(_skip_ws(a, p[ai] + 1, 1) == vs[ai] - 1):
        raise _Fallback
    # after the value: strings end with ws (',' | '}'); lists hold ', int, int]' or ']'
    after = _skip_ws(a, ve + 1, 1)
    term = after.copy()
    ca = a[after[ai]]
    whole = np.zeros(n, bool)
    whole[ai[ca == 93]] = True
    three = ai[ca == 44]
    if np.count_nonzero(whole) + three.size != ai.size:
        raise _Fallback
    w_i = np.flatnonzero(whole)
    if w_i.size:
        term[w_i] = _skip_ws(a, after[w_i] + 1, 1)
    offset = np.zeros(n, np.uint64)
    length = np.zeros(n, np.uint64)
    if three.size:
        s1 = _skip_ws(a, after[three] + 1, 1)
        e1 = _digits_end(W, a, s1)
        c2 = _skip_ws(a, e1, 1)
        if not np.all(a[c2] == 44):
            raise _Fallback
        s2 = _skip_ws(a, c2 + 1, 1)
        e2 = _digits_end(W, a, s2)
        rb = _skip_ws(a, e2, 1)
        if not np.all(a[rb] == 93):
            raise _Fallback
        term[three] = _skip_ws(a, rb + 1, 1)
        offset[three] = _parse_uints(W, a, s1, e1)
        length[three] = _parse_uints(W, a, s2, e2)
    # members are separated by ',' and the body ends with '}'
    more = m < doc.members - 1
    if not np.all(a[term] == np.where(more, 44, 125)):
        raise _Fallback
    nxt_key = doc.s(doc.first + 2 * (m[more] + 1)) - 1
    if np.any(_skip_ws(a, term[more] + 1, 1) != nxt_key):
        raise _Fallback
    return ks, ke, vs, ve, is_arr, whole, offset, length, term


def fast_load(
    data: bytes | list[bytes],
    *,
    max_gen: int | None = None,
    template_overrides: Mapping[str, str] | None = None,
    lazy: bool = False,
) -> ReferenceSet | None:
    """A ReferenceSet from JSON text, or None when the document needs the generic parser.

    ``data`` may be a one-item list holding the text: the reader then takes it out and lets it go
    before building the tables (lower peak memory), and puts it back when it returns None.

    ``lazy``: read keys, metadata and inline values now, but the chunk tables (offsets, lengths,
    URLs) only when a chunk is first used. Opening is then several times faster; the text stays in
    memory until then, and problems in chunk references are reported at first use.
    """
    box = data if isinstance(data, list) else [data]
    if len(box[0]) < MIN_SIZE:
        return None
    data = box.pop()
    try:
        plan = _Plan(_Doc(data), template_overrides, max_gen)
    except _Fallback:
        box.append(data)
        return None
    del data
    # the plan owns the text now and lets it go as soon as it can
    if lazy and not (plan.head_doc or {}).get("gen"):
        if plan.heads is None:
            try:
                plan.classify()
            except _Fallback:
                box.append(plan.doc.data)
                return None
        plan.settle_grids()
        return _LazyJson(plan)
    try:
        return plan.finish()
    except _Fallback:
        box.append(plan.doc.data)
        return None


class _Plan:
    """The cheap part of reading: strings, keys routed to chunk grids, metadata and inline values,
    keys outside the grids. :meth:`finish` adds the chunk references (the costly part)."""

    def __init__(self, doc: _Doc, template_overrides: Mapping[str, str] | None,
                 max_gen: int | None) -> None:
        from ._templates import Templates

        self.doc = doc
        self.template_overrides = template_overrides
        self.max_gen = max_gen
        if doc.nstr < 4:
            raise _Fallback
        self.head_doc, self.closers = _envelope(doc)
        if (doc.nstr - doc.first) % 2:
            raise _Fallback
        doc.members = (doc.nstr - doc.first) // 2
        self.templates = None
        if self.head_doc is not None:
            if self.head_doc.get("version") != 1:
                raise _Fallback  # the generic path reports the unknown version
            tmpl = self.head_doc.get("templates", {})
            if not isinstance(tmpl, dict) or not all(isinstance(v, str) for v in tmpl.values()):
                raise _Fallback
            self.templates = Templates({**tmpl, **(template_overrides or {})})
        b = self.builder = Builder()
        problems: list[str] = []
        # string values (metadata, inline data) go through the per-key path; grids need them.
        # A value is a string when the text before its opening quote is ':' (ws allowed), not '['.
        a = doc.a
        value_open = doc.q[2 * doc.first + 2 :: 4].astype(np.int64)
        is_str = a[value_open - 1] != 91
        maybe = np.flatnonzero(is_str)  # '[' right before the quote is a list; else look past ws
        before = a[_skip_ws(a, value_open[maybe] - 1, -1)]
        if not np.all((before == 58) | (before == 91)):
            raise _Fallback
        is_str[maybe] = before == 58
        for m in np.flatnonzero(is_str).tolist():
            ks, ke, vs, ve = (int(x[0]) for x in doc.spans(m, m + 1))
            key = doc.text(ks, ke)
            b.add(key, _inline(doc.data, vs, ve, key, problems))
        if problems:
            raise _Fallback
        self.string_keys = set(b.items)
        self.is_str = is_str
        del value_open, maybe, before
        self.grids = b.grids()
        self.batches: list[tuple[int, int, np.ndarray, list[str], np.ndarray, np.ndarray]] | None = None
        self.dense: set[str] | None = None  # set by settle_grids (lazy reading)
        self.heads = _list_heads(doc, is_str, self.grids)

    def classify(self) -> None:
        """Route list-valued members: chunk keys of known grids column-wise per batch, the others
        (keys outside any grid) one at a time. Idempotent."""
        if self.batches is not None:
            return
        doc, b, is_str = self.doc, self.builder, self.is_str
        problems: list[str] = []
        batches = []
        for m0 in range(0, doc.members, KEY_BATCH):
            m1 = min(m0 + KEY_BATCH, doc.members)
            ks, ke = doc.s(doc.first + 2 * np.arange(m0, m1, dtype=np.int64)), doc.e(
                doc.first + 2 * np.arange(m0, m1, dtype=np.int64))
            lists = np.flatnonzero(~is_str[m0:m1])
            rows, names, aid, flat = _classify(doc, ks, ke, lists, self.grids)
            batches.append((m0, m1, rows, names, aid, flat))
            one_by_one = np.ones(m1 - m0, bool)
            one_by_one[rows] = False
            one_by_one[is_str[m0:m1]] = False
            for i in np.flatnonzero(one_by_one).tolist():
                key = doc.text(int(ks[i]), int(ke[i]))
                if key in self.string_keys:
                    raise _Fallback  # a key given twice (text and list): the generic path orders them
                ref = _member_list(doc, m0 + i, key, problems, self.templates)
                if ref is not None:
                    b.add(key, ref)
        if problems:
            raise _Fallback
        if self.grids and _collides(b, KeyRouter(self.grids), batches):
            raise _Fallback  # a chunk given both inline and as a range: let the generic path order them
        self.batches = batches

    def settle_grids(self) -> None:
        """Drop the grids too sparse to index densely, judged from an upper bound of their entries,
        and keep the others dense (``self.dense``, for ``Builder.build``), so that the grids known
        at open are those of the finished set whichever way it is finished."""
        upper = dict.fromkeys(self.grids, 0)
        router = KeyRouter(self.grids)
        for key in self.builder.items:
            hit = router.locate(key)
            if hit is not None:
                upper[hit[0]] += 1
        if self.batches is not None:
            for _m0, _m1, _rows, names, aid, _flat in self.batches:
                for j, n in enumerate(np.bincount(aid, minlength=len(names)).tolist()):
                    upper[names[j]] += n
        elif self.heads is not None:
            # a key spelled with escapes may lie under an inner array but match only an outer head
            for path in upper:
                upper[path] += sum(n for p, n in self.heads.count.items() if (path + "/").startswith(p + "/"))
        keep = {p: g for p, g in self.grids.items() if not sparse_grid(g, upper[p])}
        if len(keep) < len(self.grids):
            self.grids = keep
            if self.batches is not None:  # classified with the dropped grids: again without them
                self.batches = None
                self.classify()
        self.dense = set(self.grids)

    def table(self, path: str) -> ChunkTable | None:
        """The chunk table of a small array read on its own (its members only), or None when it
        is read with all the others."""
        heads, g = self.heads, self.grids.get(path)
        if heads is None or self.batches is not None or g is None:
            return None
        members = heads.small.get(path)
        if members is None or g.separator != "." or g.prefix or g.ndim == 0:
            return None
        if any((path + "/").startswith(h) for h in heads.prefixes if h != path + "/"):
            return None  # inside another array: its keys may match only the outer head
        doc = self.doc
        j = doc.first + 2 * members
        ks, ke = doc.s(j), doc.e(j)
        rows, names, aid, flat = _classify(doc, ks, ke, np.arange(members.size), {path: g})
        router = KeyRouter({path: g})
        rest = np.ones(members.size, bool)
        rest[rows] = False
        for i in np.flatnonzero(rest).tolist():  # spelled another way (escapes) yet one of its chunks?
            if router.locate(doc.text(int(ks[i]), int(ke[i]))) is not None:
                return None
        b = Builder({path: g}, url_ids=self.builder.url_ids)  # ids stay valid when all is read
        for key, ref in self.builder.items.items():  # inline chunks of this array
            hit = router.locate(key)
            if hit is not None:
                if np.isin(flat, hit[1]).any():
                    raise _Fallback  # given inline and as a list: the generic path orders them
                b.add(key, ref)
        m = members[rows]
        _ks, _ke, vs, ve, _is_arr, whole, offset, length, _term = _shape(doc, m)
        _columns(doc, np.arange(m.size), names, aid, flat, vs, ve, whole, offset, length,
                 self.templates, b)
        return b.build(dense={path}).table(path)

    def finish(self) -> ReferenceSet:
        """Read the chunk references and build the set; releases the text."""
        self.classify()
        assert self.batches is not None
        doc, b = self.doc, self.builder
        term = None
        for k0, k1, rows, names, aid, flat in self.batches:
            for m0 in range(k0, k1, BATCH):  # smaller batches here: the costly part, more memory
                m1 = min(m0 + BATCH, k1)
                lo, hi = np.searchsorted(rows, [m0 - k0, m1 - k0])
                _ks, _ke, vs, ve, _is_arr, whole, offset, length, term = _shape(
                    doc, np.arange(m0, m1, dtype=np.int64))
                _columns(doc, rows[lo:hi] - (m0 - k0), names, aid[lo:hi], flat[lo:hi], vs, ve, whole,
                         offset, length, self.templates, b)
        if term is not None:
            _check_end(doc.a, int(term[-1]) + 1, self.closers)
        self.doc = None  # type: ignore[assignment]
        del doc
        if self.head_doc is not None:
            from ._json import collect
            from ._json_v1 import DEFAULT_MAX_GEN

            problems: list[str] = []
            collect(self.head_doc, problems, builder=b, refs_done=True,
                    max_gen=self.max_gen or DEFAULT_MAX_GEN, template_overrides=self.template_overrides)
            if problems:
                from ..errors import InvalidReferences

                raise InvalidReferences(problems)
        rs = b.build(dense=self.dense)
        rs.stored.update(format="json", version=1 if self.head_doc is not None else 0)
        return rs


class _LazyJson(ReferenceSet):
    """A JSON set read in steps (see ``fast_load(lazy=True)``).

    At open: strings, metadata and inline values. When every list-valued key lies under an array
    (``plan.heads``), keys and listings outside the arrays are answered from that; anything else
    first classifies the list-valued keys (:meth:`_Plan.classify`). A small array's chunk table is
    read from its own members; the first table of any other array builds them all
    (:meth:`_Plan.finish`) and releases the text. Every step runs under one lock, and ``_other``
    only ever grows from the string-valued keys to all the generic keys.
    """

    def __init__(self, plan: _Plan) -> None:
        import threading

        b = plan.builder
        self._lock = threading.RLock()
        self._plan: _Plan | None = plan
        self._heads = plan.heads
        self._classified = plan.batches is not None  # else _other holds the string-valued keys only
        other = b.build_other(plan.grids)  # registers the URLs of its rows
        super().__init__(list(b.url_ids), {}, other, grids=plan.grids)
        self.stored.update(format="json", version=1 if plan.head_doc is not None else 0)

    @property
    def _pending(self) -> bool:
        return not self._classified

    @property  # type: ignore[override]
    def other(self) -> KeyTable:
        if not self._classified:
            self._classify()
        return self._other

    @other.setter
    def other(self, table: KeyTable) -> None:
        self._other = table

    def _outside_lists(self, key: str) -> bool:
        """Whether ``key`` cannot be a list-valued key (see :func:`_list_heads`)."""
        heads = self._heads
        return heads is not None and not ("0" <= key[-1:] <= "9" and key.startswith(heads.prefixes))

    def __getitem__(self, key: str) -> Ref:
        if not self._classified and isinstance(key, str) and self._outside_lists(key) \
                and self.locate(key) is None:
            return self._generic_ref(self._other, key)  # a string-valued key, if any
        return super().__getitem__(key)

    def other_under(self, path: str) -> KeyTable:
        if not self._classified and self._heads is not None and not self._heads.inside(path):
            return self._other
        return self.other

    def table(self, path: str) -> ChunkTable:
        t = self._tables.get(path)
        if t is not None:
            return t
        with self._lock:  # one step at a time: a table is never stored beside another step's
            return super().table(path)

    def _load_table(self, path: str) -> ChunkTable:
        plan = self._plan
        if plan is not None:
            try:
                table = plan.table(path)
            except _Fallback:
                table = None
            if table is not None:  # a small array (a coordinate): read on its own
                self.urls = list(plan.builder.url_ids)
                return table
        self._materialize()
        return self._tables[path]

    def _classify(self) -> None:
        with self._lock:
            plan = self._plan
            if self._classified or plan is None:
                return
            try:
                plan.classify()
            except _Fallback:
                self._materialize()
                return
            other = plan.builder.build_other(plan.grids)
            self.urls = list(plan.builder.url_ids)
            self._other = other
            self._classified = True

    def _materialize(self) -> None:
        with self._lock:
            plan = self._plan
            if plan is None:
                return
            try:
                rs = plan.finish()
            except _Fallback:
                from ._json import decode_json, from_document

                rs = from_document(decode_json(plan.doc.data), max_gen=plan.max_gen or 100_000_000,
                                   template_overrides=plan.template_overrides,
                                   builder=Builder(url_ids=plan.builder.url_ids),  # ids stay valid
                                   dense=plan.dense)
            # URLs first: a reader in another thread may meet the new tables before this ends
            self.urls = rs.urls
            self._other = rs.other
            self._classified = True
            self.grids = rs.grids
            self.router = rs.router
            self._tables = dict(rs._tables)
            self._plan = None

    def __len__(self) -> int:
        self._materialize()
        return super().__len__()

    def __repr__(self) -> str:
        if not self._classified:  # cheap: fsspec puts the repr of its arguments in its instance tokens
            return f"<{type(self).__name__}: {len(self.grids)} chunk grids, keys not read yet>"
        return super().__repr__()


def _check_end(a: np.ndarray, rest: int, closers: int) -> None:
    for _ in range(closers - 1):
        rest = int(_skip_ws(a, np.array([rest]), 1)[0])
        if a[rest] != 125:
            raise _Fallback
        rest += 1
    if rest < a.size and not np.all(_WS[a[rest:]]):
        raise _Fallback


def _url(doc: _Doc, s: int, e: int, templates: Any) -> str:
    u = doc.text(s, e)
    if templates is not None and "{{" in u:
        try:
            return str(templates.render(u))
        except ValueError:
            raise _Fallback from None
    return u


def _member_list(doc: _Doc, m: int, key: str, problems: list[str], templates: Any) -> Ref | None:
    """The list value of member ``m``, decoded on its own (keys outside the chunk grids)."""
    import msgspec

    from ._json_v0 import normalize_value

    j = doc.first + 2 * m + 1
    start = int(_skip_ws(doc.a, np.array([doc.q[2 * j] - 1], np.int64), -1)[0])  # the '['
    end = doc.data.find(b"]", int(doc.q[2 * j + 1]))
    if doc.a[start] != 91 or end < 0:
        raise _Fallback
    try:
        value = msgspec.json.decode(doc.data[start : end + 1])
    except msgspec.DecodeError:
        raise _Fallback from None

    def render(url: str, at: str) -> str | None:
        try:
            return str(templates.render(url))
        except ValueError as e:
            problems.append(f"{at}: {e}")
            return None

    return normalize_value(key, value, problems, render if templates is not None else None)


def _classify(
    doc: _Doc, ks: np.ndarray, ke: np.ndarray, lists: np.ndarray, grids: Mapping[str, Any]
) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """List-valued members (``lists``, batch rows) whose keys are canonical chunk keys of a known
    '.'-separated grid: (rows, array names, array id per row, flat chunk index per row)."""
    a, W = doc.a, doc.W
    pend, ndim, idx = _key_tails(W, a, ks[lists], ke[lists])
    ok = np.zeros(lists.size, bool)
    arr_of = np.full(lists.size, -1, np.int64)
    names: list[str] = []
    chunky = np.flatnonzero(ndim > 0)
    flat = np.zeros(lists.size, np.int64)
    if chunky.size:
        m = lists[chunky]
        same = _same_spans(a, ks[m], pend[chunky], W)
        bounds = np.append(np.flatnonzero(~same), chunky.size)
        name_id: dict[str, int] = {}
        for s0, s1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            r = int(chunky[s0])
            k0 = int(ks[lists[r]])
            prefix = doc.text(k0, int(pend[r])) if pend[r] > k0 else ""
            g = grids.get(prefix)
            if g is None or g.separator != "." or g.prefix or g.ndim == 0:
                continue
            j = name_id.setdefault(prefix, len(names))
            if j == len(names):
                names.append(prefix)
            arr_of[chunky[s0:s1]] = j
        for j, prefix in enumerate(names):
            rows = np.flatnonzero(arr_of == j)
            g = grids[prefix]
            if g.ndim > len(idx):
                continue  # no key of the batch has that many indices
            good = ndim[rows] == g.ndim
            for d, n in enumerate(reversed(g.grid_shape)):
                v = idx[d][rows]
                good &= (v >= 0) & (v < n)
            rows = rows[good]
            ok[rows] = True
            flat[rows] = np.ravel_multi_index(
                tuple(idx[d][rows] for d in reversed(range(g.ndim))), g.grid_shape)
    sel = np.flatnonzero(ok)
    return lists[sel], names, arr_of[sel].astype(np.int16 if len(names) < 2**15 else np.int64), flat[sel]


MAX_HEADS = 64  # more arrays than this: list keys are classified at open instead
_LOW8 = [np.uint64((1 << (8 * n)) - 1) for n in range(9)]  # the first n bytes of a word


def _word(part: bytes) -> np.uint64:
    return np.uint64(int.from_bytes(part, "little"))


class _Heads:
    """Where the list-valued keys lie, when each starts with a known array path and a '/' and ends
    with a plain ASCII digit (see :func:`_list_heads`)."""

    def __init__(self, paths: list[str], counts: list[int], small: list[np.ndarray | None]) -> None:
        self.prefixes = tuple(p + "/" for p in paths)
        self.count = dict(zip(paths, counts, strict=True))  # list keys under each array
        # members whose keys lie under an array holding at most 1/8 of the list keys
        self.small = {p: m for p, m in zip(paths, small, strict=True) if m is not None}

    def inside(self, path: str) -> bool:
        """Whether ``path`` is an array or lies inside one."""
        return (path + "/").startswith(self.prefixes)


def _list_heads(doc: _Doc, is_str: np.ndarray, grids: Mapping[str, Any]) -> _Heads | None:
    """A :class:`_Heads` when every list-valued key starts with a known array's path and a '/'
    and ends with a plain ASCII digit; None otherwise (or when there are no list values).

    Then no list-valued key can be a metadata key, nor lie outside the arrays, so keys and listings
    outside the arrays are known before the list-valued keys are classified.
    """
    import msgspec

    if not grids or len(grids) > MAX_HEADS or "" in grids or is_str.all():
        return None
    paths = list(grids)
    raws = [msgspec.json.encode(p + "/")[1:-1] for p in paths]
    if any(b"\\" in r for r in raws):
        return None
    W, q = doc.W, doc.q
    lists = np.flatnonzero(~is_str)

    def check(part: np.ndarray) -> list[tuple[int, np.ndarray | None]] | None:
        ks = q[2 * doc.first :: 4][part].astype(np.int64) + 1
        ke = q[2 * doc.first + 1 :: 4][part].astype(np.int64)
        if ke.min() < 8:
            return None
        # the key's last 8 bytes: it must end with a digit that does not end a \uXXXX escape
        tail = W[ke - 8]
        last = (tail >> _U8(56)).astype(np.uint8)
        if not (((last >= 48) & (last <= 57)).all() and ((tail >> _U8(16)) & _U8(0xFF) != 92).all()):
            return None
        del tail, last
        # a key that matches a head is longer than it (it ends with a digit, the head with '/'); a
        # shorter one does not match (its closing quote meets a head byte, and heads hold no quote)
        first = W[ks]  # the key's first 8 bytes
        under = np.zeros(ks.size, bool)
        out: list[tuple[int, np.ndarray | None]] = []
        for raw in raws:
            hit = (first & _LOW8[min(len(raw), 8)]) == _word(raw[:8])
            if len(raw) > 8:
                hit &= ke - ks > len(raw)  # the others cannot match; reading on could leave the text
                idx = np.flatnonzero(hit)
                sub = np.ones(idx.size, bool)
                for o in range(8, len(raw), 8):
                    piece = raw[o : o + 8]
                    sub &= (W[ks[idx] + o] & _LOW8[len(piece)]) == _word(piece)
                hit[idx] = sub
            under |= hit
            n = int(np.count_nonzero(hit))
            out.append((n, part[hit] if 8 * n <= part.size else None))
        return out if under.all() else None

    parts = np.array_split(lists, max(1, min(8, lists.size // KEY_BATCH)))
    found = parallel_map(check, parts)
    done = [f for f in found if f is not None]
    if len(done) != len(found):
        return None
    counts = [sum(f[i][0] for f in done) for i in range(len(paths))]
    small: list[np.ndarray | None] = []
    for i in range(len(paths)):
        got = [f[i][1] for f in done]
        small.append(np.concatenate(got) if all(g is not None for g in got) else None)
    return _Heads(paths, counts, small)


def _columns(
    doc: _Doc,
    rows: np.ndarray,
    names: list[str],
    aid: np.ndarray,
    flat: np.ndarray,
    vs: np.ndarray,
    ve: np.ndarray,
    whole: np.ndarray,
    offset: np.ndarray,
    length: np.ndarray,
    templates: Any,
    b: Builder,
) -> None:
    """Add one batch's classified chunk references column-wise; URLs decoded once per run."""
    if not rows.size:
        return
    starts = np.flatnonzero(~_same_spans(doc.a, vs[rows], ve[rows]))
    run_pid = np.empty(starts.size, np.int64)
    url_id = b.url_ids
    for r, s0 in enumerate(starts.tolist()):
        u = _url(doc, int(vs[rows[s0]]), int(ve[rows[s0]]), templates)
        run_pid[r] = url_id.setdefault(u, len(url_id))
    pid = np.repeat(run_pid, np.diff(np.append(starts, rows.size)))
    kind = np.where(whole[rows], WHOLE, RANGE).astype(np.uint8)
    for j, prefix in enumerate(names):
        sel = np.flatnonzero(aid == j)
        if sel.size:
            r = rows[sel]
            b.add_chunks(prefix, flat[sel], kind[sel], pid[sel], offset[r], length[r])


def _digits_end(W: np.ndarray, a: np.ndarray, s: np.ndarray) -> np.ndarray:
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
        nondig = ~_byte_lt(w ^ _ZEROS, 10) & _HI
        # lowest flagged byte = first non-digit
        low = nondig & (~nondig + _U8(1))
        first = np.where(nondig == 0, 8, _top_byte(low))
        e[live] += first
        live = live[first == 8]
    if live.size:
        raise _Fallback
    return e


def _inline(data: bytes, s: int, e: int, key: str, problems: list[str]) -> bytes:
    from ._json_v0 import normalize_value

    v = normalize_value(key, _decode(data, s, e), problems)
    return v if isinstance(v, bytes) else b""


def _collides(b: Builder, router: KeyRouter, batches: list[tuple[Any, ...]]) -> bool:
    """Whether a single key names a chunk that a classified list member also holds."""
    routed: dict[str, list[int]] = {}
    for key in b.items:
        hit = router.locate(key)
        if hit is not None:
            routed.setdefault(hit[0], []).append(hit[1])
    if not routed:
        return False
    for _m0, _m1, _rows, names, aid, flat in batches:
        for j, path in enumerate(names):
            if path in routed and np.isin(flat[aid == j], routed[path]).any():
                return True
    return False
