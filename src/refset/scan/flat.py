"""The constructor that scanners of formats without groups share (NetCDF3, GRIB, TIFF, FITS, DMR++)."""

from __future__ import annotations

from typing import Any, ClassVar

from refset.abc.scanner import INLINE_THRESHOLD, Scanner
from refset.errors import Unsupported

__all__ = ["FlatScanner"]


class FlatScanner(Scanner):
    """A scanner of one kind of file without groups: ``group`` may only name the root, and options of
    other scanners (``max_inline``) are accepted and unused, so that one option set scans any file."""

    options: ClassVar[frozenset[str]] = frozenset({"group", "max_inline"})

    def __init__(self, *, inline_threshold: int = INLINE_THRESHOLD, drop_variables: Any = (),
                 subchunk: int | None = None, group: str | None = None, max_inline: int | None = None) -> None:
        super().__init__(inline_threshold=inline_threshold, drop_variables=drop_variables, subchunk=subchunk)
        if group not in (None, "", "/"):
            raise Unsupported(f"group={group!r}: {self.title or self.name} files have no groups")
