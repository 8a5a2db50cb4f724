"""Zarr stores (v2 and v3, local or on any listable fsspec file system) -> reference sets: the
:class:`ZarrScanner`, the registry's scanner of directories (a store is told by a ``.zgroup``,
``.zarray`` or ``zarr.json`` at its top).

Every group's and array's metadata documents are kept as they are; every chunk becomes a byte range
``(chunk file, 0, size)`` (sizes from the listing: no chunk is read). A sharded zarr v3 array becomes
an array of its inner chunks: each shard's index is read (one request per shard, all in one round) and
each inner chunk is a byte range into its shard, the metadata rewritten to the inner chunk shape and
codecs, so a store's shards combine with other sources chunk by chunk. Keys that are neither metadata
nor chunks of an array (a consolidated ``.zmetadata``, stray files) are left out.

Refused naming the array: codecs around the shards (a shard compressed as a whole), shard indexes
written with codecs other than little-endian ``bytes`` (and ``crc32c``), nested sharding; an index
whose entries point past the end of their shard, a shard smaller than its index, a ``zarr.json`` that
is no JSON are :class:`~refset.io.scanfile.Broken` (the scan's ``InvalidFile`` naming the store).
``drop_variables`` leaves arrays out by path or name; ``inline_threshold`` does not apply (a chunk is a
file of its own, referenced whole by its listed size).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from refset.abc.bytestore import ByteStore
from refset.abc.scanner import INLINE_THRESHOLD, DropList, Scanner
from refset.errors import Unsupported
from refset.io.magic import ZARR_STORE_FILES
from refset.io.scanfile import Broken, ScanFile
from refset.model.metadata import ArrayMetadata
from refset.model.setwriter import SetWriter
from refset.model.table import RANGE, ChunkTable
from refset.model.versions import codec_name

__all__ = ["ZarrScanner", "MAX_KEYS"]

MAX_KEYS = 50_000_000
_META = (".zarray", ".zgroup", ".zattrs", "zarr.json")
_EMPTY = (1 << 64) - 1


class ZarrScanner(Scanner):
    """Zarr stores, v2 and v3 (sharded too): a directory holding a group or an array at its top, local
    or on a listable file system. ``group`` may only name the root (scan the group's directory);
    ``max_inline`` is accepted and unused, so that one option set scans any input."""

    name: ClassVar[str] = "zarr"
    title: ClassVar[str] = "zarr"
    directory: ClassVar[bool] = True
    options: ClassVar[frozenset[str]] = frozenset({"group", "max_inline"})

    def __init__(self, *, inline_threshold: int = INLINE_THRESHOLD, drop_variables: Any = (),
                 subchunk: int | None = None, group: str | None = None, max_inline: int | None = None) -> None:
        super().__init__(inline_threshold=inline_threshold, drop_variables=drop_variables, subchunk=subchunk)
        if group not in (None, "", "/"):
            raise Unsupported(f"group={group!r}: a zarr store's group is scanned as a store of its own (its "
                              "directory)")

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        # docstring inherited: a store is a directory, never a file
        return False

    @classmethod
    def probe_directory(cls, store: ByteStore) -> bool:
        # docstring inherited
        try:
            return any(store.exists(n) for n in ZARR_STORE_FILES)
        except Exception:  # a server refusing the probe: not a store, rather than fail differently
            return False

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        # docstring inherited: every array's chunks are its files, listed with their sizes
        _walk(file.url, file.opener.storage_options, out, drop)


def _walk(url: str, storage_options: Mapping[str, Any], out: SetWriter, drop: DropList) -> None:
    """The store at ``url`` into ``out``: its documents as they are, its arrays given whole."""
    import fsspec

    local = "://" not in url or url.startswith("file://")
    fs, root = fsspec.core.url_to_fs(os.path.abspath(url.removeprefix("file://")) if local else url,
                                     **dict(storage_options or {}))
    root = root.rstrip("/")
    listing = fs.find(root, detail=True)
    if len(listing) > MAX_KEYS:
        raise Unsupported(f"{url}: a store of {len(listing):,} keys (more than {MAX_KEYS:,})")
    sizes: dict[str, int] = {}
    for path, info in listing.items():
        if info.get("type", "file") == "file":
            sizes[path[len(root) + 1:]] = int(info.get("size") or 0)
    meta_keys = sorted(k for k in sizes if k.rsplit("/", 1)[-1] in _META)
    texts = fs.cat([f"{root}/{k}" for k in meta_keys]) if meta_keys else {}
    docs = {k: bytes(texts[f"{root}/{k}"]) for k in meta_keys}

    def url_of(key: str) -> str:
        full = f"{root}/{key}"
        return full if local else fs.unstrip_protocol(full)

    arrays: dict[str, ArrayMetadata] = {}
    dropped: set[str] = set()
    for k, text in docs.items():
        head, _, name = k.rpartition("/")
        if name == ".zarray":
            m = ArrayMetadata.parse(name, text, docs.get(f"{head}/.zattrs" if head else ".zattrs"))
        elif name == "zarr.json":
            try:
                node = json.loads(text)
            except ValueError:
                raise Broken(f"{k}: not JSON") from None
            if not (isinstance(node, dict) and node.get("node_type") == "array"):
                continue  # a group
            m = ArrayMetadata.parse(name, text)
        else:
            continue
        if head in drop or head.rsplit("/", 1)[-1] in drop:
            dropped.add(head)
            continue
        if m is None:
            raise Unsupported(f"{url_of(k)}: an array refset does not index (no regular chunk grid)")
        arrays[head] = m
    out.info = {"format": "zarr store", "name": url}
    out.documents({k: text for k, text in docs.items()
                   if k.rpartition("/")[0] not in arrays and k.rpartition("/")[0] not in dropped})
    under: dict[str, list[str]] = {}
    for k in sizes:
        if k.rsplit("/", 1)[-1] in _META:
            continue
        owner = _owner(k, arrays)
        if owner is not None:
            under.setdefault(owner, []).append(k)
    shards_to_read: list[tuple[str, ArrayMetadata, np.ndarray, list[str], dict[str, Any]]] = []
    for path, m in arrays.items():
        keys = under.get(path, [])
        pre = f"{path}/" if path else ""
        tails = [k[len(pre):] for k in keys]
        flat = m.grid.flat_indices(tails) if tails else np.zeros(0, np.int64)
        keep = flat >= 0
        keys = [k for k, ok in zip(keys, keep.tolist()) if ok]
        flat = flat[keep]
        try:
            shard = _sharding(m)
        except Unsupported as e:
            raise Unsupported(f"{url}: array {path!r}: {e}") from None
        if shard is not None:
            shards_to_read.append((path, m, flat, keys, shard))
            continue
        n = flat.size
        ids = out.file_ids([url_of(k) for k in keys])
        out.table(path, m, ChunkTable.from_entries(m.grid, flat, np.full(n, RANGE, np.uint8), ids,
                                                   np.zeros(n, np.int64), np.array([sizes[k] for k in keys], np.int64)))
    if shards_to_read:
        _shards(shards_to_read, sizes, url_of, out, storage_options, url)


def _owner(key: str, arrays: Mapping[str, ArrayMetadata]) -> str | None:
    """The array a chunk key belongs to (the longest array path that prefixes it)."""
    parts = key.split("/")
    for i in range(len(parts) - 1, -1, -1):
        head = "/".join(parts[:i])
        if head in arrays:
            return head
    return None


def _sharding(m: ArrayMetadata) -> dict[str, Any] | None:
    if m.zarr_format != 3:
        return None
    codecs = list(m.codecs)
    at = next((i for i, c in enumerate(codecs) if isinstance(c, Mapping) and c.get("name") == "sharding_indexed"),
              None)
    if at is None:
        return None
    if at != 0 or len(codecs) > 1:  # the shard as a whole transformed or compressed: no inner chunk in place
        raise Unsupported(f"a sharded array with codecs around its shards ({[codec_name(c) for c in codecs]}): "
                          "its inner chunks are not byte ranges of the shard files")
    return dict(codecs[0].get("configuration") or {})


def _shards(work: list[tuple[str, ArrayMetadata, np.ndarray, list[str], dict[str, Any]]],
            sizes: Mapping[str, int], url_of: Any, out: SetWriter, storage_options: Mapping[str, Any] | None,
            url: str) -> None:
    """The inner chunks of sharded arrays, from their shards' indexes (read in one round)."""
    from refset.io.store import read_many

    plans = []
    reads: list[tuple[str, int, int]] = []
    for path, m, flat, keys, cfg in work:
        inner = tuple(int(c) for c in cfg.get("chunk_shape") or [])
        outer = m.chunks
        if len(inner) != len(outer) or any(i <= 0 or o % i for i, o in zip(inner, outer)):
            raise Unsupported(f"{url}: array {path!r}: inner chunks {list(inner)} do not tile shards {list(outer)}")
        icodecs = cfg.get("index_codecs") or [{"name": "bytes", "configuration": {"endian": "little"}},
                                                {"name": "crc32c"}]
        names = [c.get("name") if isinstance(c, Mapping) else c for c in icodecs]
        first = icodecs[0] if isinstance(icodecs[0], Mapping) else {}
        endian = (first.get("configuration") or {}).get("endian", "little")
        if names[0] != "bytes" or any(n != "crc32c" for n in names[1:]) or endian != "little":
            raise Unsupported(f"{url}: array {path!r}: a shard index written with {names}: refset reads indexes "
                              "of little-endian bytes (and crc32c)")
        inner_codecs = list(cfg.get("codecs") or [])
        if any(isinstance(c, Mapping) and c.get("name") == "sharding_indexed" for c in inner_codecs):
            raise Unsupported(f"{url}: array {path!r}: nested sharding")
        per_shard = tuple(o // i for o, i in zip(outer, inner))
        nbytes = 16 * math.prod(per_shard) + (4 if "crc32c" in names else 0)
        at_start = cfg.get("index_location", "end") == "start"
        for k in keys:
            size = sizes[k]
            if size < nbytes:
                raise Broken(f"{k}: a shard of {size} bytes, smaller than its index ({nbytes})")
            start = 0 if at_start else size - nbytes
            reads.append((url_of(k), start, start + 16 * math.prod(per_shard)))
        plans.append((path, m, flat, keys, inner, per_shard, inner_codecs))
    got = read_many(reads, dict(storage_options or {})) if reads else []
    at = 0
    for path, m, flat, keys, inner, per_shard, inner_codecs in plans:
        doc = dict(m.document)
        doc["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": list(inner)}}
        doc["codecs"] = inner_codecs
        im = ArrayMetadata.from_v3(doc)
        igrid = im.grid.grid_shape
        outer_grid = m.grid.grid_shape
        flats, pids, offs, lens = [], [], [], []
        for f, k in zip(flat.tolist(), keys):
            index = np.frombuffer(got[at], "<u8").reshape(*per_shard, 2)
            at += 1
            shard_at = np.unravel_index(f, outer_grid)
            present = ~((index[..., 0] == _EMPTY) & (index[..., 1] == _EMPTY))
            local = np.argwhere(present)
            if not local.size:
                continue
            o = index[present][:, 0].astype(np.int64)
            n = index[present][:, 1].astype(np.int64)
            if ((index[present][:, 0] >= 1 << 62) | (o + n > sizes[k])).any():
                raise Broken(f"{k}: a shard index entry points past the end of its shard")
            glob = local + np.asarray(shard_at) * np.asarray(per_shard)
            inside = (glob < np.asarray(igrid)).all(axis=1)  # inner chunks past the array's edge
            glob, o, n = glob[inside], o[inside], n[inside]
            flats.append(np.ravel_multi_index(tuple(glob.T), igrid))
            pids.append(np.full(glob.shape[0], out.file_ids([url_of(k)])[0], np.int64))
            offs.append(o)
            lens.append(n)
        ff = _cat(flats)
        out.table(path, im, ChunkTable.from_entries(im.grid, ff, np.full(ff.size, RANGE, np.uint8), _cat(pids),
                                                    _cat(offs), _cat(lens)))


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)
