"""gzip and zstd: recognised by their magic bytes (never by name alone), undone under a bound on the
output (a bomb is refused before it takes the memory), done by a destination's suffix."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator

from refset.errors import InvalidReferences
from refset.io.magic import GZIP_MAGIC, ZSTD_MAGIC
from refset.options import DEFAULT_LIMITS

__all__ = ["decompress", "compress"]


_OUT = 1 << 24  # gzip output per step
_IN = 1 << 20  # gzip input per step
_ZIN = 1 << 12  # zstd input per step: one 4-byte RLE block can hold 128 KiB, so <= 128 MiB out per step


def decompress(data: bytes, name: str = "", limit: int = DEFAULT_LIMITS.decompressed) -> bytes | bytearray:
    """Undo gzip or zstd compression, recognised by magic bytes (never by name alone). The output is
    bounded by ``limit`` bytes (``Limits.decompressed``): a bomb ends in
    InvalidReferences naming ``name`` and the limit before it takes the memory."""
    if data[:2] == GZIP_MAGIC:
        return _collect(_gunzip(data), name or "input", "gzip", limit)
    if data[:4] == ZSTD_MAGIC:
        return _collect(_unzstd(data), name or "input", "zstd", limit)
    return data


def _collect(chunks: Iterator[bytes], name: str, kind: str, limit: int) -> bytearray:
    """The chunks end to end, in one buffer grown in place: the output is held once (a list of
    chunks joined at the end would hold it twice at its peak)."""
    import zstandard

    out = bytearray()
    try:
        for chunk in chunks:
            if len(out) + len(chunk) > limit:
                raise InvalidReferences(
                    f"{name}: {kind} data expands to more than {limit} bytes, the decompression limit "
                    "(limits=refset.Limits(decompressed=...) allows more)"
                )
            out += chunk
    except MemoryError:
        n = len(out)
        del out
        raise InvalidReferences(f"{name}: out of memory decompressing {kind} data after {n} bytes") from None
    except (OSError, EOFError, zlib.error, zstandard.ZstdError) as e:
        raise InvalidReferences(f"{name}: corrupt {kind} data ({e})") from e
    return out


def _gunzip(data: bytes) -> Iterator[bytes]:
    """Every gzip member of ``data`` in chunks of at most ``_OUT`` bytes (trailing zeros allowed)."""
    mv = memoryview(data)
    pos = 0
    pending: bytes | memoryview = b""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    while True:
        if not pending:
            if pos >= len(mv):
                break
            pending = mv[pos : pos + _IN]
            pos += len(pending)
        out = d.decompress(pending, _OUT)
        pending = d.unconsumed_tail
        if out:
            yield out
        if d.eof:
            rest = d.unused_data
            if len(rest) < 2 and pos < len(mv):
                extra = bytes(mv[pos : pos + 2 - len(rest)])
                pos += len(extra)
                rest += extra
            if rest[:2] == GZIP_MAGIC:
                d, pending = zlib.decompressobj(16 + zlib.MAX_WBITS), rest
                continue
            if rest.strip(b"\0") or bytes(mv[pos:]).strip(b"\0"):
                raise OSError("trailing data after the last gzip member")
            return
    if not d.eof:
        raise EOFError("compressed data ended before the end-of-stream marker")


def _unzstd(data: bytes) -> Iterator[bytes]:
    """Every zstd frame of ``data`` (zstd's CLI and multi-threaded writers concatenate frames), with
    content checksums verified where the frames hold them; a truncated frame is an error."""
    import zstandard

    dctx = zstandard.ZstdDecompressor()
    mv = memoryview(data)
    d, fed = dctx.decompressobj(), False
    for pos in range(0, len(mv), _ZIN):
        piece: bytes | memoryview = mv[pos : pos + _ZIN]
        while piece:
            out = d.decompress(piece)
            fed = True
            if out:
                yield out
            piece = b""
            if d.eof:
                piece = d.unused_data
                d, fed = dctx.decompressobj(), False
    if fed:
        raise EOFError("truncated zstd frame")


def compress(data: bytes, dest: str) -> bytes:
    """Compress by the destination's suffix (any case): ``.gz`` gzip, ``.zst``/``.zstd`` zstd."""
    dest = dest.lower()
    if dest.endswith(".gz"):
        return gzip.compress(data, compresslevel=6, mtime=0)
    if dest.endswith((".zst", ".zstd")):
        import zstandard

        return zstandard.ZstdCompressor(level=9, write_checksum=True).compress(data)
    return data


