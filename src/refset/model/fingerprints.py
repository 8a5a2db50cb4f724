"""What a set's data files were when they were scanned: the :class:`Fingerprints` table.

Per URL (every file a scan read to make the set: its data files, and the sidecars read beside them,
a GRIB ``.idx``; or the granule a DMR++ sidecar describes), what the scan saw: the size, and the modification time in nanoseconds for a
local file; the ``ETag`` and ``Last-Modified`` headers of a remote one (HTTP, S3). A field the scan did
not see is unknown. Columnar like the rest of the model (one numpy column per field, sorted by URL),
immutable, keyed by URL rather than by ``path_id``: it survives every remap of the URL table (combine,
append, ``rename_urls``) by URL alone.

A record is a plain tuple ``(size, mtime_ns, etag, last_modified)`` (None where unknown), the shape of
:class:`refset.io.fingerprint.Fingerprint`, which compares them. Stored forms keep the table where
other readers do not look (docs/formats.md, "Fingerprints"); :meth:`Fingerprints.to_json` and
:meth:`Fingerprints.from_json` are its one serialised form.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.errors import InvalidReferences

if TYPE_CHECKING:
    from refset.model.table import KeyTable

__all__ = ["Fingerprints", "Record", "FIELDS", "MEMBER", "KEY", "spelled", "split"]

#: A file's record: (size, mtime_ns, etag, last_modified), None where unknown.
Record = tuple[int | None, int | None, str | None, str | None]
FIELDS = ("size", "mtime_ns", "etag", "last_modified")
#: The name of the member that holds a set's fingerprints where a stored form keeps them.
MEMBER = "refset"
_VERSION = 1
_UNKNOWN = -1  # in the integer columns


def _strings(values: Iterable[str | None], n: int) -> np.ndarray:
    out = np.empty(n, object)
    out[:] = [v if v else "" for v in values]
    return out


class Fingerprints:
    """Per URL, what the file was when scanned. ``url`` sorted and unique; ``size``, ``mtime_ns``
    (int64, -1 unknown), ``etag``, ``last_modified`` (str, "" unknown) and ``via``: the file whose scan
    recorded the row when it is another (a GRIB file for its ``.idx``; a DMR++ file for its granule),
    "" for a file scanned itself; a refresh rescans ``via`` when its row changed. Immutable; pickles
    as its columns."""

    __slots__ = ("etag", "last_modified", "mtime_ns", "size", "url", "via")

    def __init__(self, url: np.ndarray, size: np.ndarray, mtime_ns: np.ndarray, etag: np.ndarray,
                 last_modified: np.ndarray, via: np.ndarray) -> None:
        # use the constructors: they sort, check and freeze
        self.url, self.size, self.mtime_ns = url, size, mtime_ns
        self.etag, self.last_modified, self.via = etag, last_modified, via
        for col in (url, size, mtime_ns, etag, last_modified, via):
            col.flags.writeable = False

    # -- construction --------------------------------------------------------------------------------
    @classmethod
    def empty(cls) -> Fingerprints:
        z = np.zeros(0, np.int64)
        e = np.zeros(0, object)
        return cls(e, z, z.copy(), e.copy(), e.copy(), e.copy())

    @classmethod
    def of(cls, records: Mapping[str, Record], via: Mapping[str, str] | None = None) -> Fingerprints:
        """From ``{url: (size, mtime_ns, etag, last_modified)}``; ``via``: ``{url: the url whose scan
        recorded it}`` for the rows recorded by another file's scan."""
        urls = sorted(records)
        n = len(urls)
        recs = [records[u] for u in urls]
        side = via or {}
        return cls(
            _strings(urls, n),
            np.fromiter((_unknown(r[0]) for r in recs), np.int64, n),
            np.fromiter((_unknown(r[1]) for r in recs), np.int64, n),
            _strings((r[2] for r in recs), n),
            _strings((r[3] for r in recs), n),
            _strings((side.get(u) for u in urls), n),
        )

    @classmethod
    def columns(cls, url: Sequence[str], size: Sequence[int | None] | None = None,
                mtime_ns: Sequence[int | None] | None = None, etag: Sequence[str | None] | None = None,
                last_modified: Sequence[str | None] | None = None, via: Sequence[str | None] | None = None,
                where: str = "fingerprints") -> Fingerprints:
        """From columns in any order (None: all unknown), checked: URLs are unique non-empty strings,
        sizes and times non-negative integers, the others strings. A problem is InvalidReferences
        naming ``where``, the field and the row."""
        n = len(url)
        cols: dict[str, Sequence[Any]] = {}
        for name, col in (("size", size), ("mtime_ns", mtime_ns), ("etag", etag),
                          ("last_modified", last_modified), ("via", via)):
            if col is None:
                col = [None] * n
            if len(col) != n:
                raise InvalidReferences(f"{where}: {name} has {len(col)} values for {n} URLs")
            cols[name] = col
        for i, u in enumerate(url):
            if not isinstance(u, str) or not u:
                raise InvalidReferences(f"{where}: url[{i}]: expected a non-empty string, got {u!r}")
        for name in ("size", "mtime_ns"):
            for i, v in enumerate(cols[name]):
                if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < 2**63):
                    raise InvalidReferences(f"{where}: {name}[{i}]: expected a non-negative integer or null, "
                                            f"got {v!r}")
        for name in ("etag", "last_modified", "via"):
            for i, v in enumerate(cols[name]):
                if v is not None and not isinstance(v, str):
                    raise InvalidReferences(f"{where}: {name}[{i}]: expected a string or null, got {v!r}")
        order = sorted(range(n), key=lambda i: url[i])
        urls = [url[i] for i in order]
        dup = next((a for a, b in itertools.pairwise(urls) if a == b), None)
        if dup is not None:
            raise InvalidReferences(f"{where}: url {dup!r} is listed twice")

        def pick(name: str) -> list[Any]:
            return [cols[name][i] for i in order]

        return cls(
            _strings(urls, n),
            np.fromiter((_unknown(v) for v in pick("size")), np.int64, n),
            np.fromiter((_unknown(v) for v in pick("mtime_ns")), np.int64, n),
            _strings(pick("etag"), n), _strings(pick("last_modified"), n), _strings(pick("via"), n),
        )

    # -- reading ---------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.url)

    def __bool__(self) -> bool:
        return len(self.url) > 0

    def find(self, url: str) -> int:
        """The row of ``url``, or -1."""
        i = int(np.searchsorted(self.url, url))
        return i if i < len(self.url) and self.url[i] == url else -1

    def get(self, url: str) -> Record | None:
        """The record of ``url``, or None when the set has none for it."""
        i = self.find(url)
        return None if i < 0 else self.record(i)

    def record(self, i: int) -> Record:
        s, m, e, lm = int(self.size[i]), int(self.mtime_ns[i]), self.etag[i], self.last_modified[i]
        return (None if s < 0 else s, None if m < 0 else m, e or None, lm or None)

    def records(self) -> dict[str, Record]:
        """``{url: record}`` of every row."""
        return {u: self.record(i) for i, u in enumerate(self.url.tolist())}

    def recorded_via(self, url: str) -> list[str]:
        """The files the scan of ``url`` recorded besides ``url`` (its sidecars)."""
        return self.url[self.via == url].tolist()  # type: ignore[no-any-return]

    def scanned(self) -> list[str]:
        """URLs of the files that were scanned (the rows not recorded via another)."""
        return self.url[self.via == ""].tolist()  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fingerprints):
            return NotImplemented
        return all(np.array_equal(getattr(self, c), getattr(other, c)) for c in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Fingerprints of {len(self)} files>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Fingerprints, (self.url, self.size, self.mtime_ns, self.etag, self.last_modified, self.via))

    # -- new tables ----------------------------------------------------------------------------------
    def take(self, rows: np.ndarray) -> Fingerprints:
        rows = np.asarray(rows, np.int64)
        return Fingerprints(*(getattr(self, c)[rows] for c in ("url", "size", "mtime_ns", "etag", "last_modified",
                                                              "via")))

    def restricted(self, urls: Iterable[str]) -> Fingerprints:
        """The rows of ``urls`` and those recorded via them."""
        keep = np.isin(self.url, np.asarray(list(urls), object))
        keep |= np.isin(self.via, self.url[keep])
        return self if keep.all() else self.take(np.flatnonzero(keep))

    def without(self, urls: Iterable[str]) -> Fingerprints:
        """The rows of every URL but ``urls`` and those recorded via them."""
        drop = np.asarray(list(urls), object)
        gone = np.isin(self.url, drop) | np.isin(self.via, drop)
        return self if not gone.any() else self.take(np.flatnonzero(~gone))

    def renamed(self, rename: Callable[[str], str]) -> Fingerprints:
        """Every URL (and ``via``) passed through ``rename``; URLs that become equal must have
        equal records (else InvalidReferences)."""
        recs: dict[str, Record] = {}
        side: dict[str, str] = {}
        for i, u in enumerate(self.url.tolist()):
            new = rename(u)
            rec = self.record(i)
            if new in recs and recs[new] != rec:
                raise InvalidReferences(f"fingerprints: two files become {new!r} with different fingerprints")
            recs[new] = rec
            if self.via[i]:
                side[new] = rename(self.via[i])
        return Fingerprints.of(recs, side)

    @staticmethod
    def union(tables: Sequence[Fingerprints], names: Sequence[str] | None = None) -> Fingerprints:
        """One table of several (combine's inputs): a URL recorded differently in two of them (one
        input was scanned before the file changed, the other after) is refused, naming both (``names``:
        the tables' owners)."""
        tables = [t for t in tables if len(t)]
        if not tables:
            return Fingerprints.empty()
        if len(tables) == 1:
            return tables[0]
        cols = {c: np.concatenate([getattr(t, c) for t in tables]) for c in
                ("url", "size", "mtime_ns", "etag", "last_modified", "via")}
        owner = np.repeat(np.arange(len(tables)), [len(t) for t in tables])
        order = np.lexsort((owner, cols["url"].astype(str)))
        url = cols["url"][order]
        first = np.ones(len(url), bool)
        first[1:] = url[1:] != url[:-1]
        if not first.all():
            same = np.ones(len(url), bool)
            for c in ("size", "mtime_ns", "etag", "last_modified"):
                v = cols[c][order]
                same[1:] &= v[1:] == v[:-1]
            bad = np.flatnonzero(~first & ~same)
            if bad.size:
                from refset.errors import SourceChanged

                j = int(bad[0])
                a, b = int(owner[order][j - 1]), int(owner[order][j])
                who = (f"inputs {names[a]!r} and {names[b]!r}" if names is not None else "two inputs")
                fp = Fingerprints(*(cols[c][order][[j - 1, j]] for c in
                                    ("url", "size", "mtime_ns", "etag", "last_modified", "via")))
                raise SourceChanged(str(url[j]), fp.record(0), fp.record(1),
                                    f"{who} were scanned from different versions of it (one of them before it "
                                    "changed): rescan the older one (refset refresh) before combining them")
        keep = order[first]
        return Fingerprints(*(cols[c][keep] for c in ("url", "size", "mtime_ns", "etag", "last_modified",
                                                      "via")))

    def updated(self, other: Fingerprints) -> Fingerprints:
        """This table with the rows of ``other`` replacing those of the same URLs (a refresh)."""
        if not len(other):
            return self
        return Fingerprints.union([self.without(other.url.tolist()), other])

    # -- the stored form -----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The table as a JSON object: ``{"version": 1, "url": [...], "size": [...], ...}``, columns
        whose values are all unknown left out, unknown values null."""
        out: dict[str, Any] = {"version": _VERSION, "url": self.url.tolist()}
        for c in ("size", "mtime_ns"):
            col = getattr(self, c)
            if (col >= 0).any():
                out[c] = [None if v < 0 else v for v in col.tolist()]
        for c in ("etag", "last_modified", "via"):
            col = getattr(self, c)
            if (col != "").any():
                out[c] = [v or None for v in col.tolist()]
        return out

    @classmethod
    def from_json(cls, doc: Any, where: str = "fingerprints") -> Fingerprints:
        """The table of a :meth:`to_json` object, checked (InvalidReferences naming ``where``)."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("url"), list):
            raise InvalidReferences(f"{where}: expected an object with a url list")
        if doc.get("version") != _VERSION:
            from refset.errors import Unsupported

            raise Unsupported(f"{where}: fingerprints version {doc.get('version')!r} (this refset reads "
                              f"version {_VERSION})")
        cols = {}
        for c in ("size", "mtime_ns", "etag", "last_modified", "via"):
            v = doc.get(c)
            if v is not None and not isinstance(v, list):
                raise InvalidReferences(f"{where}: {c}: expected a list")
            cols[c] = v
        return cls.columns(doc["url"], where=where, **cols)


