"""ArrayMetadata: stored documents kept byte for byte; the typed view; zarr v2 <-> v3 translation checked
by zarr-python itself (it must accept every document we write, and read the same values through it)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from refset.errors import InvalidReferences, Unsupported
from refset.model.metadata import ArrayMetadata

zarr = pytest.importorskip("zarr")


def _v2(dtype, *, filters=None, compressor=None, fill=None, order="C", attrs=None, shape=(6, 4),
        chunks=(4, 3), sep="."):
    return ArrayMetadata.from_v2({"chunks": list(chunks), "compressor": compressor, "dtype": dtype,
                                  "fill_value": fill, "filters": filters, "order": order,
                                  "shape": list(shape), "zarr_format": 2, "dimension_separator": sep},
                                 attrs)


def test_stored_documents_are_served_byte_for_byte() -> None:
    zarray = b'{ "chunks": [2],  "compressor": null, "dtype": "<f8", "fill_value": "NaN",\n "filters": null,' \
             b' "order": "C", "shape": [5], "zarr_format": 2}'
    zattrs = b'{"_ARRAY_DIMENSIONS": ["t"], "units": "K"}'
    m = ArrayMetadata.parse(".zarray", zarray, zattrs)
    assert m is not None and m.documents() == {".zarray": zarray, ".zattrs": zattrs}
    assert (m.shape, m.chunks, m.dtype, m.fill_value, m.dimension_names, dict(m.attributes)) == (
        (5,), (2,), np.dtype("<f8"), "NaN", ("t",), {"units": "K"})
    assert ArrayMetadata.parse(".zarray", zarray).documents() == {".zarray": zarray}  # no .zattrs: none served
    assert ArrayMetadata.parse(".zarray", zarray, b"[1]").documents() == {".zarray": zarray}  # not an object
    for bad in (b"{", b"[]", b'{"shape": [4], "chunks": [0]}', b'{"shape": [4], "chunks": [2, 2]}'):
        assert ArrayMetadata.parse(".zarray", bad) is None  # no chunk grid: stays a key of its own
    again = pickle.loads(pickle.dumps(m))
    assert again == m and again.documents() == m.documents()


def test_replace_keeps_format_and_dims() -> None:
    m = _v2("<i2", attrs={"_ARRAY_DIMENSIONS": ["y", "x"], "a": 1})
    r = m.replace(shape=(10, 4), attributes={"b": 2})
    assert r.shape == (10, 4) and dict(r.attributes) == {"b": 2} and r.dimension_names == ("y", "x")
    assert json.loads(r.documents()[".zattrs"]) == {"b": 2, "_ARRAY_DIMENSIONS": ["y", "x"]}
    assert m.replace(dimension_names=["a", "b"]).dimension_names == ("a", "b")
    v3 = m.to_v3().replace(chunks=(2, 2))
    assert v3.zarr_format == 3 and v3.chunks == (2, 2) and v3.dimension_names == ("y", "x")


CASES = {
    "hdf5 shuffle+zlib": dict(dtype="<f4", filters=[{"id": "shuffle", "elementsize": 4}, {"id": "zlib", "level": 4}],
                              fill="NaN"),
    "big-endian, gzip": dict(dtype=">i4", compressor={"id": "gzip", "level": 3}, fill=-999),
    "fortran order, zstd": dict(dtype="<f8", order="F", compressor={"id": "zstd", "level": 1, "checksum": False}),
    "blosc": dict(dtype="<u2", compressor={"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1,
                                           "blocksize": 0}),
    "delta filter": dict(dtype="<i8", filters=[{"id": "delta", "dtype": "<i8"}],
                         compressor={"id": "zlib", "level": 1}),
    "bytes |S": dict(dtype="|S3", fill=None),
    "unicode <U": dict(dtype="<U2"),
    "bool": dict(dtype="|b1", fill=False),
    "uint8": dict(dtype="|u1", fill=7),
    "complex": dict(dtype="<c16", fill=[1.0, "NaN"]),
    "datetime": dict(dtype="<M8[s]"),
    "vlen strings": dict(dtype="|O", filters=[{"id": "vlen-utf8"}]),
    "slash keys": dict(dtype="<f4", sep="/"),
}


@pytest.mark.parametrize("case", CASES)
def test_v2_v3_translation_is_what_zarr_reads(case: str) -> None:
    """zarr accepts both documents, the v3 keeps chunk keys, codecs, dtype, fill and dims, and v3 -> v2
    gives the same typed view back."""
    from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

    kw = dict(CASES[case])
    m = _v2(kw.pop("dtype"), attrs={"_ARRAY_DIMENSIONS": ["y", "x"], "units": "m"}, **kw)
    ArrayV2Metadata.from_dict(json.loads(m.documents()[".zarray"]))
    v3 = m.to_v3()
    doc = json.loads(v3.documents()["zarr.json"])
    zm = ArrayV3Metadata.from_dict(doc)  # zarr's own parser and validation
    assert tuple(zm.shape) == m.shape and tuple(zm.chunks) == m.chunks
    assert doc["dimension_names"] == ["y", "x"] and doc["attributes"]["units"] == "m"
    assert v3.grid.chunk_key((1, 2)) == m.grid.chunk_key((1, 2))  # keys spelled as before
    assert v3.dtype == m.dtype
    back = v3.to_v2()
    assert back.dtype == m.dtype and back.order == m.order and back.shape == m.shape
    assert back.dimension_names == ("y", "x") and dict(back.attributes) == {"units": "m"}
    assert [dict(f) for f in back.filters] + ([dict(back.compressor)] if back.compressor else []) == [
        dict(f) for f in m.filters] + ([dict(m.compressor)] if m.compressor else []) or case == "blosc"
    if m.fill_value is None:
        assert back.fill_value is None and "_FillValue" not in doc["attributes"]
    else:
        assert "_FillValue" in doc["attributes"]  # xarray's v3 mask, as xarray encodes it
        np.testing.assert_equal(np.asarray(back.fill_value), np.asarray(m.fill_value))


def test_what_the_other_format_cannot_express_is_refused() -> None:
    with pytest.raises(Unsupported, match="after a bytes filter"):
        _v2("<i8", filters=[{"id": "shuffle", "elementsize": 8}, {"id": "delta", "dtype": "<i8"}]).to_v3()
    with pytest.raises(Unsupported, match="object data with codec 'json2'"):
        _v2("|O", filters=[{"id": "json2"}]).to_v3()
    sharded = {"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int32",
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
               "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
               "codecs": [{"name": "sharding_indexed", "configuration": {}}]}
    with pytest.raises(Unsupported, match="sharded"):
        ArrayMetadata.from_v3(sharded).to_v2()
    with pytest.raises(InvalidReferences, match="regular chunk grid"):
        ArrayMetadata.from_v2({"shape": [4], "chunks": [0], "dtype": "<i4"})


def test_build_is_what_kerchunk_writes() -> None:
    m = ArrayMetadata.build(shape=(3, 4), chunks=(1, 4), dtype=np.dtype(">f4"), fill_value="NaN",
                            filters=[{"id": "zlib", "level": 4}], attributes={"units": "K"},
                            dimension_names=["t", "x"])
    assert json.loads(m.documents()[".zarray"]) == {
        "chunks": [1, 4], "compressor": None, "dimension_separator": ".", "dtype": ">f4", "fill_value": "NaN",
        "filters": [{"id": "zlib", "level": 4}], "order": "C", "shape": [3, 4], "zarr_format": 2}
    assert json.loads(m.documents()[".zattrs"]) == {"units": "K", "_ARRAY_DIMENSIONS": ["t", "x"]}
