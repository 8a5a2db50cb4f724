"""Version 1 documents: ``version``, ``templates``, ``gen`` and ``refs``, read into a Builder."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from refset.formats.json.templates import NotVectorisable, Part, Templates, compile_expr, render
from refset.formats.json.v0 import is_int, refs_from_v0
from refset.model.builder import Builder
from refset.model.keys import ChunkGrid, array_key
from refset.model.table import MAX_END, RANGE, WHOLE
from refset.options import DEFAULT_LIMITS, Limits

__all__ = ["read_v1", "DEFAULT_MAX_GEN"]

DEFAULT_MAX_GEN = 100_000_000
_I64 = (-(1 << 63), (1 << 63) - 1)  # dimension values are signed 64-bit integers


def _in_i64(v: int) -> bool:
    return _I64[0] <= v <= _I64[1]


def read_v1(
    doc: Mapping[str, Any],
    builder: Builder,
    problems: list[str],
    *,
    max_gen: int = DEFAULT_MAX_GEN,
    template_overrides: Mapping[str, str] | None = None,
    refs_done: bool = False,
    limits: Limits = DEFAULT_LIMITS,
) -> None:
    """Add the references of a Version 1 document to ``builder``; problems go to ``problems``.

    ``refs_done``: the caller already added ``refs`` (the fast JSON reader does so column-wise).
    """
    for k in doc:
        if k not in ("version", "templates", "gen", "refs"):
            problems.append(f"{json.dumps(k)}: unknown top-level field of a Version 1 document")
    tmpl = doc.get("templates", {})
    if not isinstance(tmpl, dict):
        problems.append(f"templates: must be an object, got {type(tmpl).__name__}")
        tmpl = {}
    good = {}
    for k, v in tmpl.items():
        if not isinstance(v, str):
            problems.append(f"templates[{json.dumps(k)}]: must be a string, got {type(v).__name__}")
        else:
            good[k] = v
    good.update(template_overrides or {})
    templates = Templates(good, limits)

    def render_url(url: str, at: str) -> str | None:
        try:
            return templates.render(url)
        except ValueError as e:
            problems.append(f"{at}: {e}")
            return None

    if not refs_done:
        refs = doc.get("refs", {})
        if not isinstance(refs, dict):
            problems.append(f"refs: must be an object, got {type(refs).__name__}")
        else:
            builder.items.update(refs_from_v0(refs, problems, render_url))
    gens = doc.get("gen", [])
    if not isinstance(gens, list):
        problems.append(f"gen: must be a list, got {type(gens).__name__}")
        return
    checked = [_check_gen(i, g, problems) for i, g in enumerate(gens)]
    total = sum(c[1] for c in checked if c is not None)
    if total > max_gen:
        problems.append(
            f"gen: would generate {total} keys, more than the limit of {max_gen} "
            "(raise it with max_gen=...)"
        )
        return
    if problems or not gens:
        return
    grids = builder.grids()
    need = sum(_estimate(g, c[0], c[1], templates, grids) for g, c in zip(gens, checked) if c is not None)
    if need > limits.gen_memory:
        problems.append(
            f"gen: would need about {need} bytes for its {total} keys, more than the gen memory budget of "
            f"{limits.gen_memory} (limits=refset.Limits(gen_memory=...) allows more)"
        )
        return
    for i, (g, c) in enumerate(zip(gens, checked)):
        if c is not None:
            _expand(f"gen[{i}]", g, c[0], templates, grids, builder, problems)


def _check_gen(
    i: int, g: object, problems: list[str]
) -> tuple[dict[str, np.ndarray | range], int] | None:
    at = f"gen[{i}]"
    if not isinstance(g, dict):
        problems.append(f"{at}: must be an object, got {type(g).__name__}")
        return None
    n0 = len(problems)
    for f in ("key", "url"):
        if f not in g:
            problems.append(f"{at}: {json.dumps(f)} is required")
        elif not isinstance(g[f], str):
            problems.append(f"{at}.{f}: must be a string, got {type(g[f]).__name__}")
    if ("offset" in g) != ("length" in g):
        have, miss = ("offset", "length") if "offset" in g else ("length", "offset")
        problems.append(f"{at}: {json.dumps(have)} given without {json.dumps(miss)}")
    for f in ("offset", "length"):
        if (f in g and not isinstance(g[f], (str, int))) or isinstance(g.get(f), bool):
            problems.append(f"{at}.{f}: must be a string or integer, got {type(g[f]).__name__}")
    for f in g:
        if f not in ("key", "url", "offset", "length", "dimensions"):
            problems.append(f"{at}: unknown field {json.dumps(f)}")
    dims = g.get("dimensions")
    out: dict[str, np.ndarray | range] = {}
    if not isinstance(dims, dict) or not dims:
        problems.append(f"{at}.dimensions: must be an object with at least one dimension")
    else:
        for name, d in dims.items():
            dat = f"{at}.dimensions[{json.dumps(name)}]"
            if isinstance(d, list):
                if not all(is_int(v) for v in d):
                    problems.append(f"{dat}: a list dimension must hold integers only")
                elif not all(_in_i64(int(v)) for v in d):
                    problems.append(f"{dat}: values must lie in [-2**63, 2**63)")
                else:
                    out[name] = np.array(d, np.int64)
            elif isinstance(d, dict):
                bad = [k for k in d if k not in ("start", "stop", "step")]
                if bad:
                    problems.append(f"{dat}: unknown field {json.dumps(bad[0])}")
                if "stop" not in d:
                    problems.append(f"{dat}: \"stop\" is required")
                    continue
                vals: dict[str, Any] = {k: d.get(k, dflt) for k, dflt in (("start", 0), ("stop", None), ("step", 1))}
                wrong = [k for k, v in vals.items() if not is_int(v)]
                if wrong:
                    problems.append(f"{dat}.{wrong[0]}: must be an integer, got {json.dumps(vals[wrong[0]])}")
                    continue
                big = [k for k, v in vals.items() if not _in_i64(int(v))]
                if big:
                    problems.append(f"{dat}.{big[0]}: must lie in [-2**63, 2**63), got {int(vals[big[0]])}")
                    continue
                if vals["step"] == 0:
                    problems.append(f"{dat}.step: must not be 0")
                    continue
                out[name] = range(vals["start"], vals["stop"], vals["step"])
            else:
                problems.append(f"{dat}: must be {{start?, stop, step?}} or a list of integers")
    if len(problems) > n0:
        return None
    total = 1
    for v in out.values():
        total *= len(v)
    return out, total


CHUNK_KEY_BYTES = 96  # peak bytes per generated chunk key of a known grid (measured: ~92)
GENERIC_KEY_BYTES = 256  # per generated key of any other form (measured: ~252 with 12-byte keys)
URL_CHAR_BYTES = 4  # per character of a URL that changes from key to key (numpy unicode while rendered)


def _estimate(g: Mapping[str, Any], dims: Mapping[str, np.ndarray | range], total: int,
              templates: Templates, grids: Mapping[str, ChunkGrid]) -> int:
    """Peak bytes that expanding ``g`` into ``total`` keys is expected to take, from its first key
    and URL (rendered alone): chunk keys of a known grid are stored as grid positions, others as
    strings; a URL that changes from key to key is a string per key (4 bytes a character while
    rendered in numpy)."""
    if total == 0:
        return 0
    first = {name: _values(vals)[:1] for name, vals in dims.items()}
    try:
        url_p = compile_expr(g["url"], first, templates.plain)
        varies = any(not isinstance(p, str) for p in url_p)
        per_url = URL_CHAR_BYTES * len(_first_text(url_p)) + 64 if varies else 0
    except (NotVectorisable, ValueError):
        per_url = URL_CHAR_BYTES * len(g["url"]) + 64
    try:
        key_p = compile_expr(g["key"], first, templates.plain)
    except (NotVectorisable, ValueError):
        return total * (GENERIC_KEY_BYTES + 64 + per_url)  # rendered item by item: strings at least
    if _chunk_target(key_p, grids, 1) is not None:
        return total * (CHUNK_KEY_BYTES + per_url)
    return total * (GENERIC_KEY_BYTES + max(0, len(_first_text(key_p)) - 12) + per_url)


def _first_text(parts: list[Any]) -> str:
    """The first rendered item of compiled template ``parts``."""
    return "".join(p if isinstance(p, str) else str(np.asarray(p).reshape(-1)[0]) for p in parts)


def _positions(dims: Mapping[str, np.ndarray | range], total: int) -> dict[str, np.ndarray]:
    """Index into each dimension of every item of the cartesian product, in the spec's order
    (the first dimension varies slowest)."""
    out: dict[str, np.ndarray] = {}
    stride = total
    idx = np.arange(total, dtype=np.int64)
    for name, vals in dims.items():
        n = len(vals)
        stride //= max(n, 1)
        out[name] = (idx // max(stride, 1)) % n if total else idx[:0]
    return out


def _values(vals: np.ndarray | range) -> np.ndarray:
    if isinstance(vals, range):
        return np.arange(vals.start, vals.stop, vals.step, dtype=np.int64)
    return np.asarray(vals, np.int64)


def _product(dims: Mapping[str, np.ndarray | range], total: int) -> dict[str, np.ndarray]:
    """Cartesian product in the spec's order: the first dimension varies slowest."""
    pos = _positions(dims, total)
    return {name: _values(vals)[pos[name]] for name, vals in dims.items()}


