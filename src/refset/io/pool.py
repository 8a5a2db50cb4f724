"""Connection pools sized for many requests in flight.

A scan keeps 64 remote files in flight, each asking for up to a dozen ranges in a round; a read of
values asks for hundreds of chunks at once. The clients' own pools are smaller: aiohttp (fsspec's
HTTP) holds 100 connections, botocore (s3fs) 10, so requests queue for a connection and a round
costs several round trips. :func:`pooled` gives the options that size them at :data:`POOL`, unless
the caller chose otherwise (``get_client`` or ``client_kwargs["connector"]`` for HTTP,
``config_kwargs["max_pool_connections"]`` for S3).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["POOL", "pooled", "http_client"]

#: Connections a file system may hold open to serve requests at once.
POOL = 256

_HTTP = ("http", "https")
_S3 = ("s3", "s3a")


def pooled(protocol: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` for fsspec's file system of ``protocol``, its connection pool sized at :data:`POOL`
    where the caller did not size it."""
    so = dict(options)
    if protocol in _HTTP:
        ck = so.get("client_kwargs") or {}
        if "get_client" not in so and "connector" not in ck:
            so["get_client"] = http_client
    elif protocol in _S3:
        cfg = dict(so.get("config_kwargs") or {})
        cfg.setdefault("max_pool_connections", POOL)
        so["config_kwargs"] = cfg
    return so


async def http_client(**kwargs: Any) -> Any:
    """An aiohttp session holding up to :data:`POOL` connections (fsspec's ``get_client``: a module
    function, so that a file system using it pickles)."""
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=POOL), **kwargs)
