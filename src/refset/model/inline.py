"""Inline chunk bytes of a chunk table, held column-wise: :class:`InlineBytes`.

The values sit end to end in one ``bytes`` buffer; ``flat`` (ascending) gives each one's flat chunk
index and ``offsets`` (one more entry than values) where each starts and ends in the buffer. It reads
as an immutable ``Mapping[int, bytes]``; :meth:`~InlineBytes.take`, :meth:`~InlineBytes.moved`,
:meth:`~InlineBytes.get_many` and :func:`concat_inline` work on the columns, without a Python object
per value.
"""

from __future__ import annotations

import operator
from collections.abc import ItemsView, Iterator, Mapping, Sequence, ValuesView
from itertools import pairwise
from typing import Any

import numpy as np

from refset.errors import InvalidReferences

__all__ = ["InlineBytes", "concat_inline", "offsets_of", "positions_in"]

#: Values longer than this on average are copied by slicing rather than by a numpy index per byte.
_SLICE_MEAN = 64
#: Bytes copied per numpy pass when values are copied by index.
_GATHER_BLOCK = 1 << 20


def _frozen(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (the caller's array object itself stays writeable)."""
    v = a.view()
    v.flags.writeable = False
    return v


def positions_in(ascending: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Position of each of ``values`` in the ascending array ``ascending``; -1 where it is not there."""
    values = np.asarray(values, np.int64)
    n = ascending.size
    if not n:
        return np.full(values.shape, -1, np.int64)
    pos = np.searchsorted(ascending, values)
    ok = (pos < n) & (ascending[np.minimum(pos, n - 1)] == values)
    return np.where(ok, pos, -1)


def offsets_of(lens: np.ndarray) -> np.ndarray:
    """Offsets (one more than ``lens``, from 0) of values of lengths ``lens`` end to end."""
    out = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    return out


def gather(data: bytes, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, bytes]:
    """The segments ``data[starts[i]:starts[i] + lens[i]]`` end to end: ``(offsets, buffer)``."""
    offsets = offsets_of(lens)
    total = int(offsets[-1])
    if total == 0:
        return offsets, b""
    if starts.size and int(starts[0]) == 0 and total == len(data) and bool(
            (starts == offsets[:-1]).all()):
        return offsets, data
    if total > _SLICE_MEAN * starts.size:
        return offsets, b"".join([data[s:s + n] for s, n in zip(starts.tolist(), lens.tolist(), strict=True)])
    src = np.frombuffer(data, np.uint8)
    out = np.empty(total, np.uint8)
    # a block of values at a time: the index arrays cost 16 bytes per byte copied
    cuts = np.searchsorted(offsets, np.arange(0, total, _GATHER_BLOCK), side="right") - 1
    bounds = np.unique(np.append(cuts, starts.size))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        lo, hi = int(offsets[a]), int(offsets[b])
        idx = np.repeat(starts[a:b] - offsets[a:b], lens[a:b])
        idx += np.arange(lo, hi, dtype=np.int64)
        out[lo:hi] = src[idx]
    return offsets, out.tobytes()


class InlineBytes(Mapping[int, bytes]):
    """Inline bytes by flat chunk index: ``flat`` ascending, value ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``. A read-only mapping ``{flat index: bytes}``."""

    __slots__ = ("data", "flat", "offsets")

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, data: bytes) -> None:
        """Columns as they are, checked (ascending ``flat`` without repeats, ``offsets`` rising from
        0 to ``len(data)``); see :meth:`of` and :meth:`from_values` to build one from values."""
        flat = np.asarray(flat)
        offsets = np.asarray(offsets)
        if not isinstance(data, bytes):
            raise InvalidReferences(f"InlineBytes.data: must be bytes, got {type(data).__name__}")
        if flat.ndim != 1 or flat.dtype.kind not in "iu" or offsets.dtype.kind not in "iu" or (
                offsets.shape != (flat.size + 1,)):
            raise InvalidReferences("InlineBytes: flat must be a 1-d integer array and offsets one "
                                    "entry longer")
        if flat.size and (int(flat[0]) < 0 or not bool((flat[1:] > flat[:-1]).all())):
            raise InvalidReferences("InlineBytes.flat: must ascend, without repeats, from 0")
        if int(offsets[0]) != 0 or int(offsets[-1]) != len(data) or not bool((offsets[1:] >= offsets[:-1]).all()):
            raise InvalidReferences(f"InlineBytes.offsets: must rise from 0 to {len(data)} (the data's length)")
        self._set(flat, offsets, data)

    def _set(self, flat: np.ndarray, offsets: np.ndarray, data: bytes) -> None:
        self.flat = _frozen(np.asarray(flat, np.int64))
        self.offsets = _frozen(np.asarray(offsets, np.int64))
        self.data = data

    @classmethod
    def _trusted(cls, flat: np.ndarray, offsets: np.ndarray, data: bytes) -> InlineBytes:
        """Columns that satisfy ``__init__``'s checks by construction."""
        out = cls.__new__(cls)
        out._set(flat, offsets, data)
        return out

    # -- construction ------------------------------------------------------------------------------
    @classmethod
    def empty(cls) -> InlineBytes:
        return _EMPTY

    @classmethod
    def of(cls, values: Mapping[int, bytes] | Any) -> InlineBytes:
        """``values`` (a mapping, or ``(index, bytes)`` pairs) as columns (itself when it already is)."""
        if isinstance(values, InlineBytes):
            return values
        if not values:
            return _EMPTY
        if not isinstance(values, Mapping):
            try:
                values = dict(values)
            except (TypeError, ValueError):
                raise InvalidReferences(f"inline chunks: a mapping of flat chunk index to bytes, got "
                                        f"{type(values).__name__}") from None
        if not all(type(k) is int for k in values):
            bad = next((k for k in values if isinstance(k, bool) or not isinstance(k, int | np.integer)), None)
            if bad is not None:
                raise InvalidReferences(f"inline chunks: key {bad!r} is not a flat chunk index (an int)")
        try:
            flat = np.fromiter(values, np.int64, len(values))
        except OverflowError:
            raise InvalidReferences("inline chunks: a key is too large for a flat chunk index") from None
        return cls.from_values(flat, list(values.values()))

    @classmethod
    def from_values(cls, flat: np.ndarray, values: Sequence[bytes]) -> InlineBytes:
        """``values[i]`` (bytes, bytearray or memoryview) at flat index ``flat[i]``, in any order
        (a later repeat of an index wins)."""
        flat = np.asarray(flat, np.int64)
        if flat.shape != (len(values),):
            raise InvalidReferences(f"inline chunks: {flat.size} indices for {len(values)} values")
        if not all(type(v) is bytes for v in values):
            values = [_as_bytes(v) for v in values]
        lens = np.fromiter(map(len, values), np.int64, len(values))
        return cls.from_buffer(flat, offsets_of(lens), b"".join(values))

    @classmethod
    def from_buffer(cls, flat: np.ndarray, offsets: np.ndarray, data: bytes) -> InlineBytes:
        """Values end to end in ``data`` (``offsets`` rising from 0 to its length, unchecked) at flat
        indices ``flat``, in any order (a later repeat of an index wins)."""
        if flat.size and int(flat.min()) < 0:
            raise InvalidReferences(f"inline chunks: {int(flat.min())} is not a flat chunk index")
        if flat.size < 2 or bool((flat[1:] > flat[:-1]).all()):
            return cls._trusted(flat, offsets, data)
        order = np.argsort(flat, kind="stable")
        f = flat[order]
        last = np.ones(f.size, bool)
        last[:-1] = f[1:] != f[:-1]
        order = order[last]
        starts = offsets[:-1][order]
        new_offsets, buf = gather(data, starts, offsets[1:][order] - starts)
        return cls._trusted(f[last], new_offsets, buf)

    # -- mapping -----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.flat.size)

    def __bool__(self) -> bool:
        return bool(self.flat.size)

    def _flat_list(self) -> list[int]:
        out: list[int] = self.flat.tolist()
        return out

    def __iter__(self) -> Iterator[int]:
        return iter(self._flat_list())

    def __reversed__(self) -> Iterator[int]:
        return reversed(self._flat_list())

    def _pos(self, key: Any) -> int:
        if isinstance(key, float):
            if not key.is_integer():
                return -1
            key = int(key)
        try:
            key = operator.index(key)
        except TypeError:
            return -1
        i = int(self.flat.searchsorted(key))
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

    def values(self) -> ValuesView[bytes]:
        """The values in flat index order."""
        return _Values(self)

    def items(self) -> ItemsView[int, bytes]:
        return _Items(self)

    def value_list(self) -> list[bytes]:
        """The values in flat index order, as a list."""
        d, o = self.data, self.offsets.tolist()
        return [d[a:b] for a, b in pairwise(o)]

    def get_many(self, flat: np.ndarray) -> list[bytes | None]:
        """The value at each of ``flat``, None where there is none."""
        pos = self.positions(flat).tolist()
        d, o = self.data, self.offsets
        return [None if p < 0 else d[o.item(p):o.item(p + 1)] for p in pos]

    def to_dict(self) -> dict[int, bytes]:
        return dict(zip(self.flat.tolist(), self.value_list(), strict=True))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, InlineBytes):
            return (self.data == other.data and np.array_equal(self.flat, other.flat)
                    and np.array_equal(self.offsets, other.offsets))
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    # -- columns -----------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        return len(self.data) + self.flat.nbytes + self.offsets.nbytes if self.flat.size else 0

    def positions(self, flat: np.ndarray) -> np.ndarray:
        """Position of each of ``flat`` among the values; -1 where there is none."""
        return positions_in(self.flat, flat)

    def take(self, pos: np.ndarray) -> InlineBytes:
        """The values at positions ``pos`` (ascending, without repeats), with their flat indices."""
        pos = np.asarray(pos, np.int64)
        n = self.flat.size
        if pos.size == n and (not n or (int(pos[0]) == 0 and int(pos[-1]) == n - 1)):
            return self
        starts = self.offsets[pos]
        offsets, buf = gather(self.data, starts, self.offsets[pos + 1] - starts)
        return InlineBytes._trusted(self.flat[pos], offsets, buf)

    def moved(self, flat: np.ndarray) -> InlineBytes:
        """The same values at new flat indices (``flat[i]`` for value ``i``; any order, no repeats)."""
        return InlineBytes.from_buffer(np.asarray(flat, np.int64), self.offsets, self.data)

    def __reduce__(self) -> tuple[object, ...]:
        return (InlineBytes._trusted, (self.flat, self.offsets, self.data))

    def __repr__(self) -> str:
        return f"<InlineBytes {self.flat.size} values, {len(self.data)} bytes>"


class _Values(ValuesView[bytes]):
    _mapping: InlineBytes

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._mapping.value_list())


class _Items(ItemsView[int, bytes]):
    _mapping: InlineBytes

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        m = self._mapping
        return zip(m.flat.tolist(), m.value_list(), strict=True)


def _as_bytes(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise InvalidReferences(f"inline chunks: values must be bytes, got {type(v).__name__}")


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
    return InlineBytes.from_buffer(flat, offsets, b"".join(p.data for p, _ in parts_f))
