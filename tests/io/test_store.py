"""The one byte layer: every stored form is read through it, so a URL form that works for one works for
all (fsspec's chained URLs such as ``simplecache::`` too); remote reads are checked, local ones direct."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import refset
from refset.io.store import FsspecStore, LocalStore, open_store, read_many


def _set() -> refset.ReferenceSet:
    za = ('{"chunks":[2],"compressor":null,"dtype":"<i4","fill_value":null,"filters":null,"order":"C",'
          '"shape":[6],"zarr_format":2}')
    return refset.load({".zgroup": '{"zarr_format":2}', "v/.zarray": za, "v/0": ["s3://b/f.nc", 0, 8],
                        "v/1": ["s3://b/f.nc", 8, 8], "v/2": "base64:AAAAAAEAAAA="})


@pytest.mark.parametrize("fmt", ["json", "v1", "parquet", "packed"])
def test_chained_urls_open_every_format(tmp_path: Path, fmt: str) -> None:
    """``simplecache::file://...`` opened JSON sets and not packed or parquet ones (each read its bytes
    its own way); now every reader asks the byte layer."""
    suffix = {"json": ".json", "v1": ".v1.json", "parquet": ".parq", "packed": ".packed"}[fmt]
    dest = tmp_path / f"s{suffix}"
    refset.save(_set(), dest)
    url = f"simplecache::file://{dest}"
    assert not isinstance(open_store(url), LocalStore)
    got = refset.load(url, storage_options={"simplecache": {"cache_storage": str(tmp_path / "cache")}})
    assert got.to_dict() == _set().to_dict()


def test_stores_read_what_they_are_asked(tmp_path: Path) -> None:
    p = tmp_path / "f.bin"
    p.write_bytes(bytes(range(256)))
    local, remote = open_store(str(p)), FsspecStore(f"file://{p}", {"auto_mkdir": False})
    for store in (local, remote):
        assert store.read("", 10, 14) == bytes([10, 11, 12, 13])
        assert store.read("", 250, 300) == bytes(range(250, 256))  # fewer at the end, never more
        assert store.read_ranges("", [0, 100], [2, 103]) == [b"\x00\x01", bytes([100, 101, 102])]
        with pytest.raises(OSError, match=r"(short read at byte 250|asked for bytes 250-260 \(10\), got 6)"):
            store.read_ranges("", [250], [260])
        assert store.size() == 256 and store.exists() and not store.isdir()
    directory = open_store(str(tmp_path))
    assert directory.list() == {"f.bin"} and directory.read("f.bin", 0, 1) == b"\x00" and directory.isdir()
    with pytest.raises(FileNotFoundError):
        directory.read("missing")
    got = read_many([(str(p), 1, 3), (f"file://{p}", 4, 6), (str(p), 0, -1)], {})
    assert got[:2] == [b"\x01\x02", b"\x04\x05"] and got[2] == bytes(range(256))
    assert np.frombuffer(local.read(), np.uint8).sum() == sum(range(256))
