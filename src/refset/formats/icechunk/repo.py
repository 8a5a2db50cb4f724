"""Where an Icechunk repository lives, and which data its virtual chunks may read.

A destination is ``icechunk://PATH`` (a local directory), ``icechunk://s3://BUCKET/PREFIX``, or either
without the scheme when the form is named (``format="icechunk"``). The repository's own storage takes
fsspec-style options (``key``, ``secret``, ``token``, ``anon``, ``endpoint_url`` or
``client_kwargs.endpoint_url``, ``client_kwargs.region_name``), translated into Icechunk's storage
config; the data files' options (``remote_options``) configure the virtual chunk containers and the
credentials readers authorize them with.

A virtual chunk container is made for each place the set's URLs point to: the common directory of its
local files (``file:///...``), each S3 bucket (``s3://BUCKET/``), each HTTP host
(``https://HOST:PORT/``). Icechunk reads a virtual chunk only through a container whose prefix it
starts with, and only when the reader authorizes that prefix: :func:`open_store` does so for the
containers the repository holds.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from refset.errors import InvalidOption, Unsupported

__all__ = ["SCHEME", "inner", "location", "container_prefixes", "open_repository", "open_store", "exists",
           "import_icechunk", "session", "remove"]

SCHEME = "icechunk://"


_quiet = False


def import_icechunk() -> Any:
    """The ``icechunk`` module, or :class:`~refset.errors.Unsupported` saying how to install it. Its
    warning that a local repository is unsafe for concurrent commits (printed on every open) is
    silenced unless ``ICECHUNK_LOG`` asks for its logs."""
    global _quiet
    try:
        import icechunk
    except ImportError:
        raise Unsupported("the icechunk form needs the icechunk package: pip install 'refset[icechunk]'") from None
    if not _quiet:
        if not os.environ.get("ICECHUNK_LOG"):
            icechunk.set_logs_filter("warn,icechunk::storage::object_store=error")
        _quiet = True
    return icechunk


def inner(dest: str) -> str:
    """The repository's own location: ``dest`` without ``icechunk://``; local paths absolute."""
    where = dest[len(SCHEME):] if dest.lower().startswith(SCHEME) else dest
    if not where:
        raise InvalidOption(f"{dest}: names no repository (icechunk://PATH or icechunk://s3://BUCKET/PREFIX)")
    if "://" in where and not where.startswith("file://"):
        return where
    return os.path.abspath(os.path.expanduser(where.removeprefix("file://")))


