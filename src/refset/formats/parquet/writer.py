"""Writing parquet reference sets in fsspec's ``LazyReferenceMapper`` layout.

Vectorised from the columnar model: each record file is a slice of an array's dense
:class:`~refset.model.refset.ChunkTable` columns, turned into Arrow arrays without a per-reference Python loop
(only inline data, which is Python ``bytes`` already, is touched one by one). Output goes to a
temporary directory beside ``dest`` that is renamed into place at the end, so a failure leaves no
half-written reference set.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
import uuid
import zlib
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from refset.errors import InvalidOption, RefsetError, Unsupported
from refset.formats.parquet.reader import CHECKSUMS, record_name, seal_zmetadata
from refset.io.atomic import (
    crash_point,
    file_mode,
    hold,
    recover_local,
    remote_leftovers,
    rm_tree,
    temp_prefix,
)
from refset.io.local import trimmed
from refset.model.fingerprints import MEMBER
from refset.model.keys import ChunkGrid, path_problem
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, RANGE, WHOLE, ChunkTable

__all__ = ["write_parquet", "DEFAULT_RECORD_SIZE", "DEFAULT_CATEGORICAL_THRESHOLD"]

# See docs/parquet.md ("Choosing record_size"): a cold lookup decodes one record, so its cost grows
# with the record; writing and whole-array reads pay a fixed cost per file. 20,000 rows keep a cold
# lookup near 1 ms while a 1.1M-reference set needs ~230 files.
DEFAULT_RECORD_SIZE = 20_000
# fsspec's rule: dictionary-encode (categorical) paths when rows / unique paths exceeds this.
DEFAULT_CATEGORICAL_THRESHOLD = 10


def _is_v2_metadata(key: str) -> bool:
    """A zarr v2 metadata key (fsspec's ``_is_meta``: a name starting with ``.z``)."""
    return key.rpartition("/")[2].startswith(".z")


def _split_other(rs: ReferenceSet) -> tuple[dict[str, object], list[tuple[str, int, int, int, int,
                                                                       bytes | None]]]:
    """``rs.other`` -> (metadata documents for ``.zmetadata``, remaining rows)."""
    o = rs.key_table()
    meta: dict[str, object] = {}
    rest = []
    cols = zip(o.keys.tolist(), o.kind.tolist(), o.path_id.tolist(), o.offset.tolist(),
               o.length.tolist(), o.data.tolist(), strict=True)
    for key, kind, pid, off, ln, data in cols:
        if kind == INLINE and _is_v2_metadata(key):
            try:
                meta[key] = json.loads(data)
                continue
            except (ValueError, UnicodeDecodeError, RecursionError):
                pass
        rest.append((key, kind, pid, off, ln, data))
    return meta, rest


class _Array:
    """Chunk references of one array as dense columns (or sparse entries), ready to cut into records."""

    def __init__(self, path: str, grid: ChunkGrid, kind: np.ndarray, pid: np.ndarray, off: np.ndarray,
                 ln: np.ndarray, inline: Mapping[int, bytes], flat: np.ndarray | None = None) -> None:
        self.path, self.grid = path, grid
        kind = np.asarray(kind, np.uint8)
        ln = np.asarray(ln)
        # a zero-length range would read back as a whole file (size 0): store its (empty) data inline
        empty = (kind == RANGE) & (ln == 0)
        inline = dict(inline)
        if empty.any():
            kind = kind.copy()
            kind[empty] = INLINE
            where = np.flatnonzero(empty) if flat is None else np.asarray(flat)[empty]
            inline.update(dict.fromkeys(where.tolist(), b""))
        self.kind, self.pid, self.off, self.ln, self.flat = kind, pid, off, ln, flat
        self.inline = inline

    def records(self, size: int) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                  dict[int, bytes]]]:
        """``(record, kind, path_id, offset, length, {row: bytes})`` per record file to write."""
        n = self.grid.nchunks
        by_rec: dict[int, dict[int, bytes]] = {}
        for f, b in self.inline.items():
            r, row = divmod(f, size)
            by_rec.setdefault(r, {})[row] = b
        if self.flat is None:  # dense: every record, including all-absent ones
            for r in range(-(-n // size)):
                lo, hi = r * size, min(n, (r + 1) * size)
                yield (r, self.kind[lo:hi], self.pid[lo:hi], self.off[lo:hi], self.ln[lo:hi],
                       by_rec.get(r, {}))
            return
        # sparse (chunk keys the model keeps outside a dense table): records that hold references
        rec_of = self.flat // size
        for r in np.unique(rec_of).tolist():
            m = rec_of == r
            rows = self.flat[m] - r * size
            k = np.zeros(min(size, n - r * size), np.uint8)
            p = np.zeros(k.size, np.int64)
            o = np.zeros(k.size, np.uint64)
            ln = np.zeros(k.size, np.uint64)
            k[rows], p[rows], o[rows], ln[rows] = self.kind[m], self.pid[m], self.off[m], self.ln[m]
            yield r, k, p, o, ln, by_rec.get(r, {})


def _pandas_column(name: str, numpy_type: str, pandas_type: str) -> dict[str, object]:
    return {"field_name": name, "metadata": None, "name": name, "numpy_type": numpy_type,
            "pandas_type": pandas_type}


# The pandas schema metadata fastparquet writes for fsspec's record files. fastparquet (fsspec's
# default engine) needs it to read offset/size as int64 rather than float64, and reads `path` as
# object strings with None for missing (a dictionary column described as "categorical" would come
# back as a Categorical whose missing values are NaN, which fsspec mistakes for a path).
_PANDAS_METADATA = json.dumps({
    "column_indexes": [],
    "columns": [_pandas_column("path", "object", "unicode"),
                _pandas_column("offset", "int64", "int64"),
                _pandas_column("size", "int64", "int64"),
                _pandas_column("raw", "object", "bytes")],
    "creator": {"library": "refset", "version": "0.1"},
    "index_columns": [],
    "partition_columns": [],
}).encode()


def _record_table(kind: np.ndarray, pid: np.ndarray, off: np.ndarray, ln: np.ndarray,
                  inline: Mapping[int, bytes], urls: np.ndarray, threshold: float, pad_to: int) -> Any:
    import pyarrow as pa

    n = kind.size
    if pad_to > n:
        kind = np.concatenate([kind, np.zeros(pad_to - n, np.uint8)])
        pid, off, ln = (np.concatenate([a, np.zeros(pad_to - n, a.dtype)]) for a in (pid, off, ln))
        n = pad_to
    has_path = (kind == RANGE) | (kind == WHOLE)
    count = int(np.count_nonzero(has_path))
    if count == 0:
        path = pa.nulls(n, pa.string())
    else:
        uniq, inv = np.unique(pid[has_path], return_inverse=True)
        idx = np.zeros(n, np.int32)
        idx[has_path] = inv
        path = pa.DictionaryArray.from_arrays(pa.array(idx, mask=~has_path),
                                              pa.array(urls[uniq], pa.string()))
        if count / uniq.size <= threshold:
            path = path.cast(pa.string())
    rng = kind == RANGE
    offset = pa.array(np.where(rng, off, 0).astype(np.int64))
    size = pa.array(np.where(rng, ln, 0).astype(np.int64))
    if inline:
        vals: list[bytes | None] = [None] * n
        for row, b in inline.items():
            vals[row] = b
        raw = pa.array(vals, pa.binary())
    else:
        raw = pa.nulls(n, pa.binary())
    # offset/size are declared non-nullable: fastparquet reads a nullable int64 column written
    # without statistics as float64, and fsspec would hand zarr float offsets
    schema = pa.schema([pa.field("path", path.type), pa.field("offset", pa.int64(), nullable=False),
                        pa.field("size", pa.int64(), nullable=False), pa.field("raw", pa.binary())],
                       metadata={b"pandas": _PANDAS_METADATA})
    return pa.Table.from_arrays([path, offset, size, raw], schema=schema)


def _array(path: str, t: ChunkTable) -> _Array:
    if t.is_sparse:
        f, kind, pid, off, ln = t.entries()
        return _Array(path, t.grid, kind, pid, off, ln, t.inline, flat=f)
    return _Array(path, t.grid, t.kind, t.path_id, t.offset, t.length, t.inline)


def _collect(rs: ReferenceSet) -> tuple[dict[str, object], list[_Array]]:
    """Metadata documents and arrays to write; refuse what the layout cannot hold."""
    meta, rest = _split_other(rs)
    problems = []
    v3 = [k for k in rs.key_table().keys.tolist() if k.rpartition("/")[2] == "zarr.json"]
    if v3:
        problems.append(f"zarr v3 metadata ({', '.join(v3[:5])}): fsspec's parquet layout indexes "
                        "chunks by .zarray only; save as 'json' or 'packed' instead")
    if "" in rs.grids:
        problems.append("an array at the root of the set: fsspec's parquet layout needs every array "
                        "in a named group/array directory ('<array>/refs.<n>.parq')")
    for p in rs.grids:
        why = path_problem(p) if p else None
        if why is not None:
            problems.append(f"array path {p[:300]!r} {why}: its record files would lie outside the "
                            "output directory or cannot be created")
    bad = [key for key, *_ in rest if key.rpartition("/")[2] != "zarr.json"]
    if bad:
        problems.append(
            f"{len(bad)} key(s) outside any zarr v2 chunk grid and not JSON zarr metadata "
            f"(e.g. {', '.join(repr(k) for k in bad[:5])}): fsspec's parquet layout cannot store them; "
            "save as 'json' or 'packed' instead"
        )
    if problems:
        raise Unsupported("cannot write parquet references:\n" + "\n".join(problems))
    return meta, [_array(p, rs.table(p)) for p in rs.grids if p]


def _write_tree(write_file: Any, rs: ReferenceSet, meta: Mapping[str, object], arrays: list[_Array],
                record_size: int, threshold: float, pad: bool, compression: str,
                compression_level: int | None) -> None:
    import pyarrow.parquet as pq

    urls = np.empty(len(rs.urls), object)
    urls[:] = rs.urls

    sums: dict[str, int] = {}

    def encode_and_write(name: str, table: Any) -> None:
        buf = io.BytesIO()
        pq.write_table(table, buf, compression=compression, compression_level=compression_level,
                       write_statistics=False, use_dictionary=["path"], write_page_checksum=True)
        data = buf.getvalue()
        sums[name] = zlib.crc32(data)
        write_file(name, data)

    # Arrow tables are built here; encoding and file writes (which release the GIL) overlap in a
    # small pool. At most `2 * workers` tables wait, so memory stays bounded.
    workers = max(1, min(4, os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        pending: list[Future[None]] = []
        for a in arrays:
            for r, kind, pid, off, ln, inline in a.records(record_size):
                table = _record_table(kind, pid, off, ln, inline, urls, threshold,
                                      record_size if pad else 0)
                pending.append(pool.submit(encode_and_write, record_name(a.path, r), table))
                if len(pending) >= 2 * workers:
                    pending.pop(0).result()
        for f in pending:
            f.result()
    doc = {"metadata": dict(sorted(meta.items())), "record_size": record_size,
           CHECKSUMS: dict(sorted(sums.items()))}
    if len(rs.fingerprints):  # refset's own member: fsspec reads "metadata" and "record_size" only
        doc[MEMBER] = {"fingerprints": rs.fingerprints.to_json()}
    write_file(".zmetadata", seal_zmetadata(json.dumps(doc).encode()))


def write_parquet(
    rs: ReferenceSet,
    dest: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    record_size: int = DEFAULT_RECORD_SIZE,
    categorical_threshold: float = DEFAULT_CATEGORICAL_THRESHOLD,
    pad: bool = False,
    compression: str = "zstd",
    compression_level: int | None = None,
    **options: Any,
) -> None:
    """Write ``rs`` to directory ``dest`` (local path or fsspec URL) in fsspec's parquet layout.

    ``record_size``: chunks per record file (C order of chunk index). ``categorical_threshold``:
    paths of a record are dictionary-encoded when rows with a path / unique paths exceeds it (as in
    fsspec). ``pad``: pad the last record of each array to ``record_size`` rows, as fsspec does (its
    reader does not need it). An existing ``dest`` is replaced. Keys outside any zarr v2 chunk grid
    (other than JSON ``.z*`` metadata) and zarr v3 metadata raise :class:`~refset.errors.Unsupported`.
    """
    if options:
        raise Unsupported(f"options {sorted(options)} are not used by format 'parquet'")
    if not isinstance(record_size, int) or isinstance(record_size, bool) or record_size <= 0:
        raise Unsupported(f"record_size: expected a positive integer, got {record_size!r}")
    _check_level(compression, compression_level)
    meta, arrays = _collect(rs)
    args = (rs, meta, arrays, record_size, categorical_threshold, pad, compression, compression_level)
    dest = trimmed(os.fspath(dest))
    if ("://" not in dest or dest.startswith("file://")) and not storage_options:
        _write_local(dest[len("file://"):] if dest.startswith("file://") else dest, args)
    else:
        _write_remote(dest, storage_options, args)


# the levels pyarrow's codecs accept; the others take none
_LEVELS = {"zstd": (1, 22), "gzip": (1, 9), "brotli": (0, 11)}


def _check_level(compression: str, level: int | None) -> None:
    if level is None:
        return
    lo, hi = _LEVELS.get(compression, (None, None))
    if lo is None:
        raise InvalidOption(f"parquet option compression_level={level!r}: compression {compression!r} "
                            f"takes no level (zstd 1-22, gzip 1-9, brotli 0-11 do)")
    if hi is None or not lo <= level <= hi:
        raise InvalidOption(f"parquet option compression_level={level!r}: expected an integer from "
                            f"{lo} to {hi} for compression {compression!r}")


def _write_local(dest: str, args: tuple[Any, ...]) -> None:
    """The tree is written to a temporary directory beside ``dest``; then ``dest`` is renamed aside
    and the new tree into place. A kill between the two renames leaves the old set aside: readers
    use it and the next write to ``dest`` puts it back first (see :func:`~._io.recover_local`)."""
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    recover_local(dest)
    tmp = tempfile.mkdtemp(prefix=temp_prefix(dest), suffix=".tmp", dir=parent)
    locks = [hold(tmp)]  # the new tree, then the old set once renamed aside: other writers leave them alone
    made: set[str] = {tmp}

    def write_file(rel: str, data: bytes) -> None:
        full = os.path.join(tmp, rel)
        d = os.path.dirname(full)
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        with open(full, "wb") as f:
            f.write(data)

    old = None
    try:
        _write_tree(write_file, *args)
        os.chmod(tmp, file_mode(directory=True))
        crash_point("parquet-before-renames")
        if os.path.lexists(dest):
            old = f"{dest}.refset-old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            locks.append(hold(dest))
            os.rename(dest, old)
        crash_point("parquet-between-renames")
        os.rename(tmp, dest)
        crash_point("parquet-after-renames")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not os.path.lexists(dest):
            os.rename(old, dest)
        raise
    finally:
        for fd in locks:
            if fd is not None:
                os.close(fd)
    if old is not None:
        if os.path.isdir(old) and not os.path.islink(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.unlink(old)


def _write_remote(dest: str, storage_options: Mapping[str, Any] | None, args: tuple[Any, ...]) -> None:
    """Object stores have no directory rename: the tree is written beside ``dest``, then the old set
    is removed and the files are copied into place, ``.zmetadata`` last (until it is there, readers see
    no set rather than a mix of two)."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(dest, **dict(storage_options or {}))
    root = root.rstrip("/")
    if not root:  # replacing a set there would remove the whole filesystem's files first
        raise Unsupported(f"{dest}: a parquet set is written into a directory of its own, not at the root "
                          "of a filesystem")
    _recover_remote(fs, root)
    tmp = f"{root}.refset-{uuid.uuid4().hex[:8]}.tmp"
    names: list[str] = []

    def write_file(rel: str, data: bytes) -> None:
        fs.pipe_file(f"{tmp}/{rel}", data)
        names.append(rel)

    try:
        _write_tree(write_file, *args)
    except BaseException:
        rm_tree(fs, tmp)  # incomplete (no .zmetadata): the old set is untouched
        raise
    try:
        if fs.exists(root):
            if fs.exists(f"{root}/.zmetadata"):
                fs.rm_file(f"{root}/.zmetadata")
            rm_tree(fs, root)
        _publish(fs, tmp, root, names)
    except OSError as e:  # the complete new tree stays beside root: readers use it, the next write puts it in place
        raise RefsetError(f"{dest}: writing the parquet set failed ({type(e).__name__}: {e}); the new set "
                          f"is kept complete at {tmp}, which readers use and the next write puts in place") from e
    rm_tree(fs, tmp)


def _publish(fs: Any, tmp: str, root: str, names: list[str]) -> None:
    for i, rel in enumerate(sorted(names, key=lambda r: r == ".zmetadata")):
        fs.cp_file(f"{tmp}/{rel}", f"{root}/{rel}")
        if i == 0:
            crash_point("parquet-remote-copying")


def _recover_remote(fs: Any, root: str) -> None:
    """Finish a write killed or failed while it copied its tree into place (``root`` without
    ``.zmetadata``, the complete tree beside it), then remove every tree left beside ``root``. Writes
    to one remote target must not run at once."""
    left = remote_leftovers(fs, root)
    if not left:
        return
    if not fs.exists(f"{root}/.zmetadata"):
        for t in left:  # complete ones first, newest first
            if fs.exists(f"{t}/.zmetadata"):
                names = [p[len(t) + 1:] for p in fs.find(t)]
                if fs.exists(root):
                    rm_tree(fs, root)
                _publish(fs, t, root, names)
                break
    for t in left:
        rm_tree(fs, t)
