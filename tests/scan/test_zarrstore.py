"""refset.scan of zarr stores (v2, v3, sharded v3; local and on S3): every array reads back as zarr
reads the store itself; xarray-written stores open as xarray opens them; a sharded array becomes its
inner chunks, byte ranges into the shards; stores combine with each other; broken indexes are named."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import refset
from refset.errors import InvalidFile
from refset.scan.zarrstore import ZarrScanner
from refset.testing import ScannerTests

zarr = pytest.importorskip("zarr")
xr = pytest.importorskip("xarray")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _store(path: Path, fmt: int, **kw: Any) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(fmt)
    a = rng.standard_normal((50, 40)).astype("f4")
    b = np.arange(7, dtype="i8")
    g = zarr.open_group(str(path), mode="w", zarr_format=fmt)
    arr = g.create_array("a", shape=a.shape, chunks=(10, 10), dtype="f4", fill_value=np.nan,
                         **({"shards": (20, 20)} if kw.get("shards") else {}))
    arr[:30] = a[:30]  # rows 30.. never written: the fill value
    sub = g.create_group("sub")
    sub.attrs["title"] = "nested"
    bb = sub.create_array("b", shape=(7,), chunks=(3,), dtype="i8", **({"shards": (6,)} if kw.get("shards") else {}))
    bb[:] = b
    want = a.copy()
    want[30:] = np.nan
    return {"a": want, "sub/b": b}


@pytest.mark.parametrize("fmt,shards", [(2, False), (3, False), (3, True)], ids=["v2", "v3", "v3-sharded"])
def test_stores_read_as_zarr_reads_them(tmp_path: Path, fmt: int, shards: bool) -> None:
    path = tmp_path / "s.zarr"
    want = _store(path, fmt, shards=shards)
    rs = refset.scan(str(path))
    assert sorted(rs.metadata) == ["a", "sub/b"]
    ours = zarr.open_group(refset.ZarrStore(rs), mode="r", zarr_format=fmt)
    theirs = zarr.open_group(str(path), mode="r", zarr_format=fmt)
    for name, values in want.items():
        np.testing.assert_array_equal(ours[name][...], values, err_msg=name)
        np.testing.assert_array_equal(theirs[name][...], values, err_msg=name)
    assert dict(ours["sub"].attrs) == {"title": "nested"}
    a = rs.table("a")
    assert rs.metadata["a"].chunks == (10, 10) and a.count() == 12  # rows 30.. absent: never written
    urls = {rs.urls[i] for i in a.path_id[a.kind != 0].tolist()}
    if shards:  # inner chunks are byte ranges into the shard files: 4 shards of 20 x 20 hold the 12 chunks
        assert len(urls) == 4 and all("/a/c/" in u for u in urls)
        assert a.offset[a.kind != 0].max() > 0
    else:
        assert len(urls) == 12 and (a.offset[a.kind != 0] == 0).all()


@pytest.mark.parametrize("fmt", [2, 3])
def test_xarray_written_stores_open_as_xarray_opens_them(tmp_path: Path, fmt: int) -> None:
    ds = xr.Dataset({"tas": (("time", "x"), np.arange(24.0).reshape(4, 6))},
                    coords={"time": np.arange(4), "x": np.linspace(0, 1, 6)})
    ds["tas"].attrs["units"] = "K"
    path = tmp_path / f"x{fmt}.zarr"
    ds.to_zarr(path, zarr_format=fmt, consolidated=False, encoding={"tas": {"chunks": (2, 3)}})
    got = refset.open_dataset(refset.scan(str(path)))
    xr.testing.assert_identical(got.load(), xr.open_zarr(path, consolidated=False, zarr_format=fmt).load())


def test_stores_combine_along_time(tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        ds = xr.Dataset({"tas": (("time", "x"), np.full((2, 4), float(i)))},
                        coords={"time": ("time", [2 * i, 2 * i + 1], {"units": "days since 2024-01-01"})})
        p = tmp_path / f"d{i}.zarr"
        ds.to_zarr(p, zarr_format=2, consolidated=False, encoding={"tas": {"chunks": (2, 4)}})
        paths.append(str(p))
    rs = refset.combine(paths, concat_dims=["time"])
    want = xr.concat([xr.open_zarr(p, consolidated=False) for p in paths], dim="time")
    xr.testing.assert_equal(refset.open_dataset(rs).load(), want.load())


def test_a_store_on_s3(tmp_path: Path, s3: dict[str, Any]) -> None:
    fsspec = pytest.importorskip("fsspec")
    path = tmp_path / "s.zarr"
    want = _store(path, 3, shards=True)
    fs = fsspec.filesystem("s3", **s3)
    fs.put(str(path), "refs/stores/s.zarr", recursive=True)
    rs = refset.scan("s3://refs/stores/s.zarr", storage_options=s3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = zarr.open_group(refset.ZarrStore(rs, remote_options=s3), mode="r", zarr_format=3)
        for name, values in want.items():
            np.testing.assert_array_equal(got[name][...], values, err_msg=name)


def test_a_broken_shard_index_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _store(path, 3, shards=True)
    shard = path / "a" / "c" / "0" / "0"
    data = bytearray(shard.read_bytes())
    n = 4 * 16  # the index: 2 x 2 inner chunks of (offset, length), then a crc32c
    data[-n - 4:-n + 4] = (10**9).to_bytes(8, "little")  # the first chunk's offset, far past the shard's end
    shard.write_bytes(bytes(data))
    with pytest.raises(InvalidFile, match=r"a shard index entry points past the end of its shard"):
        refset.scan(str(path))


def test_shards_compressed_as_a_whole_are_refused(tmp_path: Path) -> None:
    from zarr.codecs import ShardingCodec, ZstdCodec

    g = zarr.open_group(str(tmp_path / "s.zarr"), mode="w", zarr_format=3)
    a = g.create_array("a", shape=(8,), chunks=(8,), dtype="i4", serializer=ShardingCodec(chunk_shape=(4,)),
                       compressors=[ZstdCodec()])
    a[:] = np.arange(8)
    with pytest.raises(refset.Unsupported, match="array 'a': a sharded array with codecs around its shards"):
        refset.scan(str(tmp_path / "s.zarr"))


def test_zarrstore_fuzz(tmp_path: Path) -> None:
    """Seeded mutations of a sharded store's shard indexes and metadata documents: the scan gives a set
    or a refset error naming the store, never another exception; where zarr-python reads the mutated
    store itself, reading the set gives its values or a refset error."""
    import os
    import random
    import shutil

    from refset.errors import RefsetError
    from tests.scan.fuzzcheck import refusal_problem

    src = tmp_path / "src.zarr"
    _store(src, 3, shards=True)
    files = sorted(p for p in src.rglob("*") if p.is_file())
    bad = []
    for seed in range(100 * int(os.environ.get("FUZZ_SCALE", "1"))):
        rng = random.Random(seed)
        case = tmp_path / "case.zarr"
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(src, case)
        victim = case / rng.choice(files).relative_to(src)
        data = bytearray(victim.read_bytes())
        for _ in range(rng.randint(1, 3)):
            at = len(data) - 1 - rng.randrange(min(len(data), 80)) if victim.name != "zarr.json" else \
                rng.randrange(len(data))  # a shard's index sits at its end
            data[at] ^= 1 << rng.randrange(8)
        victim.write_bytes(bytes(data))
        try:
            rs = refset.scan(str(case))
        except RefsetError as e:
            problem = refusal_problem(str(case), e)  # unnamed, or an InvalidFile no Broken caused
            if problem:
                bad.append(f"seed {seed}: {problem}")
            continue
        except Exception as e:
            bad.append(f"seed {seed}: bare {type(e).__name__}: {e}")
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = {n: zarr.open_group(str(case), mode="r", zarr_format=3)[n][...] for n in ("a", "sub/b")}
            except Exception:
                continue  # zarr cannot read the store either
            try:
                ours = zarr.open_group(refset.ZarrStore(rs), mode="r", zarr_format=3)
                got = {n: ours[n][...] for n in want}
            except RefsetError:
                continue
            except Exception as e:
                bad.append(f"seed {seed}: bare {type(e).__name__} reading ({victim.relative_to(case)}): {e}")
                continue
        for n, w in want.items():
            if not np.array_equal(got[n], w, equal_nan=True):
                bad.append(f"seed {seed}: {n!r} differs from zarr's ({victim.relative_to(case)})")
    assert not bad, "\n".join(bad[:10])


class TestZarrConformance(ScannerTests):
    """Zarr stores go through the registry like any scanner: a directory's probe finds them."""

    scanner = ZarrScanner

    def make_files(self, tmp_path: Path) -> dict[Path, dict[str, np.ndarray]]:
        out = {}
        tas = np.arange(48.0).reshape(8, 6)
        for fmt, shards in ((2, False), (3, False), (3, True)):
            path = tmp_path / f"s{fmt}{'-sharded' if shards else ''}.zarr"
            enc: dict[str, Any] = {"chunks": (2, 3), **({"shards": (4, 6)} if shards else {})}
            xr.Dataset({"tas": (("time", "x"), tas)}).to_zarr(path, zarr_format=fmt, consolidated=False,
                                                              encoding={"tas": enc})
            out[path] = {"tas": tas}
        return out


def test_names_to_drop_leave_arrays_and_their_documents_out(tmp_path: Path) -> None:
    path = tmp_path / "s.zarr"
    _store(path, 3, shards=True)
    rs = refset.scan(str(path), drop_variables=["b"])  # by name
    assert sorted(rs.metadata) == ["a"] and not any(k.startswith("sub/b") for k in rs)
    assert "sub/zarr.json" in rs  # the group stays
    assert sorted(refset.scan(str(path), drop_variables=["sub/b", "a"]).metadata) == []