def _url_ids(
    url: str, dims: Mapping[str, np.ndarray | range], pos: Mapping[str, np.ndarray], total: int,
    templates: Templates,
) -> tuple[list[str], np.ndarray]:
    """(unique URLs, id per item), rendering the URL once per combination of the dimensions it uses."""
    from jinja2 import meta

    from refset.formats.json.templates import parse

    used = [d for d in dims if d in meta.find_undeclared_variables(parse(url))]
    sub = {d: dims[d] for d in used}
    n_sub = 1
    for v in sub.values():
        n_sub *= len(v)
    parts = compile_expr(url, _product(sub, n_sub), templates.plain)
    arrays = [np.broadcast_to(p, (n_sub,)) for p in parts if not isinstance(p, str)]
    if not arrays:
        return ["".join(parts)], np.zeros(total, np.int64)  # type: ignore[arg-type]
    # distinct values of the integer parts first: strings are built once per distinct URL
    if len(arrays) == 1:
        u1, ids = np.unique(arrays[0], return_inverse=True)
        uniq = u1[:, None]
    else:
        uniq, ids = np.unique(np.stack(arrays, axis=1), axis=0, return_inverse=True)
    ids = ids.reshape(-1)
    it = iter(range(uniq.shape[1]))
    parts = [p if isinstance(p, str) else uniq[:, next(it)] for p in parts]
    u = _strings(parts, uniq.shape[0])
    reduced = np.zeros(total, np.int64)
    for d in used:
        reduced = reduced * len(dims[d]) + pos[d]
    return u.tolist(), ids[reduced]


