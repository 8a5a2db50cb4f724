"""Local JSON reference files read straight into combine's columns.

Documents are parsed with msgspec a batch at a time, their values left as JSON text; each distinct
key is classified once (kerchunk's single-file sets of one product repeat the same keys); the
``["url", offset, length]`` values of a batch are taken apart by numpy passes over their text, and
only metadata and inline values are looked at one by one. There is no set, table or numpy call per
input, and a batch's parsed objects are dropped before the next is parsed.

Anything unusual (Version 1 templates or ``gen``, a value of another form, an input that is not a
local JSON file, a grid with "/"-separated keys...) raises :class:`NotBatch`: combine then opens each
input as a set, whose reader reports problems precisely. What this module accepts, it reads as that
reader does.
"""

from __future__ import annotations

import binascii
import os
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from ..builder import dotted_flat
from ..formats._jsonscan import Fallback, digits_end, parse_uints, same_spans, skip_ws, words
from ..keys import ChunkGrid, grid_from_metadata
from ..model import ReferenceSet
from ..tables import INLINE, RANGE, WHOLE, Ref
from ._inputs import META_NAMES, Inputs, Rows

__all__ = ["read_documents", "NotBatch", "BATCH"]

#: Documents parsed before their values are taken apart (bounds the Python objects alive at once).
BATCH = 128


class NotBatch(Exception):
    """The inputs need the generic reader."""


def read_documents(items: Sequence[Any], storage_options: Mapping[str, Any]) -> Inputs:
    """The :class:`Inputs` of ``items`` (local JSON reference files, plain or compressed). Raises
    :class:`NotBatch` for anything the generic reader must see."""
    reader = _Reader(len(items))
    for start in range(0, len(items), BATCH):
        part = items[start:start + BATCH]
        reader.add(start, [_document(x, storage_options) for x in part])
    return reader.inputs(items, storage_options)


