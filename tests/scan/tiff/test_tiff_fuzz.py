"""Seeded fuzzing of the TIFF scanner against tifffile: byte flips, runs of 0x00/0xFF and truncations,
mostly in the header and the directories (where the parser reads), of TIFFs written by tifffile in
every layout the scanner takes (JPEG, LZMA, LERC, WebP and JPEG XL ones included) and of the corpus's
COGs. Each case must end in tifffile's values for every image refset reads, or a refset error naming
the file; never another exception, never other values where tifffile reads the image. ``FUZZ_SCALE=N`` runs N times as many cases.

Images claiming more than :data:`MAX_READ` bytes are scanned but not read (by either side): a flipped
width is a valid header for a 4-gigapixel image, which both would allocate.
"""

from __future__ import annotations

import os
import random
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.errors import RefsetError

tifffile = pytest.importorskip("tifffile")
imagecodecs = pytest.importorskip("imagecodecs")

from tests.scan.fuzzcheck import refusal_problem  # noqa: E402
from tests.scan.tiff.test_tiff import COGS, _pyramid, _write  # noqa: E402
from tests.scan.tiff.test_tiff_codecs import CASES as CODEC_CASES  # noqa: E402
from tests.scan.tiff.test_tiff_codecs import CODECS  # noqa: E402
from tests.scan.tiff.test_tiff_codecs import _write as _write_codec  # noqa: E402
from tests.scan.tiff.test_tiff_jpeg import _data, _write_with_tables  # noqa: E402
from tests.scan.tiff.test_tiff_jpeg import _write as _write_jpeg  # noqa: E402

CASES_PER_RUN = 300 * int(os.environ.get("FUZZ_SCALE", "1"))
MAX_READ = 64 << 20


def _sources(d: Path) -> list[Path]:
    out = []
    for name in ("zlib-tiled", "lzw-predictor", "rgb-planar", "bigtiff", "packbits-strips", "raw-strips-big-endian"):
        p = d / f"{name}.tif"
        _write(p, name)
        out.append(p)
    for name in ("ycbcr-tiled", "rgb-strips"):  # JPEG: YCbCr; RGB (its first strip's JFIF test)
        p = d / f"jpeg-{name}.tif"
        _write_jpeg(p, name)
        out.append(p)
    p = d / "jpeg-tables.tif"  # JPEG with a JPEGTables tag
    _write_with_tables(p, _data((64, 64, 3), 9), tile=(32, 32))
    out.append(p)
    # LZMA with a predictor, LERC with its Deflate layer, WebP RGBA, 16-bit JPEG XL (its sample kind test)
    for name in ("lzma-u2-strips-predictor", "lerc-deflate-rgb-tiled", "webp-rgba-tiled", "jpegxl-u2-strips"):
        feature = getattr(imagecodecs, CODECS[CODEC_CASES[name][0]][1], None)
        if getattr(feature, "available", False):  # else imagecodecs here lacks the codec: left out
            p = d / f"{name}.tif"
            _write_codec(p, name)
            out.append(p)
    p = d / "pyramid.tif"
    _pyramid(p)
    return [*out, p, *COGS]


def _structure_end(data: bytes) -> int:
    """Where the directories end: the largest offset any of them uses (tifffile's parse)."""
    import io

    end = 16
    with tifffile.TiffFile(io.BytesIO(data)) as tf:
        for page in tf.pages:
            end = max(end, page.offset + 8)
            for tag in page.tags:
                end = max(end, tag.valueoffset + tag.count * 8 if tag.valueoffset else 0)
    return min(end, len(data))


