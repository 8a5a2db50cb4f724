"""Keys as a directory tree: listing, ``find`` and ``isdir`` answered from the columnar model (the sorted
table of other keys plus the chunk grids), never from a dict of all keys. Calls may read lazily stored
tables: async callers run them in a worker thread."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from refset.model.keys import ChunkGrid, chunk_keys
from refset.model.refset import ReferenceSet
from refset.model.table import INLINE, RANGE, KeyTable, Ref

__all__ = ["KeyIndex", "entry"]

_TOP = "\U0010ffff"  # sorts after every character a key can continue with


def entry(name: str, kind: int, length: int, inline: int) -> dict[str, Any]:
    """fsspec's info dict of a file entry (size None for a whole file: unknown without asking)."""
    size: int | None = length if kind == RANGE else inline if kind == INLINE else None
    return {"name": name, "type": "file", "size": size}


def info_of(key: str, ref: Ref) -> dict[str, Any]:
    if isinstance(ref, bytes):
        return {"name": key, "type": "file", "size": len(ref)}
    if len(ref) == 3:
        return {"name": key, "type": "file", "size": ref[2]}
    return {"name": key, "type": "file", "size": None}


class KeyIndex:
    """Listing over a ReferenceSet: the sorted table of other keys plus the chunk grids."""

    def __init__(self, rs: ReferenceSet) -> None:
        self.rs = rs

    def ref(self, key: str) -> Ref | None:
        return self.rs.get(key)

    def _other_range(self, prefix: str, o: KeyTable | None = None) -> tuple[int, int]:
        keys = (self.rs.key_table() if o is None else o).keys
        if not prefix:
            return 0, len(keys)
        return int(np.searchsorted(keys, prefix)), int(np.searchsorted(keys, prefix + _TOP))

    def _inside(self, path: str, a: str, g: ChunkGrid) -> tuple[int, ...] | None:
        """When ``path`` is a directory inside the chunk key tree of array ``a``: the chunk index
        prefix it names (possibly empty, for ``a/c`` of zarr v3). None otherwise."""
        head = f"{a}/" if a else ""
        if path == a or not path.startswith(head):
            return None
        return g.dir_index(path[len(head):])

    def _present(self, a: str, lead: tuple[int, ...]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        t = self.rs.table(a)
        flat = t.present()
        if not t.grid.shape:  # a scalar array: its one chunk, no index
            return flat, ()
        idx = np.unravel_index(flat, t.grid.grid_shape)
        if lead:
            m = np.ones(len(flat), bool)
            for j, v in enumerate(lead):
                m &= idx[j] == v
            flat = flat[m]
            idx = tuple(i[m] for i in idx)
        return flat, idx

    def isdir(self, path: str) -> bool:
        if not path:
            return True
        lo, hi = self._other_range(path + "/", self.rs.other_under(path))
        if hi > lo:
            return True
        for a, g in self.rs.grids.items():
            if a == path or a.startswith(path + "/"):
                return True
            lead = self._inside(path, a, g)
            if lead is not None and len(self._present(a, lead)[0]):
                return True
        return False

    def entries(self, path: str) -> tuple[list[tuple[str, int, int, int]], list[str]] | None:
        """Direct children of directory ``path``: files as ``(name, kind, length, inline size)`` and
        directory names (full keys). None when ``path`` is not a directory."""
        prefix = f"{path}/" if path else ""
        files: list[tuple[str, int, int, int]] = []
        dirs: dict[str, None] = {}
        o = self.rs.other_under(path)
        lo, hi = self._other_range(prefix, o)
        i = lo
        while i < hi:
            k = o.keys[i]
            slash = k.find("/", len(prefix))
            if slash < 0:
                d = o.data[i]
                files.append((k, int(o.kind[i]), int(o.length[i]), len(d) if d is not None else 0))
                i += 1
            else:
                d = k[:slash]
                dirs[d] = None
                i = int(np.searchsorted(o.keys, d + "0", side="left"))  # "0" follows "/"
        for a, g in self.rs.grids.items():
            lead: tuple[int, ...] | None
            if a == path:
                if g.prefix and g.separator == "/" and g.shape:
                    if len(self._present(a, ())[0]):
                        dirs[prefix + g.prefix] = None
                    continue
                lead = ()
            elif a and (not path or a.startswith(prefix)):
                dirs[prefix + a[len(prefix):].split("/", 1)[0]] = None
                continue
            else:
                lead = self._inside(path, a, g)
                if lead is None:
                    continue
            flat, idx = self._present(a, lead)
            depth = len(lead)
            if g.separator == "/" and g.shape and depth + 1 < g.ndim:
                for v in np.unique(idx[depth]).tolist():
                    dirs[f"{prefix}{v}"] = None
                continue
            t = self.rs.table(a)
            kinds, _, _, lens = t.take(flat)
            names = chunk_keys(a, g, flat).tolist()
            data = t.inline.get_many(flat)
            for name, k, n, d in zip(names, kinds.tolist(), lens.tolist(), data, strict=True):
                files.append((name, k, n, len(d) if k == INLINE and d is not None else 0))
        if not files and not dirs and path and not self.isdir(path):
            return None
        return files, list(dirs)

    def iter_prefix(self, prefix: str) -> Iterator[str]:
        """Every key starting with the string ``prefix`` (no path-boundary rule: zarr's
        ``list_prefix``); unordered across arrays."""
        lo, hi = self._other_range(prefix)
        yield from self.rs.key_table().keys[lo:hi].tolist()
        for a, g in self.rs.grids.items():
            head = f"{a}/" if a else ""
            if head.startswith(prefix):
                keys = chunk_keys(a, g, self.rs.table(a).present())
            elif prefix.startswith(head):
                keys = chunk_keys(a, g, self.rs.table(a).present())
                keys = keys[np.strings.startswith(keys, prefix)]
            else:
                continue
            yield from keys.tolist()

    def find(self, path: str) -> list[str]:
        """Sorted keys at or below ``path``, respecting path boundaries (``x`` never finds ``xy/0``)."""
        out = [] if not path or self.ref(path) is None else [path]
        out.extend(self.iter_prefix(f"{path}/" if path else ""))
        out.sort()
        return out

    info_of = staticmethod(info_of)