def _document(x: Any, so: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``refs`` of one input: its keys, each with its value's JSON text (``msgspec.Raw``)."""
    import msgspec

    if not isinstance(x, str | os.PathLike):
        raise NotBatch  # sets, dicts, items of JSON lists: as they are
    doc = _raw_object(_read(os.fspath(x), so))
    if "version" not in doc:
        return doc
    try:
        version = msgspec.json.decode(doc["version"])
        extra = {k: msgspec.json.decode(v) for k, v in doc.items() if k not in ("version", "refs")}
    except msgspec.DecodeError:
        raise NotBatch from None
    if version != 1 or type(version) is not int or set(extra) - {"templates", "gen"} or any(
            extra.values()) or "refs" not in doc:
        raise NotBatch
    return _raw_object(doc["refs"])


def _raw_object(data: Any) -> dict[str, Any]:
    """A JSON object's members, their values as JSON text."""
    import msgspec

    try:
        return msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise NotBatch from None


def _read(url: str, so: Mapping[str, Any]) -> bytes:
    from ..formats._io import decompress, is_local, local_path

    if not is_local(url, so):
        raise NotBatch
    try:
        with open(local_path(url), "rb") as f:
            head = f.read(64)
            packed = head[:2] in (b"\x1f\x8b", b"\x28\xb5")
            if not packed and head.lstrip()[:1] != b"{":
                raise NotBatch  # a data file, a packed set...: not read further
            data = head + f.read()
    except OSError:  # a directory (parquet), missing: the generic reader says what it is
        raise NotBatch from None
    return bytes(decompress(data, url)) if packed else data


class _Reader:
    def __init__(self, n: int) -> None:
        self.n = n
        self.meta: list[dict[str, Ref]] = [{} for _ in range(n)]
        self.grids: list[dict[str, ChunkGrid]] = [{} for _ in range(n)]
        self.url_ids: dict[str, int] = {}
        # distinct keys: id -> path id (-1: no chunk key) and the key's tail after the path
        self.key_ids: dict[str, int] = {}
        self.key_path: list[int] = []
        self.key_tail: list[str] = []
        self.paths: dict[str, int] = {}
        self.flat_cache: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
        self.parts: dict[int, list[tuple[np.ndarray, ...]]] = {}
        self.inline: dict[int, dict[int, bytes]] = {}
        self.count: dict[int, int] = {}

    def _new_keys(self, keys: list[str]) -> None:
        for k in keys:
            if k in self.key_ids:
                continue
            if type(k) is not str:
                raise NotBatch
            self.key_ids[k] = len(self.key_ids)
            head, _, tail = k.rpartition("/")
            # a chunk key candidate as the generic reader routes them (its grid decides: dotted_flat)
            self.key_path.append(self.paths.setdefault(head, len(self.paths)) if tail[:1].isdigit() else -1)
            self.key_tail.append(tail)

    def _flat(self, p: int, shape: tuple[int, ...]) -> np.ndarray:
        """Flat index of every known key in a grid of ``shape`` for array ``p`` (-1: not its chunk)."""
        nk = len(self.key_path)
        got = self.flat_cache.get((p, shape))
        if got is not None and len(got) == nk:
            return got
        out = np.full(nk, -1, np.int64)
        new = [kid for kid in range(0 if got is None else len(got), nk) if self.key_path[kid] == p]
        if new:
            out[new] = dotted_flat([self.key_tail[kid] for kid in new], shape)
        if got is not None:
            out[:len(got)] = got
        self.flat_cache[(p, shape)] = out
        return out

    def add(self, start: int, docs: list[Mapping[str, Any]]) -> None:
        keys: list[str] = []
        vals: list[Any] = []
        counts = []
        for refs in docs:
            keys.extend(refs)
            vals.extend(refs.values())
            counts.append(len(refs))
        del docs
        got = list(map(self.key_ids.get, keys))
        if None in got:
            self._new_keys(keys)
            got = list(map(self.key_ids.__getitem__, keys))
        kid = np.fromiter(got, np.int64, len(got))
        owner = np.repeat(np.arange(start, start + len(counts), dtype=np.int64), counts)
        kpath = np.asarray(self.key_path, np.int64)[kid]
        # metadata first: the grids say which keys are chunk keys
        rest = np.flatnonzero(kpath < 0)
        self._others(rest, keys, vals, owner)
        flat = np.full(len(kid), -1, np.int64)
        cand = np.flatnonzero(kpath >= 0)
        if cand.size:
            names = list(self.paths)
            for p in np.unique(kpath[cand]).tolist():
                sel = cand[kpath[cand] == p]
                shapes: dict[tuple[int, ...], list[int]] = {}
                for i in range(start, start + len(counts)):
                    g = self.grids[i].get(names[p])
                    if g is not None:
                        shapes.setdefault(g.grid_shape, []).append(i)
                for shape, members in shapes.items():
                    part = sel if len(shapes) == 1 and len(members) == len(counts) else sel[
                        np.isin(owner[sel], members)]
                    flat[part] = self._flat(p, shape)[kid[part]]
        chunk = flat >= 0
        self._others(np.flatnonzero(~chunk & (kpath >= 0)), keys, vals, owner)
        rows = np.flatnonzero(chunk)
        if rows.size:
            picked = itemgetter(*rows.tolist())(vals)
            self._chunks(rows, kpath[rows], flat[rows], owner[rows], list(picked) if rows.size > 1 else [picked])

    def _others(self, rows: np.ndarray, keys: list[str], vals: list[Any], owner: np.ndarray) -> None:
        """Keys that are no chunk keys: checked as the generic reader checks them; metadata kept."""
        import msgspec

        from ..formats._json_v0 import normalize_value

        problems: list[str] = []
        for r, i in zip(rows.tolist(), owner[rows].tolist(), strict=True):
            k = keys[r]
            try:
                v = normalize_value(k, msgspec.json.decode(vals[r]), problems)
            except msgspec.DecodeError:
                raise NotBatch from None
            if problems:
                raise NotBatch
            if k.endswith(META_NAMES):
                self.meta[i][k] = v  # type: ignore[assignment]
                head, _, name = k.rpartition("/")
                if name == "zarr.json":
                    raise NotBatch  # zarr v3: the generic path refuses it by name
                if name == ".zarray":
                    if not isinstance(v, bytes):
                        raise NotBatch
                    g = grid_from_metadata(".zarray", v)
                    if g is None or g.separator != "." or g.prefix:
                        raise NotBatch
                    self.grids[i][head] = g

    def _url_ids(self, urls: Sequence[str]) -> list[int]:
        ids = self.url_ids
        for u in dict.fromkeys(urls):
            if u not in ids:
                if "{{" in u:
                    raise NotBatch
                ids[u] = len(ids)
        return list(map(ids.__getitem__, urls))

    def _chunks(self, rows: np.ndarray, path: np.ndarray, flat: np.ndarray, owner: np.ndarray,
                vals: list[Any]) -> None:
        """Chunk references from their values' JSON text (valid JSON: msgspec checked it):
        ``["url", offset, length]`` and ``["url"]`` taken apart by numpy passes over the text of all
        of them, strings (inline data) one by one; anything else raises NotBatch."""
        n = len(vals)
        if not n:
            return
        size = np.fromiter(map(len, vals), np.int64, n)
        text = b" " * 16 + b"".join(vals) + b" " * 24  # room for the 8-byte word reads
        del vals
        a = np.frombuffer(text, np.uint8)
        end = 16 + np.cumsum(size)  # each value's end (exclusive)
        start = end - size
        q = np.flatnonzero(a == 34)  # quotes
        lo = np.searchsorted(q, start)
        quotes = np.searchsorted(q, end) - lo
        if b"\\" in text:
            bs = np.flatnonzero(a == 92)
            escaped = np.searchsorted(bs, end) - np.searchsorted(bs, start)
        else:
            escaped = np.zeros(n, np.int64)
        head = a[start]
        is_list = head == 91  # [
        is_str = head == 34  # "
        if not (is_list | is_str).all():
            raise NotBatch  # numbers, objects...: the generic reader says what they are
        kind = np.full(n, INLINE, np.uint8)
        pid = np.zeros(n, np.int64)
        off = np.zeros(n, np.uint64)
        ln = np.zeros(n, np.uint64)
        li = np.flatnonzero(is_list)
        if li.size:
            if (quotes[li] != 2).any() or escaped[li].any():
                raise NotBatch  # other strings than the URL, escapes
            us, ue = q[lo[li]] + 1, q[lo[li] + 1]
            k, p, o, s = self._lists(text, a, us, ue, end[li])
            kind[li], pid[li], off[li], ln[li] = k, p, o, s
        inline: dict[int, bytes] = {}
        si = np.flatnonzero(is_str)
        for r, x, y, esc in zip(si.tolist(), start[si].tolist(), end[si].tolist(), escaped[si].tolist()):
            inline[r] = _inline(text[x:y], bool(esc))
        order = np.argsort(path, kind="stable")
        cuts = np.flatnonzero(np.diff(path[order])) + 1
        bases = {}
        for grp in np.split(order, cuts):
            p = int(path[grp[0]])
            bases[p] = self.count.get(p, 0)
            self.parts.setdefault(p, []).append((owner[grp], flat[grp], kind[grp], pid[grp], off[grp], ln[grp]))
            self.count[p] = bases[p] + len(grp)
        if inline:  # each inline row's place among its array's rows
            starts = np.concatenate(([0], cuts))
            place = np.empty(n, np.int64)
            place[order] = np.arange(n) - np.repeat(starts, np.diff(np.concatenate((starts, [n]))))
            for r, p, j in zip(inline, path[si].tolist(), place[si].tolist()):
                self.inline.setdefault(p, {})[bases[p] + j] = inline[r]

    def _lists(self, text: bytes, a: np.ndarray, us: np.ndarray, ue: np.ndarray, end: np.ndarray,
               ) -> tuple[np.ndarray, ...]:
        """(kind, url id, offset, length) of list values whose one string (the URL, no escapes) spans
        ``us:ue`` and which end at ``end``."""
        n = len(us)
        if not (a[us - 1] == 34).all() or not (a[us - 2] == 91).all():
            raise NotBatch  # whitespace before the URL
        W = words(text)
        try:
            p = skip_ws(a, ue + 1, 1)
            three = a[p] == 44  # ,
            if not (three | (p == end - 1)).all():
                raise NotBatch
            r = np.flatnonzero(three)
            s1 = skip_ws(a, p[r] + 1, 1)
            e1 = digits_end(W, a, s1)
            offset = parse_uints(W, a, s1, e1)
            c2 = skip_ws(a, e1, 1)
            s2 = skip_ws(a, c2 + 1, 1)
            e2 = digits_end(W, a, s2)
            length = parse_uints(W, a, s2, e2)
            if not ((a[c2] == 44).all() and (skip_ws(a, e2, 1) == end[r] - 1).all()):
                raise NotBatch
            same = same_spans(a, us, ue)
        except Fallback:
            raise NotBatch from None
        heads = np.flatnonzero(~same)
        try:
            urls = [text[i:j].decode("utf-8") for i, j in zip(us[heads].tolist(), ue[heads].tolist())]
        except UnicodeDecodeError:
            raise NotBatch from None
        pid = np.asarray(self._url_ids(urls), np.int64)[np.cumsum(~same) - 1]
        kind = np.where(three, RANGE, WHOLE).astype(np.uint8)
        off = np.zeros(n, np.uint64)
        ln = np.zeros(n, np.uint64)
        off[r], ln[r] = offset, length
        return kind, pid, off, ln

    def inputs(self, items: Sequence[Any], so: Mapping[str, Any]) -> Inputs:
        n = self.n
        parts, inline = self.parts, self.inline

        def rows(path: str) -> Rows:
            p = self.paths.get(path)
            got = parts.get(p) if p is not None else None
            if not got:
                z = np.zeros(0, np.int64)
                return Rows(z, z, z.astype(np.uint8), z, z.astype(np.uint64), z.astype(np.uint64), {},
                            np.zeros(n + 1, np.int64))
            cols = [np.concatenate([g[j] for g in got]) for j in range(6)]
            bounds = np.searchsorted(cols[0], np.arange(n + 1))
            return Rows(*cols, inline.get(p, {}), bounds)  # type: ignore[arg-type]

        def one_set(i: int) -> ReferenceSet:
            from . import open_input

            return open_input(items[i], i, storage_options=so)[0]

        return Inputs([os.fspath(x) for x in items], list(self.url_ids), self.meta, self.grids, rows, one_set)


def _inline(text: bytes, escaped: bool) -> bytes:
    """The bytes of a JSON string value (its text, quotes included): base64 data or the string."""
    if escaped:
        import msgspec

        raw = msgspec.json.decode(text).encode("utf-8")
    else:
        raw = text[1:-1]
    if raw.startswith(b"base64:"):
        try:
            return binascii.a2b_base64(raw[7:], strict_mode=True)
        except (binascii.Error, ValueError):
            raise NotBatch from None  # the generic reader's rules decide
    return raw