def _int_column(parts: list[Part], total: int) -> np.ndarray:
    """An offset/length template that is one integer expression, as an int64 column."""
    core = [p for p in parts if not (isinstance(p, str) and p.strip() == "")]
    if len(core) != 1:
        raise NotVectorisable
    p = core[0]
    if isinstance(p, str):
        s = p.strip()
        if not (s.isascii() and s.lstrip("-").isdigit()) or not _in_i64(int(s)):
            raise NotVectorisable  # jinja2 reports it item by item
        return np.full(total, int(s), np.int64)
    return np.broadcast_to(p, (total,)).astype(np.int64)


def _strings(parts: list[Part], total: int) -> np.ndarray:
    from numpy.dtypes import StringDType

    acc: np.ndarray = np.full(total, "", dtype=StringDType())
    for p in parts:
        if isinstance(p, str):
            acc = np.strings.add(acc, p)
        else:
            acc = np.strings.add(acc, np.broadcast_to(p, (total,)).astype(StringDType()))
    return acc


def _chunk_target(
    parts: list[Part], grids: Mapping[str, ChunkGrid], total: int
) -> tuple[str, np.ndarray] | None:
    """(array, flat indices) when the key template spells canonical chunk keys of a known grid."""
    if len(parts) < 2 or not isinstance(parts[0], str):
        return None
    for path, g in grids.items():
        if not g.shape:
            continue
        head = array_key(path, g.key_head)
        if parts[0] != head or len(parts) != 2 * g.ndim:
            continue
        arrs = parts[1::2]
        seps = parts[2::2]
        if not all(isinstance(a, np.ndarray) for a in arrs) or any(s != g.separator for s in seps):
            continue
        idx = [np.broadcast_to(a, (total,)) for a in arrs]
        if any(((a < 0) | (a >= n)).any() for a, n in zip(idx, g.grid_shape)):
            return None  # keys outside the grid stay generic keys
        return path, np.ravel_multi_index(tuple(idx), g.grid_shape).astype(np.int64)
    return None


