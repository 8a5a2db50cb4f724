"""Errors raised by refset.

Every error derives from :class:`RefsetError`. Errors about bad or unsupported input are also
``ValueError``; failed fetches are also ``OSError`` so that callers catching the builtin keep working.
"""

from __future__ import annotations

__all__ = [
    "RefsetError",
    "InvalidReferences",
    "Unsupported",
    "InvalidOption",
    "InvalidFile",
    "ReferenceNotReachable",
    "ShortRead",
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
    def wrap(cls, key: str, url: str, cause: BaseException) -> ReferenceNotReachable:
        """The error for ``key`` at ``url`` caused by ``cause`` (kept as ``__cause__``)."""
        if isinstance(cause, ReferenceNotReachable):
            return cause
        err = cls(key, url, f"{type(cause).__name__}: {cause}")
        err.__cause__ = cause
        return err

    def __reduce__(self) -> tuple[object, ...]:
        reason = str(self).partition(f"{self.url!r}: ")[2]
        return (type(self), (self.key, self.url, reason))


class ShortRead(RefsetError, OSError):
    """A target returned a different number of bytes than the range asked for."""
