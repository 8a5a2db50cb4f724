"""Jinja2 templates of Version 1: ``templates`` rendering and vectorised ``gen`` evaluation.

Rendering uses jinja2's SandboxedEnvironment with StrictUndefined (an unknown name is an error, not an
empty string). Plain ``{{name}}`` placeholders take a fast path without jinja2. ``gen`` fields whose
expressions are integer arithmetic on dimension variables are evaluated with numpy; anything else is
rendered by jinja2, one item at a time.
"""

from __future__ import annotations

import ctypes
import re
import threading
import time
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from refset.options import DEFAULT_LIMITS, Limits

__all__ = ["Templates", "compile_expr", "NotVectorisable", "Part",
           "Budget"]

_PLAIN = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


MAX_INT_BITS = 1 << 16  # integers a template may build: far beyond any offset, far below a bomb
LIPSUM_MAX = 100  # paragraphs lipsum() may make


class TemplateLimit(Exception):
    """A template went past a limit (raised inside rendering; reported as ValueError)."""


class _Timeout(BaseException):
    """Raised asynchronously in a thread whose rendering ran out of time."""


class _Watchdog:
    """One daemon thread that raises :class:`_Timeout` in threads rendering past their deadline
    (``PyThreadState_SetAsyncExc``: a loop in a template stops at its next bytecode)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.jobs: dict[int, tuple[float, int]] = {}  # token -> (deadline, thread id)
        self.fired: dict[int, int] = {}
        self.next = 0
        self.thread: threading.Thread | None = None

    def begin(self, seconds: float) -> int:
        with self.cond:
            self.next += 1
            tok = self.next
            self.jobs[tok] = (time.monotonic() + seconds, threading.get_ident())
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="refset-template-watchdog",
                                               daemon=True)
                self.thread.start()
            self.cond.notify()
        return tok

    def end(self, tok: int) -> None:
        with self.cond:
            self.jobs.pop(tok, None)
            tid = self.fired.pop(tok, None)
            if tid is not None:  # fired but not yet raised: withdraw it
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)

    def _run(self) -> None:
        with self.cond:
            while True:
                if not self.jobs:
                    self.cond.wait()
                    continue
                tok, (deadline, tid) = min(self.jobs.items(), key=lambda j: j[1][0])
                wait = deadline - time.monotonic()
                if wait > 0:
                    self.cond.wait(wait)
                    continue
                del self.jobs[tok]
                self.fired[tok] = tid
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), ctypes.py_object(_Timeout))


_WATCHDOG = _Watchdog()


class Budget:
    """What one document's templates may still spend (``template_seconds`` and ``template_memory``
    of :class:`~refset.options.Limits`)."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self.seconds, self.memory = limits.template_seconds, limits.template_memory
        self.spent = 0.0
        self.local = threading.local()

    def check(self, n: int, what: str) -> None:
        if n > self.memory:
            raise TemplateLimit(f"{what} of {n} bytes is over the template memory limit of {self.memory}")


def _size(v: Any) -> int:
    return len(v) if isinstance(v, str | bytes | list | tuple | dict) else 0


@lru_cache(maxsize=1)
def _env() -> Any:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Env(ImmutableSandboxedEnvironment):
        """Sandboxed and immutable; operations that could build a huge value are checked first."""

        intercepted_binops = frozenset(["*", "**", "+", "%", "//"])
        budget: Budget | None = None  # set per rendering (thread-local through _current)

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            b = _current()
            if b is not None:
                _check_binop(b, operator, left, right)
            return super().call_binop(context, operator, left, right)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
            b = _current()
            if b is not None:
                for v in (*args, *kwargs.values()):
                    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > b.memory:
                        raise TemplateLimit(f"argument {v} is over the template memory limit of {b.memory}")
            out = super().call(__context, __obj, *args, **kwargs)
            if b is not None:
                b.check(_size(out), "a value")
            return out

    from jinja2.compiler import CodeGenerator

    class Gen(CodeGenerator):
        """``a ~ b`` through :func:`_checked_join` (jinja2 would join without asking the sandbox)."""

        def visit_Concat(self, node: Any, frame: Any) -> None:
            self.write("environment.refset_join((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")

    Env.code_generator_class = Gen
    env = Env(undefined=jinja2.StrictUndefined, autoescape=False)
    env.refset_join = _checked_join  # type: ignore[attr-defined]
    for name, f in list(env.filters.items()):
        env.filters[name] = _checked_filter(name, f)
    lipsum: Callable[..., Any] = env.globals["lipsum"]  # type: ignore[assignment]

    def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> Any:
        if not 0 <= n <= LIPSUM_MAX or not 0 <= max <= 1000:
            raise TemplateLimit(f"lipsum(n={n}, max={max}) is over the limits (n <= {LIPSUM_MAX}, "
                                "max <= 1000)")
        return lipsum(n=n, html=html, min=min, max=max)

    env.globals["lipsum"] = bounded_lipsum

    def concat(pieces: Any) -> str:
        b, out, n = _current(), [], 0
        for p in pieces:
            n += len(p)
            if b is not None and n > b.memory:
                raise TemplateLimit(f"output over the template memory limit of {b.memory} bytes")
            out.append(p)
        return "".join(out)

    env.concat = concat  # type: ignore[method-assign]
    return env


