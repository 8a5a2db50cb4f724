"""Scan fuzzing (issue 30, item 4): seeded byte mutations of NetCDF3/NetCDF4/HDF5 files through
``refset.scan`` and a read of every variable, against h5py (HDF5, NetCDF4) or scipy/netCDF4 (NetCDF3)
reading the same mutated bytes.

A case is a seed: it picks a source file (:func:`make_sources` writes files with h5py and netCDF4;
:func:`corpus_sources` adds the real files of ``../shared/corpus``) and mutates it (:func:`mutate`:
flips of 1-8 bytes, a truncation, a run of zeros or of 0xFF, most placed in the metadata: object
headers, B-trees, heaps, the first 64 KiB outside the data, a NetCDF3 header). Cases run in long-lived
worker processes (:class:`Pool`), one after another, each reporting over a pipe; a worker runs under
``RLIMIT_AS`` and a deadline per case and is started again after a crash, a hang or a memory error.
In a worker, refset scans the file and reads every variable through ``engine="refset"`` (no CF
decoding); then the oracle reads the file raw. :func:`classify` gives each case one of
:data:`OUTCOMES`; :data:`FAILING` are the ones a test refuses (among them a scan's ``InvalidFile`` that
no ``Broken`` caused: see :func:`tests.scan.fuzzcheck.from_broken`).

Replay one case (in a worker, with the traceback; ``--keep`` writes the mutated file)::

    python -m tests.scanfuzz SEED [--keep PATH]
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import random
import re
import selectors
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

TIMEOUT = 20.0  # seconds a case may take (scan, read and the oracle's read)
MEMORY = 2 << 30  # RLIMIT_AS of a worker (bytes)
RESTART_EVERY = 250  # cases a worker runs before a fresh one takes over (no slow leaks)
#: refset's deadline for libhdf5 reading a file it hands to h5py in a child process (``h5py_timeout``,
#: 60 s by default), where the refset under test has one: under the case's deadline, so that a file
#: libhdf5 loops on ends in refset's InvalidFile rather than in the case's timeout
H5PY_TIMEOUT = TIMEOUT / 4
MAX_ELEMENTS = 1 << 22  # a variable larger than this is compared on a corner of this many elements

OUTCOMES = (
    "right",  # refset's values equal the oracle's for every variable
    "refset error",  # a RefsetError naming the file; the oracle reads the file
    "refset error without the file name",
    "invalid file not from Broken",  # the scan's InvalidFile without a Broken (a format fault, or a
    # library's refusal wrapped where the library is called) under it: an error passed off as the file's
    "oracle also fails (refset error)",  # the oracle fails too, refset raised a RefsetError
    "oracle also fails (other)",  # the oracle fails, refset read what it could
    "silently wrong",  # refset's values differ from the oracle's (which reads fine)
    "bare exception",  # anything but a RefsetError, from scan or read
    "crash",  # the worker died by a signal in refset's part
    "hang",  # refset's part did not end in time
    "memory",  # MemoryError in refset's part, or killed at the memory limit
)
FAILING = frozenset({"refset error without the file name", "invalid file not from Broken", "silently wrong",
                     "bare exception", "crash", "hang", "memory"})

HDF5_SIGNATURES = (b"\x89HDF\r\n\x1a\n", b"OHDR", b"OCHK", b"TREE", b"HEAP", b"SNOD", b"GCOL", b"FRHP", b"FHDB",
                   b"FHIB", b"BTHD", b"BTIN", b"BTLF", b"FAHD", b"FADB", b"EAHD", b"EAIB", b"EASB", b"EADB")
NETCDF3_MAGIC = (b"CDF\x01", b"CDF\x02", b"CDF\x05")
NON_COORD = "_nc4_non_coord_"
BAD_CORPUS = {"nc_test_bad_cdf5_begin.nc"}  # corrupt before any mutation (netCDF-C refuses it)


# -- sources -------------------------------------------------------------------------------------------
def file_kind(path: Path) -> str | None:
    """"netcdf3", "hdf5" or None (GRIB, TIFF, HDF4, reference sets...) by the file's first bytes."""
    with open(path, "rb") as f:
        head = f.read(8)
    if head[:4] in NETCDF3_MAGIC:
        return "netcdf3"
    if head == HDF5_SIGNATURES[0]:
        return "hdf5"
    import h5py

    return "hdf5" if h5py.is_hdf5(str(path)) else None  # a user block before the signature


def corpus_sources() -> list[Path]:
    """The NetCDF3/NetCDF4/HDF5 files of the shared corpus (none when it is absent; not GRIB, TIFF,
    HDF4 or reference sets)."""
    from .conftest import corpus_files

    return corpus_files(lambda p, _head: p.name not in BAD_CORPUS and file_kind(p) is not None)


GENERATED = ("h5-earliest.h5", "h5-latest.h5", "h5-dense.h5", "nc4.nc", "nc4-classic.nc", "nc3-classic.nc",
             "nc3-64bit.nc", "nc3-cdf5.nc")


