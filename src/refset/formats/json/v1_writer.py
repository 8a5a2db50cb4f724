"""Writing Version 1: repeated URLs become ``templates``; with ``gen=True``, regular runs of chunks
become ``gen`` entries.

Each device is used only where it makes the output smaller:
- a URL referenced by many keys is written once as a template and referred to as ``{{name}}``;
- (``gen=True``) a run of consecutive chunks (C order) in one file, with one length and each chunk
  starting where the previous one ends, becomes one ``gen`` entry over the run's flat chunk index ``i``.

The default output uses only what fsspec's ``ReferenceFileSystem`` reads with its default settings
(``simple_templates=True`` drops ``gen`` silently); output with ``gen`` needs
``simple_templates=False`` there.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping
from typing import Any

import numpy as np

from refset.errors import Unsupported
from refset.io.atomic import write_bytes
from refset.io.compression import compress
from refset.model.keys import array_key
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, RANGE, WHOLE, encode_inline

__all__ = ["dumps_v1", "v1_document", "write_v1"]

MIN_RUN = 3  # shorter runs never pay for a gen entry
GEN_OVERHEAD = 110  # bytes of a gen entry besides its key, url and expressions
_ALPHA = string.ascii_letters
_ALNUM = string.ascii_letters + string.digits


def _name(n: int) -> str:
    """Short identifiers: a..Z, then aa, ab, ... (jinja names: letter first)."""
    head, n = _ALPHA[n % len(_ALPHA)], n // len(_ALPHA)
    tail = ""
    while n:
        n -= 1
        tail = _ALNUM[n % len(_ALNUM)] + tail
        n //= len(_ALNUM)
    return head + tail


def _escape(url: str) -> str:
    """A URL as a jinja string that renders to itself."""
    if "{{" in url:
        return "{% raw %}" + url + "{% endraw %}"
    return url


def _url_names(urls: list[str], uses: np.ndarray) -> dict[int, str]:
    """Template names for URLs whose repetition costs more than a template would."""
    out: dict[int, str] = {}
    for pid in np.argsort(-uses, kind="stable").tolist():
        url, n = urls[pid], int(uses[pid])
        if "{{" in url or "{%" in url or "{#" in url:
            continue
        name = _name(len(out) + (len(out) >= 8))  # never "i", the gen dimension
        saved = n * (len(url) - len(name) - 4) - (len(url) + len(name) + 6)
        if saved <= 0:
            break
        out[pid] = name
    return out


def _key_template(path: str, grid: Any) -> str:
    """Jinja key of the chunk with flat index ``i`` of an array with this grid."""
    gs = grid.grid_shape
    parts = []
    for d in range(len(gs)):
        inner = int(np.prod(gs[d + 1 :], dtype=np.int64))
        expr = "i" if inner == 1 else f"i // {inner}"
        if d > 0:
            expr = f"({expr}) % {gs[d]}" if inner != 1 else f"i % {gs[d]}"
        parts.append("{{" + expr + "}}")
    return array_key(path, grid.key_head + grid.separator.join(parts))


def _runs(flat: np.ndarray, kind: np.ndarray, pid: np.ndarray, off: np.ndarray,
          ln: np.ndarray) -> np.ndarray:
    """(start, stop) positions (into the entries) of regular runs of at least MIN_RUN range
    references at consecutive flat indices."""
    n = kind.shape[0]
    if n < MIN_RUN:
        return np.zeros((0, 2), np.int64)
    rng = kind == RANGE
    o = off.astype(np.int64)
    n_ = ln.astype(np.int64)
    cont = (rng[1:] & rng[:-1] & (flat[1:] == flat[:-1] + 1) & (pid[1:] == pid[:-1])
            & (n_[1:] == n_[:-1]) & (o[1:] == o[:-1] + n_[:-1]))
    # runs of True in cont: entries s..e are one regular run when cont[s:e] all True
    edges = np.diff(np.concatenate(([0], cont.view(np.int8), [0])))
    starts = np.flatnonzero(edges == 1)
    stops = np.flatnonzero(edges == -1) + 1
    keep = stops - starts >= MIN_RUN
    return np.stack([starts[keep], stops[keep]], axis=1)


def _run_mask(n: int, runs: np.ndarray) -> np.ndarray:
    """Boolean mask of the entries inside the (start, stop) runs."""
    edges = np.zeros(n + 1, np.int8)
    np.add.at(edges, runs[:, 0], 1)
    np.add.at(edges, runs[:, 1], -1)
    return np.cumsum(edges[:-1]) > 0


def _paying_runs(
    urls: tuple[str, ...], entries: Mapping[str, tuple[np.ndarray, ...]], ndims: dict[str, int],
    runs: dict[str, np.ndarray], names: dict[int, str],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Keep the runs whose gen entry is shorter than the reference lines it replaces."""
    url_len = np.array([len(names[i]) + 4 if i in names else len(u) for i, u in enumerate(urls)]
                       or [0], np.int64)
    kept: dict[str, np.ndarray] = {}
    in_run: dict[str, np.ndarray] = {}
    for path, r in runs.items():
        _f, _k, pid, off, ln = entries[path]
        key_len = len(path) + 2 + 3 * max(ndims[path], 1)
        n = r[:, 1] - r[:, 0]
        first = r[:, 0]
        ul = url_len[pid[first].astype(np.int64)] if len(r) else np.zeros(0, np.int64)
        digits = np.char.str_len(off[first].astype(str)) + np.char.str_len(
            ln[first].astype(str)) if len(r) else np.zeros(0, np.int64)
        line = key_len + ul + digits + 12
        gen = GEN_OVERHEAD + 2 * key_len + ul + 2 * digits
        r = kept[path] = r[n * line > gen]
        in_run[path] = _run_mask(len(pid), r)
    return kept, in_run


