"""A reference set written into an Icechunk repository: zarr v3 metadata for every group and array,
every byte range a virtual chunk, inline chunks as native chunks, one commit.

:func:`write` makes a new repository; :func:`append` adds a set that :mod:`refset.combine` made from
the repository's :func:`~refset.formats.icechunk.view.archive_view` and new inputs along one
dimension: the rows past the archive's, in a new commit on the branch (nothing is written when a
check fails: an uncommitted session is dropped).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.errors import ReferenceNotReachable, Unsupported
from refset.formats.icechunk.repo import (
    check_locations,
    container_prefixes,
    exists,
    import_icechunk,
    inner,
    location,
    open_repository,
    remove,
    session,
)
from refset.model.decoding import attrs_difference, decoding_attrs
from refset.model.parts import find_parts, why_split
from refset.model.table import INLINE, RANGE, WHOLE
from refset.model.transforms import with_zarr_format

if TYPE_CHECKING:
    from refset.model.refset import ReferenceSet

__all__ = ["write", "append", "BATCH", "Plan", "plan_of", "native_chunks", "put_documents", "get_document"]

#: Virtual chunk specs handed to Icechunk at a time (bounds the Python objects alive at once).
BATCH = 200_000

_DEFAULT_KEYS = {"name": "default", "configuration": {"separator": "/"}}


@dataclass(frozen=True)
class Plan:
    """A set translated for Icechunk and checked, before anything is written."""

    rs: ReferenceSet  # zarr v3 metadata
    arrays: dict[str, dict[str, Any]]  # path -> zarr.json as written
    groups: dict[str, dict[str, Any]]  # path ("" the root) -> zarr.json
    locations: list[str]  # the set's URL table as Icechunk reads it
    prefixes: list[str]


def plan_of(rs: ReferenceSet) -> Plan:
    """Everything checked and translated before anything is written."""
    rs3 = with_zarr_format(rs.loaded(), 3)
    arrays: dict[str, dict[str, Any]] = {}
    for p, m in rs3.metadata.items():
        dt = m.dtype
        if dt.fields and any(f[0].byteorder == ">" for f in dt.fields.values()):
            raise Unsupported(f"{p}: a compound data type with big-endian fields ({dt}): zarr v3's structured "
                              "data type has no byte order per field, and zarr-python reads such values swapped")
        adoc = dict(m.document)
        if adoc.get("chunk_grid", {}).get("name") != "regular":
            raise Unsupported(f"{p}: chunk grid {adoc.get('chunk_grid')!r}: Icechunk holds regular grids only")
        adoc["chunk_key_encoding"] = _DEFAULT_KEYS  # Icechunk addresses chunks by index, spelled c/i/j
        arrays[p] = adoc
    groups: dict[str, dict[str, Any]] = {}
    other = rs3.other
    for key in other.keys.tolist():
        head, _, name = key.rpartition("/")
        try:
            doc: Any = json.loads(_bytes_of(rs3[key])) if name == "zarr.json" else None
        except ValueError:
            doc = None
        if not (isinstance(doc, dict) and doc.get("node_type") == "group"):
            raise Unsupported(f"key {key!r} is not zarr metadata: an Icechunk repository holds zarr groups and "
                              "arrays only (no plain keys)")
        groups[head] = doc
    groups.setdefault("", {"zarr_format": 3, "node_type": "group", "attributes": {}})
    for p in arrays:  # every parent of an array is a group
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            groups.setdefault("/".join(parts[:i]), {"zarr_format": 3, "node_type": "group", "attributes": {}})
    used = _used_urls(rs3)
    locations = [location(u) if i in used else "" for i, u in enumerate(rs3.urls)]
    check_locations(loc for loc in locations if loc)
    return Plan(rs3, arrays, groups, locations, container_prefixes(loc for loc in locations if loc))


def _bytes_of(ref: Any) -> bytes:
    if isinstance(ref, bytes | bytearray | memoryview):
        return bytes(ref)
    raise Unsupported(f"a group document stored as a reference {ref!r}: read it into the set first")


def _used_urls(rs: ReferenceSet) -> set[int]:
    used: set[int] = set()
    for p in rs.grids:
        t = rs.table(p)
        kind, pid = t.kind, t.path_id
        used.update(np.unique(pid[(kind == RANGE) | (kind == WHOLE)]).tolist())
    return used


def _sync(coro: Any) -> Any:
    from refset.io.bridge import run

    return run(coro)


def put_documents(store: Any, docs: Mapping[str, bytes]) -> None:
    """Write ``{key: bytes}`` into a zarr store (its metadata and native chunks), concurrently."""
    import asyncio

    from zarr.buffer import default_buffer_prototype

    buf = default_buffer_prototype().buffer

    async def put() -> None:
        await asyncio.gather(*(store.set(k, buf.from_bytes(v)) for k, v in docs.items()))

    if docs:
        _sync(put())


def get_document(store: Any, key: str) -> bytes | None:
    """The bytes at ``key`` of a zarr store, None when absent."""
    from zarr.buffer import default_buffer_prototype

    got = _sync(store.get(key, prototype=default_buffer_prototype()))
    return None if got is None else bytes(got.to_bytes())


def _chunk_key(path: str, index: Sequence[int]) -> str:
    return f"{path}/c" + "".join(f"/{i}" for i in index)


def _whole_sizes(rs: ReferenceSet, remote_options: Mapping[str, Any]) -> dict[int, int]:
    """The sizes of the files referenced whole (Icechunk takes offset and length)."""
    ids: set[int] = set()
    for p in rs.grids:
        t = rs.table(p)
        ids.update(np.unique(t.path_id[t.kind == WHOLE]).tolist())
    out = {}
    for i in ids:
        url = rs.urls[i]
        try:
            if "://" not in url or url.startswith("file://"):
                out[i] = os.path.getsize(url.removeprefix("file://"))
            else:
                import fsspec

                fs, path = fsspec.core.url_to_fs(url, **dict(remote_options))
                out[i] = int(fs.size(path))
        except OSError as e:
            raise ReferenceNotReachable("", url, f"its size (a whole-file reference): {e}") from None
    return out


def _batches(plan: Plan, paths: Iterable[str], sizes: Mapping[int, int]) -> Iterator[tuple[str, list[Any]]]:
    """``(path, virtual chunk specs)`` of the byte ranges of ``paths``, at most :data:`BATCH` at a time."""
    ic = import_icechunk()
    rs = plan.rs
    spec = ic.VirtualChunkSpec
    locs = plan.locations
    sums = _checksums(rs)
    for path in paths:
        t = rs.table(path)
        kind = t.kind
        refs = np.flatnonzero((kind == RANGE) | (kind == WHOLE))
        shape = rs.grids[path].grid_shape
        for start in range(0, refs.size, BATCH):
            flat = refs[start:start + BATCH]
            index = np.stack(np.unravel_index(flat, shape), axis=1) if shape else np.zeros((flat.size, 0), np.int64)
            pid = t.path_id[flat].astype(np.int64)
            off = t.offset[flat].astype(np.int64)
            ln = t.length[flat].astype(np.int64)
            whole = kind[flat] == WHOLE
            if whole.any():
                off[whole] = 0
                ln[whole] = [sizes[int(i)] for i in pid[whole]]
            yield path, [spec(index=i, location=locs[p], offset=o, length=n, **sums.get(p, _NONE))
                         for i, p, o, n in zip(index.tolist(), pid.tolist(), off.tolist(), ln.tolist())]


_NONE: dict[str, Any] = {}


def _checksums(rs: ReferenceSet) -> dict[int, dict[str, Any]]:
    """Per URL id, the checksum Icechunk keeps with each virtual chunk into it, so that Icechunk itself
    refuses to read a file that changed since the set's scan: its ETag (a strong one: a weak ETag
    never satisfies the If-Match Icechunk sends), else when it was last modified (Icechunk keeps whole
    seconds: the recorded time rounded up, so that the file as scanned still passes)."""
    import datetime
    from email.utils import parsedate_to_datetime

    fps = rs.fingerprints
    out: dict[int, dict[str, Any]] = {}
    if not len(fps):
        return out
    for i, url in enumerate(rs.urls):
        rec = fps.get(url)
        if rec is None:
            continue
        _, mtime_ns, etag, last_modified = rec
        if etag is not None and not etag.startswith("W/"):
            out[i] = {"etag_checksum": etag}
            continue
        when = None
        if mtime_ns is not None:
            when = datetime.datetime.fromtimestamp(-(-mtime_ns // 10**9), datetime.UTC)
        elif last_modified is not None:
            try:
                when = parsedate_to_datetime(last_modified)
            except (TypeError, ValueError):
                when = None
        if when is not None:
            out[i] = {"last_updated_at_checksum": when}
    return out


def native_chunks(plan: Plan, paths: Iterable[str]) -> dict[str, bytes]:
    """``{chunk key: bytes}`` of the inline chunks of ``paths``."""
    rs = plan.rs
    out = {}
    for path in paths:
        t = rs.table(path)
        inline = np.flatnonzero(t.kind == INLINE)
        if not inline.size:
            continue
        shape = rs.grids[path].grid_shape
        index = np.stack(np.unravel_index(inline, shape), axis=1) if shape else np.zeros((inline.size, 0), np.int64)
        for i, v in zip(index.tolist(), rs.chunk_refs(path, inline)):
            if isinstance(v, bytes | bytearray | memoryview):
                out[_chunk_key(path, i)] = bytes(v)
    return out


def _write_arrays(store: Any, plan: Plan, paths: Iterable[str], sizes: Mapping[int, int]) -> tuple[int, int]:
    """The chunks of ``paths``: inline ones as native chunks, byte ranges as virtual chunks. Icechunk
    takes each batch of specs on a thread of its own while the next batch is made (it releases the
    GIL), and the native chunks on another, so making them costs little beyond Icechunk's own time.
    How many of each were written."""
    from concurrent.futures import Future, ThreadPoolExecutor

    paths = list(paths)
    native = native_chunks(plan, paths)
    written = 0

    def put(path: str, specs: list[Any]) -> None:
        failed = store.set_virtual_refs(path, specs, validate_containers=True)
        if failed:
            raise Unsupported(f"{path}: Icechunk refused {len(failed)} virtual chunk(s), e.g. chunk "
                              f"{tuple(failed[0])}: no virtual chunk container of the repository holds their URLs")

    with ThreadPoolExecutor(2, thread_name_prefix="refset-icechunk") as pool:
        natives = pool.submit(put_documents, store, native)  # beside the virtual ones: other keys
        pending: Future[None] | None = None
        for path, specs in _batches(plan, paths, sizes):
            if pending is not None:
                pending.result()
            pending = pool.submit(put, path, specs)
            written += len(specs)
        if pending is not None:
            pending.result()
        natives.result()
    return written, len(native)


def _special(v: Any) -> Any:
    """``v`` with NaN and infinite floats as zarr v3 spells special fill values (``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``): Icechunk takes standard JSON only."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, dict):
        return {k: _special(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_special(x) for x in v]
    return v


def _json(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(_special(doc), allow_nan=False).encode()


def _metadata_docs(plan: Plan, paths: Iterable[str], groups: bool = True) -> dict[str, bytes]:
    docs = {}
    if groups:
        for g, doc in plan.groups.items():
            docs[f"{g}/zarr.json" if g else "zarr.json"] = _json(doc)
    for p in paths:
        docs[f"{p}/zarr.json"] = _json(plan.arrays[p])
    return docs


def _message(message: str | None, arrays: int, counts: tuple[int, int], what: str) -> str:
    return message or f"refset: {what} {arrays} arrays, {counts[0]:,} virtual and {counts[1]:,} native chunks"


def write(rs: ReferenceSet, dest: Any, *, storage_options: Mapping[str, Any] | None = None,
          remote_options: Mapping[str, Any] | None = None, message: str | None = None,
          branch: str = "main") -> None:
    """A new repository at ``dest`` holding ``rs`` in one commit on ``branch``. A repository already
    there is refused (append to it with :func:`refset.append`).

    ``dest`` may also be an ``icechunk.Repository`` (``rs`` written into a writable session of
    ``branch``, committed) or the ``IcechunkStore`` of a writable session (written, the commit left to
    the caller, as VirtualiZarr's ``to_icechunk`` does); their repository must hold a virtual chunk
    container for each place the set's URLs point to (refused before anything is written, naming
    the prefixes to add)."""
    plan = plan_of(rs)
    if not isinstance(dest, str):
        _write_into(dest, plan, remote_options or {}, message, branch)
        return
    if exists(dest, storage_options):
        raise Unsupported(f"{dest}: an Icechunk repository exists there: append to it (refset.append, or "
                          "--append on the command line) or write a new one elsewhere")
    sizes = _whole_sizes(plan.rs, remote_options or {})
    made = "://" in inner(dest) or not os.path.lexists(inner(dest))
    repo, _ = open_repository(dest, storage_options=storage_options, remote_options=remote_options,
                              prefixes=plan.prefixes, create=True)
    try:
        if branch != "main":
            try:
                repo.create_branch(branch, repo.lookup_branch("main"))
            except BaseException as e:
                raise Unsupported(f"{dest}: branch {branch!r} cannot be made: {e}") from None
        store = session(repo, dest, branch, writable=True).store
        put_documents(store, _metadata_docs(plan, list(plan.arrays)))
        counts = _write_arrays(store, plan, plan.arrays, sizes)
        store.session.commit(_message(message, len(plan.arrays), counts, "wrote"))
    except BaseException:
        if made:  # a repository half made is no repository: a rerun starts clean
            remove(dest, storage_options)
        raise


def _write_into(dest: Any, plan: Plan, remote_options: Mapping[str, Any], message: str | None, branch: str) -> None:
    """:func:`write` into a Repository or a writable session's IcechunkStore."""
    ic = import_icechunk()
    if isinstance(dest, ic.Repository):
        config, sess = dest.config, None
    elif isinstance(dest, ic.IcechunkStore):
        if dest.read_only:
            raise Unsupported("the IcechunkStore is read-only: give the store of a writable session")
        if message is not None or branch != "main":
            raise Unsupported("message= and branch= are not used with an IcechunkStore: its session's branch "
                              "is written, and the commit is its caller's")
        config, sess = dest.session.config, dest.session
    else:
        raise Unsupported(f"an Icechunk destination is a path, an icechunk.Repository or an IcechunkStore, "
                          f"not {type(dest).__name__}")
    held = list((config.virtual_chunk_containers or {}) if config is not None else {})
    missing = [p for p in plan.prefixes if not any(p.startswith(h) for h in held)]
    if missing:
        raise Unsupported(f"the repository has no virtual chunk container for {', '.join(missing)}: add "
                          "one for each (icechunk.VirtualChunkContainer in its RepositoryConfig), or write "
                          "to a path, where refset makes them")
    sizes = _whole_sizes(plan.rs, remote_options)
    if sess is None:
        sess = session(dest, "the repository", branch, writable=True)
    store = sess.store
    put_documents(store, _metadata_docs(plan, list(plan.arrays)))
    counts = _write_arrays(store, plan, plan.arrays, sizes)
    if isinstance(dest, ic.Repository):
        sess.commit(_message(message, len(plan.arrays), counts, "wrote"))


def _comparable(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("shape", "attributes")}


def append(rs: ReferenceSet, dest: str, dim: str, *, storage_options: Mapping[str, Any] | None = None,
           remote_options: Mapping[str, Any] | None = None, message: str | None = None,
           branch: str = "main") -> None:
    """Add to the repository at ``dest`` the rows of ``rs`` along ``dim`` past those it holds, in a new
    commit on ``branch``. ``rs`` is the archive's view combined with new inputs (its first rows are
    the archive's, their chunks absent): the coordinate ``dim``, whose values combine read and
    re-encoded, is written whole; every other array along ``dim`` keeps the repository's chunks and
    gains the new ones, its metadata equal to the repository's but for its length and attributes that
    do not change decoding; arrays without ``dim`` stay as they are. A difference is refused naming
    the array before anything is written; containers for new places are saved after the commit."""
    mixed = find_parts(rs)
    if mixed:  # the new rows are stored unlike the repository's
        path, layout = sorted(mixed.items())[0]
        why = why_split(rs.metadata, layout, len(layout.names) - 1)
        raise Unsupported(f"{dest}: append: variable {path!r}: {why}: "
                          "the new rows would be a part of their own (docs/formats.md, 'Variables made of parts'), "
                          "which an Icechunk repository does not hold; append to a JSON, parquet or packed set, "
                          "or write a new repository")
    plan = plan_of(rs)
    sizes = _whole_sizes(plan.rs, remote_options or {})
    repo, added = open_repository(dest, storage_options=storage_options, remote_options=remote_options,
                                  prefixes=plan.prefixes)
    sess = session(repo, dest, branch, writable=True)
    store = sess.store
    work: list[str] = []
    for p, doc in plan.arrays.items():
        old_raw = get_document(store, f"{p}/zarr.json")
        if old_raw is None:
            raise Unsupported(f"{dest}: append: the inputs have a variable {p!r} that the repository has not: "
                              "an append adds rows to the repository's variables (drop it, or write a new "
                              "repository)")
        old = json.loads(old_raw)
        names = list(doc.get("dimension_names") or [])
        t = plan.rs.table(p)
        if dim not in names:
            if _comparable(old) != _comparable(doc) or old.get("shape") != doc.get("shape"):
                raise Unsupported(f"{dest}: append: {p!r} (without {dim!r}) differs from the repository's")
            continue
        if p == dim and names == [dim]:  # the coordinate: combine read every value
            if t.count() != t.nchunks:
                raise Unsupported(f"{dest}: append: the coordinate {dim!r} has chunks never written")
            work.append(p)
            continue
        axis = names.index(dim)
        _check_same(dest, p, old, doc, axis, dim)
        chunk = doc["chunk_grid"]["configuration"]["chunk_shape"][axis]
        rows = int(old["shape"][axis])
        if rows % chunk:
            raise Unsupported(f"{dest}: append: {p!r} holds {rows} rows along {dim!r}, not a multiple of its "
                              f"chunk {chunk}: rows added after its partial last chunk would need a variable "
                              "made of parts")
        start = rows // chunk
        flat = np.flatnonzero(t.kind != 0)
        if flat.size:
            first = int(np.unravel_index(flat, plan.rs.grids[p].grid_shape)[axis].min())
            if first < start:
                raise Unsupported(f"{dest}: append: {p!r}: new chunks at row {first} of {dim!r}, within the "
                                  f"repository's {start} rows of chunks: appended inputs must come after the "
                                  "repository's last value along it")
        work.append(p)
    put_documents(store, _metadata_docs(plan, work))
    counts = _write_arrays(store, plan, work, sizes)
    sess.commit(_message(message, len(work), counts, "appended to"))
    if added:  # readers find containers in the repository's saved config, not in a commit
        repo.save_config()


def _check_same(dest: str, path: str, old: Mapping[str, Any], new: Mapping[str, Any], axis: int, dim: str) -> None:
    """The repository's metadata of ``path`` and the new set's agree but for the length along ``axis``
    and attributes that decoding does not read."""
    where = f"{dest}: append: {path!r}"
    a, b = _comparable(old), _comparable(new)
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            raise Unsupported(f"{where}: {k} {b.get(k)!r} differs from the repository's {a.get(k)!r}")
    so, sn = list(old.get("shape") or []), list(new.get("shape") or [])
    if len(so) != len(sn) or any(x != y for i, (x, y) in enumerate(zip(so, sn)) if i != axis):
        raise Unsupported(f"{where}: shape {sn} differs from the repository's {so} on dims other than {dim!r}")
    if sn[axis] < so[axis]:
        raise Unsupported(f"{where}: {sn[axis]} rows along {dim!r}, fewer than the repository's {so[axis]}")
    diff = attrs_difference(decoding_attrs(old.get("attributes") or {}),  # as written: special floats as text
                            decoding_attrs(_special(new.get("attributes") or {})))
    if diff is not None:
        raise Unsupported(f"{where}: attribute {diff[0]} {diff[2]!r} differs from the repository's {diff[1]!r}: "
                          "its values would decode differently")

