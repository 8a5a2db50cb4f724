"""Jinja2 templates of Version 1: ``templates`` rendering and vectorised ``gen`` evaluation.

Rendering uses jinja2's SandboxedEnvironment with StrictUndefined (an unknown name is an error, not an
empty string). Plain ``{{name}}`` placeholders take a fast path without jinja2. ``gen`` fields whose
expressions are integer arithmetic on dimension variables are evaluated with numpy; anything else is
rendered by jinja2, one item at a time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ["Templates", "compile_expr", "NotVectorisable", "Part"]

_PLAIN = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@lru_cache(maxsize=1)
def _env() -> Any:
    import jinja2
    from jinja2.sandbox import SandboxedEnvironment

    return SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=False)


@lru_cache(maxsize=4096)
def _compiled(text: str) -> Any:
    return _env().from_string(text)


def render(text: str, context: Mapping[str, Any]) -> str:
    """Render ``text`` with jinja2 (sandboxed, strict). Raises ValueError with jinja's reason."""
    import jinja2

    try:
        return str(_compiled(text).render(**context))
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"template syntax error: {e.message}") from None
    except jinja2.UndefinedError as e:
        raise ValueError(f"unknown template name: {e.message}") from None
    except jinja2.TemplateError as e:
        raise ValueError(f"template error: {e}") from None
    except Exception as e:  # errors raised by the expression itself (TypeError, ZeroDivision ...)
        raise ValueError(f"template error: {type(e).__name__}: {e}") from None


class Templates:
    """The ``templates`` of a Version 1 document.

    A template containing ``{{`` is a function of keyword arguments (``{{f(c='text')}}``); any other
    template is a plain string (``{{u}}``), as in fsspec.
    """

    def __init__(self, templates: Mapping[str, str]) -> None:
        self.raw = dict(templates)
        self.plain = {k: v for k, v in self.raw.items() if "{{" not in v}
        self.context: dict[str, Any] = dict(self.plain)
        for k, v in self.raw.items():
            if k not in self.plain:
                self.context[k] = self._function(v)
        self._cache: dict[str, str] = {}

    def _function(self, text: str) -> Callable[..., str]:
        def fn(**kwargs: Any) -> str:
            return render(text, {**self.plain, **kwargs})

        return fn

    def render(self, text: str) -> str:
        """Expand the templates in ``text``. Raises ValueError naming the problem."""
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        out = _PLAIN.sub(lambda m: self.plain.get(m.group(1), m.group(0)), text)
        if "{{" in out or "{%" in out or "{#" in out:
            out = render(text, self.context)
        elif "{%" in text or "{#" in text:
            out = render(text, self.context)
        if len(self._cache) < 100_000:
            self._cache[text] = out
        return out


class NotVectorisable(Exception):
    """The template uses something the numpy evaluator does not handle; render item by item."""


# A compiled template: literal strings and integer arrays (one value per generated item), in order.
Part = str | np.ndarray


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _bounds(v: np.ndarray | int) -> tuple[int, int]:
    """(min, max) of an int64 column or an integer, as Python ints."""
    if isinstance(v, np.ndarray):
        return (int(v.min()), int(v.max())) if v.size else (0, 0)
    return v, v


def _checked(node: Any, a: np.ndarray | int, b: np.ndarray | int) -> None:
    """Raise NotVectorisable when ``a <op> b`` could leave int64 for some item (the jinja2 path then
    computes it exactly with Python integers): numpy's integer arithmetic wraps silently."""
    from jinja2 import nodes

    (alo, ahi), (blo, bhi) = _bounds(a), _bounds(b)
    if isinstance(node, nodes.Add):
        lo, hi = alo + blo, ahi + bhi
    elif isinstance(node, nodes.Sub):
        lo, hi = alo - bhi, ahi - blo
    elif isinstance(node, nodes.Mul):
        corners = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        lo, hi = min(corners), max(corners)
    else:  # // and %: only -2**63 // -1 leaves int64
        lo, hi = 0, 0
        if alo == _I64_MIN and blo <= -1 <= bhi:
            raise NotVectorisable
    if lo < _I64_MIN or hi > _I64_MAX:
        raise NotVectorisable


def _eval(node: Any, dims: Mapping[str, np.ndarray], plain: Mapping[str, str]) -> Part | int:
    from jinja2 import nodes

    if isinstance(node, nodes.Const):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, str)):
            raise NotVectorisable
        if isinstance(node.value, int) and not _I64_MIN <= node.value <= _I64_MAX:
            raise NotVectorisable
        return node.value
    if isinstance(node, nodes.Name):
        if node.name in dims:
            return dims[node.name]
        if node.name in plain:
            return plain[node.name]
        raise NotVectorisable
    if isinstance(node, (nodes.Neg, nodes.Pos)):
        v = _eval(node.node, dims, plain)
        if isinstance(v, str):
            raise NotVectorisable
        if isinstance(node, nodes.Neg) and _bounds(v)[0] == _I64_MIN:
            raise NotVectorisable
        return -v if isinstance(node, nodes.Neg) else v
    ops: dict[type, Callable[[Any, Any], Any]] = {
        nodes.Add: lambda a, b: a + b,
        nodes.Sub: lambda a, b: a - b,
        nodes.Mul: lambda a, b: a * b,
        nodes.FloorDiv: lambda a, b: a // b,
        nodes.Mod: lambda a, b: a % b,
    }
    op = ops.get(type(node))
    if op is None:
        raise NotVectorisable
    a, b = _eval(node.left, dims, plain), _eval(node.right, dims, plain)
    if isinstance(a, str) or isinstance(b, str):
        raise NotVectorisable
    if isinstance(node, (nodes.FloorDiv, nodes.Mod)) and np.any(np.asarray(b) == 0):
        raise NotVectorisable  # let jinja report the division by zero
    _checked(node, a, b)
    return op(a, b)  # type: ignore[no-any-return]


def parse(text: str) -> Any:
    """The jinja2 syntax tree of ``text``; ValueError naming the syntax problem."""
    import jinja2

    try:
        return _env().parse(text)
    except jinja2.TemplateSyntaxError as e:
        raise ValueError(f"template syntax error: {e.message}") from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as e:  # e.g. a huge literal
        raise ValueError(f"template syntax error: {type(e).__name__}: {e}") from None


def compile_expr(
    text: str, dims: Mapping[str, np.ndarray], plain: Mapping[str, str]
) -> list[Part]:
    """``text`` as literal strings and int64 arrays, or raise :class:`NotVectorisable`."""
    from jinja2 import nodes

    tree = parse(text)
    out: list[Part] = []
    for stmt in tree.body:
        if not isinstance(stmt, nodes.Output):
            raise NotVectorisable
        for n in stmt.nodes:
            if isinstance(n, nodes.TemplateData):
                out.append(n.data)
                continue
            v = _eval(n, dims, plain)
            if isinstance(v, str):
                out.append(v)
            elif isinstance(v, np.ndarray):
                out.append(v.astype(np.int64, copy=False))
            else:
                out.append(str(int(v)))
    merged: list[Part] = []
    for p in out:
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] = merged[-1] + p
        elif not (isinstance(p, str) and p == ""):
            merged.append(p)
    return merged
