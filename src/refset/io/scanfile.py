"""How a scan reads its file: a local file directly; a remote one with a single GET of its first
``head_bytes`` (the whole file when it is smaller: it gives the size without a HEAD request), then by
the ranges a reader asks for, each byte fetched once, every read through the byte layer's checked
reader (``Content-Range``, lengths, retries, timeouts).

HDF5 metadata is spread through a file (each variable's chunk index is written next to its data), so
a reader that asks for one structure at a time pays a round trip for each. A reader that knows what
it needs next asks for all of it at once (:meth:`ScanFile.prefetch`: every chunk index of a level,
every small chunk to inline), in one concurrent round, nearby ranges in one request.

Every file a scan reads is opened by its :class:`Opener` (:meth:`Opener.open`): the file scanned, and
the files its scan reads beside it (:meth:`ScanFile.sibling`: a GRIB file's ``.idx`` inventory, the
granule a DMR++ describes), through the byte layer with the run's storage options, local or remote, their
requests counted with the run's. It is the one place where a scan opens a file, and a file's first
read (``ScanFile.__init__``: a local file's open, a remote one's first GET, whose answer says its size)
is the one place that learns what the file is.

A format's reader reads its metadata with :meth:`ScanFile.read_exact`: exactly the bytes asked for, or
the one :class:`Broken` naming them when they do not lie in the file; the ranges it reads so are the
file's metadata (:meth:`ScanFile.overlaps_metadata`: no valid file's data overlaps them).
"""

from __future__ import annotations

import bisect
import io
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from refset.abc.bytestore import ByteStore
from refset.io.fingerprint import Fingerprint, local_fingerprint
from refset.io.local import is_local, local_path
from refset.io.store import LocalStore, open_store

__all__ = ["ScanFile", "Opener", "Broken", "HEAD_BYTES", "resolve"]

#: Bytes of a remote file read by the first GET: the superblock and the object headers netCDF-C and
#: h5py write at the start (64 KiB holds them for the corpus of daily products; a file this small is
#: read whole), and the file's size from the answer.
HEAD_BYTES = 64 * 1024
_BLOCK = 256 * 1024  # a read past what is in hand fetches this much from where it starts
#: Ranges read in one round closer than this are fetched as one request: a request costs about as much
#: as this many bytes (the server's and the client's work for it; requests of a round wait together)
MERGE_GAP = 64 * 1024


class Broken(Exception):
    """The scanned file holds a structure no valid file has (a cycle, an address past its end, a bad
    checksum or signature, a count its bytes cannot hold), or a library reading it for the scan
    (h5py, ecCodes) refused it: then raised ``from`` the library's error, where the library is called.
    ``str(self)`` says what and where. The scan's frame (:meth:`refset.abc.scanner.Scanner.__call__`)
    turns it into :class:`~refset.errors.InvalidFile` naming the file: ``FILE: not a valid FORMAT file:
    WHY``, or ``FILE: WHY`` where ``titled`` is False (a message that names what is broken by itself:
    a variable, a NetCDF3 header). The one class of its kind in refset: every format raises it."""

    def __init__(self, why: str, *, titled: bool = True) -> None:
        super().__init__(why)
        self.titled = titled


def resolve(ref: str, base: str) -> str:
    """``ref`` as given when it is absolute (a URL, an absolute path; ``file://`` dropped), else beside
    ``base`` (a URL or a local path)."""
    if "://" in ref or ref.startswith("/"):
        return ref.removeprefix("file://")
    if "://" in base:
        scheme, rest = base.split("://", 1)
        return f"{scheme}://{posixpath.normpath(posixpath.join(posixpath.dirname(rest), ref))}"
    return posixpath.normpath(posixpath.join(posixpath.dirname(base), ref))


