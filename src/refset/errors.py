"""Errors raised by refset.

Every error derives from :class:`RefsetError`. Errors about bad or unsupported input are also
``ValueError``; failed fetches are also ``OSError`` so that callers catching the builtin keep working.
"""

from __future__ import annotations

__all__ = [
    "RefsetError",
    "InvalidReferences",
    "Unsupported",
    "ReferenceNotReachable",
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


class Unsupported(RefsetError, ValueError):
    """The input is valid but uses something refset (or the chosen format) cannot handle."""


class ReferenceNotReachable(RefsetError, OSError):
    """The bytes behind a reference could not be fetched."""

    def __init__(self, key: str, url: str, reason: str = "") -> None:
        self.key = key
        self.url = url
        msg = f"cannot read reference {key!r} from {url!r}"
        super().__init__(msg + (f": {reason}" if reason else ""))
