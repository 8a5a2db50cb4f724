"""Local JSON reference files read straight into combine's columns.

The reference bodies (the ``refs`` object of a Version 1 document, a Version 0 document itself) of a
batch of documents are joined into one text and taken apart as the vectorised JSON reader takes a
large document apart (``formats._jsonplan``): string table, member grammar, chunk key tails, URL runs
and integers are numpy passes over the text. Only string values (metadata, inline data), the first
key of each run of one array's chunk keys and the first URL of each run are decoded one by one. There
is no set, table, dict or Python object per reference.

Anything unusual (Version 1 templates or ``gen``, a value of another form, an input that is not a
local JSON file, a grid with "/"-separated keys, a key given twice...) raises :class:`NotBatch`:
combine then opens each input as a set, whose reader reports problems precisely. What this module
accepts, it reads as that reader does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from refset.formats.json.doc import Doc, base64_bytes, base64_many, member_shape
from refset.formats.json.scan import Fallback, same_spans, skip_ws
from refset.model.fingerprints import KEY as FINGERPRINTS_KEY
from refset.model.fingerprints import Fingerprints, split
from refset.model.inline import InlineBytes
from refset.model.keys import ChunkGrid, flat_of, grid_from_metadata, key_tails, tails_in_grid
from refset.model.metadata import ArrayMetadata
from refset.model.refset import ReferenceSet
from refset.model.stack import META_NAMES, Rows, SetStack
from refset.model.table import INLINE, RANGE, WHOLE, KeyTable, Ref, Row

__all__ = ["read_documents", "NotBatch", "BATCH"]

#: Documents taken apart together (with :data:`BATCH_BYTES`, bounds the temporary memory).
BATCH = 128
BATCH_BYTES = 1 << 25
MEMO_SIZE = 1 << 14  # string values up to this size are decoded once per spelling
_PAD = 16  # spaces before the first body: the 8-byte word reads never start before the text
_WS = b" \t\r\n"
_NOT_WS = re.compile(rb"[^ \t\r\n]")


def _nonspace(data: bytes, lo: int, hi: int) -> int:
    """Position of the first byte of ``data[lo:hi]`` that is not JSON white space."""
    found = _NOT_WS.search(data, lo, hi)
    if found is None:
        raise NotBatch
    return found.start()


class NotBatch(Exception):
    """The inputs need the generic reader."""


def read_documents(items: Sequence[Any], storage_options: Mapping[str, Any]) -> SetStack:
    """The :class:`~refset.model.stack.SetStack` of ``items`` (local JSON reference files, plain or compressed). Raises
    :class:`NotBatch` for anything the generic reader must see.

    The next batch is read from disk and parsed on a helper thread (file reads and most numpy passes
    let go of the GIL) while this one takes the parsed batch apart."""
    from concurrent.futures import ThreadPoolExecutor

    if not items:
        raise NotBatch
    reader = _Reader(len(items))
    with ThreadPoolExecutor(1, thread_name_prefix="refset-read") as ahead:
        job = ahead.submit(_prepare, items, 0, storage_options)
        while True:
            start, stop, parsed = job.result()
            if stop < len(items):
                job = ahead.submit(_prepare, items, stop, storage_options)
            try:
                reader.add(start, parsed)
            except BaseException:
                job.cancel()
                raise
            if stop == len(items):
                break
    return reader.inputs(items, storage_options)


def _prepare(items: Sequence[Any], start: int, so: Mapping[str, Any]) -> tuple[int, int, _Parsed]:
    """Read inputs from ``start`` on (up to :data:`BATCH` of them or :data:`BATCH_BYTES` of text) and
    parse them: (start, stop, parsed)."""
    bodies: list[memoryview] = []
    size, stop = 0, start
    while stop < len(items) and len(bodies) < BATCH and size < BATCH_BYTES:
        bodies.append(_body(items[stop], so))
        size += len(bodies[-1])
        stop += 1
    try:
        try:
            parsed = _parse(bodies)
        except Fallback:  # values the member grammar does not take (JSON objects...): as normal JSON
            parsed = _parse([_normalised(b) for b in bodies])
    except Fallback:
        raise NotBatch from None
    return start, stop, parsed


def _body(x: Any, so: Mapping[str, Any]) -> memoryview:
    """The text of the references object of one input, from its "{" to its "}"."""
    if not isinstance(x, str | os.PathLike):
        raise NotBatch  # sets, dicts, items of JSON lists: as they are
    data = _read(os.fspath(x), so)
    first = _NOT_WS.search(data)
    if first is None:
        raise NotBatch
    lo, hi = first.start(), len(data)
    while data[hi - 1] in _WS:
        hi -= 1
    if data[lo] != 123 or data[hi - 1] != 125:  # { ... }
        raise NotBatch
    if b'"version"' in data:
        lo, hi = _refs_body(data, lo, hi)
    return memoryview(data)[lo:hi]


def _refs_body(data: bytes, lo: int, hi: int) -> tuple[int, int]:
    """Where the ``refs`` object of ``{"version": 1, ..., "refs": {...}}`` (``data[lo:hi]``) lies;
    ``refs`` must be the last member and templates and ``gen`` empty."""
    import msgspec

    at = data.find(b'"refs"', lo, hi)
    if at < 0:
        raise NotBatch
    try:
        head = msgspec.json.decode(data[lo:at] + b'"refs": {}}')
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise NotBatch from None
    if not (isinstance(head, dict) and head.get("refs") == {} and type(head.get("version")) is int
            and head["version"] == 1 and set(head) <= {"version", "refs", "templates", "gen"}
            and head.get("templates", {}) == {} and head.get("gen", []) == []):
        raise NotBatch
    colon = _nonspace(data, at + 6, hi)
    p = _nonspace(data, colon + 1, hi)
    if data[colon] != 58:  # :
        raise NotBatch
    end = hi - 1  # the document's "}"
    while data[end - 1] in _WS:
        end -= 1
    if data[p] != 123 or data[end - 1] != 125 or end - 1 <= p:
        raise NotBatch
    return p, end


def _read(url: str, so: Mapping[str, Any]) -> bytes:
    from refset.io.compression import decompress
    from refset.io.local import is_local, local_path
    from refset.io.magic import GZIP_MAGIC, ZSTD_MAGIC

    if not is_local(url, so):
        raise NotBatch
    try:
        with open(local_path(url), "rb") as f:
            head = f.read(64)
            packed = head[:2] == GZIP_MAGIC or head[:4] == ZSTD_MAGIC
            if not packed and head.lstrip()[:1] != b"{":
                raise NotBatch  # a data file, a packed set...: not read further
            data = head + f.read()
    except OSError:  # a directory (parquet), missing: the generic reader says what it is
        raise NotBatch from None
    if not packed:
        return data
    try:
        return bytes(decompress(data, url))
    except Exception:  # a broken stream: the generic reader names it, in input order
        raise NotBatch from None


class _Reader:
    def __init__(self, n: int) -> None:
        self.n = n
        self.meta: list[dict[str, Ref]] = [{} for _ in range(n)]
        self.grids: list[dict[str, ChunkGrid]] = [{} for _ in range(n)]
        self.url_ids: dict[str, int] = {}
        self.paths: dict[str, int] = {}
        self.parts: dict[int, list[tuple[np.ndarray, ...]]] = {}
        self.inline: dict[int, tuple[list[np.ndarray], list[bytes]]] = {}
        self.count: dict[int, int] = {}
        self.texts: dict[bytes, Any] = {}  # a key's or string value's JSON text: what it reads as
        self.stored: dict[int, list[bytes]] = {}  # per input, the .refset keys (fingerprints) it holds
        self.grid_of: dict[bytes, ChunkGrid | None] = {}

    def add(self, start: int, parsed: _Parsed) -> None:
        """Take the parsed bodies of inputs ``start``, ``start + 1``... apart."""
        doc, owner, cols, (pend, ndim, idx) = parsed
        ks = cols[0]
        owner += start
        try:
            # metadata first (the grids decide which keys are chunks), in member order (the last
            # of a repeated key wins): keys that end in no index; the others are routed
            # column-wise, and what is left one by one
            first = np.flatnonzero(ndim == 0)
            others = self._values(doc, first, owner, cols)
            routed, chunks = self._route(doc, owner, ks, pend, ndim, idx)
            routed[first] = True
            others += self._values(doc, np.flatnonzero(~routed), owner, cols)
            self._keep(doc, owner, cols, chunks, self._chunks(others))
        except Fallback:
            raise NotBatch from None

    def _meta(self, i: int, key: str, value: Ref) -> None:
        self.meta[i][key] = value
        head, _, name = key.rpartition("/")
        if name == "zarr.json":
            raise NotBatch  # zarr v3: the generic path refuses it by name
        if name == ".zarray":
            if not isinstance(value, bytes):
                raise NotBatch
            g = self.grid_of.get(value)
            if g is None:
                g = self.grid_of[value] = grid_from_metadata(".zarray", value)
            if g is None or g.separator != "." or g.prefix:
                raise NotBatch
            self.grids[i][head] = g

    def _values(self, doc: Doc, rows: np.ndarray, owner: np.ndarray, cols: tuple[np.ndarray, ...],
                ) -> list[tuple[int, int, str, Ref]]:
        """Members read one by one as the generic reader reads them: metadata kept, the others
        returned as (member, input, key, value). Keys and string values are decoded once per
        spelling (inputs of one product repeat them)."""
        ks, ke, vs, ve, is_arr, whole, offset, length = cols
        text, data, texts = doc.text, doc.data, self.texts
        out = []
        for m, i, k0, k1, v0, v1 in zip(rows.tolist(), owner[rows].tolist(), ks[rows].tolist(),
                                        ke[rows].tolist(), vs[rows].tolist(), ve[rows].tolist()):
            raw = bytes(data[k0:k1])  # a key of the memo (the batch reads its texts as bytes: no copy)
            key = texts.get(raw)
            if key is None:
                key = texts[raw] = text(k0, k1)
            if is_arr[m]:
                url = text(v0, v1)
                if "{{" in url:
                    raise NotBatch  # a template: Version 1 with templates, or a mistake
                v: Any = (url,) if whole[m] else (url, int(offset[m]), int(length[m]))
            else:
                vraw = bytes(data[v0 - 1:v1]) if v1 - v0 < MEMO_SIZE else None  # with the quote: no key's text
                v = texts.get(vraw) if vraw is not None else None
                if v is None:
                    v = _string(doc, v0, v1, key)
                    if vraw is not None:
                        texts[vraw] = v
            if key.endswith(META_NAMES):
                self._meta(i, key, v)
            elif key == FINGERPRINTS_KEY and isinstance(v, bytes):
                self.stored.setdefault(i, []).append(v)
            else:
                out.append((m, i, key, v))
        return out

    def _chunks(self, values: list[tuple[int, int, str, Ref]]) -> list[tuple[int, int, int, Ref]]:
        """Those of ``values`` that are chunks (the generic reader's routing): (member, path id,
        flat, value)."""
        out = []
        for m, i, key, v in values:
            head, _, tail = key.rpartition("/")
            g = self.grids[i].get(head)
            if g is not None and tail[:1].isdigit():
                f = flat_of(tail.split("."), g.grid_shape) if g.shape else (0 if tail == "0" else -1)
                if f >= 0:
                    out.append((m, self.paths.setdefault(head, len(self.paths)), f, v))
        return out

    def _route(self, doc: Doc, owner: np.ndarray, ks: np.ndarray, pend: np.ndarray, ndim: np.ndarray,
               idx: list[np.ndarray]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """Members whose keys are canonical chunk keys of a known grid, found column-wise (runs of
        one path, key tails): (routed mask, (member, path id, flat))."""
        a = doc.a
        routed = np.zeros(ks.size, bool)
        got = []
        chunky = np.flatnonzero(ndim > 0)
        if chunky.size:
            heads = np.flatnonzero(~same_spans(a, ks[chunky], pend[chunky]))
            pids = []
            for r in chunky[heads].tolist():
                k0, p = int(ks[r]), int(pend[r])
                pids.append(self.paths.setdefault(doc.text(k0, p) if p > k0 else "", len(self.paths)))
            path = np.repeat(np.asarray(pids, np.int64), np.diff(np.append(heads, chunky.size)))
            names = list(self.paths)
            for p in dict.fromkeys(pids):
                sel = chunky[path == p]
                own = owner[sel]
                present = dict.fromkeys(own[np.flatnonzero(np.diff(own, prepend=-1))].tolist())
                shapes: dict[tuple[int, ...], list[int]] = {}
                for i in present:
                    g = self.grids[i].get(names[p])
                    if g is not None and g.ndim:
                        shapes.setdefault(g.grid_shape, []).append(i)
                for shape, inputs in shapes.items():
                    part = sel if len(inputs) == len(present) else sel[np.isin(own, inputs)]
                    part, flat = tails_in_grid(ndim, idx, part, shape)
                    routed[part] = True
                    got.append((part, np.full(part.size, p, np.int64), flat))
        if not got:
            z = np.zeros(0, np.int64)
            return routed, (z, z, z)
        return routed, tuple(np.concatenate(c) for c in zip(*got))

    def _keep(self, doc: Doc, owner: np.ndarray, cols: tuple[np.ndarray, ...],
              chunks: tuple[np.ndarray, ...], more: list[tuple[int, int, int, Ref]]) -> None:
        """Append the chunk rows of a batch to each array's columns (URLs decoded once per run)."""
        _ks, _ke, vs, ve, is_arr, whole, offset, length = cols
        m, path, flat = chunks
        known: dict[int, Ref] = {}
        if more:
            mm, mp, mf, mv = zip(*more)
            m = np.concatenate((m, np.asarray(mm, np.int64)))
            path = np.concatenate((path, np.asarray(mp, np.int64)))
            flat = np.concatenate((flat, np.asarray(mf, np.int64)))
            known = dict(zip(mm, mv))
        if not m.size:
            return
        step = np.diff(path)
        if not ((step > 0) | ((step == 0) & (np.diff(m) > 0))).all():
            order = np.lexsort((m, path))  # per array, in member order (so inputs ascend)
            m, path, flat = m[order], path[order], flat[order]
        lst = is_arr[m]
        kind = np.where(whole[m], WHOLE, RANGE).astype(np.uint8)
        kind[~lst] = INLINE
        off = np.where(lst, offset[m], 0).astype(np.uint64)
        ln = np.where(lst, length[m], 0).astype(np.uint64)
        pid = np.zeros(m.size, np.int64)
        li = np.flatnonzero(lst)
        if li.size:
            us, ue = vs[m[li]], ve[m[li]]
            heads = np.flatnonzero(~same_spans(doc.a, us, ue))
            run_ids = self._url_ids([doc.text(int(us[h]), int(ue[h])) for h in heads.tolist()])
            pid[li] = np.repeat(np.asarray(run_ids, np.int64), np.diff(np.append(heads, li.size)))
        starts = np.flatnonzero(np.diff(path, prepend=-1))
        sizes = np.diff(np.append(starts, m.size))
        base = np.zeros(starts.size, np.int64)
        for g, (s0, n) in enumerate(zip(starts.tolist(), sizes.tolist())):
            p = int(path[s0])
            sel = slice(s0, s0 + n)
            own = owner[m[sel]]
            _check_unique(own, flat[sel])
            base[g] = self.count.get(p, 0) - s0
            self.parts.setdefault(p, []).append((own, flat[sel], kind[sel], pid[sel], off[sel], ln[sel]))
            self.count[p] = self.count.get(p, 0) + n
        si = np.flatnonzero(~lst)
        if si.size:
            at = si + np.repeat(base, sizes)[si]  # each inline row's place among its array's rows
            data = _strings(doc, vs, ve, m[si], known)
            cut = np.flatnonzero(np.diff(path[si])) + 1
            for lo, hi in zip([0, *cut.tolist()], [*cut.tolist(), si.size]):
                rows, values = self.inline.setdefault(int(path[si[lo]]), ([], []))
                rows.append(at[lo:hi])
                values.extend(data[lo:hi])

    def _url_ids(self, urls: Sequence[str]) -> list[int]:
        ids = self.url_ids
        for u in urls:
            if u not in ids:
                if "{{" in u:
                    raise NotBatch
                ids[u] = len(ids)
        return list(map(ids.__getitem__, urls))

    def inputs(self, items: Sequence[Any], so: Mapping[str, Any]) -> SetStack:
        n = self.n
        parts, inline = self.parts, self.inline

        def rows(path: str) -> Rows:
            p = self.paths.get(path)
            got = parts.get(p) if p is not None else None
            if p is None or not got:
                z = np.zeros(0, np.int64)
                return Rows(z, z, z.astype(np.uint8), z, z.astype(np.uint64), z.astype(np.uint64),
                            InlineBytes.empty(), np.zeros(n + 1, np.int64))
            cols = [np.concatenate([g[j] for g in got]) for j in range(6)]
            bounds = np.searchsorted(cols[0], np.arange(n + 1))
            at, values = inline.pop(p, ([], []))  # rows are built once per array: the values move
            store = InlineBytes.from_values(np.concatenate(at), values) if at else InlineBytes.empty()
            return Rows(cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], store, bounds)

        def one_set(i: int) -> ReferenceSet:
            return open_json(os.fspath(items[i]), dict(so))

        fps = [self._fingerprints(i, items[i]) for i in range(n)]
        metadata: list[dict[str, ArrayMetadata]] = []
        for meta, grids in zip(self.meta, self.grids, strict=True):
            arrays = {}
            for head in grids:
                pre = f"{head}/" if head else ""
                attrs = meta.get(pre + ".zattrs")
                doc = meta[pre + ".zarray"]
                assert isinstance(doc, bytes)  # a grid is read from its metadata text
                m = ArrayMetadata.parse(".zarray", doc, attrs if isinstance(attrs, bytes) else None)
                assert m is not None  # its grid was read from the same text
                arrays[head] = m
                for name in m.documents():
                    del meta[pre + name]  # derived from the metadata from now on
            metadata.append(arrays)
        return SetStack([os.fspath(x) for x in items], list(self.url_ids), metadata, self.meta, rows, one_set,
                        fingerprints=fps)

    def _fingerprints(self, i: int, item: Any) -> Fingerprints:
        """Input ``i``'s fingerprints, taken out of its ``.zgroup`` (and ``.refset`` key) as the
        generic reader takes them."""
        meta = self.meta[i]
        stored = self.stored.get(i)
        rows: dict[str, Row] = {FINGERPRINTS_KEY: (INLINE, 0, 0, 0, stored[-1])} if stored else {}
        z = meta.get(".zgroup")
        if isinstance(z, bytes):
            rows[".zgroup"] = (INLINE, 0, 0, 0, z)
        if not rows:
            return Fingerprints.empty()
        other, fps = split(KeyTable.from_items(rows), f"{os.fspath(item)}")
        if isinstance(z, bytes):
            meta[".zgroup"] = other.data[other.find(".zgroup")]
        return fps


