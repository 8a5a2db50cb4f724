"""Typed zarr array metadata: read from and written as zarr v2 (``.zarray`` + ``.zattrs``) or zarr v3
(``zarr.json``), translated both ways (data types, codecs, fill values, dimension names: see
:mod:`refset.model.versions` and :mod:`refset.model.dtypes`).

An :class:`ArrayMetadata` keeps the documents it was read from, byte for byte, and serves them as they
were (a set reads back exactly what it was given); one built or changed here is written as compact
JSON. Its typed view (shape, chunks, dtype, codecs, fill value, attributes, dimension names, chunk
grid) is what every consumer reads, instead of parsing the text again.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from refset.errors import InvalidReferences
from refset.model.dtypes import dtype_json, fill_of, v2_numpy, v3_numpy
from refset.model.keys import ChunkGrid, checked_grid
from refset.model.versions import DIMENSION_KEY, codec_config, codec_name, v2_to_v3, v3_to_v2

__all__ = ["ArrayMetadata", "DOCUMENT_NAMES", "V2_ARRAY", "V2_ATTRS", "V3_DOC", "DIMENSION_KEY"]

V2_ARRAY, V2_ATTRS, V3_DOC = ".zarray", ".zattrs", "zarr.json"
#: The documents an array's metadata may be stored in (what a set derives from its metadata).
DOCUMENT_NAMES = (V2_ARRAY, V2_ATTRS, V3_DOC)

_KEEP: Any = object()  # replace(): a field left as it is


def _numpy_value(o: Any) -> Any:
    if isinstance(o, np.generic | np.ndarray):
        return o.tolist()
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _compact(doc: Any, where: str) -> bytes:
    """A document as compact JSON (NaN/Infinity as Python writes them, as zarr v2 and fsspec read
    them; numpy values as their Python values)."""
    try:
        return json.dumps(doc, separators=(",", ":"), allow_nan=True, default=_numpy_value).encode()
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidReferences(f"{where}: not JSON-serialisable ({e})") from None


def _loads(text: bytes) -> Any:
    try:
        return json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


class ArrayMetadata:
    """One zarr array's metadata (v2 or v3), immutable.

    Read with :meth:`parse` (stored documents, kept byte for byte) or made with :meth:`from_v2`,
    :meth:`from_v3` and :meth:`build`; :meth:`to_v2`, :meth:`to_v3` and :meth:`replace` give new
    metadata. :meth:`documents` are the keys a set serves for the array.
    """

    __slots__ = ("_attrs_doc", "_doc", "_texts", "grid", "zarr_format")

    def __init__(self, doc: Mapping[str, Any], attrs_doc: Mapping[str, Any] | None, grid: ChunkGrid,
                 texts: Mapping[str, bytes]) -> None:
        # use the constructors: they check the grid and make the texts
        self._doc = doc
        self._attrs_doc = attrs_doc
        self.grid = grid
        self.zarr_format: Literal[2, 3] = 3 if V3_DOC in texts else 2
        self._texts = dict(texts)

    # -- reading ---------------------------------------------------------------------------------------
    @classmethod
    def parse(cls, name: str, text: bytes, attrs_text: bytes | None = None) -> ArrayMetadata | None:
        """The metadata in a stored ``.zarray`` (with its ``.zattrs`` text, if any) or ``zarr.json``
        document, or None when it describes no regular chunk grid refset indexes (such documents stay
        keys of their own). A ``.zattrs`` that is not a JSON object is ignored here (it stays a key of
        its own too)."""
        text = bytes(text)
        if len(text) <= 4096 and (attrs_text is None or len(attrs_text) <= 4096):
            return _parse_cached(name, text, None if attrs_text is None else bytes(attrs_text))
        return _parse(name, text, None if attrs_text is None else bytes(attrs_text))

    @classmethod
    def from_v2(cls, zarray: Mapping[str, Any], attrs: Mapping[str, Any] | None = None) -> ArrayMetadata:
        """Zarr v2 metadata from its ``.zarray`` and ``.zattrs`` documents (written as compact JSON)."""
        doc = dict(zarray)
        grid = _v2_grid(doc)
        if grid is None:
            raise InvalidReferences(f".zarray: shape {doc.get('shape')!r} and chunks {doc.get('chunks')!r} "
                                    "do not describe a regular chunk grid")
        texts = {V2_ARRAY: _compact(doc, V2_ARRAY)}
        if attrs is not None:
            texts[V2_ATTRS] = _compact(dict(attrs), V2_ATTRS)
        return cls(doc, None if attrs is None else dict(attrs), grid, texts)

    @classmethod
    def from_v3(cls, doc: Mapping[str, Any]) -> ArrayMetadata:
        """Zarr v3 metadata from its ``zarr.json`` document (written as compact JSON)."""
        doc = dict(doc)
        grid = _v3_grid(doc)
        if grid is None:
            raise InvalidReferences("zarr.json: not a zarr v3 array with a regular chunk grid and a default "
                                    "or v2 chunk key encoding")
        return cls(doc, None, grid, {V3_DOC: _compact(doc, V3_DOC)})

    @classmethod
    def build(
        cls,
        *,
        shape: Sequence[int],
        chunks: Sequence[int],
        dtype: Any,
        fill_value: Any = None,
        filters: Sequence[Mapping[str, Any]] | None = None,
        compressor: Mapping[str, Any] | None = None,
        order: Literal["C", "F"] = "C",
        attributes: Mapping[str, Any] | None = None,
        dimension_names: Sequence[str] | None = None,
        separator: str = ".",
    ) -> ArrayMetadata:
        """Zarr v2 metadata from typed values, as kerchunk and refset's scanners write it: ``dtype`` a
        numpy dtype (or its zarr v2 JSON form), ``fill_value`` in its JSON form (see
        :func:`fill_json`), numcodecs configurations for ``filters`` and ``compressor``."""
        zarray = {
            "chunks": [int(c) for c in chunks],
            "compressor": dict(compressor) if compressor else None,
            "dimension_separator": separator,
            "dtype": dtype_json(np.dtype(dtype)) if not isinstance(dtype, str | list) else dtype,
            "fill_value": fill_value,
            "filters": [dict(f) for f in filters] if filters else None,
            "order": order,
            "shape": [int(s) for s in shape],
            "zarr_format": 2,
        }
        attrs = dict(attributes or {})
        if dimension_names is not None:
            attrs[DIMENSION_KEY] = list(dimension_names)
        return cls.from_v2(zarray, attrs)

    # -- the typed view --------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.grid.shape

    @property
    def chunks(self) -> tuple[int, ...]:
        return self.grid.chunks

    @property
    def ndim(self) -> int:
        return self.grid.ndim

    @property
    def document(self) -> Mapping[str, Any]:
        """The main document as parsed (``.zarray`` or ``zarr.json``): read it, do not change it."""
        return self._doc

    @property
    def dtype_json(self) -> Any:
        """The data type as the document spells it (v2 typestr or field list; v3 name or object)."""
        return self._doc.get("dtype") if self.zarr_format == 2 else self._doc.get("data_type")

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of the values (``object`` for variable-length strings and bytes)."""
        return _numpy_dtype(self)

    @property
    def fill_value(self) -> Any:
        """The fill value in the document's JSON form (None: zarr v2's "no fill value")."""
        return self._doc.get("fill_value")

    @property
    def fill(self) -> Any:
        """The value missing chunks read as (the fill value decoded; None: zarr v2 without one)."""
        dt = self.dtype
        if self.zarr_format == 2:
            return fill_of(self.fill_value, dt)
        v = self.fill_value
        if dt.kind in "SV" or dt.names is not None:
            return fill_of(v, dt) if isinstance(v, str) else v
        if dt.kind == "O":
            return v
        return fill_of(v, dt)

    @property
    def order(self) -> Literal["C", "F"]:
        if self.zarr_format == 2:
            return "F" if self._doc.get("order") == "F" else "C"
        for c in self.codecs:
            if codec_name(c) == "transpose":
                return "F"
        return "C"

    @property
    def filters(self) -> tuple[Mapping[str, Any], ...]:
        """The v2 filters (numcodecs configurations), in the order they encode."""
        return tuple(self._v2()._doc.get("filters") or ())

    @property
    def compressor(self) -> Mapping[str, Any] | None:
        """The v2 compressor (a numcodecs configuration) or None."""
        c = self._v2()._doc.get("compressor")
        return c if isinstance(c, Mapping) else None

    @property
    def codecs(self) -> tuple[Mapping[str, Any], ...]:
        """The v3 codecs (``{"name", "configuration"}``), in the order they encode."""
        return tuple(self._v3()._doc.get("codecs") or ())

    @property
    def attributes(self) -> Mapping[str, Any]:
        """The user attributes (zarr v2: ``.zattrs`` without ``_ARRAY_DIMENSIONS``)."""
        if self.zarr_format == 3:
            a = self._doc.get("attributes")
            return a if isinstance(a, Mapping) else {}
        a = self._attrs_doc or {}
        return {k: v for k, v in a.items() if k != DIMENSION_KEY} if DIMENSION_KEY in a else a

    @property
    def dimension_names(self) -> tuple[str | None, ...] | None:
        """Names of the dimensions (v2: xarray's ``_ARRAY_DIMENSIONS``), or None."""
        names = (self._doc.get("dimension_names") if self.zarr_format == 3
                 else (self._attrs_doc or {}).get(DIMENSION_KEY))
        if isinstance(names, list | tuple) and len(names) == self.ndim:
            return tuple(n if isinstance(n, str) else None for n in names)
        return None

    def documents(self) -> dict[str, bytes]:
        """``{name: text}`` of the documents that hold this metadata (``.zarray`` and, when present,
        ``.zattrs``; or ``zarr.json``): the stored bytes when it was read, compact JSON otherwise."""
        return dict(self._texts)

    # -- new metadata ------------------------------------------------------------------------------------
    def replace(
        self,
        *,
        shape: Sequence[int] | None = None,
        chunks: Sequence[int] | None = None,
        attributes: Mapping[str, Any] | None = None,
        dimension_names: Sequence[str] | None = None,
        fill_value: Any = _KEEP,
    ) -> ArrayMetadata:
        """This metadata with the given fields changed (same zarr format; written as compact JSON).
        ``fill_value`` is given in the document's JSON form (``"NaN"`` for a float NaN)."""
        doc = dict(self._doc)
        if fill_value is not _KEEP:
            doc["fill_value"] = fill_value
        if self.zarr_format == 2:
            if shape is not None:
                doc["shape"] = [int(s) for s in shape]
            if chunks is not None:
                doc["chunks"] = [int(c) for c in chunks]
            base = self._attrs_doc
            if attributes is not None or dimension_names is not None:
                old = dict(base or {})
                dims = list(dimension_names) if dimension_names is not None else old.get(DIMENSION_KEY)
                attrs = dict(attributes) if attributes is not None else {
                    k: v for k, v in old.items() if k != DIMENSION_KEY}
                attrs.pop(DIMENSION_KEY, None)
                if dims is not None:
                    attrs[DIMENSION_KEY] = dims  # last, as xarray and the scanners write it
                base = attrs
            return ArrayMetadata.from_v2(doc, base)
        if shape is not None:
            doc["shape"] = [int(s) for s in shape]
        if chunks is not None:
            doc["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": [int(c) for c in chunks]}}
        if attributes is not None:
            doc["attributes"] = dict(attributes)
        if dimension_names is not None:
            doc["dimension_names"] = list(dimension_names)
        return ArrayMetadata.from_v3(doc)

    def to_v2(self) -> ArrayMetadata:
        """The same array as zarr v2 metadata (itself when it is v2). Sharded arrays and codecs v2
        cannot express raise :class:`~refset.errors.Unsupported`."""
        return self._v2()

    def to_v3(self) -> ArrayMetadata:
        """The same array as zarr v3 metadata (itself when it is v3), its chunk keys spelled as before."""
        return self._v3()

    def _v2(self) -> ArrayMetadata:
        if self.zarr_format == 2:
            return self
        zarray, attrs = v3_to_v2(self._doc, self.dtype, self.grid, self.attributes, self.dimension_names)
        return ArrayMetadata.from_v2(zarray, attrs)

    def _v3(self) -> ArrayMetadata:
        if self.zarr_format == 3:
            return self
        return ArrayMetadata.from_v3(v2_to_v3(self._doc, self.dtype, self.grid, self.attributes,
                                              self.dimension_names))

    # -- value semantics -------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrayMetadata) and other._texts == self._texts

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._texts.items())))

    def __reduce__(self) -> tuple[Any, ...]:
        name = V3_DOC if self.zarr_format == 3 else V2_ARRAY
        return (_reparse, (name, self._texts[name], self._texts.get(V2_ATTRS)))

    def __repr__(self) -> str:
        return (f"<ArrayMetadata v{self.zarr_format} shape={list(self.shape)} chunks={list(self.chunks)} "
                f"dtype={self.dtype_json!r}>")


