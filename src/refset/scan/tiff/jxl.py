"""JPEG XL headers (ISO/IEC 18181-1 SizeHeader, ImageMetadata, BitDepth; ISO BMFF containers): whether
a stream's samples are floating-point, from its first bytes, so that a TIFF image's codec gives the
samples the type its tags say (libjxl decodes 16-bit streams to uint16 or float16 as the stream says).
"""

from __future__ import annotations

import struct

__all__ = ["jxl_float", "codestream"]


#: JPEG XL U32 distributions, as (bits, offset) per selector (a value alone: 0 bits)
_JXL_SIZE = ((9, 1), (13, 1), (18, 1), (30, 1))
_JXL_PREVIEW_DIV8 = ((0, 16), (0, 32), (5, 1), (9, 33))
_JXL_PREVIEW = ((6, 1), (8, 65), (10, 321), (12, 1345))
_JXL_ANIMATION = (((0, 100), (0, 1000), (10, 1), (30, 1)), ((0, 1), (0, 1001), (8, 1), (10, 1)),
                  ((0, 0), (3, 0), (16, 0), (32, 0)))


class _Bits:
    """A JPEG XL header's fields, read least significant bit first."""

    def __init__(self, data: bytes) -> None:
        self.value, self.end, self.at = int.from_bytes(data, "little"), 8 * len(data), 0

    def u(self, n: int) -> int:
        if self.at + n > self.end:
            raise EOFError
        self.at += n
        return (self.value >> (self.at - n)) & ((1 << n) - 1)

    def u32(self, dist: tuple[tuple[int, int], ...]) -> int:
        bits, offset = dist[self.u(2)]
        return self.u(bits) + offset

    def size(self, preview: bool = False) -> None:
        """A SizeHeader, or a PreviewHeader: y, a ratio, x when the ratio is 0."""
        flag = self.u(1)  # small (5 bits a side), or for a preview div8
        for side in ("y", "x"):
            if preview:
                self.u32(_JXL_PREVIEW_DIV8 if flag else _JXL_PREVIEW)
            elif flag:
                self.u(5)
            else:
                self.u32(_JXL_SIZE)
            if side == "y" and self.u(3):  # a ratio other than 0 gives x
                return


def jxl_float(data: bytes) -> bool | None:
    """Whether a JPEG XL stream (a codestream or an ISO BMFF container) holds floating-point samples:
    its ImageMetadata's BitDepth (ISO/IEC 18181-1); None when that is not within ``data``."""
    stream = codestream(data)
    if stream is None or stream[:2] != b"\xff\x0a":
        return None
    r = _Bits(stream[2:])
    try:
        r.size()
        if r.u(1):  # all_default: 8-bit integers
            return False
        if r.u(1):  # extra_fields
            r.u(3)  # orientation
            if r.u(1):
                r.size()  # intrinsic size
            if r.u(1):
                r.size(preview=True)
            if r.u(1):
                for dist in _JXL_ANIMATION:
                    r.u32(dist)
                r.u(1)  # have_timecodes
        return bool(r.u(1))  # float_sample
    except EOFError:
        return None


def codestream(data: bytes) -> bytes | None:
    """The codestream a JPEG XL container's ``jxlc`` or first ``jxlp`` box holds (the data itself when it
    is a bare codestream); None when not within ``data``."""
    if data[:2] == b"\xff\x0a":
        return data
    if data[:12] != b"\0\0\0\x0cJXL \r\n\x87\n":
        return None
    at = 0
    while at + 8 <= len(data):
        size, kind = struct.unpack_from(">I4s", data, at)
        head = 8
        if size == 1 and at + 16 <= len(data):
            size, head = struct.unpack_from(">Q", data, at + 8)[0], 16
        if kind in (b"jxlc", b"jxlp"):
            return data[at + head + (4 if kind == b"jxlp" else 0):]
        if size < head:
            return None
        at += size
    return None
