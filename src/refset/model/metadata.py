"""Typed zarr array metadata: read from and written as zarr v2 (``.zarray`` + ``.zattrs``) or zarr v3
(``zarr.json``), translated both ways (data types, codecs, fill values, dimension names).

An :class:`ArrayMetadata` keeps the documents it was read from, byte for byte, and serves them as they
were (a set reads back exactly what it was given); one built or changed here is written as compact
JSON. Its typed view (shape, chunks, dtype, codecs, fill value, attributes, dimension names, chunk
grid) is what every consumer reads, instead of parsing the text again.

Translation follows the zarr v3 specification and zarr-python 3's own v2 -> v3 migration: v2 ``order``
"F" is a ``transpose`` codec; array-to-array filters (``delta``, ``fixedscaleoffset``, ...) come before
the ``bytes`` codec (which carries the byte order), bytes-to-bytes ones (``shuffle``, ``zlib``, ...)
and the compressor after it; ``gzip``, ``zstd``, ``blosc``, ``crc32c`` and the object codecs
``vlen-utf8``/``vlen-bytes`` are v3 core codecs, any other numcodecs codec is ``numcodecs.<id>``;
chunk keys keep their spelling (v3's ``v2`` chunk key encoding). xarray's conventions travel with the
metadata: v2 ``_ARRAY_DIMENSIONS`` is v3 ``dimension_names``, and v2's fill value (a mask for xarray)
is v3's ``_FillValue`` attribute, encoded as xarray encodes it.
"""

from __future__ import annotations

import base64
import functools
import json
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from refset.errors import InvalidReferences, Unsupported
from refset.model.keys import ChunkGrid, checked_grid

__all__ = ["ArrayMetadata", "DOCUMENT_NAMES", "V2_ARRAY", "V2_ATTRS", "V3_DOC", "DIMENSION_KEY"]

V2_ARRAY, V2_ATTRS, V3_DOC = ".zarray", ".zattrs", "zarr.json"
#: The documents an array's metadata may be stored in (what a set derives from its metadata).
DOCUMENT_NAMES = (V2_ARRAY, V2_ATTRS, V3_DOC)
#: xarray's attribute naming a zarr v2 array's dimensions.
DIMENSION_KEY = "_ARRAY_DIMENSIONS"

#: numcodecs codecs that map arrays to arrays (before the ``bytes`` codec in v3).
_ARRAY_TO_ARRAY = frozenset({"delta", "fixedscaleoffset", "quantize", "astype", "packbits", "bitround",
                             "categorize"})
#: numcodecs codecs that turn an object array into bytes (v3's array-to-bytes codecs).
_OBJECT_CODECS = {"vlen-utf8": "string", "vlen-bytes": "variable_length_bytes"}
_BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


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
            if _name(c) == "transpose":
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
    ) -> ArrayMetadata:
        """This metadata with the given fields changed (same zarr format; written as compact JSON)."""
        doc = dict(self._doc)
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
        return self if self.zarr_format == 2 else _v3_to_v2(self)

    def _v3(self) -> ArrayMetadata:
        return self if self.zarr_format == 3 else _v2_to_v3(self)

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


def _name(codec: Any) -> str:
    return str(codec.get("name")) if isinstance(codec, Mapping) else str(codec)


def _config(codec: Mapping[str, Any]) -> dict[str, Any]:
    c = codec.get("configuration")
    return dict(c) if isinstance(c, Mapping) else {}


# -- data types ----------------------------------------------------------------------------------------
def dtype_json(dtype: np.dtype[Any]) -> Any:
    """A numpy dtype as zarr v2 ``.zarray`` writes it (structured types as field lists)."""
    if dtype.names is None:
        return dtype.str
    out: list[Any] = []
    for name in dtype.names:
        sub, _ = dtype.fields[name][:2]  # type: ignore[index]
        base = dtype_json(sub.base)
        out.append([name, base, list(sub.shape)] if sub.shape else [name, base])
    return out