def _reparse(name: str, text: bytes, attrs: bytes | None) -> ArrayMetadata:
    got = ArrayMetadata.parse(name, text, attrs)
    assert got is not None
    return got


def _parse(name: str, text: bytes, attrs_text: bytes | None) -> ArrayMetadata | None:
    doc = _loads(text)
    if not isinstance(doc, dict):
        return None
    if name == V2_ARRAY:
        grid = _v2_grid(doc)
        if grid is None:
            return None
        attrs = _loads(attrs_text) if attrs_text is not None else None
        texts = {V2_ARRAY: text}
        if isinstance(attrs, dict):
            texts[V2_ATTRS] = attrs_text  # type: ignore[assignment]
        else:
            attrs = None
        return ArrayMetadata(doc, attrs, grid, texts)
    if name == V3_DOC:
        grid = _v3_grid(doc)
        return None if grid is None else ArrayMetadata(doc, None, grid, {V3_DOC: text})
    return None


_parse_cached = functools.lru_cache(maxsize=2048)(_parse)


def _v2_grid(doc: Mapping[str, Any]) -> ChunkGrid | None:
    return checked_grid(doc.get("shape"), doc.get("chunks"), doc.get("dimension_separator") or ".", "", 2)


def _v3_grid(doc: Mapping[str, Any]) -> ChunkGrid | None:
    from refset.model.keys import grid_from_document

    return grid_from_document(V3_DOC, doc)


def _endian(meta: ArrayMetadata) -> str:
    for c in meta._doc.get("codecs") or ():
        if codec_name(c) == "bytes":
            return ">" if codec_config(c).get("endian") == "big" else "<"
    return "<"


def _numpy_dtype(meta: ArrayMetadata) -> np.dtype[Any]:
    try:
        if meta.zarr_format == 2:
            return v2_numpy(meta._doc.get("dtype"))
        return v3_numpy(meta._doc.get("data_type"), _endian(meta))
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidReferences(f"array metadata: data type {meta.dtype_json!r} is malformed ({e})") from None
