"""zarr-python 3 codecs for the numcodecs codecs refset's sets name that zarr does not know: GRIB
messages (``refset_grib``) and imagecodecs' codecs (``imagecodecs_lzw``, ``imagecodecs_jpeg``, ...,
which TIFF and FITS sets name). In zarr v3 metadata (an Icechunk repository refset writes, a set
converted to v3) they are ``numcodecs.<id>`` codecs; installing refset registers each under that name
in zarr's ``zarr.codecs`` entry-point group, so ``xr.open_zarr`` and ``zarr.open`` read such arrays
with no import of refset. Each decodes as the numcodecs codec of that id does (a bytes-to-bytes
codec, as refset's v2 -> v3 translation places them), built on zarr's public codec interface only.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, ClassVar

from zarr.abc.codec import BytesBytesCodec

if TYPE_CHECKING:
    from typing import Self


__all__ = ["NumcodecsBytes", "CODEC_IDS"]

# zarr's ArraySpec and Buffer live below its public API (zarr.core): typed loosely here
ArraySpec = Any
Buffer = Any

#: The numcodecs ids refset's scanners write that zarr-python has no codec for.
CODEC_IDS = ("refset_grib", "imagecodecs_lzw", "imagecodecs_packbits", "imagecodecs_jpeg", "imagecodecs_lzma",
             "imagecodecs_lerc", "imagecodecs_webp", "imagecodecs_jpegxl", "imagecodecs_delta",
             "imagecodecs_floatpred", "imagecodecs_rcomp")


class NumcodecsBytes(BytesBytesCodec):
    """The numcodecs codec ``codec_id`` as a zarr v3 bytes-to-bytes codec named ``numcodecs.<id>``."""

    codec_id: ClassVar[str] = ""
    is_fixed_size = False
    config: dict[str, Any]
    _numcodec: Any

    def __init__(self, **config: Any) -> None:
        object.__setattr__(self, "config", {k: v for k, v in config.items() if k != "id"})
        object.__setattr__(self, "_numcodec", None)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return cls(**dict(data.get("configuration") or {}))

    def to_dict(self) -> dict[str, Any]:
        return {"name": f"numcodecs.{self.codec_id}", "configuration": dict(self.config)}

    def compute_encoded_size(self, input_byte_length: int, chunk_spec: ArraySpec) -> int:
        raise NotImplementedError  # a compressed size is not known beforehand

    def _codec(self) -> Any:
        got = self._numcodec
        if got is None:
            import numcodecs

            from refset.model.codecs import register_for

            register_for(self.codec_id)  # imagecodecs' codecs are registered with numcodecs on demand
            got = numcodecs.get_codec({"id": self.codec_id, **self.config})
            object.__setattr__(self, "_numcodec", got)
        return got

    async def _decode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        return await asyncio.to_thread(self._decode, chunk_bytes, chunk_spec)

    def _decode(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        import numpy as np

        out = self._codec().decode(chunk_bytes.as_array_like())
        raw = out.tobytes() if isinstance(out, np.ndarray) else bytes(out)
        return chunk_spec.prototype.buffer.from_bytes(raw)

    async def _encode_single(self, chunk_bytes: Buffer, chunk_spec: ArraySpec) -> Buffer:
        import numpy as np

        out = await asyncio.to_thread(self._codec().encode, chunk_bytes.as_array_like())
        raw = out.tobytes() if isinstance(out, np.ndarray) else bytes(out)
        return chunk_spec.prototype.buffer.from_bytes(raw)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and isinstance(other, NumcodecsBytes) and other.config == self.config

    def __hash__(self) -> int:
        return hash((self.codec_id, repr(sorted(self.config.items()))))

    def __repr__(self) -> str:
        return f"NumcodecsBytes(numcodecs.{self.codec_id}, {self.config!r})"


def _class(codec_id: str) -> type[NumcodecsBytes]:
    name = "".join(p.capitalize() for p in codec_id.split("_"))
    return type(name, (NumcodecsBytes,), {"codec_id": codec_id, "__module__": __name__})


# one class per id, named for the entry points (``refset.serve.zarr_codecs:ImagecodecsLzw``)
for _id in CODEC_IDS:
    _cls = _class(_id)
    globals()[_cls.__name__] = _cls