def _v2_numpy(spec: Any) -> np.dtype[Any]:
    if isinstance(spec, list):
        fields = []
        for f in spec:
            if not isinstance(f, list) or len(f) not in (2, 3) or not isinstance(f[0], str):
                raise InvalidReferences(f".zarray: dtype field {f!r} is not [name, dtype] or [name, dtype, shape]")
            fields.append((f[0], _v2_numpy(f[1]), *([tuple(f[2])] if len(f) == 3 else [])))
        return np.dtype(fields)
    if not isinstance(spec, str):
        raise InvalidReferences(f".zarray: dtype {spec!r} is not a zarr v2 data type")
    try:
        return np.dtype(spec)
    except TypeError as e:
        raise InvalidReferences(f".zarray: dtype {spec!r} is not a numpy data type ({e})") from None


_V3_NUMERIC = {"bool": "b1", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "uint8": "u1",
               "uint16": "u2", "uint32": "u4", "uint64": "u8", "float16": "f2", "float32": "f4",
               "float64": "f8", "complex64": "c8", "complex128": "c16"}


def _endian(meta: ArrayMetadata) -> str:
    for c in meta._doc.get("codecs") or ():
        if _name(c) == "bytes":
            return ">" if _config(c).get("endian") == "big" else "<"
    return "<"


def _v3_numpy(spec: Any, endian: str) -> np.dtype[Any]:
    name = spec.get("name") if isinstance(spec, Mapping) else spec
    cfg = spec.get("configuration") or {} if isinstance(spec, Mapping) else {}
    if name in _V3_NUMERIC:
        return np.dtype(endian + _V3_NUMERIC[name])
    if name in ("string", "variable_length_bytes"):
        return np.dtype(object)
    if name == "null_terminated_bytes":
        return np.dtype(f"S{int(cfg['length_bytes'])}")
    if name == "raw_bytes":
        return np.dtype(f"V{int(cfg['length_bytes'])}")
    if name == "fixed_length_utf32":
        return np.dtype(f"{endian}U{int(cfg['length_bytes']) // 4}")
    if name in ("numpy.datetime64", "numpy.timedelta64"):
        code = "M8" if name == "numpy.datetime64" else "m8"
        scale = int(cfg.get("scale_factor", 1))
        return np.dtype(f"{endian}{code}[{'' if scale == 1 else scale}{cfg['unit']}]")
    if name == "structured":
        return np.dtype([(f[0], _v3_numpy(f[1], endian)) for f in cfg["fields"]])
    raise Unsupported(f"zarr.json: data type {spec!r} has no numpy counterpart refset knows")


def _numpy_dtype(meta: ArrayMetadata) -> np.dtype[Any]:
    try:
        if meta.zarr_format == 2:
            return _v2_numpy(meta._doc.get("dtype"))
        return _v3_numpy(meta._doc.get("data_type"), _endian(meta))
    except (KeyError, TypeError, ValueError) as e:
        raise InvalidReferences(f"array metadata: data type {meta.dtype_json!r} is malformed ({e})") from None


def _v3_data_type(dt: np.dtype[Any], object_codec: str | None) -> Any:
    if dt.names is not None:
        return {"name": "structured", "configuration": {
            "fields": [[n, _v3_data_type(dt.fields[n][0], None)] for n in dt.names]}}  # type: ignore[index]
    if dt.kind == "O":
        if object_codec not in _OBJECT_CODECS:
            raise Unsupported(f"object data with codec {object_codec!r} has no zarr v3 data type "
                              "(vlen-utf8 and vlen-bytes have)")
        return _OBJECT_CODECS[object_codec]
    if dt.kind in "biufc":
        return dt.name if dt.kind != "b" else "bool"
    if dt.kind == "S":
        return {"name": "null_terminated_bytes", "configuration": {"length_bytes": dt.itemsize}}
    if dt.kind == "V":
        return {"name": "raw_bytes", "configuration": {"length_bytes": dt.itemsize}}
    if dt.kind == "U":
        return {"name": "fixed_length_utf32", "configuration": {"length_bytes": dt.itemsize}}
    if dt.kind in "Mm":
        unit, count = np.datetime_data(dt)
        return {"name": "numpy.datetime64" if dt.kind == "M" else "numpy.timedelta64",
                "configuration": {"unit": unit, "scale_factor": int(count)}}
    raise Unsupported(f"data type {dt} has no zarr v3 counterpart")