def make_sources(dest: Path) -> list[Path]:
    """The files of :data:`GENERATED` in ``dest`` (written once; the same bytes on every run of one
    machine's libraries): h5py files of libver earliest and latest (contiguous, chunked, compressed,
    compact, fletcher32, attributes, dense attributes and links, groups, vlen and fixed strings, an
    unlimited dimension, dimension scales) and netCDF4 files in its four formats and CDF-5."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for name in GENERATED:
        p = dest / name
        if not p.exists():
            tmp = dest / f".{name}.tmp"
            if name.startswith("h5-"):
                _h5py_source(tmp, name)
            else:
                _netcdf_source(tmp, name)
            tmp.replace(p)
        out.append(p)
    return out


def _h5py_source(path: Path, name: str) -> None:
    import h5py
    import numpy as np

    libver = "earliest" if name == "h5-earliest.h5" else "latest"
    many = 20 if name == "h5-dense.h5" else 2  # 20: dense attributes and links (fractal heap, v2 B-tree)
    with h5py.File(path, "w", libver=(libver, "latest"), track_order=name == "h5-dense.h5") as f:
        f.attrs["title"] = "scan fuzz"
        f.attrs["count"] = np.int16(3)
        f.attrs["array"] = np.arange(4, dtype=">f8")
        for i in range(many):
            f.attrs[f"a{i:02d}"] = np.array([i], "<i4")
        x = f.create_dataset("x", data=np.arange(10, dtype="<f4"))
        x.make_scale("x")
        t = f.create_dataset("t", data=np.arange(7, dtype="<i8"), maxshape=(None,), chunks=(3,))
        t.make_scale("t")
        v = f.create_dataset("v", data=np.arange(60, dtype="<i4").reshape(6, 10), chunks=(4, 3),
                             compression="gzip", shuffle=True, fillvalue=-1)
        v.dims[1].attach_scale(x)
        v.attrs["units"] = "K"
        f.create_dataset("be", data=np.linspace(0, 1, 12, dtype=">f8").reshape(3, 4), chunks=(2, 2))
        f.create_dataset("partial", shape=(20,), chunks=(5,), dtype="<f8", fillvalue=np.nan)[:5] = 1.0
        f.create_dataset("scalar", data=np.float32(2.5))
        f.create_dataset("f32", data=np.arange(6, dtype="<f4"), fletcher32=True, chunks=(3,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        f.create_dataset("compact", data=np.arange(4, dtype="<i2"), dcpl=dcpl)
        f.create_dataset("text", data=np.array([b"ab", b"cde"], dtype="S3"))
        f.create_dataset("words", data=np.array(["a", "", "\u00e9t\u00e9"], dtype=h5py.string_dtype()))
        f.create_dataset("tags", data=np.array([f"t{i}" for i in range(5)], dtype=h5py.string_dtype()),
                         chunks=(2,), compression="gzip")
        g = f.create_group("g")
        g.attrs["name"] = "group"
        g.create_dataset("w", data=np.ones((3, 10), "<f4")).dims[1].attach_scale(x)
        for i in range(many):
            g.create_dataset(f"d{i:02d}", data=np.full(2, i % 256, "u1"))
        if libver == "latest":  # chunk indexes of layout version 4: fixed and extensible arrays
            f.create_dataset("fa", data=np.arange(400, dtype="<i2").reshape(20, 20), chunks=(3, 3),
                             compression="gzip")
            f.create_dataset("ea", data=np.arange(300.0), maxshape=(None,), chunks=(4,))


def _netcdf_source(path: Path, name: str) -> None:
    import netCDF4
    import numpy as np

    fmt: Any = {"nc4.nc": "NETCDF4", "nc4-classic.nc": "NETCDF4_CLASSIC", "nc3-classic.nc": "NETCDF3_CLASSIC",
           "nc3-64bit.nc": "NETCDF3_64BIT_OFFSET", "nc3-cdf5.nc": "NETCDF3_64BIT_DATA"}[name]
    with netCDF4.Dataset(path, "w", format=fmt) as ds:
        ds.title = "scan fuzz"
        ds.numbers = np.array([1.5, np.nan], "f8")
        ds.createDimension("time", None)
        ds.createDimension("lat", 5)
        ds.createDimension("lon", 8)
        ds.createDimension("nchar", 4)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(4) + 0.5
        ds.createVariable("lat", "f4", ("lat",))[:] = np.linspace(-10, 10, 5)
        nc4 = fmt.startswith("NETCDF4")
        compressed: dict[str, Any] = {"zlib": True, "shuffle": True, "chunksizes": (1, 5, 4)} if nc4 else {}
        v = ds.createVariable("v", "i2", ("time", "lat", "lon"), fill_value=np.int16(-999), **compressed)
        v.scale_factor = 0.5
        v[:] = np.arange(160).reshape(4, 5, 8)  # every record (fewer: xarray refuses the unequal lengths)
        ds.createVariable("r", "f4", ("time", "lon"))[:] = np.arange(32, dtype="f4").reshape(4, 8)
        ds.createVariable("fixed", "f8", ("lat", "lon"))[:] = np.arange(40.0).reshape(5, 8)
        ds.createVariable("chars", "S1", ("lat", "nchar"))[:] = np.array([list("abcd")] * 5, "S1")
        ds.createVariable("b", "i1", ("lon",))[:] = np.arange(8, dtype="i1")
        s = ds.createVariable("s", "i4")
        s.comment = "scalar"
        s.assignValue(7)
        if fmt == "NETCDF4":
            ds.createVariable("names", str, ("lat",))[:] = np.array(["a", "bcd", "", "\u00fcn", "x" * 30], object)
            g = ds.createGroup("sub")
            g.createDimension("n", 3)
            w = g.createVariable("w", "u1", ("n",))
            w[:] = 1
        if fmt == "NETCDF3_64BIT_DATA":
            ds.createVariable("u8", "u8", ("lon",))[:] = np.arange(8, dtype="u8") * 2**40


# -- where the metadata is -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Regions:
    """Where mutations are aimed: ``windows`` follow each metadata structure (a block signature, a
    NetCDF3 header); ``meta`` is everything outside the variables' data."""

    size: int
    windows: tuple[tuple[int, int], ...]
    meta: tuple[tuple[int, int], ...]