def _unknown(v: int | None) -> int:
    return _UNKNOWN if v is None else int(v)


# -- the spelling in key/value forms (JSON Version 0 and 1) ------------------------------------------
#: The key that holds a set's fingerprints where there is no root ``.zgroup`` to hold them.
KEY = ".refset"
_ZGROUP = ".zgroup"


def spelled(other: KeyTable, fps: Fingerprints) -> KeyTable:
    """``other`` (a :class:`~refset.model.table.KeyTable` of the keys outside the arrays) with ``fps``
    stored where zarr, fsspec and kerchunk do not look: as the member ``"refset"`` of the root
    ``.zgroup`` (zarr v2 reads the ``zarr_format`` member only), else as a key ``.refset`` (a zarr v3
    root: zarr-python lists it as an unknown object). Unchanged when ``fps`` is empty."""
    from refset.model.table import INLINE, KeyTable

    if not len(fps):
        return other
    member = json.dumps({"fingerprints": fps.to_json()}, separators=(",", ":")).encode()
    i = other.find(_ZGROUP)
    raw = other.data[i] if i >= 0 and other.kind[i] == INLINE else None
    if raw is not None:
        text = bytes(raw).rstrip()
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and MEMBER not in doc and text.endswith(b"}"):
            raw = bytes(raw)
            at = len(raw[:raw.rindex(b"}")].rstrip())  # after the last member (or the "{"), before blanks
            sep = b"" if not doc else b","
            new = raw[:at] + sep + b'"' + MEMBER.encode() + b'":' + member + raw[at:]
            return KeyTable.merged_rows(other, {_ZGROUP: (INLINE, 0, 0, 0, new)})
    return KeyTable.merged_rows(other, {KEY: (INLINE, 0, 0, 0, member)})


