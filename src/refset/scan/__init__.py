"""Scan data files into reference sets (``refset.scan``, :class:`Scan`).

A file's kind is told by its content (:mod:`.registry`: HDF5's signature at 0 or after a user block,
``CDF\\x01``/``\\x02``/``\\x05`` for NetCDF3, and the scanners installed under ``refset.scanners``).
Local files are read directly, others through the read path's checked reader (HTTP and S3 files scan the
same way), reading only the bytes the metadata needs (:mod:`.file`).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NoReturn

from refset.abc.bytestore import ByteStore
from refset.abc.scanner import Scanner, SidecarWarning
from refset.errors import RefsetError, Unsupported, located
from refset.io.local import is_local
from refset.io.magic import Kind, describe, describe_directory, file_reader
from refset.io.scanfile import HEAD_BYTES, Opener, ScanFile
from refset.io.store import LocalStore
from refset.model.refset import ReferenceSet
from refset.scan.writer import INLINE_THRESHOLD, UnusedDropWarning

__all__ = ["scan", "Scan", "INLINE_THRESHOLD", "SidecarWarning", "UnusedDropWarning", "detect_scanner",
           "CONCURRENCY"]


def scan(
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    inline_threshold: int = INLINE_THRESHOLD,
    group: str | None = None,
    drop_variables: Iterable[str] | str = (),
    subchunk: int | None = None,
    head_bytes: int = HEAD_BYTES,
    **options: Any,
) -> ReferenceSet:
    """Reference every variable of a NetCDF4/HDF5 or NetCDF3 file (or a kind an installed scanner
    reads) as zarr v2, as kerchunk writes it.

    ``inline_threshold``: chunks (and whole small variables) below this many bytes are stored in the
    set. ``group``: scan only this HDF5 group (it becomes the root). ``drop_variables``: names or
    paths left out. ``subchunk``: split uncompressed chunks bigger than this many bytes along their
    first axis so that parallel reads work. ``head_bytes``: a remote file is read with one GET of
    its first bytes (the whole file when smaller; 64 KiB by default), then only the ranges its
    metadata needs, a level of its chunk indexes per round trip. ``options`` go to the format's
    scanner (HDF5: ``max_inline`` bytes of data read through h5py and stored for filters no codec
    decodes exactly; ``native=False`` reads the file through h5py). A variable that cannot be
    referenced exactly raises :class:`~refset.errors.Unsupported` naming it; a name to drop that the
    file lacks warns (:class:`UnusedDropWarning`). Scanning many files, :class:`Scan` keeps what files
    of one product share.
    """
    run = Scan(inline_threshold=inline_threshold, group=group, drop_variables=drop_variables,
               subchunk=subchunk, head_bytes=head_bytes, **options)
    return run(url, storage_options)


class Scan:
    """A run of scans with one set of options: ``Scan(**options)(url)`` for each file. It keeps one
    scanner per kind of file for the run (files of one product share parsed headers), never longer:
    a new ``Scan`` starts afresh. Not thread-safe (one per thread; :meth:`many`'s threads share the
    run's scanners whose class says ``shared``); pickles as its options."""

    def __init__(self, *, inline_threshold: int = INLINE_THRESHOLD, group: str | None = None,
                 drop_variables: Iterable[str] | str = (), subchunk: int | None = None,
                 head_bytes: int = HEAD_BYTES, **options: Any) -> None:
        from refset.scan.registry import scanners
        from refset.scan.writer import common_options

        known = frozenset().union(*(cls.options for cls in scanners())) - {"group"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"scan: unknown option(s) {', '.join(map(repr, unknown))}; "
                             f"format options are {', '.join(sorted(known))}")
        inline_threshold, drops, subchunk = common_options(inline_threshold, drop_variables, subchunk)
        self.head_bytes = head_bytes
        self.options: dict[str, Any] = {"inline_threshold": inline_threshold, "drop_variables": drops,
                                        "subchunk": subchunk, "group": group, **options}
        self._scanners: dict[type[Scanner], Scanner] = {}
        #: what the run's remote files cost so far: files scanned, requests made, bytes read, and the
        #: most round trips one of them took (its requests of a round are sent together)
        self.files = self.requests = self.nbytes = self.rounds = 0
        self._threads: list[Scan] = []  # the runs of :meth:`many`'s threads while it runs
        self._lead: Scan | None = None  # a thread's run: the run of many() whose shared scanners it uses
        self._lock = threading.Lock()

    def scanner(self, cls: type[Scanner]) -> Scanner:
        """This run's scanner of class ``cls``, made with the options it takes."""
        got = self._scanners.get(cls)
        if got is None and cls.shared and self._lead is not None:
            got = self._scanners[cls] = self._lead.scanner(cls)
        if got is None:
            with self._lock:  # a shared scanner is made once for the threads asking at once
                got = self._scanners.get(cls)
                if got is None:
                    got = self._scanners[cls] = self._make(cls)
        return got

    def _make(self, cls: type[Scanner]) -> Scanner:
        common = ("inline_threshold", "drop_variables", "subchunk")
        return cls(**{k: v for k, v in self.options.items() if k in common or k in cls.options})

    def __call__(self, url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None,
                 ) -> ReferenceSet:
        """The reference set of the data file at ``url`` (``storage_options``: fsspec options to read it)."""
        got = self._scan(url, storage_options, strict=True)
        assert got is not None  # strict: what no scanner reads raised
        return got

    def scan_if_data(self, url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None,
                     ) -> ReferenceSet | None:
        """The reference set of the file at ``url`` when a scanner reads it, else None (a directory, a
        reference set, any other file), from the same first read: one request for a remote file."""
        return self._scan(url, storage_options, strict=False)

    def _scan(self, url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None, strict: bool,
              ) -> ReferenceSet | None:
        url = os.fspath(url)
        opener = Opener(storage_options, self.head_bytes)  # opens the file and any read beside it
        store = opener.store(url)
        if isinstance(store, LocalStore) and os.path.isdir(store.root):
            return self._scan_directory(opener, store, url, strict)
        try:
            sf = opener.open(url, store=store)
        except (FileNotFoundError, IsADirectoryError):
            if not strict:
                return None  # the reference readers say what it is (a parquet set, a missing file)
            if _is_dir(store):  # asked only when there is no such file: a request
                return self._scan_directory(opener, store, url, strict)
            raise
        with opener:
            self.files += 1
            try:
                cls = detect_scanner(sf.file, sf.size)
            except Unsupported as e:
                if not strict:
                    return None
                raise Unsupported(f"{url}: {e}") from None
            sf.file.seek(0)
            rs = _fingerprinted(self._run(cls, sf, opener, url), sf)
            return rs if sf.local else _keep_small_values(rs, sf)

    def _scan_directory(self, opener: Opener, store: ByteStore, url: str, strict: bool) -> ReferenceSet | None:
        """A directory: scanned by the scanner whose kind it is (a zarr store), else refused (None
        when not ``strict``)."""
        from refset.scan.registry import scanner_for_directory

        cls = scanner_for_directory(store)
        if cls is None:
            if not strict:
                return None
            _refuse_directory(store, url)
        assert cls is not None  # refused otherwise
        with opener:
            self.files += 1
            return self._run(cls, opener.open_directory(url, store=store), opener, url)

    def _run(self, cls: type[Scanner], sf: ScanFile, opener: Opener, url: str) -> ReferenceSet:
        """The run's scanner of class ``cls`` over ``sf``, its errors named by ``url``, its costs counted."""
        try:
            return self.scanner(cls)(sf)
        except RefsetError as e:  # named by its file (a variable's error says only the variable); anything
            err = located(e, url)  # else is a bug (a library's errors are the file's fault where the
            if err is e:  # scanner calls it: InvalidFile), and propagates as it is
                raise
            raise err from e.__cause__
        finally:
            requests, nbytes, rounds = opener.costs()
            self.requests += requests
            self.nbytes += nbytes
            self.rounds = max(self.rounds, rounds)

    def many(self, urls: Iterable[str | os.PathLike[str]], storage_options: Mapping[str, Any] | None = None,
             *, concurrency: int | None = None) -> Iterator[ReferenceSet]:
        """The reference sets of the data files at ``urls``, in order, with up to ``concurrency``
        remote files in flight (default :data:`CONCURRENCY`; local files are read one after another:
        their scan is CPU-bound). Each thread scans with a run of its own, made with these options.
        An error is raised where its file comes in the order; closing the iterator early cancels
        what has not started."""
        for rs in self._many(urls, storage_options, concurrency, strict=True):
            assert isinstance(rs, ReferenceSet)  # strict: what no scanner reads raised
            yield rs

    def many_or_errors(self, urls: Iterable[str | os.PathLike[str]],
                       storage_options: Mapping[str, Any] | None = None, *, concurrency: int | None = None,
                       ) -> Iterator[ReferenceSet | RefsetError]:
        """:meth:`many`, with each file's :class:`~refset.errors.RefsetError` in its place instead of
        raised (the others go on)."""
        for rs in self._many(urls, storage_options, concurrency, strict=True, errors=True):
            assert rs is not None  # strict: what no scanner reads raised
            yield rs

    def scan_many_if_data(self, urls: Iterable[str | os.PathLike[str]],
                          storage_options: Mapping[str, Any] | None = None, *, concurrency: int | None = None,
                          errors: bool = False) -> Iterator[ReferenceSet | RefsetError | None]:
        """:meth:`many` of :meth:`scan_if_data`: None for each file no scanner reads; with ``errors``,
        a file's :class:`~refset.errors.RefsetError` in its place instead of raised."""
        return self._many(urls, storage_options, concurrency, strict=False, errors=errors)

    def _many(self, urls: Iterable[str | os.PathLike[str]], storage_options: Mapping[str, Any] | None,
              concurrency: int | None, strict: bool, errors: bool = False,
              ) -> Iterator[ReferenceSet | RefsetError | None]:
        items = [os.fspath(u) for u in urls]
        n = _concurrency(concurrency, items, storage_options)

        def scan_with(run: Scan, u: str) -> ReferenceSet | RefsetError | None:
            try:
                return run._scan(u, storage_options, strict)
            except RefsetError as e:
                if errors:
                    return e
                raise

        if n <= 1:
            for u in items:
                yield scan_with(self, u)
            return
        from concurrent.futures import ThreadPoolExecutor

        local = threading.local()
        runs = self._threads = []

        def one(u: str) -> ReferenceSet | RefsetError | None:
            run = getattr(local, "run", None)
            if run is None:
                run = local.run = _remake(self.head_bytes, self.options)
                run._lead = self  # scanners that say they are shared serve every thread of this call
                runs.append(run)
            return scan_with(run, u)

        pool = ThreadPoolExecutor(n, thread_name_prefix="refset-scan")
        try:
            window = deque(pool.submit(one, u) for u in items[:2 * n])
            ahead = iter(items[2 * n:])
            while window:
                done = window.popleft().result()
                nxt = next(ahead, None)
                if nxt is not None:
                    window.append(pool.submit(one, nxt))
                yield done
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            self._threads = []
            for run in runs:  # the threads' runs counted for this one
                self.count(*run.costs())

    def costs(self) -> tuple[int, int, int, int]:
        """(files, requests, bytes, the most round trips of a file) of this run's remote scans."""
        return self.files, self.requests, self.nbytes, self.rounds

    def count(self, files: int, requests: int, nbytes: int, rounds: int) -> None:
        """Add the :meth:`costs` of another run (a thread's, a cluster task's) to this one's."""
        self.files += files
        self.requests += requests
        self.nbytes += nbytes
        self.rounds = max(self.rounds, rounds)

    def read_so_far(self) -> int:
        """Bytes read from remote files so far, those of :meth:`many`'s threads while it runs
        included (a progress bar's count; the run's own counts take them when it ends)."""
        return self.nbytes + sum(run.nbytes for run in list(self._threads))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_remake, (self.head_bytes, self.options))