def _expand(
    at: str,
    g: Mapping[str, Any],
    dims: Mapping[str, np.ndarray | range],
    templates: Templates,
    grids: Mapping[str, ChunkGrid],
    builder: Builder,
    problems: list[str],
) -> None:
    total = 1
    for v in dims.values():
        total *= len(v)
    if total == 0:
        return
    has_range = "offset" in g
    pos = _positions(dims, total)
    values = {name: _values(vals)[pos[name]] for name, vals in dims.items()}
    try:
        key_p = compile_expr(g["key"], values, templates.plain)
        urls, pid = _url_ids(g["url"], dims, pos, total, templates)
        if has_range:
            off = _int_column(compile_expr(str(g["offset"]), values, templates.plain), total)
            ln = _int_column(compile_expr(str(g["length"]), values, templates.plain), total)
    except NotVectorisable:
        _expand_slowly(at, g, values, total, templates, builder, problems)
        return
    except ValueError as e:
        problems.append(f"{at}: {e}")
        return
    if has_range:
        for name, col in (("offset", off), ("length", ln)):
            bad = np.flatnonzero(col < 0)
            if bad.size:
                where = {k: int(v[bad[0]]) for k, v in values.items()}
                problems.append(
                    f"{at}.{name}: must be a non-negative integer, got {int(col[bad[0]])} for {where}"
                )
                return
        bad = np.flatnonzero(off > (MAX_END - 1) - ln)  # off + ln >= 2**63, without overflow
        if bad.size:
            where = {k: int(v[bad[0]]) for k, v in values.items()}
            problems.append(f"{at}: offset {int(off[bad[0]])} + length {int(ln[bad[0]])} must be below "
                            f"2**63, for {where}")
            return
    else:
        off = ln = np.zeros(total, np.int64)
    kind = np.full(total, RANGE if has_range else WHOLE, np.uint8)
    target = _chunk_target(key_p, grids, total)
    if target is not None:
        builder.add_chunks(target[0], target[1], kind, pid, off, ln, urls=urls)
        return
    builder.add_keys(_strings(key_p, total), kind, pid, off, ln, urls=urls)


def _expand_slowly(
    at: str,
    g: Mapping[str, Any],
    values: Mapping[str, np.ndarray],
    total: int,
    templates: Templates,
    builder: Builder,
    problems: list[str],
) -> None:
    cols = {k: v.tolist() for k, v in values.items()}
    has_range = "offset" in g
    for j in range(total):
        ctx = {**templates.context, **{k: v[j] for k, v in cols.items()}}
        try:
            key = render(g["key"], ctx, templates.budget)
            url = render(g["url"], ctx, templates.budget)
            if has_range:
                nums = []
                for f in ("offset", "length"):
                    text = render(str(g[f]), ctx, templates.budget).strip()
                    try:
                        n = int(text)
                    except ValueError:
                        raise ValueError(f"{f} must render to an integer, got {text!r}") from None
                    if n < 0:
                        raise ValueError(f"{f} must be a non-negative integer, got {n}")
                    nums.append(n)
                if nums[0] + nums[1] >= MAX_END:
                    raise ValueError(f"offset {nums[0]} + length {nums[1]} must be below 2**63")
        except ValueError as e:
            where = {k: v[j] for k, v in cols.items()}
            problems.append(f"{at}: {e} (at {where})")
            return
        builder.add(key, (url, nums[0], nums[1]) if has_range else (url,))
