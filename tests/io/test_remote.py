"""Reference sets stored remotely: parquet over a plain HTTP server that lists no directories, and
every format on S3 (a real moto server on 127.0.0.1) read through the sync and async APIs; written
files' modes follow the umask."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

import refset
from tests.httpserver import RangeServer
from tests.servedata import raw_array_set

FORMATS = ("json", "v1", "parquet", "packed")


def _norm(d: dict) -> dict:
    return {k: json.loads(v) if k.rpartition("/")[2].startswith(".z") else v for k, v in d.items()}


def test_parquet_over_http_without_directory_listings(tmp_path):
    rs, data = raw_array_set(tmp_path, shape=(6, 20, 30), chunks=(1, 10, 10))
    refset.save(rs, tmp_path / "r.parq", record_size=7)
    with RangeServer(tmp_path) as srv:
        import fsspec

        http = fsspec.filesystem("http")
        assert not http.isdir(srv.url + "/r.parq")  # the server answers 404 for a directory
        for url in (srv.url + "/r.parq", srv.url + "/r.parq/"):
            back = refset.load(url)
            assert back.format_info()["format"] == "parquet"
            assert _norm(back.to_dict()) == _norm(rs.to_dict())
        fs = refset.ReferenceFileSystem(fo=srv.url + "/r.parq")
        assert fs.cat_file("v/5.1.2") == rs_bytes(rs, "v/5.1.2")
        ds = refset.open_dataset(srv.url + "/r.parq")
        np.testing.assert_array_equal(ds.v.values, data)


def rs_bytes(rs: refset.ReferenceSet, key: str) -> bytes:
    url, off, ln = rs[key]  # type: ignore[misc]
    with open(url.removeprefix("file://"), "rb") as f:
        f.seek(off)
        return f.read(ln)


@pytest.mark.parametrize("fmt", FORMATS)
def test_sets_on_s3_through_sync_and_async_apis(tmp_path, s3, fmt):
    import asyncio

    import fsspec

    rs, data = raw_array_set(tmp_path, shape=(4, 20, 30), chunks=(1, 10, 10))
    s3fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3)
    s3fs.put_file(str(tmp_path / "data.bin"), "refs/data.bin")
    on_s3 = refset.rename_urls(rs, {rs.urls[0]: "s3://refs/data.bin"})
    assert on_s3.urls == ("s3://refs/data.bin",) and rs.urls[0].startswith("file://")
    dest = f"s3://refs/{fmt}/r.{fmt}"
    refset.save(on_s3, dest, format=fmt, storage_options=s3)
    back = refset.load(dest, storage_options=s3)
    assert _norm(back.to_dict()) == _norm(on_s3.to_dict())
    fs = refset.ReferenceFileSystem(fo=dest, target_options=s3, remote_protocol="s3", remote_options=s3)
    want = rs_bytes(rs, "v/2.1.0")
    assert fs.cat_file("v/2.1.0") == want  # sync, on a set stored on S3 (a parquet record is read here)
    assert fs.cat(["v/2.1.0", "v/3.0.0"])["v/2.1.0"] == want

    async def read_async() -> bytes:
        afs = refset.ReferenceFileSystem(fo=dest, target_options=s3, remote_protocol="s3",
                                         remote_options=s3, asynchronous=True)
        return await afs._cat_file("v/2.1.0")

    assert asyncio.run(read_async()) == want
    ds = refset.open_dataset(dest, storage_options=s3, remote_protocol="s3", remote_options=s3)
    np.testing.assert_array_equal(ds.v.values, data)


def test_written_files_get_the_umask_mode(tmp_path):
    rs, _ = raw_array_set(tmp_path, shape=(2, 10, 10), chunks=(1, 10, 10))
    old = os.umask(0o027)
    try:
        for fmt in FORMATS:
            dest = tmp_path / f"r-{fmt}"
            refset.save(rs, dest, format=fmt)
            if fmt == "parquet":
                assert stat.S_IMODE(dest.stat().st_mode) == 0o750
                for root, dirs, files in os.walk(dest):
                    for name in dirs:
                        assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o750
                    for name in files:
                        assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o640
            else:
                assert stat.S_IMODE(dest.stat().st_mode) == 0o640, fmt
        os.umask(0o002)
        refset.save(rs, tmp_path / "shared.json")
        assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == 0o664
    finally:
        os.umask(old)