def split(other: KeyTable, where: str = "fingerprints") -> tuple[KeyTable, Fingerprints]:
    """``other`` without the fingerprints :func:`spelled` stored in it (the root ``.zgroup`` as it was
    before, byte for byte), and the fingerprints (empty when there are none). A ``.refset`` key or a
    ``.zgroup`` member that is not refset's stays as it is."""
    from refset.model.table import INLINE, KeyTable

    found: list[Fingerprints] = []
    drop: list[int] = []
    rows: dict[str, Any] = {}
    i = other.find(_ZGROUP)
    raw = other.data[i] if i >= 0 and other.kind[i] == INLINE else None
    if raw is not None and b'"' + MEMBER.encode() + b'"' in raw:
        got = _from_zgroup(bytes(raw), where)
        if got is not None:
            found.append(got[1])
            rows[_ZGROUP] = (INLINE, 0, 0, 0, got[0])
    j = other.find(KEY)
    raw = other.data[j] if j >= 0 and other.kind[j] == INLINE else None
    if raw is not None:
        doc = _loads(bytes(raw))
        if isinstance(doc, dict) and set(doc) == {"fingerprints"}:
            found.append(Fingerprints.from_json(doc["fingerprints"], f"{where}: {KEY!r}"))
            drop.append(j)
    if not found:
        return other, Fingerprints.empty()
    out = other.without_rows(np.asarray(drop, np.int64))
    return KeyTable.merged_rows(out, rows), Fingerprints.union(found)


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _from_zgroup(raw: bytes, where: str) -> tuple[bytes, Fingerprints] | None:
    """(the ``.zgroup`` text without refset's member, the fingerprints), or None when it holds none."""
    doc = _loads(raw)
    if not isinstance(doc, dict) or not isinstance(doc.get(MEMBER), dict) or "fingerprints" not in doc[MEMBER]:
        return None
    fps = Fingerprints.from_json(doc[MEMBER]["fingerprints"], f"{where}: {_ZGROUP!r}")
    rest = {k: v for k, v in doc.items() if k != MEMBER}
    text = raw.decode("utf-8", errors="surrogateescape")
    name = f'"{MEMBER}":'
    at = text.rfind(name)
    if at > 0:  # as spelled() wrote it: the member inserted whole into the original text
        try:
            _, end = json.JSONDecoder().raw_decode(text, at + len(name))
        except ValueError:
            end = -1
        start = at - 1 if text[at - 1] == "," else at
        candidate = (text[:start] + text[end:]).encode("utf-8", errors="surrogateescape")
        if end > 0 and _loads(candidate) == rest:
            return candidate, fps
    return json.dumps(rest, separators=(",", ":")).encode(), fps
