"""zarr v2 <-> v3 metadata translation, following the zarr v3 specification and zarr-python 3's own
v2 -> v3 migration: v2 ``order`` "F" is a ``transpose`` codec; array-to-array filters (``delta``,
``fixedscaleoffset``, ...) come before the ``bytes`` codec (which carries the byte order),
bytes-to-bytes ones (``shuffle``, ``zlib``, ...) and the compressor after it; ``gzip``, ``zstd``,
``blosc``, ``crc32c`` and the object codecs ``vlen-utf8``/``vlen-bytes`` are v3 core codecs, any
other numcodecs codec is ``numcodecs.<id>``; chunk keys keep their spelling (v3's ``v2`` chunk key
encoding). xarray's conventions travel with the metadata: v2 ``_ARRAY_DIMENSIONS`` is v3
``dimension_names``, and v2's fill value (a mask for xarray) is v3's ``_FillValue`` attribute,
encoded as xarray encodes it.

The functions take a document and what :class:`~refset.model.metadata.ArrayMetadata` read from it,
and return the other version's documents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from refset.errors import InvalidReferences, Unsupported
from refset.model.dtypes import (
    OBJECT_CODECS,
    bytes_codec,
    dtype_json,
    fill_json,
    fill_of,
    v3_data_type,
    v3_default_fill,
    v3_fill,
    xarray_fill_attr,
    xarray_fill_value,
)
from refset.model.keys import ChunkGrid

__all__ = ["v2_to_v3", "v3_to_v2", "codec_name", "codec_config", "DIMENSION_KEY"]

#: xarray's attribute naming a zarr v2 array's dimensions.
DIMENSION_KEY = "_ARRAY_DIMENSIONS"
#: numcodecs codecs that map arrays to arrays (before the ``bytes`` codec in v3).
ARRAY_TO_ARRAY = frozenset({"delta", "fixedscaleoffset", "quantize", "astype", "packbits", "bitround",
                            "categorize"})
BLOSC_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def codec_name(codec: Any) -> str:
    return str(codec.get("name")) if isinstance(codec, Mapping) else str(codec)


def codec_config(codec: Mapping[str, Any]) -> dict[str, Any]:
    c = codec.get("configuration")
    return dict(c) if isinstance(c, Mapping) else {}


def v2_codec_to_v3(spec: Mapping[str, Any], itemsize: int) -> dict[str, Any]:
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
            "shuffle": BLOSC_SHUFFLE.get(shuffle, "shuffle"), "blocksize": int(cfg.get("blocksize", 0))}}
    if cid == "crc32c":
        return {"name": "crc32c"}
    return {"name": f"numcodecs.{cid}", "configuration": cfg}


def v3_codec_to_v2(codec: Mapping[str, Any]) -> dict[str, Any]:
    name, cfg = codec_name(codec), codec_config(codec)
    if name == "gzip":
        return {"id": "gzip", "level": cfg.get("level", 5)}
    if name == "zstd":
        return {"id": "zstd", "level": cfg.get("level", 0), "checksum": cfg.get("checksum", False)}
    if name == "blosc":
        shuffle = {v: k for k, v in BLOSC_SHUFFLE.items()}.get(cfg.get("shuffle", "shuffle"), 1)
        return {"id": "blosc", "cname": cfg.get("cname", "lz4"), "clevel": cfg.get("clevel", 5),
                "shuffle": shuffle, "blocksize": cfg.get("blocksize", 0)}
    if name == "crc32c":
        return {"id": "crc32c"}
    if name.startswith("numcodecs."):
        return {"id": name[len("numcodecs."):], **cfg}
    raise Unsupported(f"zarr.json: codec {name!r} has no zarr v2 counterpart")


def v2_to_v3(doc: Mapping[str, Any], dt: np.dtype[Any], g: ChunkGrid, attributes: Mapping[str, Any],
             names: Sequence[str | None] | None) -> dict[str, Any]:
    """The ``zarr.json`` of the v2 array ``doc`` (``.zarray``) with the given dtype, grid, user
    attributes and dimension names."""
    filters = list(doc.get("filters") or [])
    compressor = doc.get("compressor")
    codecs: list[dict[str, Any]] = []
    if doc.get("order") == "F" and g.ndim > 1:
        codecs.append({"name": "transpose", "configuration": {"order": list(range(g.ndim - 1, -1, -1))}})
    object_codec = None
    if dt.kind == "O":
        ids = [str(f.get("id")) for f in filters if isinstance(f, Mapping)]
        if not set(ids) & set(OBJECT_CODECS):
            v3_data_type(dt, ids[0] if ids else None)  # refused, naming the codec
    after: list[dict[str, Any]] = []
    for f in filters:
        cid = str(f.get("id")) if isinstance(f, Mapping) else None
        if cid in OBJECT_CODECS:
            object_codec = cid
            continue
        if cid in ARRAY_TO_ARRAY:
            if after or object_codec:
                raise Unsupported(f"filter {cid!r} after a bytes filter: zarr v3 applies array filters first")
            codecs.append(v2_codec_to_v3(f, dt.itemsize))
        elif isinstance(f, Mapping):
            after.append(v2_codec_to_v3(f, dt.itemsize))
        else:
            raise InvalidReferences(f".zarray: filter {f!r} is not a codec configuration")
    data_type = v3_data_type(dt, object_codec)
    if object_codec is not None:
        codecs.append({"name": object_codec, "configuration": {}})
    else:
        codecs.append(bytes_codec(dt))
    codecs.extend(after)
    if isinstance(compressor, Mapping):
        codecs.append(v2_codec_to_v3(compressor, dt.itemsize))
    attrs = dict(attributes)
    fill = fill_of(doc.get("fill_value"), dt)
    if fill is None:
        fill3 = v3_default_fill(data_type, dt.itemsize)
    else:
        fill3 = v3_fill(fill, dt, data_type)
        attrs["_FillValue"] = xarray_fill_attr(fill, dt)
    v3: dict[str, Any] = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(g.shape),
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(g.chunks)}},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": g.separator}},
        "fill_value": fill3,
        "codecs": codecs,
        "attributes": attrs,
    }
    if names is not None:
        v3["dimension_names"] = list(names)
    return v3


def v3_to_v2(doc: Mapping[str, Any], dt: np.dtype[Any], g: ChunkGrid, attributes: Mapping[str, Any],
             names: Sequence[str | None] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``.zarray`` and ``.zattrs`` of the v3 array ``doc`` (``zarr.json``) with the given dtype,
    grid, user attributes and dimension names."""
    codecs = list(doc.get("codecs") or ())
    order: Literal["C", "F"] = "C"
    filters: list[dict[str, Any]] = []
    i = 0
    if i < len(codecs) and codec_name(codecs[i]) == "transpose":
        perm = list(codec_config(codecs[i]).get("order") or ())
        if perm != list(range(g.ndim - 1, -1, -1)):
            raise Unsupported(f"zarr.json: transpose {perm} is not a reversal: zarr v2 has orders C and F only")
        order = "F"
        i += 1
    while i < len(codecs) and codec_name(codecs[i]) not in ("bytes", "vlen-utf8", "vlen-bytes", "sharding_indexed"):
        filters.append(v3_codec_to_v2(codecs[i]))
        i += 1
    if i == len(codecs):
        raise InvalidReferences("zarr.json: no array-to-bytes codec (bytes, vlen-utf8, ...)")
    ab = codec_name(codecs[i])
    if ab == "sharding_indexed":
        raise Unsupported("zarr.json: a sharded array has no zarr v2 form (its chunks are inner chunks of shards)")
    if ab in ("vlen-utf8", "vlen-bytes"):
        filters.append({"id": ab})
    rest = [v3_codec_to_v2(c) for c in codecs[i + 1:]]
    compressor = rest.pop() if rest else None
    filters.extend(rest)
    attrs = dict(attributes)
    fill = None
    if "_FillValue" in attrs:
        fill = xarray_fill_value(attrs.pop("_FillValue"), dt)
    if names is not None:
        attrs[DIMENSION_KEY] = list(names)
    return {
        "chunks": list(g.chunks),
        "compressor": compressor,
        "dimension_separator": g.separator,
        "dtype": dtype_json(dt),
        "fill_value": fill_json(fill, dt) if fill is not None else None,
        "filters": filters or None,
        "order": order,
        "shape": list(g.shape),
        "zarr_format": 2,
    }, attrs
