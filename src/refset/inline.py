"""Inline chunk bytes of a chunk table, held column-wise: :class:`InlineBytes`.

The values sit end to end in one ``bytes`` buffer; ``flat`` (ascending) gives each one's flat chunk
index and ``offsets`` (one more entry than values) where each starts and ends in the buffer. It reads
as an immutable ``Mapping[int, bytes]``; :meth:`~InlineBytes.select`, :meth:`~InlineBytes.moved` and
:func:`concat_inline` work on the columns, without a Python object per value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from .errors import InvalidReferences

__all__ = ["InlineBytes", "concat_inline"]

#: Values longer than this on average are copied by slicing rather than by a numpy index per byte.
_SLICE_MEAN = 64


def _frozen(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _offsets(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    return out


def gather(data: bytes, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, bytes]:
    """The segments ``data[starts[i]:starts[i] + lens[i]]`` end to end: ``(offsets, buffer)``."""
    offsets = _offsets(lens)
    total = int(offsets[-1])
    if total == 0:
        return offsets, b""
    if starts.size and int(starts[0]) == 0 and total == len(data) and bool(
            (starts == offsets[:-1]).all()):
        return offsets, data
    if total > _SLICE_MEAN * starts.size:
        return offsets, b"".join([data[s:s + n] for s, n in zip(starts.tolist(), lens.tolist(), strict=True)])
    src = np.frombuffer(data, np.uint8)
    idx = np.repeat(starts - offsets[:-1], lens) + np.arange(total, dtype=np.int64)
    return offsets, src[idx].tobytes()


class InlineBytes:
    """Inline bytes by flat chunk index: ``flat`` ascending, value ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``. A read-only mapping ``{flat index: bytes}``."""

    __slots__ = ("data", "flat", "offsets")

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, data: bytes) -> None:
        """Columns as they are (ascending ``flat``, ``offsets`` from 0 to ``len(data)``); see
        :meth:`of` and :meth:`from_values` to build one from values in any order."""
        self.flat = _frozen(np.asarray(flat, np.int64))
        self.offsets = _frozen(np.asarray(offsets, np.int64))
        self.data = bytes(data)

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def empty(cls) -> InlineBytes:
        return _EMPTY

    @classmethod
    def of(cls, values: Mapping[int, bytes] | None) -> InlineBytes:
        """``values`` as columns (itself when it already is)."""
        if isinstance(values, InlineBytes):
            return values
        if not values:
            return _EMPTY
        try:
            flat = np.fromiter(values, np.int64, len(values))
        except (TypeError, ValueError, OverflowError) as e:
            raise InvalidReferences(f"inline chunks: keys must be flat chunk indices (ints): {e}") from None
        return cls.from_values(flat, list(values.values()))

    @classmethod
    def from_values(cls, flat: np.ndarray, values: Sequence[bytes]) -> InlineBytes:
        """``values[i]`` at flat index ``flat[i]``, in any order (a later repeat of an index wins)."""
        flat = np.asarray(flat, np.int64)
        if flat.shape != (len(values),):
            raise InvalidReferences(f"inline chunks: {flat.size} indices for {len(values)} values")
        try:
            lens = np.fromiter(map(len, values), np.int64, len(values))
            data = b"".join(values)
        except TypeError:
            bad = next(v for v in values if not isinstance(v, bytes | bytearray | memoryview))
            raise InvalidReferences(f"inline chunks: values must be bytes, got {type(bad).__name__}") from None
        return cls._ordered(flat, _offsets(lens), data)

    @classmethod
    def _ordered(cls, flat: np.ndarray, offsets: np.ndarray, data: bytes) -> InlineBytes:
        """Columns whose ``flat`` may be in any order or repeat (the last repeat wins)."""
        if flat.size < 2 or bool((flat[1:] > flat[:-1]).all()):
            return cls(flat, offsets, data)
        order = np.argsort(flat, kind="stable")
        f = flat[order]
        last = np.ones(f.size, bool)
        last[:-1] = f[1:] != f[:-1]
        order = order[last]
        starts = offsets[:-1][order]
        new_offsets, buf = gather(data, starts, offsets[1:][order] - starts)
        return cls(f[last], new_offsets, buf)

    # -- mapping -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.flat.size)

    def __bool__(self) -> bool:
        return bool(self.flat.size)

    def __iter__(self) -> Iterator[int]:
        return iter(self.flat.tolist())

    def keys(self) -> list[int]:
        return self.flat.tolist()

    def _pos(self, key: Any) -> int:
        if isinstance(key, bool) or not isinstance(key, int | np.integer):
            return -1
        i = int(np.searchsorted(self.flat, key))
        return i if i < self.flat.size and self.flat.item(i) == key else -1

    def __getitem__(self, key: int) -> bytes:
        i = self._pos(key)
        if i < 0:
            raise KeyError(key)
        return self.data[self.offsets.item(i):self.offsets.item(i + 1)]

    def get(self, key: int, default: Any = None) -> Any:
        i = self._pos(key)
        return default if i < 0 else self.data[self.offsets.item(i):self.offsets.item(i + 1)]

    def __contains__(self, key: object) -> bool:
        return self._pos(key) >= 0

    def values(self) -> list[bytes]:
        """The values in flat index order."""
        d, o = self.data, self.offsets.tolist()
        return [d[a:b] for a, b in pairwise(o)]

    def items(self) -> list[tuple[int, bytes]]:
        return list(zip(self.flat.tolist(), self.values(), strict=True))

    def to_dict(self) -> dict[int, bytes]:
        return dict(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, InlineBytes):
            return (self.data == other.data and np.array_equal(self.flat, other.flat)
                    and np.array_equal(self.offsets, other.offsets))
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    # -- columns -----------------------------------------------------------------------------------
    def value_at(self, pos: int) -> bytes:
        """The value at position ``pos`` (in flat index order)."""
        return self.data[self.offsets.item(pos):self.offsets.item(pos + 1)]

    def buffer(self) -> tuple[bytes, np.ndarray]:
        """``(data, offsets)``: the values end to end and where each starts and ends."""
        return self.data, self.offsets

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def nbytes(self) -> int:
        return len(self.data) + self.flat.nbytes + self.offsets.nbytes if self.flat.size else 0

    def positions(self, flat: np.ndarray) -> np.ndarray:
        """Position of each of ``flat`` among the values; -1 where there is none."""
        flat = np.asarray(flat, np.int64)
        if not self.flat.size:
            return np.full(flat.shape, -1, np.int64)
        pos = np.searchsorted(self.flat, flat)
        ok = (pos < self.flat.size) & (self.flat[np.minimum(pos, self.flat.size - 1)] == flat)
        return np.where(ok, pos, -1)

    def take(self, pos: np.ndarray) -> InlineBytes:
        """The values at positions ``pos`` (ascending), with their flat indices."""
        pos = np.asarray(pos, np.int64)
        if pos.size == self.flat.size:
            return self
        starts = self.offsets[pos]
        offsets, buf = gather(self.data, starts, self.offsets[pos + 1] - starts)
        return InlineBytes(self.flat[pos], offsets, buf)

    def moved(self, flat: np.ndarray) -> InlineBytes:
        """The same values at new flat indices (``flat[i]`` for value ``i``; any order, no repeats)."""
        return InlineBytes._ordered(np.asarray(flat, np.int64), self.offsets, self.data)

    def __reduce__(self) -> tuple[object, ...]:
        return (InlineBytes, (self.flat, self.offsets, self.data))

    def __repr__(self) -> str:
        return f"<InlineBytes {self.flat.size} values, {len(self.data)} bytes>"


Mapping.register(InlineBytes)

_EMPTY = InlineBytes(np.zeros(0, np.int64), np.zeros(1, np.int64), b"")


def concat_inline(parts: Sequence[InlineBytes], flats: Sequence[np.ndarray]) -> InlineBytes:
    """One store of the values of ``parts``, part ``k``'s values at flat indices ``flats[k]``
    (any order; where indices repeat, the later part's value wins)."""
    parts_f = [(p, f) for p, f in zip(parts, flats, strict=True) if p.flat.size]
    if not parts_f:
        return _EMPTY
    if len(parts_f) == 1:
        return parts_f[0][0].moved(parts_f[0][1])
    flat = np.concatenate([np.asarray(f, np.int64) for _, f in parts_f])
    sizes = np.array([len(p.data) for p, _ in parts_f], np.int64)
    shift = np.repeat(np.concatenate(([0], np.cumsum(sizes)[:-1])), [p.flat.size for p, _ in parts_f])
    starts = np.concatenate([p.offsets[:-1] for p, _ in parts_f]) + shift
    offsets = np.append(starts, sizes.sum())
    return InlineBytes._ordered(flat, offsets, b"".join(p.data for p, _ in parts_f))