def _complement(size: int, data: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out, pos = [], 0
    for a, b in sorted((max(0, a), min(size, b)) for a, b in data):
        if a > pos:
            out.append((pos, a))
        pos = max(pos, b)
    if pos < size:
        out.append((pos, size))
    return out


def _hdf5_data(path: Path) -> list[tuple[int, int]]:
    """Byte ranges of the datasets' data (contiguous extents and chunks), from h5py."""
    import h5py

    spans: list[tuple[int, int]] = []

    def visit(_name: str, obj: Any) -> None:
        if not isinstance(obj, h5py.Dataset):
            return
        dsid = obj.id
        if obj.chunks is None:
            off = dsid.get_offset()
            if off is not None:
                spans.append((off, off + dsid.get_storage_size()))
            return
        for i in range(dsid.get_num_chunks()):
            info = dsid.get_chunk_info(i)
            spans.append((info.byte_offset, info.byte_offset + info.size))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return spans


def _netcdf3_header_end(data: bytes) -> int:
    """Where a NetCDF3 header ends: the smallest ``begin`` of its variables (the file's end if none)."""
    pos = 4
    big = data[3] == 5

    def count() -> int:
        nonlocal pos
        fmt = ">Q" if big else ">I"
        (n,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return int(n)

    def name() -> None:
        nonlocal pos
        n = count()
        pos += (n + 3) // 4 * 4

    def attrs() -> None:
        nonlocal pos
        pos += 4  # NC_ATTRIBUTE or ABSENT
        for _ in range(count()):
            name()
            (t,) = struct.unpack_from(">I", data, pos)
            pos += 4
            n = count()
            size = {1: 1, 2: 1, 3: 2, 4: 4, 5: 4, 6: 8, 7: 1, 8: 2, 9: 4, 10: 8, 11: 8}[t] * n
            pos += (size + 3) // 4 * 4

    count()  # numrecs
    pos += 4  # NC_DIMENSION or ABSENT
    for _ in range(count()):
        name()
        count()
    attrs()
    pos += 4  # NC_VARIABLE or ABSENT
    begins = []
    for _ in range(count()):
        name()
        for _ in range(count()):
            count()
        attrs()
        pos += 4  # nc_type
        count()  # vsize
        (begin,) = struct.unpack_from(">Q" if data[3] != 1 else ">I", data, pos)
        pos += 8 if data[3] != 1 else 4
        begins.append(begin)
    return min([pos, *begins]) if begins else len(data)


def regions(path: Path, kind: str) -> Regions:
    data = path.read_bytes()
    n = len(data)
    if kind == "netcdf3":
        try:
            end = _netcdf3_header_end(data)
        except (struct.error, KeyError):
            end = n
        return Regions(n, ((0, end),), ((0, end),))
    try:
        meta = _complement(n, _hdf5_data(path))
    except Exception:  # h5py cannot list the data: all of the file is fair game
        meta = [(0, n)]
    windows = []
    for sig in HDF5_SIGNATURES:
        i = data.find(sig)
        while i >= 0:
            if any(a <= i < b for a, b in meta):  # not by chance inside compressed data
                windows.append((i, min(n, i + 256)))
            i = data.find(sig, i + 1)
    return Regions(n, tuple(sorted(windows)), tuple(meta))


# -- mutations -----------------------------------------------------------------------------------------
def _position(rng: random.Random, reg: Regions) -> int:
    """A byte to change: after a metadata structure's start (45 %), elsewhere outside the data in the
    first 64 KiB (40 %), anywhere (15 %)."""
    r = rng.random()
    if r < 0.45 and reg.windows:
        a, b = rng.choice(reg.windows)
        return rng.randrange(a, b)
    if r < 0.85:
        head = [(a, min(b, 65536)) for a, b in reg.meta if a < 65536] or list(reg.meta)
        total = sum(b - a for a, b in head)
        if total > 0:
            k = rng.randrange(total)
            for a, b in head:
                if k < b - a:
                    return a + k
                k -= b - a
    return rng.randrange(reg.size)


def mutate(data: bytes, reg: Regions, rng: random.Random) -> tuple[bytes, str]:
    """``data`` changed by one mutation drawn from ``rng``, and a description of it."""
    out = bytearray(data)
    how = rng.choices(["flip", "truncate", "zeros", "ones"], weights=[6, 2, 1, 1])[0]
    if how == "flip":
        parts = []
        for _ in range(rng.choices(range(1, 9), weights=[8, 4, 2, 2, 1, 1, 1, 1])[0]):  # mostly one or two
            p = _position(rng, reg)
            new = out[p] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
            if new == out[p]:
                new ^= 0xFF
            parts.append(f"{p}:{out[p]:02x}>{new:02x}")
            out[p] = new
        return bytes(out), "flip " + " ".join(parts)
    if how == "truncate":
        p = _position(rng, reg) if rng.random() < 0.7 else rng.randrange(len(out))
        return bytes(out[:p]), f"truncate at {p} of {len(out)}"
    p = _position(rng, reg)
    n = min(len(out) - p, int(2 ** rng.uniform(0, 12)))
    out[p:p + n] = (b"\x00" if how == "zeros" else b"\xff") * n
    return bytes(out), f"{how} {p}+{n}"


@dataclass
class Source:
    path: Path
    kind: str  # "hdf5" or "netcdf3"
    regions: Regions
    generated: bool

    @property
    def name(self) -> str:
        from .conftest import CORPUS

        return self.path.name if self.generated else str(self.path.relative_to(CORPUS))


def load_sources(generated_dir: Path, corpus: bool = True) -> list[Source]:
    """The generated files (written in ``generated_dir`` if absent) and, with ``corpus``, the shared
    corpus's files, each with its regions."""
    out = []
    for p in make_sources(generated_dir):
        kind = file_kind(p)
        assert kind is not None, p
        out.append(Source(p, kind, regions(p, kind), True))
    for p in corpus_sources() if corpus else []:
        kind = file_kind(p)
        assert kind is not None
        out.append(Source(p, kind, regions(p, kind), False))
    return out


def pick(seed: int, sources: Sequence[Source]) -> tuple[Source, bytes, str]:
    """Case ``seed``: its source (a generated file 40 % of the time when the corpus is there) and the
    mutated bytes, with the mutation's description."""
    rng = random.Random(seed)
    gen = [s for s in sources if s.generated]
    real = [s for s in sources if not s.generated]
    pool = gen if not real or (gen and rng.random() < 0.4) else real
    src = rng.choice(pool)
    data, desc = mutate(src.path.read_bytes(), src.regions, rng)
    return src, data, desc


# -- results and their classes -------------------------------------------------------------------------
@dataclass
class Result:
    seed: int
    source: str
    mutation: str
    outcome: str
    exc_type: str = ""
    message: str = ""  # the first 200 characters
    where: str = ""  # the innermost frame in refset (file:line function)
    origin: str = ""  # the innermost frame of all
    phase: str = ""  # "scan", "read NAME", "oracle"...
    detail: str = ""  # what differed, or how the worker ended
    seconds: float = 0.0  # from the task sent to its last answer
    tb: str = field(default="", repr=False)

    @property
    def pattern(self) -> tuple[str, str]:
        """(exception type, message with numbers and paths blanked): one row per kind of failure."""
        msg = self.message if self.exc_type else self.detail
        msg = re.sub(r"/\S*case-\d+\S*", "<file>", msg)
        msg = re.sub(r"'[^']*'", "'…'", msg)
        msg = re.sub(r"0x[0-9a-fA-F]+|\d+", "N", msg)
        return self.exc_type or self.outcome, msg[:90]


def classify(refset_part: dict[str, Any] | None, oracle_part: dict[str, Any] | None,
             diff: dict[str, str], excluded: dict[str, list[str]] | None = None) -> tuple[str, dict[str, Any] | None,
                                                                                          str]:
    """The outcome of a case (one of :data:`OUTCOMES`), the exception that decided it and what
    differed. ``refset_part``/``oracle_part`` are the workers' reports (see :func:`_refset_part`);
    ``oracle_part`` None: the oracle crashed or hung. ``excluded``: what differs on the unmutated
    file (names only one side has, names whose values differ), left out of the comparison."""
    assert refset_part is not None
    ex = excluded or {}
    skip = set(ex.get("differ", ()))
    errors = [refset_part["error"]] if refset_part["error"] else [
        e for n, e in refset_part["vars"].items() if e and n not in skip]
    for e in errors:
        if e["memory"]:
            return "memory", e, ""
    for e in errors:
        if not e["refset"]:
            return "bare exception", e, ""
    for e in errors:
        if e["phase"] == "scan" and not e.get("from_broken", True):
            return "invalid file not from Broken", e, ""
    oracle_open = oracle_part is not None and oracle_part["error"] is None
    o_vars: dict[str, Any] = oracle_part["vars"] if oracle_open and oracle_part else {}
    r_vars: dict[str, Any] = refset_part["vars"]
    wrong = [f"{n}: {why}" for n, why in diff.items() if n not in skip]
    if refset_part["error"] is None and oracle_open:
        wrong += [f"{n}: missing" for n, e in o_vars.items()
                  if e is None and n not in r_vars and n not in ex.get("oracle_only", ()) and n not in skip]
        wrong += [f"{n}: not in the file" for n, e in r_vars.items()
                  if e is None and n not in o_vars and n not in ex.get("refset_only", ()) and n not in skip]
    if wrong:
        return "silently wrong", None, "; ".join(wrong)[:300]
    for e in errors:
        if not e["names_file"]:
            return "refset error without the file name", e, ""
    oracle_fails = not oracle_open or any(e is not None for n, e in o_vars.items() if n not in skip)
    if errors:
        if refset_part["error"] is None and oracle_open:  # errors reading: does the oracle fail on those?
            failed = {n for n, e in r_vars.items() if e and n not in skip}
            oracle_fails = any(o_vars.get(n) is not None for n in failed)
        return ("oracle also fails (refset error)" if oracle_fails else "refset error"), errors[0], ""
    if oracle_fails:
        return "oracle also fails (other)", None, ""
    return "right", None, ""


# -- the worker's side ---------------------------------------------------------------------------------
def _frame(fs: traceback.FrameSummary) -> str:
    return f"{_short(fs.filename)}:{fs.lineno} {fs.name}"


def _exc(e: BaseException, path: str, phase: str) -> dict[str, Any]:
    from refset.errors import RefsetError

    frames = traceback.extract_tb(e.__traceback__)
    pkg = os.path.dirname(sys.modules["refset"].__file__ or "")
    mine = [f for f in frames if f.filename.startswith(pkg)]
    typ = type(e)
    msg = str(e)
    return {
        "type": typ.__qualname__ if typ.__module__ == "builtins" else f"{typ.__module__}.{typ.__qualname__}",
        "refset": isinstance(e, RefsetError),
        "from_broken": _from_broken(e),
        "names_file": path in msg,
        "memory": isinstance(e, MemoryError),
        "message": msg[:200],
        "drop": re.findall(r"'([^']*)'", m.group(1)) if (m := re.search(r"drop_variables=\[([^\]]*)\]", msg)) else [],
        "where": _frame(mine[-1]) if mine else "",
        "origin": _frame(frames[-1]) if frames else "",
        "phase": phase,
        "tb": "".join(traceback.format_exception(e))[-4000:],
    }


def _from_broken(e: BaseException) -> bool:
    """False for an ``InvalidFile`` that no ``Broken`` caused (see :func:`tests.scan.fuzzcheck.from_broken`);
    True for anything else, and where the refset under test has no Broken (before issue 44)."""
    from refset.errors import InvalidFile

    try:
        from .scan.fuzzcheck import from_broken

        return not isinstance(e, InvalidFile) or from_broken(e)
    except ImportError:
        return True


def _corner(shape: tuple[int, ...]) -> tuple[slice, ...]:
    """A selection of at most :data:`MAX_ELEMENTS` elements from the start of every axis (the whole
    array when it is that small)."""
    sel = list(shape)
    while sel and math.prod(sel) > MAX_ELEMENTS:
        i = max(range(len(sel)), key=lambda k: sel[k])
        sel[i] = max(1, sel[i] // 2)
    return tuple(slice(0, n) for n in sel)


def _refset_part(path: str, drop: Sequence[str] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """refset's scan (without the variables ``drop``) and read: its report, and the values read
    (name -> (shape, values))."""
    import refset

    values: dict[str, Any] = {}
    report: dict[str, Any] = {"error": None, "vars": {}}
    try:
        rs = refset.scan(path, drop_variables=list(drop), **_scan_options())
        arrays = sorted(k[:-len(".zarray")].rstrip("/") for k in rs if k == ".zarray" or k.endswith("/.zarray"))
    except Exception as e:  # MemoryError too
        report["error"] = _exc(e, path, "scan")
        return report, values
    groups: dict[str, list[str]] = {}
    for a in arrays:
        g, _, _n = a.rpartition("/")
        groups.setdefault(g, []).append(a)
    for g, names in groups.items():
        try:
            ds = refset.open_dataset(rs, group=g or None, decode_cf=False, create_default_indexes=False)
        except Exception as e:
            for a in names:
                report["vars"][a] = _exc(e, path, f"open group {g or '/'}")
            continue
        for name in ds.variables:
            full = f"{g}/{name}" if g else str(name)
            try:
                var = ds.variables[name]
                values[full] = (tuple(var.shape), var[_corner(tuple(var.shape))].values if var.shape else var.values)
                report["vars"][full] = None
            except Exception as e:
                report["vars"][full] = _exc(e, path, f"read {full}")
    return report, values


def _scan_options() -> dict[str, Any]:
    """``h5py_timeout``: :data:`H5PY_TIMEOUT`, or ``$SCANFUZZ_H5PY_TIMEOUT`` seconds (``default``:
    refset's own), where the refset under test has the option."""
    from refset.scan.hdf5.scanner import HDF5Scanner

    given = os.environ.get("SCANFUZZ_H5PY_TIMEOUT", "")
    if given == "default" or "h5py_timeout" not in getattr(HDF5Scanner, "options", ()):
        return {}
    return {"h5py_timeout": float(given) if given else H5PY_TIMEOUT}


def _oracle_part(path: str, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The oracle's read of every variable: h5py for HDF5 (every link to a dataset), scipy for
    CDF-1/2, netCDF4 for CDF-5; raw values (no masking, scaling or character joining)."""
    values: dict[str, Any] = {}
    report: dict[str, Any] = {"error": None, "vars": {}}

    def read(name: str, shape: tuple[int, ...], get: Callable[[Any], Any]) -> None:
        try:
            values[name] = (shape, get(_corner(shape) if shape else ()))
            report["vars"][name] = None
        except Exception as e:
            report["vars"][name] = _exc(e, path, f"oracle read {name}")

    try:
        if kind == "hdf5":
            import h5py

            with h5py.File(path, "r") as f:
                links: list[str] = []
                f.visit_links(links.append)
                # netCDF-4 names a variable that shares its dimension's name "_nc4_non_coord_NAME" (as
                # netCDF-C and refset show it: NAME, in place of the dimension's scale)
                for link in sorted(links, key=lambda k: NON_COORD in k):
                    n = link.replace(NON_COORD, "")
                    try:
                        obj = f[link]  # not f.get: it answers None for h5py's KeyErrors (an object it cannot open)
                    except Exception as e:
                        report["vars"][n] = _exc(e, path, f"oracle open {link}")
                        continue
                    if isinstance(obj, h5py.Dataset):
                        shape = obj.shape
                        if shape is None:  # a null dataspace
                            read(n, (), lambda _sel: None)
                        else:
                            read(n, tuple(shape), obj.__getitem__)
        elif Path(path).read_bytes()[:4] == b"CDF\x05":
            import netCDF4

            with netCDF4.Dataset(path) as ds:
                ds.set_auto_maskandscale(False)
                ds.set_auto_chartostring(False)
                for n, v in ds.variables.items():
                    read(n, tuple(v.shape), functools.partial(_netcdf4_values, v))
        else:
            from scipy.io import netcdf_file

            with netcdf_file(path, "r", mmap=False, maskandscale=False) as nc:
                for n, v in nc.variables.items():
                    read(n, tuple(v.shape), functools.partial(_scipy_values, v))
    except Exception as e:
        report["error"] = _exc(e, path, "oracle open")
    return report, values


def _netcdf4_values(v: Any, sel: tuple[slice, ...]) -> Any:
    return v[sel] if sel else v.getValue()


def _scipy_values(v: Any, sel: tuple[slice, ...]) -> Any:
    return v.data[sel] if sel else v.data[()]


def _texts(a: Any) -> Any:
    import numpy as np

    flat = [x.decode("utf-8", "surrogateescape") if isinstance(x, bytes) else str(x) for x in np.asarray(a).ravel()]
    return np.array(flat, dtype=object).reshape(np.shape(a))


def differs(got: Any, want: Any) -> str | None:
    """Why refset's value ``got`` is not the oracle's ``want`` (None when they are equal)."""
    import numpy as np

    if want is None:  # a null dataspace: refset has nothing to give either
        return None if got is None or np.asarray(got).size == 0 else "null dataspace has values"
    a, b = np.asarray(got), np.asarray(want)
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    if a.dtype.names or b.dtype.names:
        if a.dtype.names != b.dtype.names:
            return f"fields {a.dtype.names} != {b.dtype.names}"
        for f in a.dtype.names or ():
            why = differs(a[f], b[f])
            if why:
                return f"field {f}: {why}"
        return None
    if a.dtype.kind in "OUTS" or b.dtype.kind in "OUTS":
        if a.dtype.kind == b.dtype.kind == "S":
            return None if np.array_equal(a, b) else "bytes differ"
        if a.dtype.kind not in "OUTS" or b.dtype.kind not in "OUTS":
            return f"dtype {a.dtype} != {b.dtype}"
        return None if np.array_equal(_texts(a), _texts(b)) else "strings differ"
    if (a.dtype.kind, a.dtype.itemsize) != (b.dtype.kind, b.dtype.itemsize):
        return f"dtype {a.dtype} != {b.dtype}"
    if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):
        bad = np.flatnonzero(~((a == b) | ((a != a) & (b != b))) if a.dtype.kind in "fc" else a != b)
        return f"{bad.size} of {a.size} values differ (first at flat index {bad[0] if bad.size else '?'})"
    return None


def _worker() -> None:
    """A worker: reads tasks (JSON lines) from stdin, answers each with two JSON lines on the file
    descriptor argv[1]: refset's report, then the oracle's report and the differences."""
    import faulthandler
    import resource
    import warnings

    faulthandler.enable()
    warnings.simplefilter("ignore")
    out = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    with contextlib.suppress(ImportError):
        import hdf5plugin  # noqa: F401  # before netCDF4 (see tests/conftest.py)
    import h5py  # noqa: F401
    import numpy  # noqa: F401
    import scipy.io  # noqa: F401
    import xarray  # noqa: F401
    import zarr  # noqa: F401

    import refset
    import refset.serve.xarray

    memory = int(sys.argv[2])
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    def send(msg: dict[str, Any]) -> None:
        out.write(json.dumps(msg, default=str) + "\n")

    send({"ready": refset.__file__})
    for line in sys.stdin:
        task = json.loads(line)
        path, kind = task["path"], task["kind"]
        r_report, got = _refset_part(path, task.get("drop", ()))
        memory_hit = any(e and e["memory"] for e in [r_report["error"], *r_report["vars"].values()])
        send({"refset": r_report})
        if memory_hit:  # the heap may be in any state: this worker ends, a fresh one goes on
            return
        o_report, want = _oracle_part(path, kind)
        diff = {}
        for name in sorted(set(got) & set(want)):
            (gs, gv), (ws, wv) = got[name], want[name]
            why = f"shape {gs} != {ws}" if gs != ws else None
            if why is None:
                try:
                    why = differs(gv, wv)
                except Exception as e:  # values that do not compare (a ragged array...): they differ
                    why = f"uncomparable: {type(e).__name__}: {e}"[:200]
            if why:
                diff[name] = why
        send({"oracle": o_report, "diff": diff})
        del got, want


# -- the parent's side ---------------------------------------------------------------------------------
_WORKER_CODE = ("import sys; sys.path.append({repo!r}); from tests.scanfuzz import _worker; _worker()")


MARK = "REFSET_SCANFUZZ_WORKER"  # in the environment of a worker and of every process it starts


def _kill_marked(mark: str) -> None:
    """Kill the processes whose environment holds ``MARK=mark`` (psutil; nothing without it)."""
    try:
        import psutil
    except ImportError:
        return
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.pid != os.getpid() and p.environ().get(MARK) == mark:
                p.kill()


class _Worker:
    def __init__(self, workdir: Path, env: dict[str, str], memory: int, number: int) -> None:
        self.err_path = workdir / f"worker-{number}.stderr"
        self.mark = f"{os.getpid()}-{id(self)}-{number}"
        env = {**env, MARK: self.mark}
        r, w = os.pipe()
        with open(self.err_path, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE.format(repo=str(REPO)), str(w), str(memory)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err, pass_fds=(w,), env=env,
                cwd=workdir)
        os.close(w)
        self.fd = r
        os.set_blocking(r, False)
        self.buf = b""
        self.done = 0
        self.err_at = 0
        self.refset_file = ""

    def messages(self) -> Iterator[dict[str, Any]]:
        """The complete lines read so far (the pipe drained without blocking); StopIteration at EOF
        is signalled by :attr:`eof`."""
        self.eof = False
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            yield json.loads(line)

    def send(self, task: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.err_at = self.err_path.stat().st_size
        self.proc.stdin.write((json.dumps(task) + "\n").encode())
        self.proc.stdin.flush()

    def stderr_tail(self) -> str:
        """What the worker wrote to stderr during its last case (faulthandler's tracebacks first)."""
        with open(self.err_path, "rb") as f:
            f.seek(self.err_at)
            text = f.read().decode(errors="replace")
        return "\n".join(ln for ln in text.splitlines() if not ln.startswith("Extension modules:"))[-8000:]

    def stop(self, abort: bool = False) -> int:
        """End the worker (SIGABRT first when ``abort``, for faulthandler's traceback) and every
        process it started (refset's h5py child runs in a session of its own and, stuck in libhdf5,
        would go on looping after the worker's death): those carry the worker's mark in their
        environment. Its exit status."""
        if self.proc.poll() is None and abort:
            self.proc.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(2)
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        rc = self.proc.wait()
        _kill_marked(self.mark)
        os.close(self.fd)
        return rc


def fault_frames(text: str) -> tuple[str, str]:
    """(innermost refset frame, innermost frame) of the worker's main thread in a faulthandler dump."""
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", text):
        if "_refset_part" not in block and "_oracle_part" not in block:
            continue
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', block)  # the most recent first
        shown = [f"{_short(f)}:{n} {fn}" for f, n, fn in frames]
        mine = [x for x, (f, _, _) in zip(shown, frames) if "/refset/" in f and "/tests/" not in f]
        return (mine[0] if mine else ""), (shown[0] if shown else "")
    return "", ""


def _short(name: str) -> str:
    for root in (str(REPO) + "/", "/site-packages/"):
        if root in name:
            name = name.split(root, 1)[1]
    return name


@dataclass
class _Case:
    seed: int
    source: Source
    path: Path
    mutation: str


class Pool:
    """``workers`` long-lived worker processes that run cases one after another (see module doc).
    ``pythonpath``: put first on the workers' ``sys.path`` (another tree's ``src`` to test it)."""

    def __init__(self, workdir: Path, *, workers: int = 2, timeout: float = TIMEOUT, memory: int = MEMORY,
                 pythonpath: str | None = None) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.timeout, self.memory, self.n = timeout, memory, workers
        self.env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                    "MALLOC_ARENA_MAX": "2", "HDF5_USE_FILE_LOCKING": "FALSE", "PYTHONWARNINGS": "ignore"}
        if pythonpath:
            self.env["PYTHONPATH"] = os.pathsep.join([pythonpath, *filter(None, [os.environ.get("PYTHONPATH")])])
        self.started = 0
        self.refset_file = ""
        self.excluded: dict[str, dict[str, list[str]]] = {}  # by source: see calibrate
        self.drops: dict[str, list[str]] = {}  # by source: variables scan refuses in the unmutated file

    def _start(self) -> _Worker:
        w = _Worker(self.workdir, self.env, self.memory, self.started)
        self.started += 1
        return w

    def calibrate(self, sources: Sequence[Source]) -> dict[str, Result]:
        """Each source unmutated: what differs there (names one side lacks, variables either side fails
        to read, values that differ) is left out of its cases' comparisons, and variables that scan
        refuses as Unsupported (saying ``pass drop_variables=[...]``) are dropped in its cases. Its
        result (after the drops, names only one side has not counted) is returned by name."""
        out: dict[str, Result] = {}
        todo = list(sources)
        for _ in range(5):  # a refusal names one variable at a time
            cases = [_Case(-1 - i, s, s.path, "none") for i, s in enumerate(todo)]
            again = []
            for res, raw in self._run(cases, raw=True):
                src = next(c.source for c in cases if c.seed == res.seed)
                r_part, o_part, diff = raw
                err = (r_part or {}).get("error") or {}
                if err.get("refset") and err.get("drop"):
                    named = err["drop"]
                    if not set(named) <= set(self.drops.get(src.name, ())):
                        self.drops.setdefault(src.name, []).extend(named)
                        again.append(src)
                        continue
                dropped = list(self.drops.get(src.name, ()))
                ex: dict[str, list[str]] = {"differ": sorted(diff), "oracle_only": dropped, "refset_only": []}
                if r_part and o_part and r_part["error"] is None and o_part["error"] is None:
                    rv, ov = r_part["vars"], o_part["vars"]
                    ex["oracle_only"] = sorted(set(ov) - set(rv) | set(dropped))
                    ex["refset_only"] = sorted(set(rv) - set(ov))
                    ex["differ"] += sorted({n for n in rv if rv[n]} | {n for n in ov if ov[n]})
                self.excluded[src.name] = ex
                if r_part:  # names only one side has are expected (netCDF dimensions without a variable)
                    res.outcome = classify(r_part, o_part, diff, {k: ex[k] for k in ("oracle_only", "refset_only")})[0]
                out[src.name] = res
            todo = again
            if not todo:
                break
        return out

    def run(self, seeds: Iterable[int], sources: Sequence[Source],
            progress: Callable[[Result], None] | None = None) -> list[Result]:
        """The results of the cases ``seeds`` (mutated files written to the work directory and removed)."""
        def cases() -> Iterator[_Case]:
            for seed in seeds:
                src, data, desc = pick(seed, sources)
                p = self.workdir / f"case-{seed}{src.path.suffix}"
                p.write_bytes(data)
                yield _Case(seed, src, p, desc)

        out = []
        for res, _raw in self._run(cases()):
            out.append(res)
            if progress:
                progress(res)
        return out

    def _run(self, cases: Iterable[_Case], raw: bool = False) -> Iterator[tuple[Result, Any]]:
        todo = iter(cases)
        idle: list[_Worker] = []
        busy: dict[int, tuple[_Worker, _Case, float, dict[str, Any]]] = {}
        sel = selectors.DefaultSelector()
        exhausted = False
        try:
            while True:
                while not exhausted and len(busy) < self.n:
                    case = next(todo, None)
                    if case is None:
                        exhausted = True
                        break
                    w = idle.pop() if idle else self._ready(self._start())
                    w.send({"path": str(case.path), "kind": case.source.kind,
                            "drop": self.drops.get(case.source.name, [])})
                    busy[w.fd] = (w, case, time.monotonic() + self.timeout, {"t0": time.monotonic()})
                    sel.register(w.fd, selectors.EVENT_READ)
                if not busy:
                    return
                wait = max(0.0, min(d for _, _, d, _ in busy.values()) - time.monotonic())
                ready = {key.fd for key, _ in sel.select(wait)}
                now = time.monotonic()
                for fd in list(busy):
                    w, case, deadline, got = busy[fd]
                    ended: str | None = None  # how the worker ended, when it did before its last line
                    if fd in ready:
                        for msg in w.messages():
                            got.update(msg)
                    if "oracle" not in got:
                        if w.eof:
                            ended = "exit"
                        elif now >= deadline:
                            ended = "hang"
                        else:
                            continue
                    sel.unregister(fd)
                    del busy[fd]
                    if ended is not None:
                        rc = w.stop(abort=ended == "hang")
                        ended = "hang" if ended == "hang" else f"exit status {rc}"
                    finished = self._result(case, got, ended, w)
                    if not raw:
                        with contextlib.suppress(OSError):
                            case.path.unlink()
                    if ended is None:
                        w.done += 1
                        if w.done >= RESTART_EVERY:
                            w.stop()
                        else:
                            idle.append(w)
                    yield finished
        finally:
            for w, _, _, _ in busy.values():
                w.stop()
            for w in idle:
                w.stop()
            sel.close()

    def _ready(self, w: _Worker) -> _Worker:
        """``w`` once it has imported everything (its first line names the refset it imported)."""
        deadline = time.monotonic() + 120
        sel = selectors.DefaultSelector()
        sel.register(w.fd, selectors.EVENT_READ)
        try:
            while time.monotonic() < deadline:
                sel.select(1.0)
                for msg in w.messages():
                    w.refset_file = self.refset_file = msg["ready"]
                    return w
                if w.eof:
                    break
        finally:
            sel.close()
        w.stop()
        raise RuntimeError(f"scan fuzz worker did not start: {w.stderr_tail()}")

    def _result(self, case: _Case, got: dict[str, Any], ended: str | None, w: _Worker) -> tuple[Result, Any]:
        """The case's result from what the worker sent (``ended``: how it ended before its last line)."""
        res = Result(case.seed, case.source.name, case.mutation, "", seconds=time.monotonic() - got["t0"])
        r_part, o_part, diff = got.get("refset"), got.get("oracle"), got.get("diff", {})
        if "refset" not in got:  # died or hung in refset's part
            tail = w.stderr_tail()
            memory = ended != "hang" and any(s in tail for s in ("MemoryError", "bad_alloc", "Cannot allocate",
                                                                  "out of memory"))
            res.outcome = "hang" if ended == "hang" else "memory" if memory else "crash"
            res.detail, res.tb, res.phase = ended or "", tail, "refset"
            res.where, res.origin = fault_frames(tail)
            return res, (None, None, {})
        outcome, exc, detail = classify(r_part, o_part, diff, self.excluded.get(case.source.name))
        res.outcome, res.detail = outcome, detail
        if ended is not None:
            res.detail = (f"oracle ended: {ended}; " + detail).strip("; ")
            res.tb = w.stderr_tail()
        if exc:
            res.exc_type, res.message, res.where, res.origin = exc["type"], exc["message"], exc["where"], exc["origin"]
            res.phase, res.tb = exc["phase"], exc["tb"]
        return res, (r_part, o_part, diff)


# -- summaries -----------------------------------------------------------------------------------------
def counts(results: Iterable[Result]) -> Counter[str]:
    c: Counter[str] = Counter(r.outcome for r in results)
    return Counter({k: c[k] for k in OUTCOMES if c[k]})


def table(results: Sequence[Result]) -> str:
    c = counts(results)
    rows = ["| outcome | cases |", "|---|---:|"]
    rows += [f"| {k} | {c.get(k, 0)} |" for k in OUTCOMES]
    rows.append(f"| total | {len(results)} |")
    return "\n".join(rows)


def patterns(results: Sequence[Result], outcomes: Iterable[str], top: int = 15) -> str:
    """The ``top`` most frequent (type, message pattern) of the cases of ``outcomes``, with one
    example seed each and where in refset it arose."""
    chosen = set(outcomes)
    groups: dict[tuple[str, str, str], list[Result]] = {}
    for r in results:
        if r.outcome in chosen:
            groups.setdefault((r.outcome, *r.pattern), []).append(r)
    rows = ["| outcome | type | pattern | cases | example seed | where (refset / innermost) |", "|---|---|---|---:|---:|---|"]
    for (outcome, typ, pat), rs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:top]:
        ex = rs[0]
        pat = pat.replace("|", "\\|").replace("\n", " ")
        rows.append(f"| {outcome} | {typ} | {pat} | {len(rs)} | {ex.seed} ({ex.source}) | {ex.where} / {ex.origin} |")
    return "\n".join(rows)


def replay_command(seed: int) -> str:
    return f"python -m tests.scanfuzz {seed}   # in {REPO}, with the venv active"


def default_generated_dir() -> Path:
    """Where the test and ``python -m tests.scanfuzz`` keep the generated files: named by the code that
    writes them and the versions of h5py, libhdf5 and netCDF4 (other bytes, another directory)."""
    import hashlib
    import inspect

    import h5py
    import netCDF4

    made_by = inspect.getsource(_h5py_source) + inspect.getsource(_netcdf_source) + repr(
        (GENERATED, h5py.__version__, h5py.version.hdf5_version, netCDF4.__version__, netCDF4.__netcdf4libversion__))
    return Path(tempfile.gettempdir()) / f"refset-scanfuzz-sources-{hashlib.sha256(made_by.encode()).hexdigest()[:12]}"


def main(argv: Sequence[str] | None = None) -> int:
    """Replay cases: ``python -m tests.scanfuzz SEED... [--keep DIR] [--no-corpus]``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tests.scanfuzz", description=main.__doc__)
    ap.add_argument("seeds", type=int, nargs="+")
    ap.add_argument("--keep", type=Path, help="write each mutated file into this directory")
    ap.add_argument("--no-corpus", action="store_true", help="generated files only (as without ../shared)")
    ap.add_argument("--sources", type=Path, default=default_generated_dir(), help="where generated files are kept")
    args = ap.parse_args(argv)
    sources = load_sources(args.sources, corpus=not args.no_corpus)
    with tempfile.TemporaryDirectory(prefix="refset-scanfuzz-") as tmp:
        pool = Pool(Path(tmp), workers=1)
        picked = {pick(seed, sources)[0].name: pick(seed, sources)[0] for seed in args.seeds}
        pool.calibrate(list(picked.values()))
        for res in pool.run(args.seeds, sources):
            print(f"seed {res.seed}: {res.outcome}  ({res.source}, {res.mutation})")
            for k in ("exc_type", "message", "where", "origin", "phase", "detail"):
                if getattr(res, k):
                    print(f"  {k}: {getattr(res, k)}")
            if res.tb:
                print("  " + res.tb.rstrip().replace("\n", "\n  "))
            if args.keep:
                args.keep.mkdir(parents=True, exist_ok=True)
                src, data, _ = pick(res.seed, sources)
                dest = args.keep / f"case-{res.seed}{src.path.suffix}"
                dest.write_bytes(data)
                print(f"  mutated file: {dest}")
        print(f"refset: {pool.refset_file}")
    return 0


def as_dict(r: Result) -> dict[str, Any]:
    return asdict(r)


if __name__ == "__main__":
    sys.exit(main())
