"""Key grammar: zarr metadata -> chunk grid, and chunk key <-> chunk index.

Zarr v2 (``<array>/.zarray``) chunk keys are ``i.j.k`` or ``i/j/k`` (``dimension_separator``), and
``0`` for a scalar. Zarr v3 (``<array>/zarr.json``) uses ``chunk_key_encoding``: ``default`` gives
``c/i/j`` (or ``c.i.j``), ``v2`` gives ``i.j`` like zarr v2.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from refset.model.swar import HI, U8, ZEROS, byte_lt, masked, swar8, top_byte

__all__ = [
    "ChunkGrid",
    "KeyRouter",
    "grid_from_metadata",
    "grid_from_document",
    "checked_grid",
    "split_metadata_key",
    "array_key",
    "chunk_keys",
    "METADATA_NAMES",
    "path_problem",
    "grid_problem",
    "flat_of",
    "flat_indices",
    "key_tails",
    "tails_in_grid",
]

METADATA_NAMES = (".zarray", "zarr.json")


@dataclass(frozen=True, slots=True)
class ChunkGrid:
    """The regular chunk grid of one zarr array and the spelling of its chunk keys."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    separator: str = "."  # between chunk indices
    prefix: str = ""  # before the indices: "" (zarr v2 style) or "c" (zarr v3 default encoding)
    zarr_format: int = 2
    grid_shape: tuple[int, ...] = field(init=False, compare=False, repr=False)
    """Number of chunks along each dimension."""

    def __post_init__(self) -> None:
        grid = tuple(-(-s // c) if c else 0 for s, c in zip(self.shape, self.chunks))
        object.__setattr__(self, "grid_shape", grid)

    @property
    def nchunks(self) -> int:
        return math.prod(self.grid_shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def chunk_key(self, index: tuple[int, ...] | list[int]) -> str:
        """The key suffix of the chunk at ``index`` (no array prefix)."""
        if not self.shape:
            return self.prefix or "0"
        body = self.separator.join(map(str, index))
        return f"{self.prefix}{self.separator}{body}" if self.prefix else body

    @property
    def key_head(self) -> str:
        """What comes between the array's ``path/`` and the first chunk index (``c/`` or ``c.`` for
        zarr v3's default encoding, else nothing)."""
        return self.prefix + self.separator if self.prefix else ""

    def parse(self, suffix: str) -> tuple[int, ...] | None:
        """Chunk index of a canonical key suffix inside the grid, else None."""
        if not self.shape:
            return () if suffix == (self.prefix or "0") else None
        if self.prefix:
            head = self.key_head
            if not suffix.startswith(head):
                return None
            suffix = suffix[len(head) :]
        return _indices(suffix.split(self.separator), self.grid_shape)

    def flat_index(self, suffix: str) -> int | None:
        """Flat (C-order) chunk index of a canonical key suffix inside the grid, else None."""
        idx = self.parse(suffix)
        if idx is None:
            return None
        flat = 0
        for i, n in zip(idx, self.grid_shape):
            flat = flat * n + i
        return flat

    def flat_indices(self, suffixes: Sequence[str]) -> np.ndarray:
        """:meth:`flat_index` of many key suffixes at once (-1 where one is no chunk key of the grid)."""
        if self.separator == "." and not self.prefix:
            return flat_indices(suffixes, self.grid_shape)
        return np.array([-1 if (f := self.flat_index(t)) is None else f for t in suffixes], np.int64)

    def dir_index(self, rel: str) -> tuple[int, ...] | None:
        """For ``"/"``-separated keys: the chunk index prefix named by directory ``rel`` inside the
        array (``""`` or ``"c"``: no index yet; ``"1"``/``"c/1"``: chunk rows starting with 1). None when
        ``rel`` is not such a directory."""
        if self.separator != "/" or not self.shape:
            return None
        parts = rel.split("/") if rel else []
        if self.prefix:
            if not parts or parts[0] != self.prefix:
                return None
            parts = parts[1:]
        elif not rel:
            return None  # the array itself, not a directory of chunk keys
        if len(parts) >= self.ndim:
            return None
        return _indices(parts, self.grid_shape[: len(parts)])


# -- the grammar of one key ---------------------------------------------------------------------------
def _indices(parts: Sequence[str], grid_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Canonical decimals (ASCII digits, no sign, no leading zeros, no spaces), one per axis, inside the
    grid, else None."""
    if len(parts) != len(grid_shape):
        return None
    out = []
    for p, n in zip(parts, grid_shape):
        if not (p.isdigit() and p.isascii()) or (p[0] == "0" and len(p) > 1):
            return None
        i = int(p)
        if i >= n:
            return None
        out.append(i)
    return tuple(out)


def flat_of(parts: Sequence[str], grid_shape: tuple[int, ...]) -> int:
    """The flat C-order index of the chunk whose indices are ``parts`` (:func:`_indices`'s grammar,
    in one pass: it runs once per key looked up), or -1."""
    if len(parts) != len(grid_shape):
        return -1
    flat = 0
    for p, n in zip(parts, grid_shape):
        if not (p.isdigit() and p.isascii()) or (p[0] == "0" and len(p) > 1):
            return -1
        i = int(p)
        if i >= n:
            return -1
        flat = flat * n + i
    return flat


def array_key(path: str, suffix: str) -> str:
    """The key ``suffix`` of array ``path`` (the root array has no ``/``)."""
    return f"{path}/{suffix}" if path else suffix


def chunk_keys(path: str, grid: ChunkGrid, flat: np.ndarray) -> np.ndarray:
    """Keys (a numpy ``StringDType`` array) of chunks ``flat`` of array ``path``, built without a
    Python loop (variable-width strings: short keys sit inline, no fixed-width padding)."""
    from numpy.dtypes import StringDType

    sd = StringDType()
    flat = np.asarray(flat, np.int64)
    if not grid.shape:
        return np.full(len(flat), array_key(path, grid.chunk_key(())), dtype=sd)
    idx = np.unravel_index(flat, grid.grid_shape)
    out = idx[0].astype(sd)
    for i in idx[1:]:
        out = np.strings.add(np.strings.add(out, grid.separator), i.astype(sd))
    head = array_key(path, grid.key_head)
    return np.strings.add(np.array(head, sd), out) if head else out


class KeyRouter:
    """Maps a key to (array path, flat chunk index) for a set of chunk grids."""

    def __init__(self, grids: Mapping[str, ChunkGrid]) -> None:
        self.grids = dict(grids)
        # how many trailing "/"-separated components a chunk key suffix has
        self._depths: dict[int, None] = {}
        self._depth_of: dict[str, int] = {}
        for path, g in self.grids.items():
            d = 1 if (g.separator == "." or not g.shape) else g.ndim + (1 if g.prefix else 0)
            self._depth_of[path] = d
            self._depths[d] = None

    def locate(self, key: str) -> tuple[str, int] | None:
        """(array path, flat C-order chunk index) of a canonical chunk key inside a grid, else None."""
        for d in self._depths:
            if d == 1:
                head, _, suffix = key.rpartition("/")
            else:
                parts = key.rsplit("/", d)
                if len(parts) == d + 1:
                    head, suffix = parts[0], "/".join(parts[1:])
                elif len(parts) == d:
                    head, suffix = "", key
                else:
                    continue
            g = self.grids.get(head)
            if g is None or self._depth_of[head] != d:
                continue
            if g.separator == "." and not g.prefix and g.shape:  # the common spelling
                f = flat_of(suffix.split("."), g.grid_shape)
                if f >= 0:
                    return head, f
                continue
            flat = g.flat_index(suffix)
            if flat is not None:
                return head, flat
        return None


def split_metadata_key(key: str) -> tuple[str, str] | None:
    """``"a/b/.zarray"`` -> ``("a/b", ".zarray")``; None for other keys."""
    head, _, name = key.rpartition("/")
    if name in METADATA_NAMES:
        return head, name
    return None


def _int_tuple(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list | tuple) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    ):
        return None
    return tuple(value)


def grid_from_metadata(name: str, text: bytes) -> ChunkGrid | None:
    """The chunk grid described by a ``.zarray`` or ``zarr.json`` document (JSON text), or None.

    None means "no chunk grid": the document is not an array, is malformed, or uses a grid refset
    does not index (irregular grids). Such arrays keep their keys in the generic table, losslessly.
    """
    text = bytes(text)
    # cached when small: sets made from many files repeat the same few documents
    return _cached_grid(name, text) if len(text) <= 4096 else _grid_of_text(name, text)


def _grid_of_text(name: str, text: bytes) -> ChunkGrid | None:
    try:
        meta = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return grid_from_document(name, meta)


_cached_grid = functools.lru_cache(maxsize=1024)(_grid_of_text)


def grid_from_document(name: str, meta: object) -> ChunkGrid | None:
    """:func:`grid_from_metadata` for an already parsed document."""
    if not isinstance(meta, dict):
        return None
    if name == ".zarray":
        sep = meta.get("dimension_separator") or "."
        return checked_grid(meta.get("shape"), meta.get("chunks"), sep, "", 2)
    else:
        if meta.get("node_type") != "array" or meta.get("zarr_format") != 3:
            return None
        shape = _int_tuple(meta.get("shape"))
        cg = meta.get("chunk_grid")
        if shape is None or not isinstance(cg, dict) or cg.get("name") != "regular":
            return None
        cfg = cg.get("configuration")
        chunks = _int_tuple(cfg.get("chunk_shape")) if isinstance(cfg, dict) else None
        if chunks is None or len(shape) != len(chunks):
            return None
        enc = meta.get("chunk_key_encoding") or {"name": "default"}
        if not isinstance(enc, dict):
            return None
        cfg = enc.get("configuration") or {}
        if not isinstance(cfg, dict):
            return None
        if enc.get("name") == "default":
            sep = cfg.get("separator", "/")
            prefix = "c"
        elif enc.get("name") == "v2":
            sep = cfg.get("separator", ".")
            prefix = ""
        else:
            return None
        return checked_grid(shape, chunks, sep, prefix, 3)


def checked_grid(shape: object, chunks: object, separator: object, prefix: object,
                 zarr_format: object) -> ChunkGrid | None:
    """The :class:`ChunkGrid` of these fields when they make one refset indexes, else None: lists of
    non-negative integers of one rank, no chunk 0, fewer than 2**63 chunks (flat indices fit in int64),
    separator ``.`` or ``/``, prefix ``""`` or ``c``, zarr format 2 or 3."""
    shape_t, chunks_t = _int_tuple(shape), _int_tuple(chunks)
    if (shape_t is None or chunks_t is None or len(shape_t) != len(chunks_t) or 0 in chunks_t
            or separator not in (".", "/") or prefix not in ("", "c")
            or zarr_format not in (2, 3) or type(zarr_format) is not int):
        return None
    grid = ChunkGrid(shape_t, chunks_t, str(separator), str(prefix), zarr_format)
    return grid if grid.nchunks < 1 << 63 else None


MAX_COMPONENT = 255  # bytes: NAME_MAX of common filesystems
MAX_PATH = 4000  # bytes: below PATH_MAX (4096) with room for the output directory


def path_problem(path: str) -> str | None:
    """Why array ``path`` cannot name a directory inside an output or input tree, or None when it
    can: a ``..`` or ``.`` or empty component, an absolute path, a NUL or backslash, a component
    longer than 255 bytes, a path longer than 4000 bytes."""
    if "\0" in path:
        return "contains a NUL character"
    if "\\" in path:
        return "contains a backslash"
    if path.startswith("/"):
        return "is absolute"
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH:
        return f"is longer than {MAX_PATH} bytes"
    for part in path.split("/"):
        if part in ("", ".", ".."):
            return f"has a {part!r} component" if part else "has an empty component"
        if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT:
            return f"has a component longer than {MAX_COMPONENT} bytes"
    return None


def grid_problem(name: str, text: bytes) -> str:
    """Why a ``.zarray``/``zarr.json`` document describes no chunk grid (for a reader that must have one)."""
    try:
        meta = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        return f"not JSON ({e})"
    if not isinstance(meta, dict):
        return f"must be a JSON object, got {type(meta).__name__}"
    shape = meta.get("shape")
    chunks = meta.get("chunks") if name == ".zarray" else (meta.get("chunk_grid") or {})
    if _int_tuple(shape) is None:
        return f"shape must be a list of non-negative integers, got {json.dumps(shape)[:80]}"
    if name == ".zarray" and _int_tuple(chunks) is None:
        return f"chunks must be a list of non-negative integers, got {json.dumps(chunks)[:80]}"
    return ("does not describe a regular chunk grid (chunks of the same rank as shape, none 0, "
            "fewer than 2**63 chunks, dimension_separator '.' or '/')")


# -- the grammar over many keys at once (numpy passes over the bytes of a text) ---------------------
def key_tails(
    W: np.ndarray, a: np.ndarray, ks: np.ndarray, ke: np.ndarray, maxdim: int = 32
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """Parse ``prefix/i.j.k`` from key spans: (prefix end, ndim, [last index, second last, ...]).

    ndim 0 means "not a dotted chunk key"; the prefix end is the position of the '/' (or the key
    start for a key of digits only).
    """
    N = ks.size
    ndim = np.zeros(N, np.int64)
    pend = ks.copy()
    idx: list[np.ndarray] = []
    active = np.arange(N)
    end = ke.copy()
    for d in range(maxdim):
        if active.size == 0:
            break
        e = end[active]
        kst = ks[active]
        w = W[np.maximum(e - 8, 0)]
        bad = ~byte_lt(w ^ ZEROS, 10) & HI
        top = top_byte(bad)  # highest non-digit byte; -1 if all 8 are digits
        nd = 7 - top
        # the separator and the first digit are bytes of the same word: no gathers
        shift = (top.clip(0) * 8).astype(np.uint64)
        sep = ((w >> shift) & U8(0xFF)).astype(np.uint8)
        first = ((w >> np.minimum(shift + U8(8), U8(56))) & U8(0xFF)).astype(np.uint8)
        start = e - nd
        at_key_start = start <= kst  # the key's opening quote is the "separator"
        good = (top >= 0) & (nd >= 1) & (start >= kst) & ~((first == 48) & (nd > 1))
        val = swar8(masked(w, nd))
        cont = good & (sep == 46) & ~at_key_start
        stop_slash = good & (sep == 47) & ~at_key_start
        stop_root = good & (start == kst)
        col = np.full(N, -1, np.int64)
        col[active[good]] = val[good].astype(np.int64)
        idx.append(col)
        done = stop_slash | stop_root
        dr = active[done]
        ndim[dr] = d + 1
        pend[dr] = np.where(stop_slash[done], start[done] - 1, ks[dr])
        end[active[cont]] = start[cont] - 1
        active = active[cont]
    return pend, ndim, idx


def tails_in_grid(ndim: np.ndarray, idx: list[np.ndarray], rows: np.ndarray, shape: tuple[int, ...],
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Of ``rows`` (whose key tails :func:`key_tails` parsed into ``ndim`` and ``idx``), those that
    name a chunk of a grid of chunk-grid ``shape`` (ndim >= 1), and their flat indices."""
    if len(shape) > len(idx):  # no key has that many indices
        return rows[:0], np.zeros(0, np.int64)
    good = ndim[rows] == len(shape)
    for d, n in enumerate(reversed(shape)):
        v = idx[d][rows]
        good &= (v >= 0) & (v < n)
    rows = rows[good]
    flat = np.ravel_multi_index(tuple(idx[d][rows] for d in reversed(range(len(shape)))), shape)
    return rows, flat.astype(np.int64)


@functools.lru_cache(maxsize=1 << 16)
def _tail_flat(tail: str, grid_shape: tuple[int, ...]) -> int:
    """:func:`flat_of` of a "."-separated tail, memoised (a pure function: sets made from many files
    repeat the same tails of the same small grids)."""
    return flat_of(tail.split("."), grid_shape)


#: From this many key tails, :func:`flat_indices` parses them in numpy passes.
VECTOR_KEYS = 256


def flat_indices(tails: Sequence[str], grid_shape: tuple[int, ...]) -> np.ndarray:
    """Flat C-order chunk index of each "."-separated key tail (``"i.j.k"``; ``"0"`` in a scalar's grid)
    in a grid of chunk-grid shape ``grid_shape``; -1 where a tail is no canonical chunk key of it. The
    grammar of :func:`flat_of`, for many tails at once (:func:`key_tails` over their bytes)."""
    n = len(tails)
    if not grid_shape:
        return np.array([0 if t == "0" else -1 for t in tails], np.int64)
    if n < VECTOR_KEYS:
        return np.fromiter((_tail_flat(t, grid_shape) for t in tails), np.int64, n)
    from refset.model.swar import words

    body = "/".join(tails).encode("utf-8", "surrogatepass")
    pad = 16
    text = b"/" * pad + body + b"/" + bytes(8)
    lens = np.fromiter((len(t.encode("utf-8", "surrogatepass")) if not t.isascii() else len(t) for t in tails),
                       np.int64, n)
    ks = pad + np.concatenate(([0], np.cumsum(lens + 1)[:-1]))
    ke = ks + lens
    a = np.frombuffer(text, np.uint8)
    _, ndim, idx = key_tails(words(text), a, ks, ke)
    rows, flat = tails_in_grid(ndim, idx, np.arange(n), grid_shape)
    out = np.full(n, -1, np.int64)
    out[rows] = flat
    # components of 8 digits and more are beyond one word of the vectorised pass
    for i in np.flatnonzero((out < 0) & (lens >= 8)).tolist():
        out[i] = flat_of(tails[i].split("."), grid_shape)
    return out
