"""An outer selection of an array as the chunks it touches, kept per axis (columnar): along each axis
the chunks the axis' index touches, and for each of them which of its positions are read and where
they go in the result. A chunk of the selection is one position in the C-order product of the axes;
nothing is built per chunk until it is placed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Selection"]

_Index = slice | np.ndarray


class Selection:
    """The outer selection ``key`` (per axis an integer, a slice or a 1-d integer or boolean array) of
    an array of ``shape`` chunked by ``chunks``.

    ``ids[a]``: the chunk indices touched along axis ``a`` (ascending); ``src[a][j]``: the positions of
    chunk ``ids[a][j]`` read (relative to the chunk); ``dst[a][j]``: where they go along axis ``a`` of
    :attr:`shape`. ``dropped``: the axes an integer indexed (absent from :attr:`result_shape`).
    """

    __slots__ = ("counts", "dropped", "dst", "ids", "ix", "shape", "src")

    def __init__(self, key: tuple[Any, ...], shape: tuple[int, ...], chunks: tuple[int, ...]) -> None:
        if len(key) != len(shape):
            raise IndexError(f"{len(key)} indices for an array of {len(shape)} dimensions")
        ids, src, dst, out, dropped = [], [], [], [], []
        fancy = False
        for a, (k, n, c) in enumerate(zip(key, shape, chunks, strict=True)):
            i, s, d, m, integer, arr = _axis(k, n, c)
            ids.append(i)
            src.append(s)
            dst.append(d)
            out.append(m)
            fancy |= arr
            if integer:
                dropped.append(a)
        if fancy:  # numpy indexes with several arrays pointwise: outer placement needs np.ix_
            src = [[_as_array(x) for x in s] for s in src]
            dst = [[_as_array(x) for x in d] for d in dst]
        self.ix = fancy
        self.ids = tuple(ids)
        self.src: tuple[list[_Index], ...] = tuple(src)
        self.dst: tuple[list[_Index], ...] = tuple(dst)
        self.shape = tuple(out)
        self.dropped = tuple(dropped)
        self.counts = tuple(len(i) for i in ids)

    @property
    def nchunks(self) -> int:
        """The number of chunks touched (0 when the selection is empty)."""
        return int(np.prod(self.counts, dtype=np.int64)) if all(self.shape) else 0

    @property
    def result_shape(self) -> tuple[int, ...]:
        return tuple(n for a, n in enumerate(self.shape) if a not in self.dropped)

    def flat(self, grid_shape: tuple[int, ...]) -> np.ndarray:
        """Flat (C-order) grid indices of the chunks touched, in selection order."""
        if not self.nchunks:
            return np.zeros(0, np.int64)
        if not grid_shape:
            return np.zeros(1, np.int64)
        mesh = np.meshgrid(*self.ids, indexing="ij")
        got: np.ndarray = np.ravel_multi_index(tuple(m.ravel() for m in mesh), grid_shape).astype(np.int64)
        return got

    def where(self, m: int) -> tuple[tuple[_Index, ...], tuple[_Index, ...]]:
        """(source in the chunk, destination in the result of :attr:`shape`) of the ``m``-th chunk."""
        js = np.unravel_index(m, self.counts) if self.counts else ()
        src = tuple(s[int(j)] for s, j in zip(self.src, js, strict=True))
        dst = tuple(d[int(j)] for d, j in zip(self.dst, js, strict=True))
        if self.ix:
            return np.ix_(*src), np.ix_(*dst)
        return src, dst

    def grid_index(self, m: int) -> tuple[int, ...]:
        """The chunk grid index of the ``m``-th chunk (for messages)."""
        js = np.unravel_index(m, self.counts) if self.counts else ()
        return tuple(int(i[int(j)]) for i, j in zip(self.ids, js, strict=True))


def _as_array(x: _Index) -> np.ndarray:
    return np.arange(x.start, x.stop) if isinstance(x, slice) else x


def _axis(k: Any, n: int, c: int) -> tuple[np.ndarray, list[_Index], list[_Index], int, bool, bool]:
    """(chunk ids, sources, destinations, length in the result, an integer?, arrays needed?) of the
    index ``k`` along an axis of ``n`` positions in chunks of ``c``."""
    c = max(int(c), 1)
    if isinstance(k, int | np.integer):
        i = int(k) + n if int(k) < 0 else int(k)
        if not 0 <= i < n:
            raise IndexError(f"index {int(k)} is out of bounds for an axis of size {n}")
        ci = i // c
        return np.array([ci], np.int64), [slice(i - ci * c, i - ci * c + 1)], [slice(0, 1)], 1, True, False
    if isinstance(k, slice):
        a, b, step = k.indices(n)
        if step == 1:
            if b <= a:
                return np.zeros(0, np.int64), [], [], 0, False, False
            ids = np.arange(a // c, (b - 1) // c + 1, dtype=np.int64)
            lo = np.maximum(ids * c, a)
            hi = np.minimum((ids + 1) * c, b)
            src: list[_Index] = [slice(x - i * c, y - i * c) for i, x, y in zip(ids.tolist(), lo.tolist(), hi.tolist(),
                                                                                   strict=True)]
            dst: list[_Index] = [slice(x - a, y - a) for x, y in zip(lo.tolist(), hi.tolist(), strict=True)]
            return ids, src, dst, b - a, False, False
        idx = np.arange(a, b, step, dtype=np.int64)
    else:
        idx = np.asarray(k)
        if idx.dtype == bool:
            if idx.shape != (n,):
                raise IndexError(f"a boolean index of shape {idx.shape} for an axis of size {n}")
            idx = np.flatnonzero(idx)
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise IndexError(f"an outer index must be 1-d integers, not {idx.dtype} of shape {idx.shape}")
        idx = idx.astype(np.int64)
        idx = np.where(idx < 0, idx + n, idx)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise IndexError(f"index out of bounds for an axis of size {n}")
    if not idx.size:
        return np.zeros(0, np.int64), [], [], 0, False, True
    ch = idx // c
    order = np.argsort(ch, kind="stable")
    ids, first = np.unique(ch[order], return_index=True)
    ends = np.append(first[1:], len(order))
    src = [idx[order[s:e]] - i * c for i, s, e in zip(ids.tolist(), first.tolist(), ends.tolist(), strict=True)]
    dst = [order[s:e] for s, e in zip(first.tolist(), ends.tolist(), strict=True)]
    return ids.astype(np.int64), src, dst, len(idx), False, True
