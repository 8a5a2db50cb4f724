"""Integrity (issue 12): a single flipped bit in a stored reference set ends in a ``refset.errors``
error or in the very same set, never in a different one. Parquet record files carry page checksums
and a CRC-32 each in ``.zmetadata`` (which is sealed by its own CRC-32); ``.json.zst`` carries zstd
content checksums; packed blocks their CRC-32."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import refset
from refset.errors import RefsetError
from tests.helpers import zarray

FLIPS = 200


def _refs() -> dict:
    refs: dict = {".zgroup": '{"zarr_format":2}', "a/.zarray": zarray([60], [1]), "a/.zattrs": '{"units":"K"}',
                  "b/.zarray": zarray([6, 5], [1, 1])}
    for i in range(60):
        refs[f"a/{i}"] = [f"s3://bucket/file{i % 7}.nc", 1000 + 37 * i, 100 + i % 5]
    for i in range(6):
        for j in range(5):
            refs[f"b/{i}.{j}"] = "base64:" + "AAEC" * (i + j) if (i + j) % 3 == 0 else [f"f{j}.nc"]
    return refs


def _flip(path: Path, rng: random.Random) -> tuple[int, int]:
    data = bytearray(path.read_bytes())
    pos, bit = rng.randrange(len(data)), rng.randrange(8)
    data[pos] ^= 1 << bit
    path.write_bytes(bytes(data))
    return pos, bit


def _outcome(path: Path, expected: dict) -> str:
    try:
        got = refset.load(str(path)).to_dict()
    except RefsetError:
        return "error"
    assert got == expected, "a flipped bit gave a different set"
    return "same"


def _files(root: Path, pattern: str) -> list[Path]:
    return sorted(p for p in root.rglob(pattern) if p.is_file())


@pytest.mark.parametrize("fmt,pattern", [("out.parq", "*.parq"), ("out.parq", ".zmetadata"),
                                         ("out.json.zst", "out.json.zst"), ("out.packed", "out.packed")])
def test_single_bit_flips_never_give_another_set(tmp_path, fmt, pattern):
    rs = refset.load(_refs())
    expected = rs.to_dict()
    dest = tmp_path / fmt
    refset.save(rs, dest)
    files = _files(tmp_path, pattern) if dest.is_dir() else [dest]
    originals = {p: p.read_bytes() for p in files}
    rng = random.Random(12)
    outcomes = {"error": 0, "same": 0}
    for _ in range(FLIPS):
        target = rng.choice(files)
        pos, bit = _flip(target, rng)
        try:
            outcomes[_outcome(dest, expected)] += 1
        except AssertionError as e:
            raise AssertionError(f"{target.name}: bit {bit} of byte {pos}: {e}") from None
        target.write_bytes(originals[target])
    assert outcomes["error"] + outcomes["same"] == FLIPS
    assert outcomes["error"] > FLIPS // 2, outcomes


def test_parquet_page_checksums_are_written_and_verified(tmp_path):
    """Without refset's per-file CRC (as a stranger's .zmetadata), a flip in a data page is still an
    error: the pages carry CRCs and the reader verifies them."""
    import pyarrow.parquet as pq

    refset.save(refset.load(_refs()), tmp_path / "out.parq")
    zm = tmp_path / "out.parq" / ".zmetadata"
    doc = json.loads(zm.read_text())
    doc.pop("refset_checksums")
    doc.pop("refset_crc32")
    zm.write_text(json.dumps(doc))
    rec = tmp_path / "out.parq" / "a" / "refs.0.parq"
    col = pq.ParquetFile(rec).metadata.row_group(0).column(1)  # offset: plain-encoded, one data page
    assert col.path_in_schema == "offset"
    data = bytearray(rec.read_bytes())
    data[col.data_page_offset + col.total_compressed_size - 1] ^= 0x10
    rec.write_bytes(bytes(data))
    with pytest.raises(refset.InvalidReferences, match=r"a/refs.0.parq: not a readable parquet file .*CRC"):
        refset.load(str(tmp_path / "out.parq")).to_dict()


def test_parquet_checksums_name_a_missing_file(tmp_path):
    refset.save(refset.load(_refs()), tmp_path / "out.parq")
    (tmp_path / "out.parq" / "a" / "refs.0.parq").unlink()
    with pytest.raises(refset.InvalidReferences, match=r"a/refs.0.parq: missing, but .zmetadata lists it"):
        refset.load(str(tmp_path / "out.parq")).to_dict()


def test_fsspec_reads_our_parquet_with_checksums(tmp_path):
    """fsspec ignores refset's extra .zmetadata members."""
    fsspec = pytest.importorskip("fsspec")
    refset.save(refset.load(_refs()), tmp_path / "out.parq")
    assert "refset_crc32" in (tmp_path / "out.parq" / ".zmetadata").read_text()
    fs = fsspec.filesystem("reference", fo=str(tmp_path / "out.parq"), remote_protocol="s3",
                           remote_options={"anon": True})
    m = fs.references
    assert json.loads(m["a/.zarray"])["shape"] == [60]
    assert list(m["a/3"]) == ["s3://bucket/file3.nc", 1000 + 37 * 3, 103]
