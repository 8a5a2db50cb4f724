"""The chunk indexes of a version 4 layout message (HDF5 1.10+, ``libver="latest"``; spec IV.A.2.i
and III.H-III.I): a single chunk, an implicit index (every chunk allocated, one after another), a
fixed array (datasets without unlimited dimensions; its data block paged from 1024 entries on) and
an extensible array whose chunks are all in its index block (one unlimited dimension, the first,
and at most a few chunks along it). Other extensible arrays and version 2 B-tree indexes are not
native (the scan reads them through h5py).

Each gives the chunks as columns: (linear index over the grid of the dataset's maximum extent, filter
masks, file offsets, sizes), the linear index being libhdf5's (row-major over that grid).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from refset.scan.hdf5.base import UNDEF, need
from refset.scan.hdf5.checksum import check
from refset.scan.hdf5.meta import H5File

__all__ = ["read_index", "index_start"]

_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def index_start(index: tuple[Any, ...]) -> int | None:
    """Where a remote read of the index starts (its header), for reading ahead; None when there
    is nothing to read."""
    if index[0] in ("farray", "earray") and index[1] != UNDEF:
        return int(index[1])
    return None


def read_index(h5: H5File, index: tuple[Any, ...], chunk_bytes: int, maxgrid: tuple[int | None, ...],
               filtered: bool) -> _Columns:
    """The chunks ``index`` lists (see the module's docstring); ``chunk_bytes`` the size of an
    unfiltered chunk, ``maxgrid`` the chunk grid of the maximum extent (None: unlimited)."""
    kind, addr = index[0], index[1]
    if addr == UNDEF:
        return _empty()
    if kind == "single":
        fsize, mask = index[2], index[3]
        need(filtered == (fsize is not None), "single chunk filter flag")
        size = chunk_bytes if fsize is None else int(fsize)
        return _checked(h5, np.zeros(1, np.int64), np.array([mask], np.int64), np.array([addr], np.int64),
                        np.array([size], np.int64))
    if kind == "implicit":
        need(not filtered and None not in maxgrid, "implicit chunk index")
        n = math.prod(g for g in maxgrid if g is not None)
        need(addr + n * chunk_bytes <= h5.size, "implicit chunks past the end of the file")  # before allocating
        flat = np.arange(n, dtype=np.int64)
        return _checked(h5, flat, np.zeros(n, np.int64), addr + flat * chunk_bytes, np.full(n, chunk_bytes, np.int64))
    if kind == "farray":
        need(None not in maxgrid, "fixed array over an unlimited dimension")
        return _fixed_array(h5, addr, math.prod(g for g in maxgrid if g is not None), chunk_bytes, filtered)
    need(kind == "earray", "chunk index type")
    need(maxgrid[0] is None and None not in maxgrid[1:], "extensible array over other than its first dimension")
    return _extensible_array(h5, addr, chunk_bytes, filtered)


def _empty() -> _Columns:
    z = np.zeros(0, np.int64)
    return z, z, z, z


def _checked(h5: H5File, flat: np.ndarray, mask: np.ndarray, addr: np.ndarray, size: np.ndarray) -> _Columns:
    """Defined entries only (an unallocated chunk's address is undefined), within the file."""
    keep = addr != np.int64(-1)  # UNDEF read as int64
    flat, mask, addr, size = flat[keep], mask[keep], addr[keep], size[keep]
    need(bool(((addr >= 0) & (size > 0) & (h5.base + addr + size <= h5.size)).all()), "chunk past the end of the file")
    return flat, mask, addr + h5.base, size


def _entries(raw: bytes, n: int, entry: int, filtered: bool, chunk_bytes: int) -> tuple[np.ndarray, ...]:
    """(mask, address, size) columns of ``n`` index entries of ``entry`` bytes each."""
    a = np.frombuffer(raw, np.uint8, n * entry).reshape(n, entry)
    addr = a[:, :8].copy().view("<u8")[:, 0].astype(np.int64)  # UNDEF becomes -1
    if not filtered:
        need(entry == 8, "chunk index entry size")
        return np.zeros(n, np.int64), addr, np.full(n, chunk_bytes, np.int64)
    k = entry - 12  # the chunk size's bytes
    need(1 <= k <= 8, "filtered chunk index entry size")
    size = np.zeros(n, np.int64)
    for i in range(k):
        size |= a[:, 8 + i].astype(np.int64) << (8 * i)
    mask = a[:, 8 + k:12 + k].copy().view("<u4")[:, 0].astype(np.int64)
    return mask, addr, size


def _fixed_array(h5: H5File, addr: int, nchunks: int, chunk_bytes: int, filtered: bool) -> _Columns:
    h = h5.read(addr, 28)
    need(h[:4] == b"FAHD" and h[4] == 0, "fixed array header")
    check(h, "fixed array header")
    client, entry, page_bits = h[5], h[6], h[7]
    nelmts, dblk = struct.unpack_from("<QQ", h, 8)
    need(client == int(filtered) and nelmts == nchunks and page_bits < 32, "fixed array parameters")
    if dblk == UNDEF:
        return _empty()
    page = 1 << page_bits
    if nelmts <= page:  # one block of entries
        raw = h5.read(dblk, 14 + nelmts * entry + 4)
        _block_prefix(raw, b"FADB", client, addr, "fixed array data block")
        check(raw, "fixed array data block")
        mask, a, size = _entries(raw[14:], nelmts, entry, filtered, chunk_bytes)
        return _checked(h5, np.arange(nelmts, dtype=np.int64), mask, a, size)
    npages = -(-nelmts // page)
    nbits = -(-npages // 8)
    head = h5.read(dblk, 14 + nbits + 4)
    _block_prefix(head, b"FADB", client, addr, "fixed array data block")
    check(head, "fixed array data block")
    bitmap = np.unpackbits(np.frombuffer(head, np.uint8, nbits, 14))[:npages]  # most significant bit first
    first = dblk + 14 + nbits + 4
    parts: list[tuple[np.ndarray, ...]] = []
    for p in np.flatnonzero(bitmap).tolist():
        n = min(page, nelmts - p * page)
        raw = h5.read(first + p * (page * entry + 4), n * entry + 4)
        check(raw, "fixed array data block page")
        mask, a, size = _entries(raw, n, entry, filtered, chunk_bytes)
        parts.append((np.arange(p * page, p * page + n, dtype=np.int64), mask, a, size))
    if not parts:
        return _empty()
    flat, mask, a, size = (np.concatenate(c) for c in zip(*parts, strict=True))
    return _checked(h5, flat, mask, a, size)


def _block_prefix(raw: bytes, sig: bytes, client: int, header: int, what: str) -> None:
    need(raw[:4] == sig and raw[4] == 0 and raw[5] == client
         and struct.unpack_from("<Q", raw, 6)[0] == header, what)


def _extensible_array(h5: H5File, addr: int, chunk_bytes: int, filtered: bool) -> _Columns:
    h = h5.read(addr, 72)
    need(h[:4] == b"EAHD" and h[4] == 0, "extensible array header")
    check(h, "extensible array header")
    client, entry, max_bits, idx_elmts, dblk_min, sblk_min, _page_bits = h[5:12]
    _nsblks, _sblk_size, _ndblks, _dblk_size, max_set, _nelmts, iblock = struct.unpack_from("<7Q", h, 12)
    need(client == int(filtered) and entry > 0 and 0 < max_bits <= 64, "extensible array parameters")
    need(dblk_min > 0 and dblk_min & (dblk_min - 1) == 0 and sblk_min > 0 and sblk_min & (sblk_min - 1) == 0,
         "extensible array parameters")
    if iblock == UNDEF or max_set == 0:
        return _empty()
    need(max_set <= idx_elmts, "extensible array past its index block")
    nsblks = 1 + max_bits - (dblk_min.bit_length() - 1)
    iblock_sblks = 2 * (sblk_min.bit_length() - 1)
    need(nsblks >= iblock_sblks, "extensible array parameters")
    ndblk_addrs, nsblk_addrs = 2 * (sblk_min - 1), nsblks - iblock_sblks
    raw = h5.read(iblock, 14 + idx_elmts * entry + 8 * (ndblk_addrs + nsblk_addrs) + 4)
    _block_prefix(raw, b"EAIB", client, addr, "extensible array index block")
    check(raw, "extensible array index block")
    mask, a, size = _entries(raw[14:], max_set, entry, filtered, chunk_bytes)
    return _checked(h5, np.arange(max_set, dtype=np.int64), mask, a, size)