class Opener:
    """Opens the files of one scan through the byte layer, with the run's ``storage_options``: the file
    scanned and the files read beside it (as VirtualiZarr hands its parsers an ObjectStoreRegistry),
    and counts what they cost. A local file is named by its absolute path, a remote one by its URL."""

    def __init__(self, storage_options: Mapping[str, Any] | None = None, head_bytes: int = HEAD_BYTES) -> None:
        self.storage_options = dict(storage_options or {})
        self.head_bytes = head_bytes
        self.files: list[ScanFile] = []  # every file opened, the scanned one first

    def store(self, url: str) -> ByteStore:
        """The byte store of ``url`` (a local path made absolute)."""
        local = is_local(url, self.storage_options)
        return open_store(os.path.abspath(local_path(url)) if local else url, self.storage_options)

    def open(self, url: str, *, head_bytes: int | None = None, store: ByteStore | None = None) -> ScanFile:
        """The file at ``url`` (its ``store`` when already made), read from its first ``head_bytes``
        (the opener's by default; 0: none). :class:`FileNotFoundError` when there is none."""
        store = self.store(url) if store is None else store
        name = store.root if isinstance(store, LocalStore) else url  # what references name
        got = ScanFile(store, self.head_bytes if head_bytes is None else head_bytes, name=name, opener=self)
        self.files.append(got)
        return got

    def open_directory(self, url: str, *, store: ByteStore | None = None) -> ScanFile:
        """The directory at ``url`` (a zarr store) as the file a directory's scanner is handed: its
        ``store``, its ``url`` and this opener; no bytes of its own."""
        store = self.store(url) if store is None else store
        got = ScanFile(store, 0, name=store.root if isinstance(store, LocalStore) else url, opener=self,
                       directory=True)
        self.files.append(got)
        return got

    def costs(self) -> tuple[int, int, int]:
        """(requests, bytes, round trips) of the remote files opened: the sidecars' rounds come
        after the scanned file's, so they add up."""
        return (sum(f.requests for f in self.files), sum(f.nbytes for f in self.files),
                sum(f.rounds for f in self.files))

    def close(self) -> None:
        for f in self.files:
            f.close()

    def __enter__(self) -> Opener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ScanFile:
    """The scanned file: ``url`` (what its references name), ``file`` (seekable, for the format readers
    and h5py), ``size``, ``prefetch`` and ``read_ranges`` (several ranges in one round). Its bytes come
    through the byte layer (``store``): a local file is opened directly; a remote one is read from its
    first ``head_bytes`` and then by the ranges asked for, each byte fetched once. ``opener``: the
    :class:`Opener` that opened it, which opens its siblings (a new one with no storage options by
    default). ``directory``: the location is a directory (a zarr store), read through ``store``: the
    scan file has no bytes of its own."""

    def __init__(self, store: ByteStore, head_bytes: int = HEAD_BYTES, name: str | None = None,
                 opener: Opener | None = None, directory: bool = False) -> None:
        self.store = store
        self.url = store.url if name is None else name  # what the references name
        self.opener = Opener(head_bytes=head_bytes) if opener is None else opener
        self.head = b""
        self._starts: list[int] = []  # the spans read past the head, sorted by start, not overlapping
        self._spans: list[bytes] = []
        self.requests = 0  # what a remote file cost: requests made and bytes they brought,
        self.nbytes = 0
        self.rounds = 0  # and round trips (requests of a round are sent together)
        self.local = isinstance(store, LocalStore)
        #: the local file's path (None for a remote one): what a library that opens files by name takes
        self.path: str | None = store.root if isinstance(store, LocalStore) else None
        self.failure: Exception | None = None  # the first read that failed, as the store raised it
        #: what the file is, as its first read saw it (local: its stat; remote: the answer's ETag,
        #: Last-Modified and size), None when the store does not tell (and for a directory)
        self.fingerprint: Fingerprint | None = None
        self._meta: list[tuple[int, int]] = []  # [start, end) of the metadata read or marked
        self.file: Any
        if directory:  # a directory's scanner reads its files through store (and the opener)
            self.file, self.size = io.BytesIO(b""), 0
            return
        if isinstance(store, LocalStore):  # self.local, spelled so that mypy narrows the store
            self.file = open(store.root, "rb")
            self.fingerprint = local_fingerprint(self.file.fileno())
            self.size = self.file.seek(0, io.SEEK_END)
            self.file.seek(0)
            return
        size = None
        if head_bytes > 0:
            # HTTP and S3 tell the size (and the fingerprint) in their answer
            self.head, size, self.fingerprint = store.read_fingerprinted("", 0, head_bytes)
            self.requests, self.nbytes, self.rounds = 1, len(self.head), 1
        if size is None:
            size, fp = store.stat()
            self.fingerprint = self.fingerprint or fp
            self.requests += 1
            self.rounds += 1
        self.size = size
        if len(self.head) == self.size:
            self.file = io.BytesIO(self.head)
        else:
            self.file = _RemoteFile(self)

    def sibling(self, ref: str, *, head_bytes: int = 0) -> ScanFile:
        """The file at ``ref``, relative to this one (or absolute), opened by this file's
        :class:`Opener` (the same byte layer and options; its requests counted with the scan's), read
        from its first ``head_bytes`` (0: none). :class:`FileNotFoundError` when there is none."""
        return self.opener.open(resolve(ref, self.url), head_bytes=head_bytes)

    @property
    def fetches(self) -> bool:
        """Whether a read past what is in hand costs a request (a remote file not read whole): what
        reading ahead (:meth:`prefetch`) is for."""
        return not self.local and len(self.head) != self.size

    def cached(self, offset: int, length: int) -> bytes | None:
        """The bytes at ``(offset, length)`` when a remote file's reads so far hold them (no request);
        None otherwise, and for a local file (its reads cost nothing to repeat)."""
        if self.local or offset < 0 or length < 0 or offset + length > self.size:
            return None
        if offset + length <= len(self.head):
            return self.head[offset:offset + length]
        end, pos = offset + length, offset
        pieces: list[bytes] = []
        if offset < len(self.head):  # the head's end, then the spans after it
            pieces.append(self.head[offset:])
            pos = len(self.head)
        k = bisect.bisect_right(self._starts, pos) - 1
        if k < 0:
            return None
        while pos < end or not pieces:
            if k >= len(self._starts) or self._starts[k] > pos:
                return None  # a gap
            start, span = self._starts[k], self._spans[k]
            if start + len(span) <= pos and pos < end:
                return None
            pieces.append(span[pos - start:end - start])
            pos = start + len(span)
            k += 1
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def prefetch(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Fetch the parts of the byte ranges ``[start, end)`` not yet in hand, in one concurrent round
        (parts closer than :data:`MERGE_GAP` in one request), so that reading them costs nothing after
        and no byte is fetched twice: how a
        reader that knows what it needs next (every chunk index of a level) saves a round trip per
        structure. Nothing for a local file or a file read whole."""
        if self.local or len(self.head) == self.size:
            return
        missing: list[tuple[int, int]] = []
        for a, b in sorted(ranges):
            missing += self._missing(max(a, len(self.head)), min(b, self.size))
        merged: list[list[int]] = []
        for a, b in sorted(set(missing)):
            last = merged[-1][1] if merged else -1
            # one request with the one before when they overlap, or lie close with nothing in hand between
            if merged and (last >= a or (a - last <= MERGE_GAP and self._missing(last, a) == [(last, a)])):
                merged[-1][1] = max(last, b)
            else:
                merged.append([a, b])
        if merged:
            try:
                got = self.store.read_ranges("", [m[0] for m in merged], [m[1] for m in merged])
            except Exception as e:  # kept: a reader (h5py) may turn it into an error of its own
                self.failure = e
                raise
            for (a, _b), data in zip(merged, got, strict=True):
                self._keep(a, data)
            self.requests += len(merged)
            self.rounds += 1
            self.nbytes += sum(len(d) for d in got)

    def _missing(self, a: int, b: int) -> list[tuple[int, int]]:
        """The parts of ``[a, b)`` (past the head) that no span holds."""
        out = []
        k = max(0, bisect.bisect_right(self._starts, a) - 1)
        pos = a
        while pos < b and k < len(self._starts):
            start, end = self._starts[k], self._starts[k] + len(self._spans[k])
            if end <= pos:
                k += 1
                continue
            if start >= b:
                break
            if start > pos:
                out.append((pos, start))
            pos = max(pos, end)
            k += 1
        if pos < b:
            out.append((pos, b))
        return out

    def _keep(self, start: int, data: bytes) -> None:
        """Add the span ``data`` at ``start``; spans it overlaps are joined with it (spans that only
        touch stay apart: joining them would copy a file read block by block again and again)."""
        end = start + len(data)
        lo = bisect.bisect_left(self._starts, start)
        if lo > 0 and self._starts[lo - 1] + len(self._spans[lo - 1]) > start:
            lo -= 1
        hi = lo
        while hi < len(self._starts) and self._starts[hi] < end:
            hi += 1
        if lo == hi:
            self._starts.insert(lo, start)
            self._spans.insert(lo, data)
            return
        base = min(self._starts[lo], start)
        last = max(end, self._starts[hi - 1] + len(self._spans[hi - 1]))
        buf = bytearray(last - base)
        for s_, d in zip(self._starts[lo:hi], self._spans[lo:hi], strict=True):
            buf[s_ - base:s_ - base + len(d)] = d
        buf[start - base:end - base] = data
        self._starts[lo:hi] = [base]
        self._spans[lo:hi] = [bytes(buf)]

    def read_at(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer at the file's end): a local file's read directly; a
        remote one's from what is in hand, else fetched from ``offset`` on, at least a block (the rest of
        the file past its head when that is no more than a block)."""
        length = max(0, min(length, self.size - offset))
        if offset < 0 or offset >= self.size or length == 0:
            return b""  # nothing there: a reader past the end sees no bytes, as a file's read() gives
        if self.local:
            self.file.seek(offset)
            return bytes(self.file.read(length))
        got = self.cached(offset, length)
        if got is None:
            if self.size - len(self.head) <= _BLOCK:  # the rest fits in the block a miss fetches: all of it,
                self.prefetch([(len(self.head), self.size)])  # so that no later read waits on a request
            else:
                self.prefetch([(offset, offset + max(length, _BLOCK))])
            got = self.cached(offset, length)
            if got is None:  # a store's answer shorter than asked, not raised by it
                raise Broken(f"{length} bytes at byte {offset} could not be read (the file is shorter than it "
                             "said)")
        return got

    def read_exact(self, offset: int, length: int, *, metadata: bool = True) -> bytes:
        """Exactly ``length`` bytes at ``offset``; :class:`Broken` naming them when they do not lie in
        the file (a structure pointing past its end, a count too large). With ``metadata`` (the
        default) the range is the file's metadata: :meth:`overlaps_metadata` checks the data against
        it. A peek into data (a codec's choice reading a tile's header) passes ``metadata=False``."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise Broken(f"{length} bytes at byte {offset} lie past the end of the file ({self.size} bytes)")
        if metadata and length:
            self._meta.append((offset, offset + length))
        data = self.read_at(offset, length)
        if len(data) != length:  # a file that changed under the scan
            raise Broken(f"{length} bytes at byte {offset}: only {len(data)} could be read")
        return data

    def mark_metadata(self, start: int, end: int) -> None:
        """``[start, end)`` is metadata, read or not (a TIFF tag's values the scan does not decode)."""
        if end > start:
            self._meta.append((start, end))

    def forget_metadata(self) -> None:
        """Drop what was recorded (a reader that gave up: another reads the file again)."""
        self._meta.clear()

    def overlaps_metadata(self, offsets: np.ndarray, lengths: np.ndarray) -> bool:
        """Whether any byte range (``offsets``, ``lengths``; a length of 0 is none) overlaps the
        metadata read or marked so far: data of a valid file never does (a corrupt address can point
        chunks into a B-tree)."""
        if not self._meta or not offsets.size:
            return False
        spans = np.array(sorted(self._meta), np.int64)
        starts, ends = spans[:, 0], np.maximum.accumulate(spans[:, 1])  # the furthest end reached by each start
        offsets, lengths = np.asarray(offsets, np.int64), np.asarray(lengths, np.int64)
        k = np.searchsorted(starts, offsets + lengths, side="left") - 1  # the last span starting before a range ends
        hit = (k >= 0) & (lengths > 0)
        return bool((ends[np.maximum(k, 0)][hit] > offsets[hit]).any())

    def read_ranges(self, offsets: Sequence[int], lengths: Sequence[int]) -> list[bytes]:
        """The bytes at each (offset, length), fetched in one concurrent round where not in hand
        (neighbouring ones in one request); bytes past the end raise :class:`Broken`."""
        for o, n in zip(offsets, lengths, strict=True):
            if o < 0 or n < 0 or o + n > self.size:
                raise Broken(f"{n} bytes at byte {o} lie past the end of the file ({self.size} bytes): it is "
                             "truncated or its structures are broken")
        if self.local:
            out = []
            for o, n in zip(offsets, lengths, strict=True):
                self.file.seek(o)
                out.append(self.file.read(n))
        else:
            if len(self.head) != self.size:
                self.prefetch([(o, o + n) for o, n in zip(offsets, lengths, strict=True)])
            out = [self.cached(o, n) or b"" for o, n in zip(offsets, lengths, strict=True)]
        for o, n, d in zip(offsets, lengths, out, strict=True):
            if len(d) != n:
                raise Broken(f"{n} bytes at byte {o} lie past the end of the file ({self.size} bytes): it is "
                             "truncated or its structures are broken")
        return out

    def close(self) -> None:
        self.file.close()
        self._starts.clear()
        self._spans.clear()

    def __enter__(self) -> ScanFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RemoteFile(io.RawIOBase):
    """A remote file as a seekable file object: reads come from what the :class:`ScanFile` holds, a
    miss fetches a block from where it starts; ``prefetch(ranges)`` reads several ranges in one round."""

    def __init__(self, sf: ScanFile) -> None:
        self._sf, self._pos = sf, 0
        self.prefetch = sf.prefetch

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._sf.size}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, b: Any) -> int:
        want = min(len(b), max(0, self._sf.size - self._pos))
        data = self._sf.read_at(self._pos, want) if want else b""
        b[:len(data)] = data
        self._pos += len(data)
        return len(data)
