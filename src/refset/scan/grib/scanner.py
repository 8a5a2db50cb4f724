"""GRIB files (editions 1 and 2) -> reference sets: the :class:`GribScanner`.

Messages are framed by refset (the ``GRIB`` indicator, the edition's length field, the ``7777`` end
marker); their keys are read with ecCodes, the library cfgrib reads them with. Messages are grouped
into variables as cfgrib groups them: one per (cfVarName, typeOfLevel, stepType, grid), with the
ensemble number, reference time, step and level as dimensions where a variable has more than one of
them (scalar coordinates otherwise), named as cfgrib names them (``number``, ``time``, ``step``, the
level type: ``isobaricInhPa``, ``surface`` ...; ``valid_time`` beside them). Each message is one chunk,
decoded by the ``refset_grib`` codec (:mod:`.codec`) into float32 values, missing points NaN. Grids:
regular and Gaussian latitude/longitude give 1-D ``latitude``/``longitude``; any other (Lambert, polar
stereographic, ...) ``y``/``x`` dims with 2-D ``latitude``/``longitude`` coordinates. Coordinates are
stored in the set (inline).

Refused, naming the variable: two messages at the same coordinates (cfgrib keeps the first and warns;
refset does not choose), alternative row scanning. A file that is not GRIB past its first message, or
whose messages are cut, is :class:`~refset.errors.InvalidFile`.
"""

from __future__ import annotations

import datetime as _dt
import re
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import DropList, SidecarWarning
from refset.errors import Unsupported
from refset.io.magic import is_grib
from refset.io.scanfile import Broken, ScanFile
from refset.model.setwriter import SetWriter
from refset.scan.flat import FlatScanner
from refset.scan.grib.idx import MAX_IDX_BYTES, IdxLine, forecast_minutes, parse_idx, shape_of
from refset.scan.writer import cannot

__all__ = ["GribScanner", "frame", "MAX_MESSAGES"]

MAX_MESSAGES = 1_000_000
_BATCH = 64 << 20  # message bytes read at a time
_MEMO_GRIDS = 16  # grids a scanner remembers
_WHOLE = 256 << 20  # bytes of a remote file read at once before framing
_EPOCH = _dt.datetime(1970, 1, 1)
_KEYS_STR = ("cfVarName", "shortName", "typeOfLevel", "stepType", "gridType", "units", "name", "cfName")
_KEYS_INT = ("paramId", "dataDate", "dataTime", "Ni", "Nj", "edition")


def _find(read_at: Callable[[int, int], bytes], at: int, size: int) -> int:
    """Where the next ``GRIB`` indicator at or after ``at`` is, or -1."""
    window = 1 << 16
    while at < size:
        chunk = read_at(at, window + 3)
        k = chunk.find(b"GRIB")
        if k >= 0:
            return at + k
        at += window
    return -1


def _fields(data: bytes) -> int:
    """The number of fields (data sections) of a GRIB2 message: more than one in a multi-field
    message (u and v in one message, as NCEP writes them), which ecCodes reads as its first only."""
    if data[7:8] != b"\x02":
        return 1
    at, n = 16, 0
    while at + 5 <= len(data) - 4:
        length = int.from_bytes(data[at:at + 4], "big")
        if data[at:at + 4] == b"7777" or length < 5:
            break
        n += data[at + 4] == 7
        at += length
    return max(n, 1)


def _in(data: bytes, base: int) -> Callable[[int, int], bytes]:
    """``read(at, n)`` over a message's bytes ``data`` read from file offset ``base``."""
    def read(at: int, n: int) -> bytes:
        return data[at - base:at - base + n]

    return read


def _section(read: Callable[[int, int], bytes], at: int, end: int, number: int) -> bytes | None:
    """Section ``number`` (its bytes) of the GRIB2 message at ``at``, or None (GRIB1, or sections that
    do not walk)."""
    if read(at + 7, 1) != b"\x02":
        return None
    pos = at + 16
    while pos + 5 <= end:
        head = read(pos, 5)
        if len(head) < 5 or head[:4] == b"7777":
            return None
        length, kind = int.from_bytes(head[:4], "big"), head[4]
        if length < 5 or pos + length > end or kind > number:
            return None
        if kind == number:
            return read(pos, length)
        pos += length
    return None


def _grid_digest(read: Callable[[int, int], bytes], at: int, end: int) -> bytes | None:
    """A digest of the grid definition section (3) of the GRIB2 message at ``at``, or None (GRIB1, or
    sections that do not walk)."""
    import hashlib

    sec = _section(read, at, end, 3)
    return None if sec is None else hashlib.blake2b(sec, digest_size=16).digest()