# -- fill values ---------------------------------------------------------------------------------------
def _float_json(x: float) -> float | str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def fill_json(value: Any, dtype: np.dtype[Any]) -> Any:
    """A fill value as zarr v2 writes it in ``.zarray`` (exact for every dtype; None stays None)."""
    if value is None:
        return None
    if dtype.kind in "SV" or dtype.names is not None:
        raw = np.asarray(value, dtype=dtype).tobytes()
        return base64.standard_b64encode(raw).decode() if raw.strip(b"\0") else None
    v = np.asarray(value, dtype=dtype).item()
    if dtype.kind == "f":
        return _float_json(float(v))
    if dtype.kind == "c":
        return [_float_json(v.real), _float_json(v.imag)]
    if dtype.kind == "b":
        return bool(v)
    if dtype.kind == "U":
        return str(v)
    if dtype.kind in "Mm":
        return int(np.asarray(value, dtype=dtype).view(np.int64))
    return int(v)


def fill_of(fill: Any, dtype: np.dtype[Any]) -> Any:
    """The value a v2 ``fill_value`` (JSON form) stands for (None stays None)."""
    if fill is None:
        return None
    if dtype.kind in "SV" or dtype.names is not None:
        if isinstance(fill, str):
            return np.frombuffer(base64.standard_b64decode(fill), dtype)[0]
        return fill
    if dtype.kind == "f" and isinstance(fill, str):
        return float(fill)  # "NaN", "Infinity", "-Infinity"
    if dtype.kind == "c" and isinstance(fill, list):
        return complex(float(fill[0]), float(fill[1]))
    return fill


def _xarray_fill_attr(value: Any, dt: np.dtype[Any]) -> Any:
    """``_FillValue`` as xarray stores it in a zarr v3 array's attributes."""
    if dt.kind == "f":
        return base64.standard_b64encode(struct.pack("<d", float(value))).decode()
    if dt.kind == "c":
        return [base64.standard_b64encode(struct.pack("<d", float(x))).decode()
                for x in (complex(value).real, complex(value).imag)]
    if dt.kind == "S":
        return base64.standard_b64encode(bytes(value)).decode()
    if dt.kind == "b":
        return bool(value)
    if dt.kind in "iu":
        return int(value)
    return value if isinstance(value, str | int | float) else None


def _xarray_fill_value(attr: Any, dt: np.dtype[Any]) -> Any:
    """The value of an xarray v3 ``_FillValue`` attribute (as :func:`_xarray_fill_attr` wrote it)."""
    try:
        if dt.kind == "f" and isinstance(attr, str):
            return struct.unpack("<d", base64.standard_b64decode(attr))[0]
        if dt.kind == "c" and isinstance(attr, list):
            re_, im = (struct.unpack("<d", base64.standard_b64decode(x))[0] for x in attr)
            return complex(re_, im)
        if dt.kind == "S" and isinstance(attr, str):
            return base64.standard_b64decode(attr)
    except (ValueError, TypeError, struct.error):
        return None
    return attr


def _v3_default_fill(data_type: Any) -> Any:
    name = data_type.get("name") if isinstance(data_type, Mapping) else data_type
    if name == "bool":
        return False
    if name in ("float16", "float32", "float64"):
        return 0.0
    if name in ("complex64", "complex128"):
        return [0.0, 0.0]
    if name in ("string", "fixed_length_utf32"):
        return ""
    if name in ("null_terminated_bytes", "raw_bytes", "structured", "variable_length_bytes"):
        return ""
    return 0


