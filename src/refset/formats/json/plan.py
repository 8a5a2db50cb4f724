"""Planning a JSON reference document for the vectorised reader: the string table, members as
(key, value) spans, keys routed to chunk grids, metadata and inline values (the cheap part), then the
chunk references column-wise (:meth:`Plan.finish`, the costly part)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import numpy as np

from refset.errors import InvalidReferences
from refset.formats.json.doc import Doc, base64_bytes, base64_lengths, base64_many, member_shape
from refset.formats.json.generic import collect, decode_json
from refset.formats.json.scan import (
    LOW8,
    U8,
    Fallback,
    check_end,
    key_tails,
    same_spans,
    skip_ws,
    tails_in_grid,
    word,
)
from refset.formats.json.templates import Templates
from refset.formats.json.v0 import normalize_value
from refset.formats.json.v1 import DEFAULT_MAX_GEN
from refset.model.builder import Builder, route
from refset.model.inline import InlineBytes, offsets_of
from refset.model.keys import KeyRouter, split_metadata_key
from refset.model.table import INLINE, RANGE, WHOLE, ChunkTable, KeyTable, Ref
from refset.options import DEFAULT_LIMITS, Limits
from refset.parallel import parallel_map

__all__ = ["Plan", "plan_document", "MIN_SIZE"]

MIN_SIZE = 1 << 16  # smaller documents parse faster with the generic parser


BATCH = 1 << 15  # members parsed together: bounds the temporary memory
KEY_BATCH = 1 << 17  # members whose keys are classified together (keys only: little memory)


def _envelope(doc: Doc) -> tuple[dict[str, Any] | None, int]:
    """(the rest of a {"version": 1, ..., "refs": {...}} document, closing braces after the body)."""

    a, data = doc.a, doc.data
    first = int(skip_ws(a, np.array([0]), 1)[0])
    if a[first] != 123:  # "{"
        raise Fallback
    if int(skip_ws(a, np.array([first + 1]), 1)[0]) != doc.q[0]:
        raise Fallback  # only whitespace may stand between "{" and the first key
    head = np.arange(min(1 << 16, doc.nstr))
    hs, he = doc.s(head), doc.e(head)
    short = np.flatnonzero((he - hs == 7) | (he - hs == 4)).tolist()
    names = {i: data[hs[i] : he[i]] for i in short}
    if b"version" not in names.values():
        return None, 1
    # "refs" must be the last top-level member: its body runs to the end of the text
    for i in (i for i, n in names.items() if n == b"refs"):
        p = int(skip_ws(a, np.array([he[i] + 1]), 1)[0])
        if a[p] != 58:
            continue
        p = int(skip_ws(a, np.array([p + 1]), 1)[0])
        if a[p] != 123:
            continue
        try:
            rest = decode_json(data[: hs[i] - 1] + b'"refs": {}}')
        except ValueError:
            continue
        if isinstance(rest, dict) and rest.get("refs") == {} and "version" in rest:
            break
    else:
        raise Fallback
    doc.first = i + 1
    return rest, 2


class Plan:
    """The cheap part of reading: strings, keys routed to chunk grids, metadata and inline values,
    keys outside the grids. :meth:`finish` adds the chunk references (the costly part)."""

    def __init__(self, doc: Doc, template_overrides: Mapping[str, str] | None,
                 max_gen: int | None, limits: Limits = DEFAULT_LIMITS) -> None:
        self.doc = doc
        self.template_overrides = template_overrides
        self.max_gen = max_gen
        self.limits = limits
        if doc.nstr < 4:
            raise Fallback
        self.head_doc, self.closers = _envelope(doc)
        if (doc.nstr - doc.first) % 2:
            raise Fallback
        doc.members = (doc.nstr - doc.first) // 2
        self.templates = None
        if self.head_doc is not None:
            if self.head_doc.get("version") != 1:
                raise Fallback  # the generic path reports the unknown version
            tmpl = self.head_doc.get("templates", {})
            if not isinstance(tmpl, dict) or not all(isinstance(v, str) for v in tmpl.values()):
                raise Fallback
            self.templates = Templates({**tmpl, **(template_overrides or {})}, limits)
        b = self.builder = Builder()
        # A value is a string when the text before its opening quote is ':' (ws allowed), not '['.
        a = doc.a
        value_open = doc.q[2 * doc.first + 2 :: 4].astype(np.int64)
        is_str = a[value_open - 1] != 91
        maybe = np.flatnonzero(is_str)  # '[' right before the quote is a list; else look past ws
        before = a[skip_ws(a, value_open[maybe] - 1, -1)]
        if not np.all((before == 58) | (before == 91)):
            raise Fallback
        is_str[maybe] = before == 58
        del value_open, maybe, before
        self.is_str = is_str
        self.inline = _string_members(doc, np.flatnonzero(is_str), b)
        self.string_keys = set(b.items)
        self.grids = b.grids()
        self.batches: list[tuple[int, int, np.ndarray, list[str], np.ndarray, np.ndarray]] | None = None
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
            # the grammar of the members that make up ``other`` (strings, lists outside the grids) is
            # checked now: a lazy set may answer from ``other`` without ever reading the chunk members
            served = np.flatnonzero(one_by_one | is_str[m0:m1]) + m0
            if served.size:
                term = member_shape(doc, served)[-1]
                if served[-1] == doc.members - 1:
                    check_end(doc.a, int(term[-1]) + 1, self.closers)
            for i in np.flatnonzero(one_by_one).tolist():
                key = doc.text(int(ks[i]), int(ke[i]))
                if key in self.string_keys:
                    raise Fallback  # a key given twice (text and list): the generic path orders them
                ref = _member_list(doc, m0 + i, key, problems, self.templates)
                if ref is not None:
                    b.add(key, ref)
        if problems:
            raise Fallback
        if self.grids:  # a chunk named twice in ways whose order the builder does not keep
            single = _named(b, self.grids)
            inline = {p: f for p, (f, _) in self.inline.items()}
            if (_overlap(single, inline.items()) or _overlap(single, _listed(batches))
                    or _overlap(inline, _listed(batches))):
                raise Fallback
        self.batches = batches

    def table(self, path: str) -> ChunkTable | None:
        """The chunk table of an array holding at most half the list keys, read on its own (its
        members only), or None when it is read with all the others."""
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
        for key, ref in self.builder.items.items():  # odd spellings of its chunks (few keys)
            hit = router.locate(key)
            if hit is not None:
                if np.isin(flat, hit[1]).any():
                    raise Fallback  # given inline and as a list: the generic path orders them
                b.add(key, ref)
        got = self.inline.get(path)
        if got is not None:  # its inline chunks
            if np.isin(flat, got[0]).any():
                raise Fallback
            _add_inline(b, path, *got)
        m = members[rows]
        _ks, _ke, vs, ve, _is_arr, whole, offset, length, _term = member_shape(doc, m)
        _columns(doc, np.arange(m.size), names, aid, flat, vs, ve, whole, offset, length,
                 self.templates, b)
        return b.build_parts()[1][path]

    def finish(self) -> tuple[tuple[str, ...], dict[str, ChunkTable], KeyTable]:
        """Read the chunk references and build ``(urls, tables, other)``; releases the text."""
        self.classify()
        assert self.batches is not None
        doc, b = self.doc, self.builder
        term = None
        for k0, k1, rows, names, aid, flat in self.batches:
            for m0 in range(k0, k1, BATCH):  # smaller batches here: the costly part, more memory
                m1 = min(m0 + BATCH, k1)
                lo, hi = np.searchsorted(rows, [m0 - k0, m1 - k0])
                _ks, _ke, vs, ve, _is_arr, whole, offset, length, term = member_shape(
                    doc, np.arange(m0, m1, dtype=np.int64))
                _columns(doc, rows[lo:hi] - (m0 - k0), names, aid[lo:hi], flat[lo:hi], vs, ve, whole,
                         offset, length, self.templates, b)
        if term is not None:
            check_end(doc.a, int(term[-1]) + 1, self.closers)
        if self.head_doc is not None:
            problems: list[str] = []
            collect(self.head_doc, problems, builder=b, refs_done=True,
                    max_gen=self.max_gen or DEFAULT_MAX_GEN, template_overrides=self.template_overrides,
                    limits=self.limits)
            if problems:
                raise InvalidReferences(problems)
            if self.head_doc.get("gen") and _overlap(_named(b, self.grids, key_batches=True),
                                                      ((p, f) for p, f, *_ in b.batches)):
                raise Fallback  # a generated key names a chunk the refs hold: the generic path orders them
        self.doc = None  # type: ignore[assignment]
        del doc
        return b.build_parts()

    @property
    def info(self) -> dict[str, object]:
        return {"format": "json", "version": 1 if self.head_doc is not None else 0}


def _url(doc: Doc, s: int, e: int, templates: Any) -> str:
    u = doc.text(s, e)
    if templates is not None and "{{" in u:
        try:
            return str(templates.render(u))
        except ValueError:
            raise Fallback from None
    return u


def _member_list(doc: Doc, m: int, key: str, problems: list[str], templates: Any) -> Ref | None:
    """The list value of member ``m``, decoded on its own (keys outside the chunk grids)."""
    import msgspec

    j = doc.first + 2 * m + 1
    start = int(skip_ws(doc.a, np.array([doc.q[2 * j] - 1], np.int64), -1)[0])  # the '['
    end = doc.data.find(b"]", int(doc.q[2 * j + 1]))
    if doc.a[start] != 91 or end < 0:
        raise Fallback
    try:
        value = msgspec.json.decode(doc.data[start : end + 1])
    except (msgspec.DecodeError, RecursionError):
        raise Fallback from None

    def render(url: str, at: str) -> str | None:
        try:
            return str(templates.render(url))
        except ValueError as e:
            problems.append(f"{at}: {e}")
            return None

    return normalize_value(key, value, problems, render if templates is not None else None)


def _classify(
    doc: Doc, ks: np.ndarray, ke: np.ndarray, lists: np.ndarray, grids: Mapping[str, Any]
) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray]:
    """List-valued members (``lists``, batch rows) whose keys are canonical chunk keys of a known
    '.'-separated grid: (rows, array names, array id per row, flat chunk index per row)."""
    a, W = doc.a, doc.W
    pend, ndim, idx = key_tails(W, a, ks[lists], ke[lists])
    ok = np.zeros(lists.size, bool)
    arr_of = np.full(lists.size, -1, np.int64)
    names: list[str] = []
    chunky = np.flatnonzero(ndim > 0)
    flat = np.zeros(lists.size, np.int64)
    if chunky.size:
        m = lists[chunky]
        same = same_spans(a, ks[m], pend[chunky])
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
            rows, flat_j = tails_in_grid(ndim, idx, np.flatnonzero(arr_of == j), grids[prefix].grid_shape)
            ok[rows] = True
            flat[rows] = flat_j
    sel = np.flatnonzero(ok)
    return lists[sel], names, arr_of[sel].astype(np.int16 if len(names) < 2**15 else np.int64), flat[sel]


MAX_HEADS = 64  # more arrays than this: list keys are classified at open instead


class Heads:
    """Where the list-valued keys lie, when each starts with a known array path and a '/' and ends
    with a plain ASCII digit (see :func:`_list_heads`)."""

    def __init__(self, paths: list[str], small: list[np.ndarray | None]) -> None:
        self.prefixes = tuple(p + "/" for p in paths)
        # members whose keys lie under an array holding at most half the list keys: its table is read
        # from them alone (the first read of one variable does not build every other's table)
        self.small = {p: m for p, m in zip(paths, small, strict=True) if m is not None}

    def inside(self, path: str) -> bool:
        """Whether ``path`` is an array or lies inside one."""
        return (path + "/").startswith(self.prefixes)


def _list_heads(doc: Doc, is_str: np.ndarray, grids: Mapping[str, Any]) -> Heads | None:
    """A :class:`Heads` when every list-valued key starts with a known array's path and a '/'
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
        last = (tail >> U8(56)).astype(np.uint8)
        if not (((last >= 48) & (last <= 57)).all() and ((tail >> U8(16)) & U8(0xFF) != 92).all()):
            return None
        del tail, last
        # a key that matches a head is longer than it (it ends with a digit, the head with '/'); a
        # shorter one does not match (its closing quote meets a head byte, and heads hold no quote)
        first = W[ks]  # the key's first 8 bytes
        under = np.zeros(ks.size, bool)
        out: list[tuple[int, np.ndarray | None]] = []
        for raw in raws:
            hit = (first & LOW8[min(len(raw), 8)]) == word(raw[:8])
            if len(raw) > 8:
                hit &= ke - ks > len(raw)  # the others cannot match; reading on could leave the text
                idx = np.flatnonzero(hit)
                sub = np.ones(idx.size, bool)
                for o in range(8, len(raw), 8):
                    piece = raw[o : o + 8]
                    sub &= (W[ks[idx] + o] & LOW8[len(piece)]) == word(piece)
                hit[idx] = sub
            under |= hit
            n = int(np.count_nonzero(hit))
            out.append((n, part[hit] if 2 * n <= part.size else None))  # half the list keys or fewer
        return out if under.all() else None

    parts = np.array_split(lists, max(1, min(8, lists.size // KEY_BATCH)))
    found = parallel_map(check, parts)
    done = [f for f in found if f is not None]
    if len(done) != len(found):
        return None
    small: list[np.ndarray | None] = []
    for i in range(len(paths)):
        got = [g for f in done if (g := f[i][1]) is not None]
        small.append(np.concatenate(got) if len(got) == len(done) else None)
    return Heads(paths, small)


def _columns(
    doc: Doc,
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
    starts = np.flatnonzero(~same_spans(doc.a, vs[rows], ve[rows]))
    run_pid = np.empty(starts.size, np.int64)
    url_id = b.url_ids
    for n, s0 in enumerate(starts.tolist()):
        u = _url(doc, int(vs[rows[s0]]), int(ve[rows[s0]]), templates)
        run_pid[n] = url_id.setdefault(u, len(url_id))
    pid = np.repeat(run_pid, np.diff(np.append(starts, rows.size)))
    kind = np.where(whole[rows], WHOLE, RANGE).astype(np.uint8)
    for j, prefix in enumerate(names):
        sel = np.flatnonzero(aid == j)
        if sel.size:
            r = rows[sel]
            b.add_chunks(prefix, flat[sel], kind[sel], pid[sel], offset[r], length[r])


def _inline(value: str, key: str, problems: list[str]) -> bytes:
    v = normalize_value(key, value, problems)
    return v if isinstance(v, bytes) else b""


def _string_members(doc: Doc, members: np.ndarray, b: Builder) -> dict[str, tuple[np.ndarray, InlineBytes]]:
    """Add the string-valued ``members`` to ``b``: metadata and keys outside the chunk grids one by
    one, inline chunks of the grids column-wise (returned per array: flat indices, their bytes)."""
    a, data, text = doc.a, doc.data, doc.text
    kj = doc.first + 2 * members
    ks, ke, vs, ve = doc.s(kj), doc.e(kj), doc.s(kj + 1), doc.e(kj + 1)
    del kj
    problems: list[str] = []

    def value(i: int, base64: bool = True) -> bytes:
        s, e = int(vs[i]), int(ve[i])
        raw = base64_bytes(data, s, e) if base64 else None
        return raw if raw is not None else _inline(text(s, e), text(int(ks[i]), int(ke[i])), problems)

    # metadata first (no metadata key ends with a digit, unless spelled with an escape: checked
    # below), then the chunk keys of the grids it gives
    last = a[np.maximum(ke - 1, 0)]
    chunky = (ke > ks) & (last >= 48) & (last <= 57)
    del last
    add = b.add
    for i in np.flatnonzero(~chunky).tolist():
        add(text(int(ks[i]), int(ke[i])), value(i))
    rows, names, aid, flat = _classify(doc, ks, ke, np.flatnonzero(chunky), b.grids())
    single = chunky.copy()
    single[rows] = False
    items = b.items
    for i in np.flatnonzero(single).tolist():  # scalars' chunks, odd spellings, keys off the grids
        key = text(int(ks[i]), int(ke[i]))
        if key in items or split_metadata_key(key) is not None:
            raise Fallback  # a key given twice, or metadata read after the grids were known
        add(key, value(i))
    inline: dict[str, tuple[np.ndarray, InlineBytes]] = {}
    if rows.size:
        rs, re_ = vs[rows], ve[rows]
        raws = base64_many(doc, rs, re_)
        lens = None if None in raws else base64_lengths(a, rs, re_)
        if lens is None:
            for r in [r for r, x in enumerate(raws) if x is None]:  # inline text that is not base64
                raws[r] = value(int(rows[r]), base64=False)
            lens = np.fromiter(map(len, cast("list[bytes]", raws)), np.int64, len(raws))
        del rs, re_
        # rows grouped by array, in member order within one (a writer's order already is)
        if aid.size < 2 or bool((aid[1:] >= aid[:-1]).all()):
            order = np.arange(aid.size)
        else:
            order = np.argsort(aid, kind="stable")
            raws = [raws[r] for r in order.tolist()]
            lens = lens[order]
        buf, offsets = b"".join(cast("list[bytes]", raws)), offsets_of(lens)
        del raws
        bounds = np.searchsorted(aid[order], np.arange(len(names) + 1)).tolist()
        for j, name in enumerate(names):
            lo, hi = bounds[j], bounds[j + 1]
            f = flat[order[lo:hi]]
            o = offsets[lo:hi + 1]
            inline[name] = (f, InlineBytes.from_buffer(f, o - o[0], buf[int(o[0]):int(o[-1])]))
            _add_inline(b, name, *inline[name])
    if problems:
        raise Fallback
    if inline and _overlap(_named(b, b.grids()), ((p, f) for p, (f, _) in inline.items())):
        raise Fallback  # a chunk given inline twice, spelled two ways: the generic path orders them
    return inline


def _add_inline(b: Builder, path: str, flat: np.ndarray, values: InlineBytes) -> None:
    z = np.zeros(flat.size, np.uint8)
    b.add_chunks(path, flat, np.full(flat.size, INLINE, np.uint8), z, z, z, inline=values)


def _named(b: Builder, grids: Mapping[str, Any], key_batches: bool = False) -> dict[str, np.ndarray]:
    """Flat indices, per array, of the chunks that single keys (and, with ``key_batches``, keys of
    key batches: generated keys) name."""
    found: dict[str, list[np.ndarray]] = {p: [f] for p, (f, _) in route(b.items, grids)[0].items()}
    if key_batches and b.key_batches:
        for _b, _i, path, flat in b.key_batch_hits(KeyRouter(grids)):
            found.setdefault(path, []).append(np.array([flat], np.int64))
    return {p: np.concatenate(f) for p, f in found.items()}


def _overlap(named: Mapping[str, np.ndarray], chunks: Iterable[tuple[str, np.ndarray]]) -> bool:
    """Whether any of ``chunks`` ((array path, flat indices) pairs) is in ``named``."""
    return any(path in named and np.isin(flat, named[path]).any() for path, flat in chunks)


def _listed(batches: list[tuple[Any, ...]]) -> Iterator[tuple[str, np.ndarray]]:
    """(array path, flat indices) of the classified list members of ``batches``."""
    for _m0, _m1, _rows, names, aid, flat in batches:
        for j, path in enumerate(names):
            yield path, flat[aid == j]


def plan_document(data: bytes | bytearray, template_overrides: Mapping[str, str] | None = None,
                  max_gen: int | None = None, limits: Limits = DEFAULT_LIMITS) -> Plan | None:
    """The plan of a JSON document, or None when it needs the generic parser (small, or a shape the
    vectorised reader does not take)."""
    if len(data) < MIN_SIZE:
        return None
    try:
        return Plan(Doc(data), template_overrides, max_gen, limits)
    except Fallback:
        return None