def _check_binop(b: Budget, op: str, left: Any, right: Any) -> None:
    """Refuse ``left op right`` when its result would be too large to build."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right))
    if op == "**" and ints:
        if abs(left) > 1 and right > 0 and abs(left).bit_length() * right > MAX_INT_BITS:
            raise TemplateLimit(f"{left} ** {right} has more than {MAX_INT_BITS} bits")
    elif op == "*" and ints:
        if abs(left).bit_length() + abs(right).bit_length() > MAX_INT_BITS:
            raise TemplateLimit(f"a product of more than {MAX_INT_BITS} bits")
    elif op == "*":
        seq, n = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(n, int) and _size(seq):
            b.check(_size(seq) * max(n, 0), "a repeated sequence")
    elif op == "+":
        b.check(_size(left) + _size(right), "a concatenation")
    elif op == "%" and isinstance(left, str):
        widths = [int(w) for w in re.findall(r"%[-#0 +]*(\d+)?(?:\.(\d+))?", left) for w in w if w]
        if "*" in left or any(w > b.memory for w in widths):
            raise TemplateLimit("a % format with a width over the template memory limit (or '*')")


def _checked_join(parts: Any) -> str:
    out = [str(p) for p in parts]
    b = _current()
    if b is not None:
        b.check(sum(map(len, out)), "a ~ concatenation")
    return "".join(out)


def _checked_filter(name: str, f: Any) -> Any:
    """Filter ``f`` with its integer arguments, a ``format`` string and its result checked."""
    import functools

    @functools.wraps(f)
    def checked(*args: Any, **kwargs: Any) -> Any:
        b = _current()
        if b is not None:
            for v in (*args, *kwargs.values()):
                if isinstance(v, int) and not isinstance(v, bool) and abs(v) > b.memory:
                    raise TemplateLimit(f"argument {v} of filter {name} is over the memory limit")
            if name == "format":
                for v in args:
                    if isinstance(v, str):
                        _check_binop(b, "%", v, ())
        out = f(*args, **kwargs)
        if b is not None:
            b.check(_size(out), f"the value of filter {name}")
        return out

    return checked


def _current() -> Budget | None:
    return getattr(_RENDERING, "budget", None)


_RENDERING = threading.local()


@lru_cache(maxsize=4096)
def _compiled(text: str) -> Any:
    return _env().from_string(text)


def render(text: str, context: Mapping[str, Any], budget: Budget | None = None) -> str:
    """Render ``text`` with jinja2 (sandboxed, strict, bounded by ``budget``: one of the default limits
    when None). Raises ValueError with the reason."""
    import jinja2

    outer = _current()
    b = outer or budget or Budget()
    tok = 0
    t0 = time.monotonic()
    try:
        try:
            if outer is None:  # the outermost rendering of this thread keeps the clock
                left = b.seconds - b.spent
                if left <= 0:
                    raise TemplateLimit(f"the document's templates took more than {b.seconds} s")
                _RENDERING.budget = b
                tok = _WATCHDOG.begin(left)
            return str(_compiled(text).render(**context))
        finally:
            if outer is None:
                if tok:
                    _WATCHDOG.end(tok)
                _RENDERING.budget = None
                b.spent += time.monotonic() - t0
    except _Timeout:
        raise ValueError(f"template error: the document's templates took more than {b.seconds} s "
                         "(limits=refset.Limits(template_seconds=...) allows more)") from None
    except TemplateLimit as e:
        raise ValueError(f"template error: {e} (limits=refset.Limits(template_memory=...) allows more)") from None
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
    template is a plain string (``{{u}}``), as in fsspec. All renderings of one document share one
    :class:`Budget`.
    """

    def __init__(self, templates: Mapping[str, str], limits: Limits = DEFAULT_LIMITS) -> None:
        self.raw = dict(templates)
        self.budget = Budget(limits)
        self.plain = {k: v for k, v in self.raw.items() if "{{" not in v}
        self.context: dict[str, Any] = dict(self.plain)
        for k, v in self.raw.items():
            if k not in self.plain:
                self.context[k] = self._function(v)
        self._cache: dict[str, str] = {}

    def _function(self, text: str) -> Callable[..., str]:
        def fn(**kwargs: Any) -> str:
            return render(text, {**self.plain, **kwargs}, self.budget)

        return fn

    def render(self, text: str) -> str:
        """Expand the templates in ``text``. Raises ValueError naming the problem."""
        hit = self._cache.get(text)
        if hit is not None:
            return hit
        for m in _PLAIN.finditer(text):
            name = m.group(1)
            if name in self.raw and name not in self.plain:
                raise ValueError(f"templates[{name!r}] holds jinja markup, so it is a function of keyword "
                                 f"arguments: use it as a call ({{{{{name}(...)}}}}), not as {m.group(0)!r}")
        out = _PLAIN.sub(lambda m: self.plain.get(m.group(1), m.group(0)), text)
        if "{{" in out or "{%" in out or "{#" in out:
            out = render(text, self.context, self.budget)
        elif "{%" in text or "{#" in text:
            out = render(text, self.context, self.budget)
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