def _remake(head_bytes: int, options: dict[str, Any]) -> Scan:
    return Scan(head_bytes=head_bytes, **options)


def _fingerprinted(rs: ReferenceSet, sf: ScanFile) -> ReferenceSet:
    """``rs`` recording what the file it was made from was when its first read saw it (also when
    every chunk of it was inlined: a change of the file makes the set out of date all the same), and
    the files its scan read beside it (a GRIB file's ``.idx``, a DMR++ file's granule) as recorded via
    it: a refresh rescans it when one of them changed."""
    from refset.model.fingerprints import Fingerprints

    records, via = {}, {}
    for f in sf.opener.files:
        fp = f.fingerprint
        if fp is None or not fp.known or f.url in records:
            continue
        records[f.url] = (fp.size, fp.mtime_ns, fp.etag, fp.last_modified)
        if f is not sf:
            via[f.url] = sf.url
    if not records:
        return rs
    return rs.with_fingerprints(rs.fingerprints.updated(Fingerprints.of(records, via)))


#: Bytes of a remote file's small arrays a scan keeps with its set when its reads already hold them
#: (coordinates: combine reads their values; see :attr:`ReferenceSet.fetched`): per array, per file.
KEEP_ARRAY, KEEP_FILE = 64 << 10, 256 << 10