def _mutate(data: bytes, rng: random.Random, hot: int) -> tuple[bytes, str]:
    b = bytearray(data)
    op = rng.random()
    where = rng.randrange(0, hot) if rng.random() < 0.85 else rng.randrange(0, len(b))
    if op < 0.55:
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(0, hot) if rng.random() < 0.85 else rng.randrange(0, len(b))
            b[at] ^= 1 << rng.randrange(8)
        return bytes(b), "flip"
    if op < 0.8:
        n = rng.randint(1, 8)
        b[where:where + n] = bytes([rng.choice((0, 255))]) * len(b[where:where + n])
        return bytes(b), "run"
    if op < 0.9:
        return bytes(b[:rng.randrange(8, len(b))]), "truncate"
    value = rng.choice((0, 1, 2**16 - 1, 2**31, 2**32 - 1))
    at = where - where % 4
    if at + 4 <= len(b):
        struct.pack_into("<I", b, at, value)
    return bytes(b), "word"


def _oracle(path: Path) -> dict[str, np.ndarray | None]:
    """tifffile's value of each page (None: it cannot read it or it is too large to read)."""
    out: dict[str, np.ndarray | None] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tf = tifffile.TiffFile(path)
        except Exception:
            return {}
        with tf:
            for k, page in enumerate(tf.pages):
                try:
                    nbytes = int(np.prod(page.shape, dtype=np.float64)) * page.dtype.itemsize
                    out[str(k)] = page.asarray() if nbytes <= MAX_READ else None
                except Exception:
                    out[str(k)] = None
    return out


def _case(path: Path, original: dict[str, np.ndarray | None]) -> str:
    """"right", "refset error" or what went wrong (a failure of the test); ``original``: tifffile's
    values of the unmutated file."""
    try:
        rs = refset.scan(str(path))
    except RefsetError as e:
        return refusal_problem(str(path), e) or "refset error"  # unnamed, or an InvalidFile no Broken caused
    except Exception as e:
        return f"bare {type(e).__name__}: {e}"
    want = _oracle(path)
    for name in [p for p in rs.metadata if p.isdigit()]:
        meta = rs.metadata[name]
        if int(np.prod(meta.shape, dtype=np.float64)) * meta.dtype.itemsize > MAX_READ:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got = refset.open_dataset(rs, mask_and_scale=False)[name].values
        except RefsetError as e:
            if str(path) not in str(e):
                return f"error without the file's name reading {name}: {e!r}"
            continue
        except Exception as e:
            return f"bare {type(e).__name__} reading {name}: {e}"
        w = want.get(name)
        if w is not None and got.shape != w.shape:
            return f"silently wrong: {name} is {got.shape}, tifffile's {w.shape}"
        if w is not None and not np.array_equal(got, w):
            # tifffile is wrong on some broken files (a zero byte count among predicted planar tiles
            # shifts its decoding of the next tiles): where refset differs from it, refset must give
            # what the unmutated file holds there
            o = original.get(name)
            if o is None or o.shape != got.shape or not np.array_equal(got[got != w], o[got != w]):
                return f"silently wrong: {name} differs from tifffile's"
            return "right (tifffile wrong)"
    return "right"


def test_tiff_fuzz(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    sources = _sources(tmp_path / "src")
    datas = [(p, p.read_bytes()) for p in sources]
    hots = [_structure_end(d) for _, d in datas]
    originals = [_oracle(p) for p, _ in datas]
    counts: dict[str, int] = {}
    failures = []
    for seed in range(CASES_PER_RUN):
        rng = random.Random(seed)
        i = rng.randrange(len(datas))
        src, data = datas[i]
        mutated, how = _mutate(data, rng, hots[i])
        case = tmp_path / f"case-{seed}.tif"
        case.write_bytes(mutated)
        outcome = _case(case, originals[i])
        key = outcome if outcome.startswith(("right", "refset error")) else "failure"
        counts[key] = counts.get(key, 0) + 1
        if key == "failure":
            failures.append(f"seed {seed} ({src.name}, {how}): {outcome}")
        case.unlink()
    print(counts)
    assert not failures, "\n".join(failures[:20])
    assert counts.get("refset error", 0) > CASES_PER_RUN // 20  # the mutations reach the parser
