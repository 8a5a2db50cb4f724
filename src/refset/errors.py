"""Errors raised by refset.

Every error derives from :class:`RefsetError`. Errors about bad or unsupported input are also
``ValueError``; failed fetches are also ``OSError`` so that callers catching the builtin keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "Problem",
    "OptionRef",
    "RefsetError",
    "InvalidReferences",
    "Unsupported",
    "InvalidOption",
    "InvalidFile",
    "ReferenceNotReachable",
    "ShortRead",
    "SourceChanged",
    "located",
    "error_name",
]


class RefsetError(Exception):
    """Base class of every refset error."""


class InvalidReferences(RefsetError, ValueError):
    """A reference set (or one of its keys/fields) is malformed.

    ``problems`` holds one line per problem, each naming where it is and why.
    """

    def __init__(self, problems: str | list[str]) -> None:
        if isinstance(problems, str):
            problems = [problems]
        self.problems: list[str] = list(problems)
        shown = self.problems[:20]
        more = len(self.problems) - len(shown)
        text = "\n".join(shown) + (f"\n... and {more} more problems" if more > 0 else "")
        super().__init__(text)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.problems,))


class Unsupported(RefsetError, ValueError):
    """The input is valid but uses something refset (or the chosen format) cannot handle."""


class InvalidOption(Unsupported):
    """A writer option with an unknown name, or a value outside what the option allows."""


class InvalidFile(RefsetError, ValueError):
    """A file handed to ``scan`` is malformed: a corrupt header, data said to lie past its end."""


class ReferenceNotReachable(RefsetError, OSError):
    """The bytes behind a reference could not be fetched."""

    def __init__(self, key: str, url: str, reason: str = "") -> None:
        self.key = key
        self.url = url
        msg = f"cannot read reference {key!r} from {url!r}" if key else f"cannot read {url!r}"
        super().__init__(msg + (f": {reason}" if reason else ""))

    @classmethod
    def wrap(cls, key: str, url: str, cause: BaseException) -> ReferenceNotReachable | SourceChanged:
        """The error for ``key`` at ``url`` caused by ``cause`` (kept as ``__cause__``)."""
        if isinstance(cause, SourceChanged):  # its own error, not "unreachable": a new one naming the key
            return cause.again(key)  # (not itself: ``raise wrap(k, u, e) from e`` would make e its own cause)
        if isinstance(cause, ReferenceNotReachable):  # it names its key and URL: the same error, anew
            again = type(cause)(cause.key, cause.url, str(cause).partition(f"{cause.url!r}: ")[2])
            again.__cause__ = cause.__cause__
            return again
        err = cls(key, url, f"{type(cause).__name__}: {cause}")
        err.__cause__ = cause
        return err

    def __reduce__(self) -> tuple[object, ...]:
        reason = str(self).partition(f"{self.url!r}: ")[2]
        return (type(self), (self.key, self.url, reason))


class ShortRead(RefsetError, OSError):
    """A target returned a different number of bytes than the range asked for."""


#: How a file's record is spelled: (size, mtime_ns, etag, last_modified), None where unknown.
_Record = tuple[Any, Any, Any, Any]

#: What a reader of a changed file is told to do.
ADVICE = "rescan it (`refset refresh SET`, or scan it again), or read with verify_sources=False to read it anyway"


def shown_record(rec: _Record | None) -> str:
    """A file's record in words (``size 1,234, modified 2026-11-28 22:48:39.123456789 UTC, ETag "a1"``)."""
    if rec is None:
        return "no such file"
    size, mtime_ns, etag, last_modified = rec
    out = []
    if size is not None:
        out.append(f"size {size:,}")
    if mtime_ns is not None:
        import datetime

        t = datetime.datetime.fromtimestamp(mtime_ns // 10**9, datetime.UTC)
        out.append(f"modified {t:%Y-%m-%d %H:%M:%S}.{mtime_ns % 10**9:09d} UTC")
    if etag is not None:
        out.append(f"ETag {etag}")
    if last_modified is not None:
        out.append(f"Last-Modified {last_modified}")
    return ", ".join(out) or "nothing recorded"


class SourceChanged(RefsetError, OSError):
    """A file a reference set points into is not what it was when the set was made (rewritten in
    place, re-uploaded, replaced): its bytes would be read under the old metadata. ``url``: the file;
    ``recorded`` and ``now``: what the set recorded and what is there now, each ``(size, mtime_ns,
    etag, last_modified)`` with None where unknown (``now`` None: the file is gone); ``key``: the key
    being read, when there is one."""

    def __init__(self, url: str, recorded: _Record | None, now: _Record | None, reason: str = "",
                 key: str = "") -> None:
        self.url, self.recorded, self.now, self.reason, self.key = url, recorded, now, reason, key
        what = reason or ADVICE
        where = f"reading {key!r}: " if key else ""
        super().__init__(f"{where}{url} changed since its reference set was made: recorded "
                         f"{shown_record(recorded)}; now {shown_record(now)}: {what}")

    def again(self, key: str | None = None) -> SourceChanged:
        """A new error saying the same (for ``key``, when given): raised each time a changed file is
        read again (raising one object again and again grows its traceback)."""
        return type(self)(self.url, self.recorded, self.now, self.reason, self.key if key is None else key)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.url, self.recorded, self.now, self.reason, self.key))


class OptionRef(NamedTuple):
    """An option of the call, named inside a :class:`Problem`: ``text`` as the Python API says it
    (``coo_map['time']``), ``option`` the keyword argument, ``key`` a key of its mapping (or None),
    ``form`` ``"name"`` (where the problem is) or ``"give"`` (how to give the option)."""

    text: str
    option: str
    key: Any = None
    form: str = "name"


class Problem(str):
    """One problem's text (a ``str``), kept with the options of the call it names, so that an interface
    with its own names for them (the command line's ``--coo-map time``) says it in its words:
    :meth:`spelled`. Built from pieces of text and :class:`OptionRef`."""

    parts: tuple[str | OptionRef, ...]

    def __new__(cls, *parts: str | OptionRef) -> Problem:
        self = super().__new__(cls, "".join(p if isinstance(p, str) else p.text for p in parts))
        self.parts = parts
        return self

    def spelled(self, spell: Callable[[OptionRef], str | None]) -> str:
        """The text with each option as ``spell`` names it (None: as the Python API does)."""
        return "".join(p if isinstance(p, str) else (spell(p) or p.text) for p in self.parts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), self.parts)


def located(err: RefsetError, where: str, name: str | None = None) -> RefsetError:
    """``err`` as an error of the same type whose text starts with ``where`` (``"combine: input 3
    ('f3.json')"``), unless its text names ``name`` (default: ``where``) already; ``err`` itself
    when its type cannot be remade so (its text is then left as it is)."""
    text = str(err)
    if (where if name is None else name) in text:
        return err
    if isinstance(err, InvalidReferences):
        out: RefsetError = type(err)([f"{where}: {p}" for p in err.problems])
    elif isinstance(err, ReferenceNotReachable):
        return err  # it names its URL
    else:
        try:
            out = type(err)(f"{where}: {text}")
        except TypeError:
            return err
    out.__cause__ = err.__cause__
    return out


def error_name(e: BaseException) -> str:
    """The name of ``e``'s type as its module spells it (``zlib.error``; builtins plain: ``ValueError``)."""
    t = type(e)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"
