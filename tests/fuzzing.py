"""What the fuzz tests and the hostile corpus replay share: reading an input through everything a user
would call, and the valid files that byte mutations start from.

:func:`exercise` loads ``source`` and reads it whole (every key, every table, its JSON forms); it
returns ``"ok"`` or ``"error"`` (a :class:`refset.errors.RefsetError`) and lets anything else
propagate, which the callers report as a crash. :func:`no_hang` turns a read that runs away into a
:class:`Hang` (a SIGALRM in the main thread), so a hang fails the test instead of stalling the run.
"""

from __future__ import annotations

import contextlib
import json
import signal
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import refset
from refset.errors import RefsetError

from .helpers import zarray

# A read longer than this is a hang (the slowest legitimate fuzz input reads in well under a second;
# the template limit is 1 s per document).
HANG_SECONDS = 30


class Hang(Exception):
    """An input whose read did not end within :data:`HANG_SECONDS`."""


@contextlib.contextmanager
def no_hang(seconds: float = HANG_SECONDS) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise Hang(f"no end after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def read_all(rs: refset.ReferenceSet) -> None:
    """Everything a reader of ``rs`` may ask: keys, each reference, tables, sizes, JSON V0 and V1,
    listings and inline values through :class:`refset.ReferenceFileSystem`."""
    from refset.formats.json.v0 import dumps_v0
    from refset.formats.json.v1_writer import dumps_v1

    n = len(rs)
    keys = list(rs)
    assert len(keys) == n, f"len(rs) = {n} but {len(keys)} keys"
    for p in rs.grids:
        rs.table(p)
    for k in keys[:50]:
        assert k in rs
        rs[k]
    rs.to_dict()
    rs.referenced_bytes()
    rs.nbytes()
    rs.format_info()
    dumps_v0(rs)
    dumps_v1(rs, gen=True)
    fs = refset.ReferenceFileSystem(fo=rs)
    fs.find("", withdirs=True)
    for p in list(rs.grids)[:3]:
        fs.ls(p, detail=True)
    # inline values only (the fuzzed URLs are not fetched), of keys that are paths (fsspec strips a
    # trailing "/" and collapses "//", as for any filesystem); cat_file, as cat would expand [ and *
    for k in keys[:50]:
        if isinstance(rs[k], bytes) and k and k == k.strip("/") and "//" not in k:
            assert fs.cat_file(k) == rs[k]


def exercise(source: Any, **options: Any) -> str:
    """``"ok"`` when ``source`` loads and reads whole, ``"error"`` for a refset error; anything else
    (another exception, a :class:`Hang`) propagates."""
    with no_hang():
        try:
            rs = refset.load(source, **options)
            read_all(rs)
        except RefsetError:
            return "error"
    return "ok"


def exercise_json(text: bytes, **options: Any) -> str:
    """:func:`exercise` of JSON ``text``, and ``refset validate``'s check of it
    (:func:`~refset.formats.json.read.document_problems`): both must agree on whether it is valid."""
    from refset.formats.json.read import document_problems

    outcome = exercise(text, **options)
    with no_hang():
        problems = document_problems(text)
    assert isinstance(problems, list) and all(isinstance(p, str) and p for p in problems), problems
    assert (outcome == "ok") == (not problems), (outcome, problems[:3])
    return outcome


# -- valid inputs --------------------------------------------------------------------------------------
def valid_refs() -> dict[str, Any]:
    """A small set with every kind of key: metadata, ranges, whole files, inline text and bytes,
    two arrays (one 2-d with "/" keys), a group and a key outside any array (not in parquet)."""
    refs: dict[str, Any] = {
        ".zgroup": '{"zarr_format":2}',
        ".zattrs": '{"title":"fuzz"}',
        "a/.zarray": zarray([8], [2]),
        "a/.zattrs": '{"_ARRAY_DIMENSIONS":["t"]}',
        "b/.zarray": zarray([3, 4], [1, 2], sep="/"),
        "loose": ["s3://bucket/loose.bin", 5, 6],
    }
    for i in range(4):
        refs[f"a/{i}"] = [f"s3://bucket/f{i % 2}.nc", 1000 + 100 * i, 100]
    for i in range(3):
        for j in range(2):
            refs[f"b/{i}/{j}"] = "base64:AAECAw==" if (i + j) % 2 else [f"s3://bucket/g{j}.nc"]
    refs["b/2/1"] = "text"
    return refs


def valid_v1() -> dict[str, Any]:
    """A Version 1 document with templates and a ``gen`` block."""
    return {
        "version": 1,
        "templates": {"u": "s3://bucket/data", "n": "f"},
        "refs": {".zgroup": '{"zarr_format":2}', "x/.zarray": zarray([6], [1]),
                 "x/0": ["{{u}}/{{n}}0.nc", 10, 20], "y": "base64:AAE="},
        "gen": [{"key": "x/{{i}}", "url": "{{u}}/{{n}}{{i}}.nc", "offset": "{{100 * i}}",
                 "length": "{{10 + i}}", "dimensions": {"i": {"start": 1, "stop": 6}}}],
    }


FORMATS = ("out.json", "out.v1.json", "out.json.gz", "out.json.zst", "out.parq", "out.packed")


def save_valid(dest: Path) -> None:
    """``dest`` (named as in :data:`FORMATS`) written by refset.save from :func:`valid_refs`."""
    fmt = "v1" if dest.name == "out.v1.json" else None
    refs, options = valid_refs(), {}
    if dest.suffix == ".parq":
        del refs["loose"]  # fsspec's layout holds chunk keys and metadata only
        options["record_size"] = 4  # several record files for one array
    refset.save(refs, dest, format=fmt, **options)


# -- packed files rewritten below their checksums ------------------------------------------------------
def packed_index(data: bytes) -> dict[str, Any]:
    """The JSON index of a packed file (see docs/packed-format.md)."""
    import zstandard

    size = int.from_bytes(data[16:24], "little")
    return json.loads(zstandard.ZstdDecompressor().decompress(data[64:64 + size]))


def with_packed_index(data: bytes, index: Any) -> bytes:
    """``data`` with its index replaced by ``index`` and the header fixed (sizes and CRCs), so that
    the file passes every checksum and its index is what a reader must judge."""
    import struct

    import zstandard

    old = int.from_bytes(data[16:24], "little")
    raw = zstandard.ZstdCompressor().compress(json.dumps(index).encode())
    out = bytearray(data[:64] + raw + data[64 + old:])
    delta = len(raw) - old
    head_size, file_size = struct.unpack_from("<QQ", out, 32)
    struct.pack_into("<Q", out, 16, len(raw))
    struct.pack_into("<I", out, 24, zlib.crc32(raw))
    struct.pack_into("<QQ", out, 32, max(0, head_size + delta), file_size + delta)
    struct.pack_into("<I", out, 60, zlib.crc32(bytes(out[:60])))
    return bytes(out)
