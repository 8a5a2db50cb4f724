"""The chunk indexes of a version 4 layout message (HDF5 1.10+, ``libver="latest"``; spec IV.A.2.i
and III.H-III.I): a single chunk, an implicit index (every chunk allocated, one after another), a
fixed array (datasets without unlimited dimensions; its data block paged from 1024 entries on) and
an extensible array (one unlimited dimension: an index block, super blocks, data blocks, pages). Version 2 B-tree indexes (several unlimited dimensions) are not native (the scan reads them
through h5py).

Each gives the chunks as columns: (linear index over the grid of the dataset's maximum extent, filter
masks, file offsets, sizes), the linear index being libhdf5's: row-major over that grid, the
unlimited dimension of an extensible array taken first (libhdf5 "swizzles" it there).
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from refset.scan.hdf5.base import UNDEF, intact, need
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
        intact(addr + n * chunk_bytes <= h5.size, "implicit chunks past the end of the file")  # before allocating
        flat = np.arange(n, dtype=np.int64)
        return _checked(h5, flat, np.zeros(n, np.int64), addr + flat * chunk_bytes, np.full(n, chunk_bytes, np.int64))
    if kind == "farray":
        need(None not in maxgrid, "fixed array over an unlimited dimension")
        return _fixed_array(h5, addr, math.prod(g for g in maxgrid if g is not None), chunk_bytes, filtered)
    need(kind == "earray", "chunk index type")
    need(sum(g is None for g in maxgrid) == 1, "extensible array without one unlimited dimension")
    return _extensible_array(h5, addr, chunk_bytes, filtered)


def _empty() -> _Columns:
    z = np.zeros(0, np.int64)
    return z, z, z, z


def _checked(h5: H5File, flat: np.ndarray, mask: np.ndarray, addr: np.ndarray, size: np.ndarray) -> _Columns:
    """Defined entries only (an unallocated chunk's address is undefined), within the file."""
    keep = addr != np.int64(-1)  # UNDEF read as int64
    flat, mask, addr, size = flat[keep], mask[keep], addr[keep], size[keep]
    intact(bool(((addr >= 0) & (size > 0) & (h5.base + addr + size <= h5.size)).all()), "chunk past the end of the file")
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
    intact(h[:4] == b"FAHD" and h[4] == 0, "fixed array header")
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
    intact(raw[:4] == sig and raw[4] == 0 and raw[5] == client
           and struct.unpack_from("<Q", raw, 6)[0] == header, what)


def _extensible_array(h5: H5File, addr: int, chunk_bytes: int, filtered: bool) -> _Columns:
    """An extensible array's entries (III.I): its index block holds the first few and the addresses
    of the first data blocks and of the super blocks, whose data blocks hold the rest, each data
    block past 2**page_bits entries in pages (unwritten pages not initialised)."""
    h = h5.read(addr, 72)
    intact(h[:4] == b"EAHD" and h[4] == 0, "extensible array header")
    check(h, "extensible array header")
    client, entry, max_bits, idx_elmts, dblk_min, sblk_min, page_bits = h[5:12]
    _nsblks, _sblk_size, _ndblks, _dblk_size, max_set, _nelmts, iblock = struct.unpack_from("<7Q", h, 12)
    need(client == int(filtered) and entry > 0 and 0 < max_bits <= 64 and page_bits < 32, "extensible array parameters")
    need(dblk_min > 0 and dblk_min & (dblk_min - 1) == 0 and sblk_min > 0 and sblk_min & (sblk_min - 1) == 0,
         "extensible array parameters")
    if iblock == UNDEF or max_set == 0:
        return _empty()
    nsblks = 1 + max_bits - (dblk_min.bit_length() - 1)
    iblock_sblks = 2 * (sblk_min.bit_length() - 1)
    need(nsblks >= iblock_sblks and max_set <= 1 << max_bits, "extensible array parameters")
    ndblk_addrs, nsblk_addrs = 2 * (sblk_min - 1), nsblks - iblock_sblks
    raw = h5.read(iblock, 14 + idx_elmts * entry + 8 * (ndblk_addrs + nsblk_addrs) + 4)
    _block_prefix(raw, b"EAIB", client, addr, "extensible array index block")
    check(raw, "extensible array index block")
    n = min(max_set, idx_elmts)
    parts = [(np.arange(n, dtype=np.int64), *_entries(raw[14:], n, entry, filtered, chunk_bytes))]
    p = 14 + idx_elmts * entry
    dblks = struct.unpack_from(f"<{ndblk_addrs}Q", raw, p)
    sblks = struct.unpack_from(f"<{nsblk_addrs}Q", raw, p + 8 * ndblk_addrs)
    off_size = (max_bits + 7) // 8
    page = 1 << page_bits
    start, first_dblk = idx_elmts, 0  # the array index of super block u's first entry; its first data block
    for u in range(nsblks):
        if start >= max_set:
            break
        count, size = 1 << (u // 2), (1 << ((u + 1) // 2)) * dblk_min  # data blocks, entries each
        paged = size > page
        npages = size // page if paged else 0
        if u < iblock_sblks:
            addrs = dblks[first_dblk:first_dblk + count]
            inits: list[np.ndarray | None] = [None] * count
        else:
            sb = sblks[u - iblock_sblks]
            if sb == UNDEF:
                addrs, inits = (), []
            else:
                nbytes = count * (-(-npages // 8))  # a data block's bytes of bits each, one bit string
                sraw = h5.read(sb, 14 + off_size + nbytes + 8 * count + 4)
                _block_prefix(sraw, b"EASB", client, addr, "extensible array super block")
                check(sraw, "extensible array super block")
                need(int.from_bytes(sraw[14:14 + off_size], "little") == start - idx_elmts,
                     "extensible array super block offset")
                q = 14 + off_size
                # the pages written: bit (block x pages + page) of the super block's bitmap, most
                # significant bit first (H5EA__lookup_elmt), not a byte-aligned bitmap per block
                bits = np.unpackbits(np.frombuffer(sraw, np.uint8, nbytes, q))
                inits = [bits[k * npages:(k + 1) * npages] if paged else None for k in range(count)]
                addrs = struct.unpack_from(f"<{count}Q", sraw, q + nbytes)
        for k, (d, init) in enumerate(zip(addrs, inits, strict=True)):
            first = start + k * size
            if d == UNDEF or first >= max_set:
                continue
            # the offset libhdf5 writes in the block: of the array's first entry, but for the index
            # block's data blocks it counts the block by its number among all data blocks
            # (H5EA__lookup_elmt), not within its super block
            stored = start - idx_elmts + (first_dblk + k if u < iblock_sblks else k) * size
            parts += _data_block(h5, d, client, addr, first, stored, size, off_size, entry, filtered,
                                 chunk_bytes, page if paged else 0, init)
        start += count * size
        first_dblk += count
    flat, mask, a, sizes = (np.concatenate(c) for c in zip(*parts, strict=True))
    keep = flat < max_set
    return _checked(h5, flat[keep], mask[keep], a[keep], sizes[keep])


def _data_block(h5: H5File, at: int, client: int, header: int, first: int, stored: int, size: int,
                off_size: int, entry: int, filtered: bool, chunk_bytes: int, page: int,
                init: np.ndarray | None) -> list[tuple[np.ndarray, ...]]:
    """The entries of an extensible array data block of ``size`` entries whose first is entry
    ``first`` of the array (``stored``: the offset the block must say it has): in the block, or in
    its pages (``page`` entries each) whose bit in ``init`` is set."""
    prefix = 14 + off_size
    if not page:
        raw = h5.read(at, prefix + size * entry + 4)
        _block_prefix(raw, b"EADB", client, header, "extensible array data block")
        check(raw, "extensible array data block")
        need(int.from_bytes(raw[14:prefix], "little") == stored, "extensible array data block offset")
        return [(np.arange(first, first + size, dtype=np.int64), *_entries(raw[prefix:], size, entry, filtered,
                                                                            chunk_bytes))]
    raw = h5.read(at, prefix + 4)
    _block_prefix(raw, b"EADB", client, header, "extensible array data block")
    check(raw, "extensible array data block")
    need(int.from_bytes(raw[14:prefix], "little") == stored, "extensible array data block offset")
    assert init is not None  # a paged block's pages are marked in its super block
    out = []
    for p in np.flatnonzero(init).tolist():
        praw = h5.read(at + prefix + 4 + p * (page * entry + 4), page * entry + 4)
        check(praw, "extensible array data block page")
        out.append((np.arange(first + p * page, first + (p + 1) * page, dtype=np.int64),
                    *_entries(praw, page, entry, filtered, chunk_bytes)))
    return out