def _s3_parts(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.netloc, parts.path.strip("/")


def _s3_settings(options: Mapping[str, Any]) -> dict[str, Any]:
    """Icechunk's S3 settings from fsspec/s3fs-style options."""
    ck = options.get("client_kwargs") or {}
    if not isinstance(ck, Mapping) or not isinstance(ck.get("config_kwargs") or {}, Mapping):
        raise InvalidOption(f"client_kwargs: a mapping (endpoint_url, region_name), got {ck!r}")
    endpoint = options.get("endpoint_url") or ck.get("endpoint_url")
    region = options.get("region") or ck.get("region_name") or (ck.get("config_kwargs") or {}).get("region_name")
    if endpoint and not region:
        region = "us-east-1"  # S3-compatible servers (MinIO, moto, Ceph) take any region
    return {"endpoint_url": endpoint, "region": region, "allow_http": bool(endpoint and endpoint.startswith("http:")),
            "anonymous": bool(options.get("anon")), "key": options.get("key"), "secret": options.get("secret"),
            "token": options.get("token")}


def storage(dest: str, storage_options: Mapping[str, Any] | None) -> Any:
    """Icechunk's ``Storage`` for the repository at ``dest``."""
    ic = import_icechunk()
    where = inner(dest)
    if "://" not in where:
        return ic.local_filesystem_storage(where)
    scheme = where.split("://", 1)[0].lower()
    if scheme in ("s3", "s3a"):
        bucket, prefix = _s3_parts(where)
        s = _s3_settings(storage_options or {})
        return ic.s3_storage(bucket=bucket, prefix=prefix or None, region=s["region"], endpoint_url=s["endpoint_url"],
                             allow_http=s["allow_http"], access_key_id=s["key"], secret_access_key=s["secret"],
                             session_token=s["token"], anonymous=s["anonymous"] or None,
                             from_env=None if (s["key"] or s["anonymous"]) else True,
                             force_path_style=bool(s["endpoint_url"]))
    raise Unsupported(f"{dest}: an Icechunk repository on {scheme}:// is not supported here; local paths and "
                      "s3:// are")


def location(url: str) -> str:
    """The absolute URL Icechunk reads ``url``'s bytes from (local paths as ``file://``)."""
    if "://" in url:
        return url if not url.startswith("file://") else "file://" + os.path.abspath(url[len("file://"):])
    if not os.path.isabs(url):
        raise Unsupported(f"URL {url!r} is relative: Icechunk's virtual chunks need absolute URLs "
                          "(refset.rename_urls makes them absolute)")
    return "file://" + url


@functools.cache
def keeps_ports() -> bool:
    """Whether this Icechunk reads a virtual chunk from an HTTP URL with a port at that port. Icechunk
    1.x takes ``http://host:8080/f.nc`` for ``http://host/f.nc`` (it matches and fetches without the
    port): asked of an in-memory repository, not of a version string."""
    ic = import_icechunk()
    import zarr

    prefix = "http://127.0.0.1:9/"
    try:
        config = ic.RepositoryConfig.default()
        config.set_virtual_chunk_container(ic.VirtualChunkContainer(prefix, ic.http_store({"allow_http": "true"})))
        repo = ic.Repository.create(ic.in_memory_storage(), config=config)
        store = repo.writable_session("main").store
        zarr.create_array(store, name="a", shape=(1,), chunks=(1,), dtype="u1", fill_value=0)
        failed = store.set_virtual_refs("a", [ic.VirtualChunkSpec(index=[0], location=prefix + "f", offset=0,
                                                                  length=1)], validate_containers=True)
    except BaseException as e:  # an Icechunk that cannot even be asked: take it as not keeping them
        if not _icechunk_failure(e) and not isinstance(e, Exception):
            raise
        return False
    return not failed


def check_locations(locations: Iterable[str]) -> None:
    """Refuse, before anything is written, a URL this Icechunk would read wrong: an HTTP URL with a
    port where it drops ports."""
    from urllib.parse import urlsplit

    for loc in locations:
        if loc.startswith(("http://", "https://")) and urlsplit(loc).port is not None and not keeps_ports():
            raise Unsupported(f"{loc}: this Icechunk reads virtual chunks over HTTP without the URL's port "
                              f"(it would ask {urlsplit(loc)._replace(netloc=urlsplit(loc).hostname or '').geturl()}), "
                              "so the repository could not read it: serve the files on the scheme's own port, "
                              "or rename the URLs (refset convert --rename), or write another form")


def container_prefixes(locations: Iterable[str]) -> list[str]:
    """One prefix per place: the common directory of the local files, each bucket, each host."""
    local: list[str] = []
    out: set[str] = set()
    for loc in locations:
        scheme, rest = loc.split("://", 1)
        if scheme == "file":
            local.append(rest)
        else:
            out.add(f"{scheme}://{rest.split('/', 1)[0]}/")
    if local:
        common = os.path.commonpath([os.path.dirname(p) for p in local])
        out.add("file://" + common.rstrip("/") + "/")
    return sorted(out)


def _container_store(prefix: str, remote_options: Mapping[str, Any]) -> Any:
    ic = import_icechunk()
    scheme = prefix.split("://", 1)[0]
    if scheme == "file":
        return ic.local_filesystem_store(prefix[len("file://"):])
    if scheme in ("s3", "s3a"):
        s = _s3_settings(remote_options)
        return ic.s3_store(region=s["region"], endpoint_url=s["endpoint_url"], allow_http=s["allow_http"],
                           anonymous=s["anonymous"], s3_compatible=bool(s["endpoint_url"]),
                           force_path_style=bool(s["endpoint_url"]))
    if scheme == "http":
        return ic.http_store({"allow_http": "true"})  # else every chunk fails: "builder error"
    if scheme == "https":
        return ic.http_store()
    raise Unsupported(f"the set's URLs under {prefix}: Icechunk reads virtual chunks from file://, s3:// and "
                      "http(s):// only")


def _credentials(prefix: str, remote_options: Mapping[str, Any]) -> Any:
    ic = import_icechunk()
    if not prefix.startswith(("s3://", "s3a://")):
        return None
    s = _s3_settings(remote_options)
    if s["anonymous"]:
        return ic.s3_anonymous_credentials()
    if s["key"] and s["secret"]:
        return ic.s3_static_credentials(access_key_id=s["key"], secret_access_key=s["secret"],
                                        session_token=s["token"])
    return None  # Icechunk's default: from the environment


def _icechunk_failure(e: BaseException) -> bool:
    """An error Icechunk raised (its own, or a panic of its Rust core, which is a BaseException)."""
    return type(e).__module__.split(".")[0] in ("icechunk", "_icechunk_python", "pyo3_runtime")


def _reason(e: BaseException) -> str:
    """The first meaningful line of an Icechunk error (its text starts with a stray marker)."""
    for line in str(e).strip().splitlines():
        line = line.strip().removeprefix("x ").strip()
        if line:
            return line
    return type(e).__name__


def exists(dest: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    """Whether a repository is at ``dest``; nothing is made (Icechunk's local storage makes the
    directory it is asked about, so a local path is looked at first)."""
    ic = import_icechunk()
    where = inner(dest)
    if "://" not in where:
        if not os.path.lexists(where):
            return False
        if not os.path.isdir(where):
            raise Unsupported(f"{dest}: is a file, not an Icechunk repository (a directory)")
    try:
        return bool(ic.Repository.exists(storage(dest, storage_options)))
    except BaseException as e:
        if not _icechunk_failure(e):
            raise
        raise Unsupported(f"{dest}: cannot be read as an Icechunk repository: {_reason(e)}") from None


def session(repo: Any, dest: str, branch: str, *, writable: bool) -> Any:
    """A session of ``branch``, or :class:`Unsupported` naming the branches there are."""
    try:
        return repo.writable_session(branch) if writable else repo.readonly_session(branch=branch)
    except BaseException as e:
        if not _icechunk_failure(e):
            raise
        try:
            branches = ", ".join(sorted(repo.list_branches()))
        except Exception:
            branches = "?"
        raise Unsupported(f"{dest}: branch {branch!r}: {_reason(e)} (branches: {branches})") from None


def open_repository(dest: str, *, storage_options: Mapping[str, Any] | None = None,
                    remote_options: Mapping[str, Any] | None = None, prefixes: Iterable[str] = (),
                    create: bool = False) -> tuple[Any, bool]:
    """``(repository, containers added)``: the repository at ``dest`` (made when ``create``), with a
    virtual chunk container for each of ``prefixes`` it lacks added to its config and every container
    it holds authorized for reading. Added containers are the caller's to save
    (``repository.save_config()``, after its commit: readers find containers there)."""
    ic = import_icechunk()
    ro = dict(remote_options or {})
    try:
        st = storage(dest, storage_options)
        if create:
            config = ic.RepositoryConfig.default()
        else:
            config = ic.Repository.fetch_config(st) or ic.RepositoryConfig.default()
        held = set((config.virtual_chunk_containers or {}).keys())
        added = False
        for p in prefixes:
            if p not in held and not any(p.startswith(h) for h in held):
                config.set_virtual_chunk_container(ic.VirtualChunkContainer(p, _container_store(p, ro)))
                held.add(p)
                added = True
        creds = ic.containers_credentials({p: _credentials(p, ro) for p in held}) if held else None
        if create:
            return ic.Repository.create(st, config=config, authorize_virtual_chunk_access=creds), added
        return ic.Repository.open(st, config=config, authorize_virtual_chunk_access=creds), added
    except BaseException as e:
        if not _icechunk_failure(e):
            raise
        raise Unsupported(f"{dest}: the Icechunk repository cannot be {'made' if create else 'opened'}: "
                          f"{_reason(e)}") from None


def open_store(dest: str, *, branch: str = "main", storage_options: Mapping[str, Any] | None = None,
               remote_options: Mapping[str, Any] | None = None) -> Any:
    """A read-only zarr store of the tip of ``branch`` of the repository at ``dest``, its virtual
    chunks readable (every container the repository holds authorized with ``remote_options``'
    credentials): ``xarray.open_zarr(open_store(dest), consolidated=False)``."""
    if not exists(dest, storage_options):
        raise Unsupported(f"{dest}: no Icechunk repository there")
    repo, _ = open_repository(dest, storage_options=storage_options, remote_options=remote_options)
    return session(repo, dest, branch, writable=False).store


def remove(dest: str, storage_options: Mapping[str, Any] | None = None) -> None:
    """Remove the repository at ``dest`` (one this process made and failed to fill), quietly."""
    where = inner(dest)
    try:
        if "://" not in where:
            import shutil

            shutil.rmtree(where, ignore_errors=True)
        else:
            import fsspec

            fs, path = fsspec.core.url_to_fs(where, **dict(storage_options or {}))
            fs.rm(path, recursive=True)
    except Exception:  # the write's own error is the one to raise
        pass
