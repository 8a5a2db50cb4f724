"""Progress bars for the command line: on stderr, only when it is a terminal, never with ``--quiet``.

tqdm is imported only when a bar is shown (it is in the ``all`` extra; without it, no bar).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def wanted(quiet: bool = False) -> bool:
    """Whether to show progress: not ``quiet``, stderr a terminal and tqdm importable."""
    if quiet or not sys.stderr.isatty():
        return False
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


class Bar:
    """A tqdm bar on stderr when ``show``, else an object with the same few methods doing nothing."""

    def __init__(self, total: int, desc: str, show: bool, unit: str = "file") -> None:
        self._bar: Any = None
        if show:
            from tqdm import tqdm

            columns, lines = _terminal_size()
            self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=True,
                             ncols=columns, nrows=lines)

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def counting_bytes(self, read: Callable[[], int]) -> Callable[[int], None]:
        """An ``update`` that also shows ``read()`` bytes beside the count (remote scans)."""
        def update(n: int = 1) -> None:
            if self._bar is not None:
                nbytes = read()
                if nbytes:
                    self._bar.set_postfix_str(f"{_size(nbytes)} read", refresh=False)
                self._bar.update(n)
        return update

    def write(self, line: str) -> None:
        """``line`` on stderr, above the bar when there is one."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stderr)
        else:
            sys.stderr.write(line + "\n")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def iterate(self, items: Iterable[T]) -> Iterator[T]:
        """Each item of ``items``, advancing the bar after it has been used."""
        for item in items:
            yield item
            self.update()


def _size(n: int) -> str:
    """``n`` bytes for a person: 812 B, 3.4 MB."""
    x = float(n)
    for unit in ("B", "KB", "MB"):
        if round(x, 1) < 1000:  # 999.97 KB would print as 1,000.0 KB
            return f"{x:,.0f} B" if unit == "B" else f"{x:,.1f} {unit}"
        x /= 1000
    return f"{x:,.1f} GB"


def _terminal_size() -> tuple[int, int]:
    """(columns, lines) of the terminal on stderr; 80 x 24 where it reports 0 (a fresh pseudo-terminal,
    on which tqdm would otherwise draw nothing)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
        columns, lines = size.columns, size.lines
    except (OSError, ValueError):
        columns = lines = 0
    return min(columns, 120) or 80, lines or 24
