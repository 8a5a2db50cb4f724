"""TIFF and BigTIFF structure: the header and the chain of image file directories (IFDs), read by
refset itself (TIFF 6.0, Adobe 1992, section 2; BigTIFF: the 8-byte offsets of libtiff 4).

Only structure is read: tag values are decoded when asked for (:meth:`Ifd.values`), each bounded by the
file's size, and the chain is refused when it loops, holds more than :data:`MAX_IFDS` directories or a
directory more than :data:`MAX_ENTRIES` entries. Anything malformed is :class:`~refset.io.scanfile.Broken`
(the scan's frame names the file). The header, the directories and the values of their tags are the
file's metadata (:func:`metadata_spans`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from refset.io.magic import is_tiff
from refset.io.scanfile import Broken, ScanFile

__all__ = ["Ifd", "read_ifds", "metadata_spans", "MAX_IFDS", "MAX_ENTRIES", "MAX_VALUES"]
MAX_IFDS = 100_000  # pages of a file (a 10,000-page stack is common; a loop is not)
MAX_ENTRIES = 4_096  # tags of one directory (baseline TIFF has ~40)
MAX_VALUES = 1 << 28  # values of one tag (tile offsets of a 16384-tile-square image: 2**28)

# field type -> (numpy dtype character, size in bytes): BYTE ASCII SHORT LONG RATIONAL SBYTE UNDEFINED
# SSHORT SLONG SRATIONAL FLOAT DOUBLE IFD LONG8 SLONG8 IFD8
_TYPES: dict[int, tuple[str, int]] = {
    1: ("u1", 1), 2: ("S1", 1), 3: ("u2", 2), 4: ("u4", 4), 5: ("u4", 8), 6: ("i1", 1), 7: ("u1", 1),
    8: ("i2", 2), 9: ("i4", 4), 10: ("i4", 8), 11: ("f4", 4), 12: ("f8", 8), 13: ("u4", 4), 16: ("u8", 8),
    17: ("i8", 8), 18: ("u8", 8),
}


@dataclass(frozen=True, slots=True)
class Entry:
    tag: int
    type: int
    count: int
    at: int  # where the value is: in the entry itself or at an offset in the file
    inline: bytes | None = None  # the value's bytes when the entry holds them


@dataclass
class Ifd:
    """One directory: its entries by tag, their values read from ``file`` when asked for."""

    offset: int
    entries: dict[int, Entry]
    endian: str  # "<" or ">"
    file: ScanFile
    end: int = 0  # where the directory's block ends
    _decoded: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    _ints: dict[int, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def spans(self) -> list[tuple[int, int]]:
        """``[start, end)`` of the directory's block and of every value it holds outside it."""
        out = [(self.offset, self.end)]
        for e in self.entries.values():
            n = e.count * _TYPES[e.type][1]
            if not self.offset <= e.at < self.end:
                out.append((e.at, e.at + n))
        return out

    def has(self, tag: int) -> bool:
        return tag in self.entries

    def values(self, tag: int) -> np.ndarray:
        """The values of ``tag`` as a 1-d array (RATIONALs as float64 numerator/denominator)."""
        got = self._decoded.get(tag)
        if got is not None:
            return got
        e = self.entries[tag]
        char, width = _TYPES[e.type]
        n = e.count * width
        if e.inline is not None:
            raw = e.inline[:n]
        else:
            if e.at + n > self.file.size:
                raise Broken(f"tag {tag}: its {e.count} values lie past the end of the file")
            raw = self.file.read_exact(e.at, n)
        if e.type in (5, 10):  # (numerator, denominator) pairs
            pairs = np.frombuffer(raw, self.endian + char).reshape(-1, 2).astype(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                got = pairs[:, 0] / pairs[:, 1]
        else:
            got = np.frombuffer(raw, self.endian + char) if char != "S1" else np.frombuffer(raw, "S1")
        got.flags.writeable = False  # kept for the next caller
        self._decoded[tag] = got
        return got

    def ints(self, tag: int, default: int | None = None, types: tuple[int, ...] = (1, 3, 4, 16)) -> np.ndarray:
        """The values of an integer tag; ``default`` (one value) when absent. ``types``: the field types
        the tag may have (unsigned BYTE, SHORT, LONG, LONG8 by default; the specification names one or
        two per tag, and another type is a broken entry, not a value to reinterpret)."""
        e = self.entries.get(tag)
        if e is None:
            if default is None:
                raise Broken(f"tag {tag} is missing")
            return np.array([default], np.int64)
        if e.type not in types:
            raise Broken(f"tag {tag}: values of type {e.type}, expected one of {types}")
        got = self._ints.get(tag)
        if got is None:
            v = self.values(tag)
            if v.size and v.dtype == np.uint64 and int(v.max()) >= 1 << 63:
                raise Broken(f"tag {tag}: a value past 2**63")
            got = self._ints[tag] = v.astype(np.int64)
            got.flags.writeable = False  # kept for the next caller
        return got

    def one(self, tag: int, default: int | None = None) -> int:
        if default is not None and tag not in self.entries:
            return default
        v = self.ints(tag, default)
        if v.size < 1:
            raise Broken(f"tag {tag} has no value")
        return int(v[0])

    def text(self, tag: int) -> str | None:
        """An ASCII tag's text (up to its first NUL), None when absent."""
        if tag not in self.entries:
            return None
        if self.entries[tag].type not in (1, 2, 7):
            raise Broken(f"tag {tag}: values of type {self.entries[tag].type}, expected ASCII text")
        raw = self.values(tag).tobytes()
        return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def read_ifds(file: ScanFile) -> list[Ifd]:
    """Every directory of the file, in chain order."""
    size = file.size
    head = file.read_at(0, 16)
    if len(head) < 8 or not is_tiff(head):
        raise Broken("no TIFF header (II*/MM*, or BigTIFF's II+/MM+)")
    endian = "<" if head[:2] == b"II" else ">"
    big = head[2:4] in (b"+\0", b"\0+")
    if big:
        if len(head) < 16:
            raise Broken("BigTIFF header cut short")
        osize, zero = struct.unpack(endian + "HH", head[4:8])
        if osize != 8 or zero != 0:
            raise Broken(f"BigTIFF offset size {osize}, expected 8")
        first = struct.unpack(endian + "Q", head[8:16])[0]
    else:
        first = struct.unpack(endian + "I", head[4:8])[0]
    count_fmt, entry_size, next_fmt = ("Q", 20, "Q") if big else ("H", 12, "I")
    inline = 8 if big else 4
    out: list[Ifd] = []
    seen: set[int] = set()
    at = first
    while at:
        if at in seen:
            raise Broken(f"the chain of directories loops (directory at {at} again)")
        if len(out) >= MAX_IFDS:
            raise Broken(f"more than {MAX_IFDS} directories")
        csize = struct.calcsize(count_fmt)
        if at + csize > size:
            raise Broken(f"directory {len(out)} at {at} lies past the end of the file ({size} bytes)")
        seen.add(at)
        n = struct.unpack(endian + count_fmt, file.read_exact(at, csize))[0]
        if n == 0 or n > MAX_ENTRIES:
            raise Broken(f"directory {len(out)} has {n} entries")
        body_size = n * entry_size + struct.calcsize(next_fmt)
        if at + csize + body_size > size:
            raise Broken(f"directory {len(out)} ({n} entries) runs past the end of the file")
        body = file.read_exact(at + csize, body_size)
        entries: dict[int, Entry] = {}
        for i in range(n):
            e = body[i * entry_size:(i + 1) * entry_size]
            if big:
                tag, typ, count = struct.unpack(endian + "HHQ", e[:12])
                value = e[12:20]
            else:
                tag, typ, count = struct.unpack(endian + "HHI", e[:8])
                value = e[8:12]
            if typ not in _TYPES:
                continue  # an unknown type: TIFF readers skip the entry
            if count > MAX_VALUES:
                raise Broken(f"directory {len(out)}: tag {tag} claims {count} values")
            nbytes = count * _TYPES[typ][1]
            if nbytes <= inline:
                entries[tag] = Entry(tag, typ, count, at + csize + i * entry_size + (12 if big else 8), value)
                continue
            where = struct.unpack(endian + ("Q" if big else "I"), value)[0]
            if where + nbytes > size:
                raise Broken(f"directory {len(out)}: the values of tag {tag} lie past the end of the file")
            entries[tag] = Entry(tag, typ, count, where)
        out.append(Ifd(at, entries, endian, file, at + csize + body_size))
        at = struct.unpack(endian + next_fmt, body[n * entry_size:])[0]
        if at and at >= size:
            raise Broken(f"directory {len(out)} at {at} lies past the end of the file ({size} bytes)")
    if not out:
        raise Broken("the file has no image directory")
    return out


def metadata_spans(ifds: list[Ifd]) -> np.ndarray:
    """``[start, end)`` rows of the file's structure (header, directories, their values), sorted and
    merged."""
    header = 16 if ifds and ifds[0].file.read_at(2, 2) in (b"+\0", b"\0+") else 8
    spans = sorted([(0, header), *(s for ifd in ifds for s in ifd.spans())])
    merged: list[list[int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return np.asarray(merged, np.int64).reshape(-1, 2)
