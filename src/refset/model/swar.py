"""SWAR ("SIMD within a register") primitives: numpy passes over unaligned 64-bit little-endian words of a
text, eight bytes at a time. The JSON reader and the key grammar parse digits with them."""

from __future__ import annotations

import numpy as np

__all__ = ["U8", "HI", "ZEROS", "words", "byte_lt", "top_byte", "swar8", "masked", "is_digits"]

U8 = np.uint64
HI = U8(0x8080808080808080)
_LO7 = U8(0x7F7F7F7F7F7F7F7F)
ZEROS = U8(0x3030303030303030)


def words(data: bytes | bytearray) -> np.ndarray:
    """``w[i]`` = the 8 bytes starting at ``i`` as a little-endian uint64 (unaligned view)."""
    return np.ndarray(shape=(len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))


def byte_lt(w: np.ndarray, n: int) -> np.ndarray:
    """0x80 in each byte of ``w`` whose value is < n (n <= 128)."""
    out: np.ndarray = ~((w & _LO7) + U8((128 - n) * 0x0101010101010101)) & ~w & HI
    return out


def top_byte(flags: np.ndarray) -> np.ndarray:
    """Index (0..7) of the highest flagged byte; -1 when none."""
    exp = np.frexp(flags.astype(np.float64))[1].astype(np.int64)  # bit_length
    return (exp - 1) // 8


def swar8(w: np.ndarray) -> np.ndarray:
    x = w - ZEROS
    x = (x * U8(10) + (x >> U8(8))) & U8(0x00FF00FF00FF00FF)
    x = (x * U8(100) + (x >> U8(16))) & U8(0x0000FFFF0000FFFF)
    out: np.ndarray = (x * U8(10000) + (x >> U8(32))) & U8(0xFFFFFFFF)
    return out


# _LOW[n]: the low 8-n bytes of a word (the bytes before its last n), for n = 0..8
_LOW = np.array([(1 << (8 * (8 - n))) - 1 if n else (1 << 64) - 1 for n in range(9)], np.uint64)


def masked(w: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Keep the last ``n`` (0..8) bytes of each word, the others become '0'."""
    low = _LOW[np.clip(n, 0, 8)]
    out: np.ndarray = (w & ~low) | (ZEROS & low)
    return out


def is_digits(w: np.ndarray) -> np.ndarray:
    hi_ok = (w & U8(0xF0F0F0F0F0F0F0F0)) == ZEROS
    lo_ok = (((w & U8(0x0F0F0F0F0F0F0F0F)) + U8(0x0606060606060606)) & U8(0xF0F0F0F0F0F0F0F0)) == 0
    out: np.ndarray = hi_ok & lo_ok
    return out