def _v3_fill(value: Any, dt: np.dtype[Any], data_type: Any) -> Any:
    """A v2 fill value (its value, not None) in v3's JSON form."""
    if dt.kind == "f":
        return _float_json(float(value))
    if dt.kind == "c":
        c = complex(value)
        return [_float_json(c.real), _float_json(c.imag)]
    if dt.kind in "SV" or dt.names is not None:
        return base64.standard_b64encode(np.asarray(value, dtype=dt).tobytes()).decode()
    if dt.kind == "b":
        return bool(value)
    if dt.kind in "iu":
        return int(value)
    if dt.kind in "Mm":
        return int(np.asarray(value, dtype=dt).view(np.int64))
    return value


# -- codecs --------------------------------------------------------------------------------------------
def _v2_codec_to_v3(spec: Mapping[str, Any], itemsize: int) -> dict[str, Any]:
    cid = str(spec.get("id"))
    cfg = {k: v for k, v in spec.items() if k != "id"}
    if cid == "gzip":
        return {"name": "gzip", "configuration": {"level": int(cfg.get("level", 5))}}
    if cid == "zstd":
        return {"name": "zstd", "configuration": {"level": int(cfg.get("level", 0)),
                                                  "checksum": bool(cfg.get("checksum", False))}}
    if cid == "blosc":
        shuffle = int(cfg.get("shuffle", 1))
        if shuffle == -1:  # numcodecs' AUTOSHUFFLE: bit-shuffle bytes, byte-shuffle wider items
            shuffle = 2 if itemsize == 1 else 1
        return {"name": "blosc", "configuration": {
            "typesize": itemsize, "cname": cfg.get("cname", "lz4"), "clevel": int(cfg.get("clevel", 5)),
            "shuffle": _BLOSC_SHUFFLE.get(shuffle, "shuffle"), "blocksize": int(cfg.get("blocksize", 0))}}
    if cid == "crc32c":
        return {"name": "crc32c"}
    return {"name": f"numcodecs.{cid}", "configuration": cfg}


def _v3_codec_to_v2(codec: Mapping[str, Any]) -> dict[str, Any]:
    name, cfg = _name(codec), _config(codec)
    if name == "gzip":
        return {"id": "gzip", "level": cfg.get("level", 5)}
    if name == "zstd":
        return {"id": "zstd", "level": cfg.get("level", 0), "checksum": cfg.get("checksum", False)}
    if name == "blosc":
        shuffle = {v: k for k, v in _BLOSC_SHUFFLE.items()}.get(cfg.get("shuffle", "shuffle"), 1)
        return {"id": "blosc", "cname": cfg.get("cname", "lz4"), "clevel": cfg.get("clevel", 5),
                "shuffle": shuffle, "blocksize": cfg.get("blocksize", 0)}
    if name == "crc32c":
        return {"id": "crc32c"}
    if name.startswith("numcodecs."):
        return {"id": name[len("numcodecs."):], **cfg}
    raise Unsupported(f"zarr.json: codec {name!r} has no zarr v2 counterpart")


def _v2_to_v3(meta: ArrayMetadata) -> ArrayMetadata:
    doc = meta._doc
    dt = meta.dtype
    filters = list(doc.get("filters") or [])
    compressor = doc.get("compressor")
    codecs: list[dict[str, Any]] = []
    if meta.order == "F" and meta.ndim > 1:
        codecs.append({"name": "transpose", "configuration": {"order": list(range(meta.ndim - 1, -1, -1))}})
    object_codec = None
    if dt.kind == "O":
        ids = [str(f.get("id")) for f in filters if isinstance(f, Mapping)]
        if not set(ids) & set(_OBJECT_CODECS):
            _v3_data_type(dt, ids[0] if ids else None)  # refused, naming the codec
    after: list[dict[str, Any]] = []
    for f in filters:
        cid = str(f.get("id")) if isinstance(f, Mapping) else None
        if cid in _OBJECT_CODECS:
            object_codec = cid
            continue
        if cid in _ARRAY_TO_ARRAY:
            if after or object_codec:
                raise Unsupported(f"filter {cid!r} after a bytes filter: zarr v3 applies array filters first")
            codecs.append(_v2_codec_to_v3(f, dt.itemsize))
        elif isinstance(f, Mapping):
            after.append(_v2_codec_to_v3(f, dt.itemsize))
        else:
            raise InvalidReferences(f".zarray: filter {f!r} is not a codec configuration")
    data_type = _v3_data_type(dt, object_codec)
    if object_codec is not None:
        codecs.append({"name": object_codec, "configuration": {}})
    else:
        codecs.append(_bytes_codec(dt))
    codecs.extend(after)
    if isinstance(compressor, Mapping):
        codecs.append(_v2_codec_to_v3(compressor, dt.itemsize))
    attrs = dict(meta.attributes)
    fill = fill_of(doc.get("fill_value"), dt)
    if fill is None:
        v3_fill = _v3_default_fill(data_type)
    else:
        v3_fill = _v3_fill(fill, dt, data_type)
        attrs["_FillValue"] = _xarray_fill_attr(fill, dt)
    g = meta.grid
    v3: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(g.shape),
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(g.chunks)}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": g.separator}},
        "fill_value": v3_fill,
        "codecs": codecs,
        "attributes": attrs,
    }
    names = meta.dimension_names
    if names is not None:
        v3["dimension_names"] = list(names)
    return ArrayMetadata.from_v3(v3)


