"""Reference documents (local JSON files, dicts) read straight into combine's columns.

Documents are parsed with msgspec a batch at a time; each distinct key is classified once (kerchunk's
single-file sets of one product repeat the same keys), the values of a batch are taken apart in
C-level passes (``map``/``itemgetter``/``np.fromiter``), and only metadata and inline values are
looked at one by one. There is no set, table or numpy call per input, and a batch's Python objects
are dropped before the next is parsed.

Anything unusual (Version 1 templates or ``gen``, a value of another form, a non-local or non-JSON
input, a grid with "/"-separated keys...) raises :class:`NotBatch`: combine then opens each input as a
set, whose reader reports problems precisely. What this module accepts, it reads as that reader does.
"""

from __future__ import annotations

import binascii
import os
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from ..keys import ChunkGrid, grid_from_metadata
from ..model import ReferenceSet
from ..tables import INLINE, MAX_END, RANGE, WHOLE, Ref
from ._inputs import META_NAMES, Inputs, Rows

__all__ = ["read_documents", "NotBatch", "BATCH"]

#: Documents parsed before their values are taken apart (bounds the Python objects alive at once).
BATCH = 128


class NotBatch(Exception):
    """The inputs need the generic reader."""


def read_documents(items: Sequence[Any], storage_options: Mapping[str, Any]) -> Inputs:
    """The :class:`Inputs` of ``items`` (local JSON reference files, dicts, items of JSON lists).
    Raises :class:`NotBatch` for anything the generic reader must see."""
    reader = _Reader(len(items))
    for start in range(0, len(items), BATCH):
        part = items[start:start + BATCH]
        reader.add(start, [_document(x, storage_options) for x in part])
    return reader.inputs(items, storage_options)


