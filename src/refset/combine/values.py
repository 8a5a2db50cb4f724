"""Values of small arrays (coordinates, identical dims) of many sets, fetched in one batch per
filesystem and decoded with numcodecs: no zarr array is opened per input.

A short uncompressed chunk (kerchunk's 8-byte inline chunk of a ``[512]``-chunked time of one step)
is read as the values it holds.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from refset.errors import InvalidReferences, Unsupported
from refset.model.metadata import ArrayMetadata
from refset.model.table import INLINE, RANGE, WHOLE

if TYPE_CHECKING:
    from refset.model.stack import SetStack

__all__ = ["read_arrays", "attributes_of", "digests", "COMPARED"]

#: Bytes of a variable an input holds up to which :func:`digests` reads its values (beyond: its
#: references stand for them).
COMPARED = 1 << 20


def attributes_of(stack: SetStack, i: int, path: str, storage_options: Mapping[str, Any] | None = None,
                  ) -> dict[str, Any]:
    """Set ``i``'s attributes of the array or group at ``path`` as a zarr v2 ``.zattrs`` reads (an
    array's dims as ``_ARRAY_DIMENSIONS``), read from the file a reference names where the document is
    stored in one; ``{}`` when there are none. A new dict."""
    key = f"{path}/.zattrs" if path else ".zattrs"
    raw = stack.meta[i].get(key)
    m = stack.metadata[i].get(path)
    if raw is None:
        if m is None:
            return {}
        attrs = dict(m.attributes)
        dims = m.dimension_names
        if dims is not None:
            attrs["_ARRAY_DIMENSIONS"] = list(dims)
        return attrs
    if isinstance(raw, tuple):
        url, *span = raw
        raw = _fetch([(url, span[0], span[0] + span[1]) if span else (url, 0, -1)], storage_options or {},
                     recorded=stack.recorded())[0]
    return dict(_json(bytes(raw), key))


def _json(raw: bytes, key: str) -> dict[str, Any]:
    out = _parse(raw)
    if isinstance(out, ValueError):
        raise InvalidReferences(f"{key!r}: not JSON ({out})")
    if not isinstance(out, dict):
        raise InvalidReferences(f"{key!r}: not a JSON object")
    return out


@functools.lru_cache(maxsize=4096)
def _parse(raw: bytes) -> Any:
    """Inputs of one product repeat the same metadata: each distinct document is parsed once."""
    try:
        return json.loads(raw)
    except ValueError as e:
        return e


def read_arrays(inputs: SetStack, path: str, which: Iterable[int],
                storage_options: Mapping[str, Any] | None = None) -> list[np.ndarray]:
    """The whole values of ``path`` in each input of ``which``; the chunks in files are fetched with one
    round of concurrent reads for all inputs together, each distinct range once, and inputs with the
    same metadata and references decoded once."""
    plans = []
    fetch: dict[tuple[str, int, int], int] = {}  # (url, start, end (-1: whole file)) -> its index
    rows = inputs.rows(path)
    urls = inputs.urls
    for i in which:
        meta = inputs.metadata[i][path]
        s = rows.of(i)
        chunks: list[tuple[int, Any]] = []
        for r, (f, k, p, o, n) in enumerate(zip(rows.flat[s].tolist(), rows.kind[s].tolist(),
                                                rows.path_id[s].tolist(), rows.offset[s].tolist(),
                                                rows.length[s].tolist()), s.start):
            if k == INLINE:
                chunks.append((f, rows.inline[r]))
            elif k in (RANGE, WHOLE):
                chunks.append((f, fetch.setdefault((urls[p], o, o + n if k == RANGE else -1), len(fetch))))
        plans.append((meta, chunks, path, (meta, tuple(chunks))))
    data = _fetch(list(fetch), storage_options or {}, inputs.fetched, inputs.recorded())
    done: dict[Any, np.ndarray] = {}
    out = []
    for meta, chunks, path, same in plans:
        if same not in done:
            done[same] = _assemble(meta, [(f, data[c] if isinstance(c, int) else c) for f, c in chunks], path)
        out.append(done[same])
    return out


def _fetch(items: list[tuple[str, int, int]], storage_options: Mapping[str, Any],
           fetched: Mapping[tuple[str, int, int], bytes] | None = None,
           recorded: Callable[[str], Any] | None = None) -> list[bytes]:
    """The bytes of each ``(url, start, end)`` (``end < 0``: the whole file): those a scan already
    read from ``fetched`` (by url, offset, length), the rest through the byte layer, checked against
    ``recorded`` (:func:`refset.io.store.read_many`)."""
    from refset.io.store import read_many

    out: list[bytes | None] = [None] * len(items)
    if fetched:
        for i, (url, start, end) in enumerate(items):
            if end >= 0:
                out[i] = fetched.get((url, start, end - start))
    missing = [i for i, d in enumerate(out) if d is None]
    for i, data in zip(missing, read_many([items[i] for i in missing], storage_options, recorded=recorded)
                       if missing else [], strict=True):
        out[i] = data
    return [d for d in out if d is not None]


def _assemble(meta: ArrayMetadata, chunks: list[tuple[int, bytes]], path: str) -> np.ndarray:
    from refset.model.decoder import decoder

    grid = meta.grid
    dtype = meta.dtype
    shape, cshape = grid.shape, grid.chunks
    try:
        dec = decoder(meta)
    except Unsupported as e:
        raise Unsupported(f"{path}: {e}") from None
    if len(chunks) == 1 and len(shape) == 1 and dtype.kind not in "OUSV" and not dec.codecs and \
            isinstance(chunks[0][1], bytes) and chunks[0][0] == 0 and shape[0] <= cshape[0] and \
            len(chunks[0][1]) in (dtype.itemsize * cshape[0], dtype.itemsize * shape[0]):
        return np.frombuffer(chunks[0][1], dtype)[:shape[0]]  # one uncompressed chunk (or its values)
    fill = meta.fill
    out = np.full(shape, fill if fill is not None else 0, dtype=dtype if dtype.kind != "O" else object)
    for f, raw in chunks:
        arr = dec.values(raw)
        idx = np.unravel_index(f, grid.grid_shape)
        sel: tuple[slice, ...] = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, cshape, shape))
        if arr.size == dec.size:
            block = arr.reshape(cshape, order=dec.order)  # type: ignore[call-overload]
            out[sel] = block[tuple(slice(0, s.stop - s.start) for s in sel)]
        elif not dec.codecs and len(shape) <= 1 and arr.size == (sel[0].stop - sel[0].start if shape else 1):
            out[sel] = arr  # a short uncompressed chunk: the values it holds
        else:
            raise InvalidReferences(f"{path}/{grid.chunk_key([int(i) for i in idx])}: decodes to {arr.size} values, "
                                    f"expected {dec.size}")
    return out


def digests(stack: SetStack, path: str, which: Iterable[int], storage_options: Mapping[str, Any] | None = None,
            ) -> list[str]:
    """For each input of ``which``, what its ``path`` holds, as a digest equal for inputs that hold
    it alike: for a variable of at most :data:`COMPARED` bytes its decoded values (raw, with the
    attributes that decode them), else its metadata and references. Combine keeps a variable that
    lacks a new dim as it is when every input's digest is the same (xarray's ``"different"``)."""
    import hashlib

    from refset.model.decoding import decoding_attrs

    which = list(which)
    out: list[str] = []
    small = [i for i in which
             if int(np.prod(stack.metadata[i][path].shape, dtype=np.int64)) * stack.metadata[i][path].dtype.itemsize
             <= COMPARED and stack.metadata[i][path].dtype.kind not in "OV"]
    values = dict(zip(small, read_arrays(stack, path, small, storage_options) if small else [], strict=True))
    rows = stack.rows(path)
    for i in which:
        h = hashlib.sha1()
        m = stack.metadata[i][path]
        if i in values:
            v = np.ascontiguousarray(values[i])
            attrs = decoding_attrs(attributes_of(stack, i, path, storage_options))
            h.update(json.dumps([str(v.dtype), list(v.shape), sorted((k, repr(x)) for k, x in attrs.items())]).encode())
            h.update(v.tobytes())
        else:
            for text in sorted(m.documents().items()):
                h.update(text[0].encode() + text[1])
            sl = rows.of(i)
            urls = stack.urls
            for f, k, pid, off, n in zip(rows.flat[sl].tolist(), rows.kind[sl].tolist(), rows.path_id[sl].tolist(),
                                         rows.offset[sl].tolist(), rows.length[sl].tolist(), strict=True):
                h.update(repr((f, k, urls[pid] if k in (RANGE, WHOLE) else "", off, n)).encode())
            for r in range(sl.start, sl.stop):
                if rows.kind[r] == INLINE:
                    h.update(bytes(rows.inline[r]))
        out.append(h.hexdigest())
    return out