def _keep_small_values(rs: ReferenceSet, sf: ScanFile) -> ReferenceSet:
    """``rs`` remembering the bytes of its small arrays' chunks that the scan of ``sf`` has read."""
    from refset.model.table import RANGE

    kept: dict[tuple[str, int, int], bytes] = {}
    total = 0
    for path in rs.grids:
        _, kind, pid, off, ln = rs.table(path).entries()
        ranged = kind == RANGE
        size = int(ln[ranged].sum())
        if not ranged.any() or size > KEEP_ARRAY or total + size > KEEP_FILE:
            continue
        got = {}
        for p, o, n in zip(pid[ranged].tolist(), off[ranged].tolist(), ln[ranged].tolist(), strict=True):
            data = sf.cached(o, n) if rs.urls[p] == sf.url else None
            if data is None:
                break
            got[(sf.url, o, n)] = data
        else:
            kept.update(got)
            total += size
    return rs.with_fetched(kept) if kept else rs


#: Remote files a scan keeps in flight by default: against 50 ms of latency a file's few round trips
#: then overlap 64 ways, while parsing (~1 ms a file) stays far below the waiting.
CONCURRENCY = 64


def _concurrency(given: int | None, urls: list[str], storage_options: Mapping[str, Any] | None) -> int:
    """Threads for scanning ``urls``: ``given`` (checked), else :data:`CONCURRENCY` when any file is
    remote, else 1."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 1:
            raise ValueError(f"concurrency: must be a positive integer, got {given!r}")
        return min(given, max(1, len(urls)))
    if len(urls) < 2 or all(is_local(u, storage_options) for u in urls):
        return 1
    return min(CONCURRENCY, len(urls))


def detect_scanner(f: Any, size: int) -> type[Scanner]:
    """The scanner class of the open file ``f`` (``size`` bytes); Unsupported naming what it is when
    no scanner reads it."""
    from refset.scan.registry import scanner_for

    read_at = file_reader(f)
    found = scanner_for(read_at, size)
    if found is None:
        raise Unsupported(_not_data(describe(read_at, size)))
    return found


def _not_data(kind: Kind) -> str:
    """What to say of a file or directory of ``kind`` given to scan (no scanner reads it)."""
    if kind.refs:
        return (f"is {kind.text}, not a data file: scan takes data files; `refset convert` rewrites a set, "
                "`refset combine` joins sets")
    if kind.name == "directory":
        return "is a directory, not a data file: scan takes data files (a glob such as DIR/*.nc scans its files)"
    if kind.name == "idx":
        return f"is {kind.text}: scan its GRIB file, which reads it"
    return (f"not a NetCDF3, NetCDF4 or HDF5 file, nor another kind refset scans (GRIB, TIFF, FITS, HDF4, "
            f"DMR++, a zarr store): {kind.text}")


def _refuse_directory(store: ByteStore, url: str) -> NoReturn:
    """The error for a directory no scanner reads: what it is (a parquet set, just a directory)."""
    def has(name: str) -> bool:
        try:
            return store.exists(name)
        except Exception:  # a server refusing the probe: not there, rather than fail differently
            return False

    def read(name: str) -> bytes:
        return bytes(store.read(name, 0, 4096))

    raise Unsupported(f"{url}: {_not_data(describe_directory(has, read))}")


def _is_dir(store: ByteStore) -> bool:
    try:
        return store.isdir()
    except Exception:  # the server failing again: the first error is the one to report
        return False