def _document(x: Any, so: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``refs`` mapping of one input."""
    from . import ListItem

    if isinstance(x, ListItem):
        doc = x.doc
    elif isinstance(x, Mapping) and not isinstance(x, ReferenceSet):
        doc = x
    elif isinstance(x, str | os.PathLike):
        doc = _read(os.fspath(x), so)
    else:
        raise NotBatch
    if "version" in doc:
        extra = set(doc) - {"version", "refs", "templates", "gen"}
        if doc.get("version") != 1 or extra or doc.get("templates") or doc.get("gen"):
            raise NotBatch
        doc = doc.get("refs")
        if not isinstance(doc, dict):
            raise NotBatch
    return doc


def _read(url: str, so: Mapping[str, Any]) -> Mapping[str, Any]:
    import msgspec

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
    if packed:
        data = decompress(data, url)
        if data.lstrip()[:1] != b"{":
            raise NotBatch
    try:
        doc = msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise NotBatch from None
    if not isinstance(doc, dict):
        raise NotBatch
    return doc


def _chunk_index(key: str) -> tuple[str, tuple[int, ...]] | None:
    """``"a/b/1.2"`` -> ``("a/b", (1, 2))``; None for a key that is no "."-separated chunk key."""
    head, _, tail = key.rpartition("/")
    parts = tail.split(".")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return head, tuple(int(p) for p in parts)


class _Reader:
    def __init__(self, n: int) -> None:
        self.n = n
        self.meta: list[dict[str, Ref]] = [{} for _ in range(n)]
        self.grids: list[dict[str, ChunkGrid]] = [{} for _ in range(n)]
        self.url_ids: dict[str, int] = {}
        self.input_urls: list[set[int]] = [set() for _ in range(n)]
        # distinct keys: id -> path id (-1: not a chunk key) and chunk index
        self.key_ids: dict[str, int] = {}
        self.key_path: list[int] = []
        self.key_index: list[tuple[int, ...]] = []
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
            hit = _chunk_index(k)
            if hit is None:
                self.key_path.append(-1)
                self.key_index.append(())
            else:
                self.key_path.append(self.paths.setdefault(hit[0], len(self.paths)))
                self.key_index.append(hit[1])

    def _flat(self, p: int, shape: tuple[int, ...]) -> np.ndarray:
        """Flat index of every known key in a grid of ``shape`` for array ``p`` (-1: not its chunk)."""
        nk = len(self.key_path)
        got = self.flat_cache.get((p, shape))
        if got is not None and len(got) == nk:
            return got
        out = np.full(nk, -1, np.int64)
        for kid in range(0 if got is None else len(got), nk):
            if self.key_path[kid] != p:
                continue
            idx = self.key_index[kid]
            if not shape:
                out[kid] = 0 if idx == (0,) else -1
            elif len(idx) == len(shape) and all(i < s for i, s in zip(idx, shape)):
                out[kid] = int(np.ravel_multi_index(idx, shape))
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
        self._chunks(rows, kpath[rows], flat[rows], owner[rows], [vals[r] for r in rows.tolist()])

    def _others(self, rows: np.ndarray, keys: list[str], vals: list[Any], owner: np.ndarray) -> None:
        """Keys that are no chunk keys: checked as the generic reader checks them; metadata kept."""
        from ..formats._json_v0 import normalize_value

        problems: list[str] = []
        for r, i in zip(rows.tolist(), owner[rows].tolist(), strict=True):
            k = keys[r]
            v = normalize_value(k, vals[r], problems)
            if problems:
                raise NotBatch
            if isinstance(v, tuple):
                self.input_urls[i].add(self._url_ids([v[0]])[0])
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
                if type(u) is not str or "{{" in u:
                    raise NotBatch
                ids[u] = len(ids)
        return list(map(ids.__getitem__, urls))

    def _chunks(self, rows: np.ndarray, path: np.ndarray, flat: np.ndarray, owner: np.ndarray,
                vals: list[Any]) -> None:
        n = len(vals)
        tid = np.fromiter(map(id, map(type, vals)), np.uint64, n)
        is_list = tid == id(list)
        is_str = tid == id(str)
        if not (is_list | is_str).all():
            raise NotBatch
        kind = np.full(n, INLINE, np.uint8)
        pid = np.zeros(n, np.int64)
        off = np.zeros(n, np.uint64)
        ln = np.zeros(n, np.uint64)
        li = np.flatnonzero(is_list)
        lists = [vals[r] for r in li.tolist()]
        sizes = np.fromiter(map(len, lists), np.int64, len(lists))
        three = sizes == 3
        if not ((sizes == 1) | three).all():
            raise NotBatch
        urls = list(map(itemgetter(0), lists))
        ids = np.asarray(self._url_ids(urls), np.int64)
        pid[li] = ids
        kind[li] = np.where(three, RANGE, WHOLE)
        if three.any():
            l3 = [lists[j] for j in np.flatnonzero(three).tolist()] if not three.all() else lists
            o = list(map(itemgetter(1), l3))
            s = list(map(itemgetter(2), l3))
            if set(map(type, o)) | set(map(type, s)) != {int}:
                raise NotBatch
            try:
                oa = np.fromiter(o, np.int64, len(o))
                sa = np.fromiter(s, np.int64, len(s))
            except OverflowError:
                raise NotBatch from None
            if (oa < 0).any() or (sa < 0).any() or ((MAX_END - 1 - oa) < sa).any():
                raise NotBatch
            at = li[three]
            off[at] = oa
            ln[at] = sa
        own_ids = owner[li]
        for i, u in set(zip(own_ids.tolist(), ids.tolist())):
            self.input_urls[i].add(u)
        inline: dict[int, bytes] = {}
        for r in np.flatnonzero(is_str).tolist():
            inline[r] = _inline(vals[r])
        del vals, lists
        order = np.argsort(path, kind="stable")
        cuts = np.flatnonzero(np.diff(path[order])) + 1
        for grp in np.split(order, cuts) if n else []:
            p = int(path[grp[0]])
            base = self.count.get(p, 0)
            self.parts.setdefault(p, []).append((owner[grp], flat[grp], kind[grp], pid[grp], off[grp], ln[grp]))
            if inline:
                target = self.inline.setdefault(p, {})
                for j, r in enumerate(grp.tolist()):
                    b = inline.get(r)
                    if b is not None:
                        target[base + j] = b
            self.count[p] = base + len(grp)

    def inputs(self, items: Sequence[Any], so: Mapping[str, Any]) -> Inputs:
        from . import ListItem

        urls = list(self.url_ids)
        names = []
        for i, x in enumerate(items):
            if isinstance(x, str | os.PathLike):
                names.append(os.fspath(x))
            elif len(self.input_urls[i]) == 1:
                names.append(urls[next(iter(self.input_urls[i]))])
            else:
                names.append(x.name if isinstance(x, ListItem) else f"input {i}")
        paths = list(self.paths)
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

        del paths
        return Inputs(names, urls, self.meta, self.grids, rows, one_set)


def _inline(v: str) -> bytes:
    if v.startswith("base64:"):
        try:
            return binascii.a2b_base64(v[7:], strict_mode=True)
        except (binascii.Error, ValueError):
            raise NotBatch from None  # the generic reader's rules decide
    return v.encode("utf-8")