def v1_document(rs: ReferenceSet, *, gen: bool = False) -> dict[str, Any]:
    """The Version 1 document of ``rs``: URL templates where they pay, and (``gen=True``) gen entries
    for regular runs of chunks."""
    entries = {p: rs.table(p).entries() for p in rs.grids}
    urls = rs.urls  # after the tables: final
    uses = np.zeros(len(urls), np.int64)
    o = rs.stored_key_table()  # the keys, and the fingerprints where other readers do not look
    refd = (o.kind == RANGE) | (o.kind == WHOLE)
    np.add.at(uses, o.path_id[refd].astype(np.int64), 1)
    runs: dict[str, np.ndarray] = {}
    in_run: dict[str, np.ndarray] = {}
    for path, (f, kind, pid, off, ln) in entries.items():
        r = runs[path] = _runs(f, kind, pid, off, ln) if gen else np.zeros((0, 2), np.int64)
        in_run[path] = _run_mask(len(f), r)
        refd = ((kind == RANGE) | (kind == WHOLE)) & ~in_run[path]
        np.add.at(uses, pid[refd].astype(np.int64), 1)
        np.add.at(uses, pid[r[:, 0]].astype(np.int64), 1)
    names = _url_names(list(urls), uses)
    if gen:
        runs, in_run = _paying_runs(urls, entries, {p: g.ndim for p, g in rs.grids.items()}, runs, names)
    spelled = [("{{" + names[i] + "}}") if i in names else _escape(u) for i, u in enumerate(urls)]
    refs: dict[str, Any] = {}

    def put(keys: list[str], kind: np.ndarray, pid: np.ndarray, off: np.ndarray, ln: np.ndarray,
            data: list[bytes | None]) -> None:
        for key, k, p, of, n, d in zip(keys, kind.tolist(), pid.tolist(), off.tolist(), ln.tolist(),
                                       data, strict=True):
            if k == INLINE:
                refs[key] = encode_inline(d)
            elif k == WHOLE:
                refs[key] = [spelled[p]]
            elif k == RANGE:
                refs[key] = [spelled[p], of, n]

    put(o.keys.tolist(), o.kind, o.path_id, o.offset, o.length, o.data.tolist())
    gens: list[dict[str, Any]] = []
    for path, (f, kind, pid, off, ln) in entries.items():
        t = rs.table(path)
        out = ~in_run[path]
        fo = f[out]
        put(rs.keys_at(path, fo), kind[out], pid[out], off[out], ln[out],
            [t.inline.get(i) for i in fo.tolist()])
        if not len(runs[path]):
            continue
        key = _key_template(path, t.grid)
        for s, e in runs[path].tolist():
            ln0 = int(ln[s])
            i0 = int(f[s])
            base = int(off[s]) - i0 * ln0
            sign = "+" if base >= 0 else "-"
            gens.append({
                "key": key,
                "url": spelled[int(pid[s])],
                "offset": f"{{{{i * {ln0} {sign} {abs(base)}}}}}" if base else f"{{{{i * {ln0}}}}}",
                "length": str(ln0),
                "dimensions": {"i": {"start": i0, "stop": i0 + (e - s)}},
            })
    doc: dict[str, Any] = {"version": 1}
    templates = {names[i]: urls[i] for i in sorted(names, key=lambda i: names[i])}
    if not templates and any(_escape(u) != u for u in urls):
        # fsspec renders URLs only when a set has templates: give it one so that the
        # {% raw %} blocks of URLs containing "{{" are rendered (docs/compat.md)
        templates["_"] = ""
    if templates:
        doc["templates"] = templates
    if gens:
        doc["gen"] = gens
    doc["refs"] = refs
    return doc


def dumps_v1(rs: ReferenceSet, *, gen: bool = False) -> bytes:
    """Version 1 JSON text of ``rs`` (see :func:`v1_document`)."""
    import msgspec

    return msgspec.json.encode(v1_document(rs, gen=gen))


def write_v1(rs: ReferenceSet, dest: str, *, storage_options: Mapping[str, Any] | None = None,
             gen: bool = False, **options: Any) -> None:
    """Write ``rs`` as Version 1 JSON (``.gz``/``.zst``: compressed), atomically. ``gen=True`` adds
    ``gen`` entries (fsspec then needs ``simple_templates=False``)."""
    if options:
        raise Unsupported(f"options {sorted(options)} are not used by format 'v1' (it takes: gen)")
    if not isinstance(gen, bool):
        raise Unsupported(f"gen: expected true or false, got {gen!r}")
    dest = os.fspath(dest)
    write_bytes(dest, compress(dumps_v1(rs, gen=gen), dest), dict(storage_options or {}))
