"""NOAA's ``.idx`` sidecars (wgrib2's inventory), read beside a GRIB file to scan it without reading its
messages.

A line per message: ``n:offset:d=YYYYMMDDHH:VAR:LEVEL:FORECAST:`` (``1:0:d=2023092800:TMP:500 mb:6 hour
fcst:``). The inventory names variables and levels in wgrib2's words, not ecCodes'; so a run learns
them from a file it scanned whole whose inventory agrees with its messages (same offsets, reference
times and steps): the *template*. A later file whose inventory has the same lines but for the dates and
forecast hours is then built from the template's keys with its own offsets, reference time and steps,
after one message per grid is read and checked against the template's (keys and grid). Anything else
(no template yet, other lines, a submessage ``n.k``, a line that does not parse, a sample that
differs) scans the file whole, as without a sidecar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["IdxLine", "parse_idx", "shape_of", "forecast_minutes", "MAX_IDX_BYTES"]

#: The largest sidecar read (a GRIB file of 1,000,000 messages has a ~60 MB inventory).
MAX_IDX_BYTES = 64 << 20

_LINE = re.compile(r"(\d{1,9}):(\d{1,15}):d=(\d{10}):([^:]*):([^:]*):([^:]*):?(.*)")
_UNITS = {"min": 1, "hour": 60, "day": 1440}
_FORECAST = re.compile(r"(?:(\d{1,9})-)?(\d{1,9}) (min|hour|day) (.*)")


@dataclass(frozen=True)
class IdxLine:
    """One inventory line: message ``n`` at byte ``offset``, reference time ``date`` (YYYYMMDDHH),
    wgrib2's ``var``, ``level`` and ``forecast`` texts."""

    n: int
    offset: int
    date: int
    var: str
    level: str
    forecast: str
    extra: str = ""  # what follows (an ensemble member: ENS=+1, a probability...)


def parse_idx(text: bytes) -> list[IdxLine] | None:
    """The lines of an inventory, or None when it is not one refset uses (a line that does not parse,
    a submessage ``n.k``, numbers out of order, offsets not increasing)."""
    try:
        lines = text.decode("ascii").splitlines()
    except UnicodeDecodeError:
        return None
    out: list[IdxLine] = []
    for raw in lines:
        if not raw.strip():
            continue
        m = _LINE.fullmatch(raw.strip())
        if m is None:
            return None
        n, off, date = int(m.group(1)), int(m.group(2)), int(m.group(3))
        if n != len(out) + 1 or (out and off <= out[-1].offset) or (not out and off != 0):
            return None
        y, mo, d, h = date // 1000000, date // 10000 % 100, date // 100 % 100, date % 100
        if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and y >= 1):
            return None
        out.append(IdxLine(n, off, date, m.group(4), m.group(5), m.group(6), m.group(7).strip(":")))
    return out or None


def forecast_minutes(text: str) -> int | None:
    """The end of the forecast period a forecast text names, in minutes (``anl``: 0; ``6 hour fcst``:
    360; ``0-6 hour acc fcst``: 360), or None."""
    if text == "anl":
        return 0
    m = _FORECAST.fullmatch(text)
    if m is None:
        return None
    return int(m.group(2)) * _UNITS[m.group(3)]


def shape_of(lines: list[IdxLine]) -> tuple[tuple[str, str, str, str], ...]:
    """What two inventories of one product share: each line's variable, level and forecast text with
    its numbers of hours left out (a file of another date or lead time has the same shape)."""
    return tuple((ln.var, ln.level, _FORECAST.sub(lambda m: f"* {m.group(3)} {m.group(4)}", ln.forecast),
                  ln.extra) for ln in lines)
