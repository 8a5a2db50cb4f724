"""End to end on real servers (issue 12): a real NetCDF4 file scanned, its reference set saved in every
format and stored on S3 (moto on 127.0.0.1) and on HTTP (tests/httpserver.py), with references into
the file on S3 and on HTTP. Read through ``xr.open_dataset(engine="refset")``, ``ReferenceFileSystem``
(sync and async) and the CLI; compared with the numpy data written."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refset

from .httpserver import RangeServer
from .servedata import write_netcdf

FORMATS = {"json": "r.json", "v1": "r.v1.json", "zst": "r.json.zst", "parquet": "r.parq", "packed": "r.packed"}


@pytest.fixture(scope="module")
def world(tmp_path_factory, s3):
    """A NetCDF file on S3 and on HTTP; for each format a set per data location, on S3 and on HTTP."""
    import fsspec

    root = tmp_path_factory.mktemp("e2e")
    expected = write_netcdf(root / "data.nc")
    rs = refset.scan(str(root / "data.nc"), inline_threshold=0)  # every chunk read from a server
    local = rs.urls[0]
    s3fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3)
    s3fs.put_file(str(root / "data.nc"), "refs/e2e/data.nc")
    with RangeServer(root) as srv:
        data_at = {"s3": "s3://refs/e2e/data.nc", "http": srv.url + "/data.nc"}
        sets = {}
        for where, url in data_at.items():
            moved = refset.rename_urls(rs, {local: url})
            for fmt, name in FORMATS.items():
                opts = {"format": "v1"} if fmt == "v1" else {}
                rel = f"{where}/{name}"
                os.makedirs(root / where, exist_ok=True)
                refset.save(moved, root / rel, **opts)
                refset.save(moved, f"s3://refs/e2e/{rel}", storage_options=s3, **opts)
                sets[(fmt, where)] = (moved, {"s3": f"s3://refs/e2e/{rel}", "http": f"{srv.url}/{rel}"})
        yield {"expected": expected, "sets": sets, "s3": s3, "root": root}


CASES = [(fmt, store, data) for fmt in FORMATS for store in ("s3", "http") for data in ("s3", "http")]


def _storage(world: dict, store: str) -> dict | None:
    return world["s3"] if store == "s3" else None


def _norm(d: dict) -> dict:
    return {k: json.loads(v) if k.rpartition("/")[2].startswith(".z") else v for k, v in d.items()}


@pytest.mark.parametrize("fmt,store,data", CASES)
def test_every_format_on_every_server(world, fmt, store, data):
    import xarray as xr

    rs, urls = world["sets"][(fmt, data)]
    url, so = urls[store], _storage(world, store)
    back = refset.load(url, storage_options=so)
    assert _norm(back.to_dict()) == _norm(rs.to_dict())
    remote = {"remote_protocol": "s3", "remote_options": world["s3"]} if data == "s3" else {}
    ds = xr.open_dataset(url, engine="refset", storage_options=so, mask_and_scale=False, **remote)
    for name, values in world["expected"].items():
        np.testing.assert_array_equal(ds[name].values, values, err_msg=name)
    key = next(k for k in rs.keys() if k.startswith("temp/") and isinstance(rs[k], tuple))
    _, off, ln = rs[key]
    want = (world["root"] / "data.nc").read_bytes()[off:off + ln]
    fs = refset.ReferenceFileSystem(fo=url, target_options=so, **remote)
    assert fs.cat_file(key) == want

    async def read_async() -> bytes:
        afs = refset.ReferenceFileSystem(fo=url, target_options=so, asynchronous=True, **remote)
        return await afs._cat_file(key)

    assert asyncio.run(read_async()) == want


def _cli(world: dict, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(refset.__file__).parents[1]),
           "FSSPEC_S3": json.dumps(world["s3"])}  # until the CLI takes --storage-options
    return subprocess.run([sys.executable, "-m", "refset.cli", *args], capture_output=True, timeout=120,
                          env=env)


def test_cli_with_fsspec_environment_variables(world):
    """A packed set on S3 pointing into HTTP, and one on HTTP pointing into S3, in a fresh process
    configured by ``FSSPEC_S3`` only."""
    for store, data in (("s3", "http"), ("http", "s3")):
        rs, urls = world["sets"][("packed", data)]
        key = next(k for k in rs.keys() if k.startswith("temp/") and isinstance(rs[k], tuple))
        _, off, ln = rs[key]
        r = _cli(world, "cat", urls[store], key)
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        assert r.stdout == (world["root"] / "data.nc").read_bytes()[off:off + ln]


@pytest.mark.parametrize("fmt", FORMATS)
def test_cli_info_and_cat_across_servers(world, fmt, monkeypatch, capsysbinary):
    """Every format, both ways across the servers; fsspec's configuration set as ``FSSPEC_S3`` sets it."""
    import fsspec.config

    from refset.cli import main

    monkeypatch.setitem(fsspec.config.conf, "s3", world["s3"])
    for store, data in (("s3", "http"), ("http", "s3")):
        rs, urls = world["sets"][(fmt, data)]
        key = next(k for k in rs.keys() if k.startswith("temp/") and isinstance(rs[k], tuple))
        _, off, ln = rs[key]
        assert main(["cat", urls[store], key]) == 0
        assert capsysbinary.readouterr().out == (world["root"] / "data.nc").read_bytes()[off:off + ln]
        assert main(["info", "--json", urls[store]]) == 0
        info = json.loads(capsysbinary.readouterr().out)
        assert info["keys"] == len(rs) and "temp" in json.dumps(info["arrays"]), info