#: Product definition templates whose horizontal levels are at octets 23-34 and forecast time at 19-22
#: (4.0-4.15), and the octets after them that say which field it is (ensemble member, probability,
#: percentile): 0-based slices of section 4.
_PRODUCT_FIELDS = {**{t: ((11, 17), (22, 34)) for t in range(16)},
                   **{t: ((11, 17), (22, 37)) for t in (1, 11)}, **{t: ((11, 17), (22, 36)) for t in (2, 12)},
                   **{t: ((11, 17), (22, 47)) for t in (5, 9)}, **{t: ((11, 17), (22, 35)) for t in (6, 10)},
                   **{t: ((11, 19), (24, 36)) for t in (40, 42)}, **{t: ((11, 19), (24, 39)) for t in (41, 43)}}


def _product_digest(read: Callable[[int, int], bytes], at: int, end: int) -> bytes | None:
    """A digest of what field the GRIB2 message at ``at`` holds, as two files of one product share it:
    its discipline and its product definition (section 4) but for the times (the forecast time, a
    statistical period's end): the parameter, the levels, the ensemble member... (templates other than
    :data:`_PRODUCT_FIELDS`': the parameter only). None: GRIB1, or sections that do not walk."""
    import hashlib

    sec = _section(read, at, end, 4)
    if sec is None or len(sec) < 11:
        return None
    template = int.from_bytes(sec[7:9], "big")
    parts = [read(at + 6, 1), sec[5:11]] + [sec[a:b] for a, b in _PRODUCT_FIELDS.get(template, ())]
    return hashlib.blake2b(b"|".join(parts), digest_size=16).digest()


def _declared(head: bytes) -> int | None:
    """The length a message's header declares (editions 1 and 2, GRIB1 up to 8 MiB), or None."""
    if len(head) < 16 or head[:4] != b"GRIB":
        return None
    if head[7] == 2:
        length = int.from_bytes(head[8:16], "big")
    elif head[7] == 1 and not head[4] & 0x80:
        length = int.from_bytes(head[4:7], "big")
    else:
        return None
    return length if length >= 16 else None


