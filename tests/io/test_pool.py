"""Connection pools sized for many requests at once: aiohttp (fsspec's HTTP) holds 100 connections by
default and botocore (s3fs) 10, so a round of a few hundred ranges queued for a connection and cost
several round trips. The stores refset makes hold :data:`~refset.io.pool.POOL`, unless the caller
sized the pool."""

from __future__ import annotations

from pathlib import Path

import pytest

from refset.io.pool import POOL, http_client, pooled
from refset.io.store import open_store
from tests.httpserver import RangeServer


def test_a_round_has_more_requests_in_flight_than_aiohttp_allows(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1000
    (tmp_path / "f.bin").write_bytes(data)
    n = 150  # > aiohttp's 100 connections, < POOL
    starts = [i * 1000 for i in range(n)]
    with RangeServer(tmp_path, delay=0.3) as srv:
        store = open_store(f"{srv.url}/f.bin")
        got = store.read_ranges("", starts, [s + 10 for s in starts])
        assert got == [data[s:s + 10] for s in starts]
        assert srv.requests == n
        assert srv.most_inflight > 100  # all in one wait, not two


def test_pools_are_sized_unless_the_caller_did() -> None:
    assert pooled("http", {})["get_client"] is http_client
    mine = object()
    assert pooled("https", {"get_client": mine})["get_client"] is mine
    assert "get_client" not in pooled("http", {"client_kwargs": {"connector": mine}})
    assert pooled("s3", {"key": "k"}) == {"key": "k", "config_kwargs": {"max_pool_connections": POOL}}
    assert pooled("s3", {"config_kwargs": {"max_pool_connections": 3}})["config_kwargs"] == {
        "max_pool_connections": 3}
    assert pooled("gs", {"token": "t"}) == {"token": "t"}


def test_s3_reads_through_a_sized_pool(s3: dict) -> None:
    """The s3fs file system refset reads with holds POOL connections (botocore's default is 10) and
    reads as before."""
    pytest.importorskip("s3fs")
    import fsspec

    fsspec.filesystem("s3", skip_instance_cache=True, **s3).pipe_file("refs/pool/x.bin", b"0123456789")
    store = open_store("s3://refs/pool/x.bin", s3)
    assert store.read_ranges("", [1, 5], [3, 8]) == [b"12", b"567"]
    assert store.fs.config_kwargs["max_pool_connections"] == POOL  # type: ignore[attr-defined]