def _bytes_codec(dt: np.dtype[Any]) -> dict[str, Any]:
    """v3's ``bytes`` codec for values of ``dt``: with their byte order where they have one."""
    if dt.names is not None:
        orders = {dt.fields[n][0].base.byteorder for n in dt.names}  # type: ignore[index]
        if ">" in orders and orders & {"<", "="}:
            raise Unsupported(f"structured data type {dt} mixes byte orders: zarr v3 has one per array")
        big = ">" in orders
        multi = any(dt.fields[n][0].base.itemsize > 1 for n in dt.names)  # type: ignore[index]
    else:
        big = dt.byteorder == ">"
        multi = dt.itemsize > 1 and dt.kind not in "SVb"
    return {"name": "bytes", "configuration": {"endian": "big" if big else "little"}} if multi else {"name": "bytes"}


def _v3_to_v2(meta: ArrayMetadata) -> ArrayMetadata:
    doc = meta._doc
    dt = meta.dtype
    codecs = list(doc.get("codecs") or ())
    order: Literal["C", "F"] = "C"
    filters: list[dict[str, Any]] = []
    i = 0
    if i < len(codecs) and _name(codecs[i]) == "transpose":
        perm = list(_config(codecs[i]).get("order") or ())
        if perm != list(range(meta.ndim - 1, -1, -1)):
            raise Unsupported(f"zarr.json: transpose {perm} is not a reversal: zarr v2 has orders C and F only")
        order = "F"
        i += 1
    while i < len(codecs) and _name(codecs[i]) not in ("bytes", "vlen-utf8", "vlen-bytes", "sharding_indexed"):
        filters.append(_v3_codec_to_v2(codecs[i]))
        i += 1
    if i == len(codecs):
        raise InvalidReferences("zarr.json: no array-to-bytes codec (bytes, vlen-utf8, ...)")
    ab = _name(codecs[i])
    if ab == "sharding_indexed":
        raise Unsupported("zarr.json: a sharded array has no zarr v2 form (its chunks are inner chunks of shards)")
    if ab in ("vlen-utf8", "vlen-bytes"):
        filters.append({"id": ab})
    rest = [_v3_codec_to_v2(c) for c in codecs[i + 1:]]
    compressor = rest.pop() if rest else None
    filters.extend(rest)
    attrs = dict(meta.attributes)
    fill = None
    if "_FillValue" in attrs:
        fill = _xarray_fill_value(attrs.pop("_FillValue"), dt)
    names = meta.dimension_names
    if names is not None:
        attrs[DIMENSION_KEY] = list(names)
    g = meta.grid
    return ArrayMetadata.from_v2({
        "chunks": list(g.chunks),
        "compressor": compressor,
        "dimension_separator": g.separator,
        "dtype": dtype_json(dt),
        "fill_value": fill_json(fill, dt) if fill is not None else None,
        "filters": filters or None,
        "order": order,
        "shape": list(g.shape),
        "zarr_format": 2,
    }, attrs)