def frame(read_at: Callable[[int, int], bytes], size: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of every message of the file."""
    out: list[tuple[int, int]] = []
    at = 0
    while at < size:
        head = read_at(at, 16)
        if len(head) < 8 or head[:4] != b"GRIB":
            # bytes between messages (padding, a WMO bulletin header), skipped as ecCodes skips them
            nxt = _find(read_at, at, size)
            if nxt < 0:
                if out:
                    break  # a tail after the last message
                raise Broken("no GRIB message")
            at = nxt
            continue
        edition = head[7]
        if edition == 2:
            if len(head) < 16:
                raise Broken(f"message at byte {at}: its header is cut")
            length = int.from_bytes(head[8:16], "big")
        elif edition == 1:
            length = int.from_bytes(head[4:7], "big")
            if length & 0x800000:
                raise Unsupported(f"the GRIB message at byte {at}: a GRIB1 message over 8 MiB (ECMWF's "
                                  "large-message length convention is not read)")
        else:
            raise Broken(f"message at byte {at}: GRIB edition {edition}")
        if length < 16 or at + length > size:
            raise Broken(f"message at byte {at}: {length} bytes, past the end of the file ({size} bytes)")
        if read_at(at + length - 4, 4) != b"7777":
            raise Broken(f"message at byte {at}: no 7777 end marker at its end ({length} bytes)")
        out.append((at, length))
        if len(out) > MAX_MESSAGES:
            raise Broken(f"more than {MAX_MESSAGES} messages")
        at += length
    if not out:
        raise Broken("no GRIB message")
    return out


@dataclass
class _Message:
    offset: int
    length: int
    keys: dict[str, Any]
    grid: tuple[Any, ...]
    time: int  # reference time, seconds since 1970
    step: int  # minutes
    level: float
    number: int
    grid_section: bytes | None = None  # a digest of its grid definition section (GRIB2), for .idx templates
    product: bytes | None = None  # and of what field it holds (:func:`_product_digest`)


@dataclass
class _Grid:
    kind: str  # "latlon", "xy" or "unsupported"
    lat: np.ndarray
    lon: np.ndarray
    shape: tuple[int, int]
    name: str = ""  # ecCodes' gridType


def _refused(at: int, e: Exception) -> Broken:
    """ecCodes' refusal of the message at byte ``at``, as the file's fault (raised ``from e``)."""
    return Broken(f"the GRIB message at byte {at} cannot be read: {type(e).__name__}: {e}", titled=False)


def _keys(data: bytes, at: int) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The keys the scan groups the message ``data`` (at byte ``at``) by, and its grid's identity."""
    try:
        return _read_keys(data)
    except Exception as e:  # ecCodes' own errors (and its values' conversions): the message's fault
        raise _refused(at, e) from e


def _read_keys(data: bytes) -> tuple[dict[str, Any], tuple[Any, ...]]:
    import eccodes

    h = eccodes.codes_new_from_message(data)
    try:
        k: dict[str, Any] = {}
        for name in _KEYS_STR:
            try:
                k[name] = str(eccodes.codes_get(h, name, str))
            except eccodes.KeyValueNotFoundError:
                k[name] = None
        for name in _KEYS_INT:
            try:
                k[name] = int(eccodes.codes_get(h, name, int))
            except eccodes.KeyValueNotFoundError:
                k[name] = None
        eccodes.codes_set(h, "stepUnits", "m")
        k["step"] = int(eccodes.codes_get(h, "endStep", int))
        try:
            k["level"] = float(eccodes.codes_get(h, "level", float))
        except eccodes.KeyValueNotFoundError:
            k["level"] = 0.0
        try:
            k["number"] = int(eccodes.codes_get(h, "number", int))
        except (eccodes.KeyValueNotFoundError, eccodes.GribInternalError):
            k["number"] = 0
        for flag in ("alternativeRowScanning", "jPointsAreConsecutive"):
            try:
                k[flag] = int(eccodes.codes_get(h, flag, int))
            except eccodes.KeyValueNotFoundError:
                k[flag] = 0
        try:  # the grid definition section's digest: messages of one grid share it, file after file
            digest = str(eccodes.codes_get(h, "md5GridSection", str))
        except eccodes.KeyValueNotFoundError:
            digest = ""
        grid_id = (k["gridType"], k["Ni"], k["Nj"], digest, int(eccodes.codes_get(h, "numberOfPoints", int)))
        return k, grid_id
    finally:
        eccodes.codes_release(h)


def _geography(data: bytes, at: int) -> _Grid:
    """The coordinates of the grid of the message ``data`` (at byte ``at``)."""
    import eccodes

    try:
        h = eccodes.codes_new_from_message(data)
        try:
            ni, nj = int(eccodes.codes_get(h, "Ni", int)), int(eccodes.codes_get(h, "Nj", int))
            kind = str(eccodes.codes_get(h, "gridType", str))
            try:
                lat = np.asarray(eccodes.codes_get_array(h, "latitudes"), np.float64)
                lon = np.asarray(eccodes.codes_get_array(h, "longitudes"), np.float64)
            except eccodes.GribInternalError:  # spectral fields have no points
                return _Grid("unsupported", np.zeros(0), np.zeros(0), (0, 0), kind)
        finally:
            eccodes.codes_release(h)
    except Exception as e:  # ecCodes' own errors: the message's fault
        raise _refused(at, e) from e
    if ni <= 0 or nj <= 0 or lat.size != ni * nj or ni >= 1 << 31 or nj >= 1 << 31:
        return _Grid("unsupported", lat, lon, (0, 0), kind)  # reduced grids, spherical harmonics...
    lat2, lon2 = lat.reshape(nj, ni), lon.reshape(nj, ni)
    if kind in ("regular_ll", "regular_gg"):
        return _Grid("latlon", lat2[:, 0].copy(), lon2[0, :].copy(), (nj, ni), kind)
    return _Grid("xy", lat2, lon2, (nj, ni), kind)


def _sidecar(file: ScanFile) -> list[IdxLine] | None:
    """The lines of ``FILE.idx`` beside ``file``, when there is one refset uses (else None: a remote
    file pays one request to learn there is none). Opened by the scan's opener (its requests counted
    with the scan's); a sidecar that cannot be read (none: ``FileNotFoundError``; a server refusing
    it) is no sidecar: the file is scanned without one."""
    try:
        side = file.sibling(file.url + ".idx", head_bytes=MAX_IDX_BYTES + 1)  # a remote one in one request
        text = side.read_at(0, MAX_IDX_BYTES + 1)
    except OSError:
        return None
    return None if side.size > MAX_IDX_BYTES else parse_idx(text)


def _seconds(date: int | None, time: int | None) -> int:
    """Seconds since 1970 of a ``YYYYMMDD`` date and ``HHMM`` time; :class:`Broken` for no such date."""
    if date is None:
        return 0
    try:
        d = _dt.datetime(date // 10000, date // 100 % 100, date % 100, (time or 0) // 100, (time or 0) % 100)
    except (ValueError, OverflowError) as e:
        raise Broken(f"date {date} time {time}: {e}") from None
    return int((d - _EPOCH).total_seconds())


#: wgrib2's words for a level of one number, and how ecCodes says it: (typeOfLevel, factor to its unit)
_LEVEL_WORDS = {"mb": {"isobaricInhPa": 1.0, "isobaricInPa": 100.0}, "m above ground": {"heightAboveGround": 1.0},
                "m above mean sea level": {"heightAboveSea": 1.0}, "hybrid level": {"hybrid": 1.0},
                "K isentropic level": {"theta": 1.0}, "sigma level": {"sigma": 1.0}}
_LEVEL_TEXT = re.compile(r"(\d+(?:\.\d+)?) (" + "|".join(map(re.escape, _LEVEL_WORDS)) + ")")


def _disagreement(lines: list[IdxLine], messages: list[_Message]) -> str | None:
    """How the inventory ``lines`` does not describe the file whose ``messages`` they are (None: it
    does, as far as it says): the number of messages, their offsets, reference times, forecast
    steps, and levels wgrib2 names by one number (``500 mb``, ``2 m above ground``)."""
    if len(lines) != len(messages):
        return f"it lists {len(lines)} messages, the file holds {len(messages)}"
    for ln, m in zip(lines, messages, strict=True):
        if ln.offset != m.offset:
            return f"its line {ln.n} says byte {ln.offset}, the message is at byte {m.offset}"
        if forecast_minutes(ln.forecast) != m.step:
            return f"its line {ln.n} says {ln.forecast!r}, the message at byte {m.offset} is at step {m.step} min"
        date, time = m.keys.get("dataDate"), m.keys.get("dataTime")
        if date is not None and time is not None and not time % 100 and ln.date != date * 100 + time // 100:
            return f"its line {ln.n} says d={ln.date}, the message at byte {m.offset} is of {date} {time:04d}"
        level = _LEVEL_TEXT.fullmatch(ln.level)
        if level is not None:
            factor = _LEVEL_WORDS[level.group(2)].get(str(m.keys.get("typeOfLevel")))
            if factor is not None and abs(float(level.group(1)) * factor - m.level) > 1e-6 * max(1.0, abs(m.level)):
                return (f"its line {ln.n} says {ln.var}:{ln.level}, the message at byte {m.offset} is "
                        f"{m.keys.get('shortName')} at {m.keys.get('typeOfLevel')} {m.level:g}")
    return None


class GribScanner(FlatScanner):
    """GRIB files, editions 1 and 2 (needs ecCodes: ``pip install 'refset[grib]'``)."""

    name: ClassVar[str] = "grib"
    title: ClassVar[str] = "GRIB"
    shared: ClassVar[bool] = True  # memos only (grids, templates, directories without sidecars)

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # the run's memo: a grid's coordinates by its definition's digest (ecCodes takes ~0.4 s to
        # compute a 1.9-million-point Lambert grid's; a product's files share one grid)
        self._grids: dict[tuple[Any, ...], _Grid] = {}
        # and the messages' keys of files whose .idx sidecars agreed with them, by the inventory's shape
        self._templates: dict[tuple[Any, ...], list[_Message]] = {}
        self._no_idx: set[str] = set()  # directories of remote files that had no sidecar
        self._with_idx: set[str] = set()  # and that had one
        self._unteachable: set[Any] = set()  # inventory shapes whose file did not agree with them
        self._taught: dict[tuple[Any, ...], str] = {}  # the file each template was learnt from
        # what threads sharing this scanner (Scan.many) are making now: a grid, a template; the others
        # asking for the same wait for it rather than make it again (64 threads, one HRRR grid each)
        self._making: dict[tuple[str, Any], threading.Event] = {}
        #: files whose inventory the run's template could not follow (scanned whole), and why the last
        self.fallbacks = 0
        self.last_fallback = ""

    def _grid(self, gid: tuple[Any, ...], data: bytes, at: int) -> _Grid:
        """The coordinates of grid ``gid`` (of the message ``data``, at byte ``at``), computed once a
        run where its definition has a digest."""
        if not gid[3]:
            return _geography(data, at)
        got = self._grids.get(gid)
        if got is not None:
            return got
        mine = self._claim(("grid", gid))
        if mine is None:  # another thread computed it meanwhile
            got = self._grids.get(gid)
            if got is not None:
                return got
        try:
            got = _geography(data, at)
            if len(self._grids) >= _MEMO_GRIDS:
                self._grids.clear()
            self._grids[gid] = got
            return got
        finally:
            self._release(("grid", gid), mine)

    def _claim(self, what: tuple[str, Any]) -> threading.Event | None:
        """An event to set once ``what`` is made, when this thread is to make it; None after waiting
        for the thread that was making it."""
        mine = threading.Event()
        theirs = self._making.setdefault(what, mine)
        if theirs is mine:
            return mine
        theirs.wait()
        return None

    def _release(self, what: tuple[str, Any], mine: threading.Event | None) -> None:
        if mine is not None:
            self._making.pop(what, None)
            mine.set()

    def _sidecar(self, file: ScanFile) -> list[IdxLine] | None:
        """The sidecar's lines (:func:`_sidecar`); a remote file's looked for unless another file of its
        directory had none (one request a directory, not one a file, where a product has no sidecars:
        threads sharing the scanner wait for the first probe of a directory)."""
        if file.local:
            return _sidecar(file)
        where = file.store.url.rpartition("/")[0]
        if where in self._no_idx:
            return None
        mine = None
        if where not in self._with_idx:
            mine = self._claim(("probe", where))
            if mine is None and where in self._no_idx:
                return None
        try:
            got = _sidecar(file)
            seen = self._with_idx if got is not None else self._no_idx
            if len(seen) >= 1024:
                seen.clear()
            seen.add(where)
            return got
        finally:
            self._release(("probe", where), mine)

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited
        return is_grib(head)

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        # docstring inherited: the messages are the data (a message a chunk); nothing is metadata
        try:
            import eccodes  # noqa: F401
        except ImportError:
            raise Unsupported("GRIB files need ecCodes: pip install 'refset[grib]'") from None
        lines = self._sidecar(file)
        learning: threading.Event | None = None
        got = None
        try:
            if lines is not None:
                got = self._from_template(file, lines)
                if got is None and shape_of(lines) not in self._unteachable:
                    # learn the template, or wait for the thread learning it and use it
                    learning = self._claim(("template", shape_of(lines)))
                    if learning is None:
                        got = self._from_template(file, lines)
            if got is None:
                got = self._whole(file, lines)
        finally:
            if lines is not None:
                self._release(("template", shape_of(lines)), learning)
        messages, grids = got
        out.group("", {"GRIB_edition": messages[0].keys.get("edition"), "Conventions": "CF-1.7"})
        _write(out, messages, grids, drop)

    def _whole(self, file: ScanFile, lines: list[IdxLine] | None
               ) -> tuple[list[_Message], dict[tuple[Any, ...], _Grid]]:
        """The messages of ``file``, all read (the template of ``lines`` learnt), and their grids."""
        # a scan reads every message whole: a remote file's first _WHOLE bytes in one request, so
        # that framing (a header per message) costs no round trip of its own
        file.prefetch([(0, min(file.size, _WHOLE))])
        spans = frame(file.read_at, file.size)
        messages: list[_Message] = []
        grids: dict[tuple[Any, ...], _Grid] = {}
        batch: list[tuple[int, int]] = []
        total = 0

        def flush() -> None:
            datas = file.read_ranges([o for o, _ in batch], [n for _, n in batch])
            for (o, n), data in zip(batch, datas, strict=True):
                fields = _fields(data)
                if fields > 1:
                    raise Unsupported(f"{file.url}: the GRIB message at byte {o} holds {fields} fields (a "
                                      "multi-field message, which ecCodes reads as its first field only): "
                                      "split it first (grib_copy)")
                k, gid = _keys(data, o)
                if gid not in grids:
                    grids[gid] = self._grid(gid, data, o)
                read = _in(data, o)
                messages.append(_Message(o, n, k, gid, _seconds(k["dataDate"], k["dataTime"]), k["step"],
                                         k["level"], k["number"],
                                         _grid_digest(read, o, o + n) if lines is not None else None,
                                         _product_digest(read, o, o + n) if lines is not None else None))
            batch.clear()

        for o, n in spans:
            batch.append((o, n))
            total += n
            if total >= _BATCH:
                flush()
                total = 0
        if batch:
            flush()
        if lines is not None:
            self._learn(file, lines, messages)
        return messages, grids

    def _learn(self, file: ScanFile, lines: list[IdxLine], messages: list[_Message]) -> None:
        """Keep ``messages`` as the template of inventories shaped like ``lines`` when the inventory
        agrees with them: one line a message, at its offset, with its reference time, step and level,
        and the same fields as the file that taught the template before (if any) holds at the same
        lines. An inventory that disagrees does not describe its file: a :class:`SidecarWarning`
        (the file was read whole: its set is right); where two files' inventories of the same lines
        disagree on which field a line is, one of them does not describe its file: neither teaches,
        and the run scans files of that shape whole."""
        shape = shape_of(lines)
        why = _disagreement(lines, messages)
        before = self._templates.get(shape)
        if why is None and before is not None:
            k = next((k for k, (a, b) in enumerate(zip(before, messages, strict=True)) if a.product != b.product), -1)
            if k >= 0:
                taught = self._taught.get(shape, "another file")
                why = (f"its line {k + 1} ({lines[k].var}:{lines[k].level}) is another field than the same line of "
                       f"{taught}.idx, which lists the same messages: one of the two inventories is out of date")
                self._templates.pop(shape, None)
        if why is not None:
            warnings.warn(SidecarWarning(file.url, file.url + ".idx", why), stacklevel=2)
        if why is not None or any(m.grid_section is None or m.product is None or m.keys.get("dataDate") is None
                                  or m.keys.get("dataTime") is None or m.keys["dataTime"] % 100 for m in messages):
            # GRIB1 (no digests here), times in minutes, or an inventory that does not agree: no thread
            # waits on another's scan of such an inventory's shape again (a bounded memo)
            if len(self._unteachable) >= _MEMO_GRIDS * 64:
                self._unteachable.clear()
            self._unteachable.add(shape)
            return
        if len(self._templates) >= _MEMO_GRIDS:
            self._templates.clear()
            self._taught.clear()
        self._templates[shape] = messages
        self._taught[shape] = file.url

    def _from_template(self, file: ScanFile, lines: list[IdxLine]
                       ) -> tuple[list[_Message], dict[tuple[Any, ...], _Grid]] | None:
        """The messages of ``file`` from its inventory and the run's template of its shape, one
        message per grid read and checked against the template's; None: scan it whole. What the
        template cannot follow (an inventory of impossible dates, a sample ecCodes refuses, ranges
        past the end: a :class:`Broken`) is scanned whole too, which names what is wrong, and counted
        (:attr:`fallbacks`, :attr:`last_fallback`)."""
        try:
            return self._templated(file, lines)
        except Broken as e:
            self.fallbacks += 1
            self.last_fallback = str(e)
            return None

    def _templated(self, file: ScanFile, lines: list[IdxLine]
                   ) -> tuple[list[_Message], dict[tuple[Any, ...], _Grid]] | None:
        tpl = self._templates.get(shape_of(lines))
        if tpl is None or lines[-1].offset >= file.size:
            return None
        ends = [ln.offset for ln in lines[1:]] + [file.size]
        steps = [forecast_minutes(ln.forecast) for ln in lines]
        out = []
        for ln, end, step, t in zip(lines, ends, steps, tpl, strict=True):
            if step is None:
                return None
            keys = {**t.keys, "dataDate": ln.date // 100, "dataTime": ln.date % 100 * 100, "step": step}
            out.append(_Message(ln.offset, end - ln.offset, keys, t.grid, _seconds(keys["dataDate"],
                                                                                  keys["dataTime"]),
                                step, t.level, t.number, t.grid_section, t.product))
        if file.local:  # every message's header, grid section and end marker checked (no request)
            for m in out:
                length = _declared(file.read_at(m.offset, 16))
                if length is None or length > m.length or file.read_at(m.offset + length - 4, 4) != b"7777":
                    return None
                if _grid_digest(file.read_at, m.offset, m.offset + length) != m.grid_section:
                    return None  # a message on another grid than the template's at its place
                if _product_digest(file.read_at, m.offset, m.offset + length) != m.product:
                    return None  # another field than the template's at its place (a reordered file)
                m.length = length
            last = out[-1]
            if last.length < file.size - last.offset and b"GRIB" in file.read_at(
                    last.offset + last.length, file.size - last.offset - last.length):
                return None  # messages past the inventory's last line (appended after it was written)
        samples = {m.grid: k for k, m in reversed(list(enumerate(out)))}  # the first message of each grid
        picks = sorted(samples.values())
        # remotely, with the samples (one round): the last message's header, as nothing may follow it
        tail = [] if file.local or picks[-1] == len(out) - 1 else [len(out) - 1]
        datas = file.read_ranges([out[k].offset for k in picks + tail],
                                 [out[k].length if k in samples.values() else 16 for k in picks + tail])
        if tail and _declared(datas.pop()) != out[-1].length:
            return None
        grids: dict[tuple[Any, ...], _Grid] = {}
        for k, data in zip(picks, datas, strict=True):
            m = out[k]
            length = _declared(data[:16])
            if length is None or length > len(data) or data[length - 4:length] != b"7777" or _fields(data) != 1:
                return None
            if k == len(out) - 1 and length != len(data):
                return None  # bytes after the last message: messages the inventory does not list
            read = _in(data, m.offset)
            if (_grid_digest(read, m.offset, m.offset + length) != m.grid_section
                    or _product_digest(read, m.offset, m.offset + length) != m.product):
                return None
            data = data[:length]
            got, gid = _keys(data, m.offset)
            if gid != m.grid or any(got.get(name) != m.keys.get(name) for name in (*_KEYS_STR, *_KEYS_INT, "step",
                                                                                   "level", "number")):
                return None
            grids[gid] = self._grid(gid, data, m.offset)
        return out, grids


_COORD_ATTRS = {
    "time": {"units": "seconds since 1970-01-01T00:00:00", "calendar": "proleptic_gregorian",
             "standard_name": "forecast_reference_time", "long_name": "initial time of forecast"},
    "step": {"units": "minutes", "standard_name": "forecast_period", "long_name": "time since forecast_reference_time",
             "dtype": "timedelta64[ns]"},  # xarray decodes it as a timedelta, as cfgrib gives it
    "valid_time": {"units": "seconds since 1970-01-01T00:00:00", "calendar": "proleptic_gregorian",
                   "standard_name": "time", "long_name": "time"},
    "number": {"long_name": "ensemble member numerical id", "standard_name": "realization", "units": "1"},
}


#: Level types' coordinate attributes as cfgrib writes them; pressure levels are stored decreasing.
_LEVELS: dict[str, dict[str, Any]] = {
    "isobaricInhPa": {"units": "hPa", "positive": "down", "stored_direction": "decreasing",
                      "standard_name": "air_pressure", "long_name": "pressure"},
    "isobaricInPa": {"units": "Pa", "positive": "down", "stored_direction": "decreasing",
                     "standard_name": "air_pressure", "long_name": "pressure"},
    "heightAboveGround": {"units": "m", "positive": "up", "standard_name": "height",
                          "long_name": "height above the surface"},
    "depthBelowLand": {"units": "m", "positive": "down", "standard_name": "depth", "long_name": "soil depth"},
    "hybrid": {"units": "1", "positive": "down", "long_name": "hybrid level",
               "standard_name": "atmosphere_hybrid_sigma_pressure_coordinate"},
}


class _Coords:
    """Coordinates shared between variables when equal; ``NAME_K`` when another variable has other
    values (or another shape) under that name. A dimension coordinate's dim is its own name."""

    def __init__(self, out: SetWriter) -> None:
        self.out = out
        self.made: dict[str, tuple[bytes, tuple[str, ...]]] = {}

    def add(self, name: str, values: np.ndarray, attrs: dict[str, Any], dims: tuple[str, ...] | None = None) -> str:
        """The name ``values`` are stored under; ``dims`` None: a dimension coordinate (its own dim)."""
        k = 0
        while True:
            cand = name if k == 0 else f"{name}_{k}"
            the_dims = (cand,) if dims is None else dims
            sig = (values.tobytes() + values.dtype.str.encode(), the_dims)
            if cand not in self.made or self.made[cand] == sig:
                break
            k += 1
        if cand not in self.made:
            self.made[cand] = sig
            self.out.array(cand, shape=values.shape, chunks=values.shape, dtype=values.dtype, fill_value=None,
                           filters=None, attrs=attrs, dims=list(the_dims), inline={0: values.tobytes()})
        return cand


def _write(out: SetWriter, messages: list[_Message], grids: dict[tuple[Any, ...], _Grid], drop: DropList) -> None:
    groups: dict[tuple[Any, ...], list[_Message]] = {}
    for m in messages:
        k = m.keys
        groups.setdefault((k["cfVarName"] or k["shortName"] or "unknown", k["typeOfLevel"], k["stepType"], m.grid),
                          []).append(m)
    names: dict[str, int] = {}
    for key in groups:
        names[key[0]] = names.get(key[0], 0) + 1
    used: set[str] = set()
    coords = _Coords(out)
    grid_names: dict[tuple[Any, ...], tuple[str, str, list[str]]] = {}  # dims, 2-D coordinates
    for (var, level_type, step_type, gid), msgs in groups.items():
        name = var if names[var] == 1 else f"{var}_{level_type}_{step_type}"
        base, n = name, 1
        while name in used:  # one variable on several grids
            name, n = f"{base}_grid{n}", n + 1
        used.add(name)
        if name in drop:
            continue
        if msgs[0].keys.get("alternativeRowScanning") or msgs[0].keys.get("jPointsAreConsecutive"):
            raise cannot(name, "its grid's points run along columns or in alternate directions (not one "
                               "array of rows)")
        grid = grids[gid]
        if grid.kind == "unsupported":
            raise cannot(name, f"its {grid.name} grid is not a rectangle of points (reduced and spectral "
                               "grids are not referenced)")
        # the grid's dims and coordinates, once per grid
        if gid not in grid_names:
            if grid.kind == "latlon":
                ydim = coords.add("latitude", grid.lat, {"units": "degrees_north", "standard_name": "latitude"})
                xdim = coords.add("longitude", grid.lon, {"units": "degrees_east", "standard_name": "longitude"})
                grid_names[gid] = (ydim, xdim, [])
            else:
                nxy = len([g for g in grid_names.values() if g[2]])
                ydim, xdim = ("y", "x") if nxy == 0 else (f"y_{nxy}", f"x_{nxy}")
                lat = coords.add("latitude", grid.lat, {"units": "degrees_north", "standard_name": "latitude"},
                                 (ydim, xdim))
                lon = coords.add("longitude", grid.lon, {"units": "degrees_east", "standard_name": "longitude"},
                                 (ydim, xdim))
                grid_names[gid] = (ydim, xdim, [lat, lon])
        ydim, xdim, grid_coords = grid_names[gid]
        scalar: list[str] = list(grid_coords)
        axes = []  # (coordinate name, values per message, all values, attrs)
        level_name = level_type or "level"
        for cname, per in (("number", [m.number for m in msgs]), ("time", [m.time for m in msgs]),
                           ("step", [m.step for m in msgs]), (level_name, [m.level for m in msgs])):
            vals = np.asarray(per).astype(np.float64 if cname == level_name else np.int64)  # as cfgrib
            attrs = dict(_COORD_ATTRS.get(cname) or _LEVELS.get(cname) or {"long_name": level_name})
            uniq = np.unique(vals)
            if attrs.get("stored_direction") == "decreasing":
                uniq = uniq[::-1].copy()
            if cname == "number" and uniq.size == 1 and uniq[0] == 0:
                continue  # not an ensemble
            axes.append((cname, vals, uniq, attrs))
        dims: list[str] = []
        index = []
        shape = []
        for cname, vals, uniq, attrs in axes:
            if uniq.size > 1:
                real = coords.add(cname, uniq, attrs)
                dims.append(real)
                order = np.argsort(uniq)
                index.append(order[np.searchsorted(uniq[order], vals)])
                shape.append(uniq.size)
            else:
                scalar.append(coords.add(cname, uniq.reshape(()), attrs, ()))
        # valid_time: time + step, over the time/step dims this variable has
        t_ax = next((a for a in axes if a[0] == "time"), None)
        s_ax = next((a for a in axes if a[0] == "step"), None)
        if t_ax is not None and s_ax is not None:
            tv, sv = t_ax[2], s_ax[2]
            vt_dims = tuple(d for d, a in zip(dims, [x for x in axes if x[2].size > 1]) if a[0] in ("time", "step"))
            valid = (tv.reshape(-1, 1) + 60 * sv.reshape(1, -1))
            valid = valid.reshape(tuple(n for n in (tv.size, sv.size) if n > 1)) if vt_dims else valid.reshape(())
            scalar.append(coords.add("valid_time", valid.astype(np.int64), dict(_COORD_ATTRS["valid_time"]), vt_dims))
        limit = 2**63 // 10**9  # seconds a datetime64[ns] / timedelta64[ns] holds: what xarray decodes into
        if max(abs(m.time) for m in msgs) >= limit or max(abs(m.step) for m in msgs) * 60 >= limit:
            raise cannot(name, "a reference time or step more than 292 years from 1970 or 0 (xarray holds "
                               "times as nanoseconds)")
        flat = np.ravel_multi_index(tuple(index), tuple(shape)) if index else np.zeros(len(msgs), np.int64)
        if np.unique(flat).size != len(msgs):
            raise cannot(name, f"{len(msgs) - np.unique(flat).size + 1} messages at the same coordinates "
                               "(cfgrib keeps the first; refset does not choose)")
        ny, nx = grid.shape
        offsets = np.zeros(int(np.prod(shape, dtype=np.int64)) if shape else 1, np.int64)
        lengths = np.zeros_like(offsets)
        offsets[flat] = [m.offset for m in msgs]
        lengths[flat] = [m.length for m in msgs]
        k = msgs[0].keys
        var_attrs: dict[str, Any] = {f"GRIB_{a}": k[a] for a in ("paramId", "shortName", "units", "name", "cfName",
                                                             "cfVarName", "typeOfLevel", "stepType", "gridType",
                                                             "Ni", "Nj") if k.get(a) not in (None, "unknown", "")}
        if k.get("units") not in (None, "unknown"):
            var_attrs["units"] = k["units"]
        if k.get("name") not in (None, "unknown"):
            var_attrs["long_name"] = k["name"]
        if k.get("cfName") not in (None, "unknown", ""):
            var_attrs["standard_name"] = k["cfName"]
        if scalar:
            var_attrs["coordinates"] = " ".join(scalar)
        grid_shape = (*shape, 1, 1)
        out.array(name, shape=(*shape, ny, nx), chunks=(*([1] * len(shape)), ny, nx), dtype=np.dtype("<f4"),
                  fill_value=float("nan"), filters=[{"id": "refset_grib", "dtype": "<f4"}], attrs=var_attrs,
                  dims=[*dims, ydim, xdim], offset=offsets.reshape(grid_shape), length=lengths.reshape(grid_shape))