def open_json(path: str, storage_options: dict[str, Any]) -> ReferenceSet:
    """One input of a batch as a set of its own (a batch's inputs are JSON reference files), which
    pickles as its path."""
    from refset.formats.json.read import read_json
    from refset.io.local import local_path

    path = os.path.abspath(local_path(path))  # reopened by a Dask worker from any directory
    return ReferenceSet(read_json(path, storage_options=storage_options),
                        origin=(open_json, (path, storage_options), {}))


_Parsed = tuple[Doc, np.ndarray, tuple[np.ndarray, ...], tuple[Any, ...]]


def _parse(bodies: list[memoryview]) -> _Parsed:
    """The string table of the bodies joined, the body of each member, the members' parts
    (:func:`member_shape`) and their key tails (:func:`key_tails`); Fallback when a body is no flat
    object of string and list values."""
    sizes = np.fromiter(map(len, bodies), np.int64, len(bodies))
    pad = b" " * (_PAD - 1)
    text = b" ".join([pad, *bodies, pad])
    begin = _PAD + np.concatenate(([0], np.cumsum(sizes[:-1] + 1)))
    end = begin + sizes
    doc = Doc(text)
    a = doc.a
    # the strings of each body alternate key, value: a value holds one string (a list its URL)
    first = np.searchsorted(doc.q[0::2], begin)
    nstr = np.diff(np.append(first, doc.nstr))
    if (nstr % 2).any():
        raise Fallback
    owner = np.repeat(np.arange(len(begin)), nstr // 2)
    doc.members = members = doc.nstr // 2
    filled = nstr > 0
    if (skip_ws(a, begin[filled] + 1, 1) != doc.q[2 * first[filled]]).any():
        raise Fallback  # "{" and the first key's quote
    for b, e in zip(begin[~filled].tolist(), end[~filled].tolist()):
        if text[b + 1 : e - 1].strip(_WS):
            raise Fallback
    more = np.zeros(members, bool)
    more[:-1] = owner[1:] == owner[:-1]
    parts = member_shape(doc, np.arange(members), more)
    term = parts[-1]
    if (term[~more] != end[owner[~more]] - 1).any():
        raise Fallback  # a body's last member ends at its "}"
    ks, ke = parts[0], parts[1]
    return doc, owner, parts[:-1], key_tails(doc.W, a, ks, ke)


def _normalised(body: memoryview) -> memoryview:
    """``body`` parsed and written again as compact JSON, JSON objects (metadata) as their text."""
    import msgspec

    from refset.formats.json.v0 import normalize_value

    try:
        refs = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        raise NotBatch from None
    if not isinstance(refs, dict):
        raise NotBatch
    problems: list[str] = []
    for k, v in refs.items():
        if isinstance(v, dict):
            text = normalize_value(k, v, problems)
            if problems or not isinstance(text, bytes):
                raise NotBatch
            refs[k] = text.decode("utf-8")
    return memoryview(msgspec.json.encode(refs))


def _string(doc: Doc, s: int, e: int, key: str | None) -> bytes:
    """The bytes of the string value spanning ``s:e`` (base64 data decoded), as the generic reader
    reads it."""
    from refset.formats.json.v0 import normalize_value

    v = base64_bytes(doc.data, s, e)
    if v is None:
        problems: list[str] = []
        v = normalize_value(key or "", doc.text(s, e), problems)  # type: ignore[assignment]
        if problems or not isinstance(v, bytes):
            raise NotBatch
    return v


def _strings(doc: Doc, vs: np.ndarray, ve: np.ndarray, rows: np.ndarray, known: Mapping[int, Any],
             ) -> list[bytes]:
    """The bytes of the string values of members ``rows`` (``known``: those already read)."""
    s, e = vs[rows], ve[rows]
    if not known:
        out: list[Any] = base64_many(doc, s, e)
    else:
        out = [None] * rows.size
        have = np.isin(rows, np.fromiter(known, np.int64, len(known)))
        for j in np.flatnonzero(have).tolist():
            out[j] = known[int(rows[j])]
        rest = np.flatnonzero(~have)
        for j, v in zip(rest.tolist(), base64_many(doc, s[rest], e[rest]), strict=True):
            out[j] = v
    for j in [j for j, v in enumerate(out) if v is None]:
        out[j] = _string(doc, int(s[j]), int(e[j]), None)
    return out


def _check_unique(owner: np.ndarray, flat: np.ndarray) -> None:
    """A chunk given twice by one input (a key repeated, or spelled twice): the generic reader
    keeps the last, as JSON parsers do."""
    if owner.size < 2:
        return
    lo = int(owner[0])
    span = int(flat.max()) + 1
    if (int(owner[-1]) - lo + 1) * span <= 1 << 22:
        repeated = np.bincount((owner - lo) * span + flat).max() > 1
    else:
        order = np.lexsort((flat, owner))
        repeated = ((np.diff(owner[order]) == 0) & (np.diff(flat[order]) == 0)).any()
    if repeated:
        raise NotBatch
