"""Shared fixtures: the corpus of real files in ../shared/corpus (skipped with a reason when absent)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

try:  # before any test imports netCDF4: netCDF4 points HDF5_PLUGIN_PATH at its own filter builds,
    # linked against its bundled HDF5, and h5py then fails to write Blosc ("error during user callback")
    import hdf5plugin  # noqa: F401
except ImportError:
    pass



def _kerchunk_without_collection() -> None:
    """kerchunk's ``SingleHdf5ToZarr.translate`` runs zarr's synchronous calls inside h5py's
    ``visititems``, which holds h5py's global lock: a garbage collection in zarr's I/O thread that
    frees an h5py object left by an earlier test then waits for that lock, while the main thread
    waits for zarr's thread (seen once in the suite: both pytest workers idle). The peer's translate
    runs here with garbage collected before and collection paused during it."""
    try:
        from kerchunk.hdf import SingleHdf5ToZarr
    except ImportError:
        return
    import functools
    import gc

    translate = SingleHdf5ToZarr.translate
    if getattr(translate, "_no_gc", False):
        return

    @functools.wraps(translate)
    def wrapped(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        gc.collect()
        was = gc.isenabled()
        gc.disable()
        try:
            return translate(self, *args, **kwargs)
        finally:
            if was:
                gc.enable()

    wrapped._no_gc = True  # type: ignore[attr-defined]
    SingleHdf5ToZarr.translate = wrapped  # type: ignore[method-assign]


_kerchunk_without_collection()

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("REFSET_SHARED", REPO.parent / "shared"))
CORPUS = SHARED / "corpus"


def corpus_files(keep: Callable[[Path, bytes], bool]) -> list[Path]:
    """The corpus's sample files whose path and first 8 bytes ``keep`` takes (none when the corpus
    is absent)."""
    if not (CORPUS / "MANIFEST.md").exists():
        return []
    out = []
    for p in sorted(CORPUS.glob("samples/*/*")) + sorted(CORPUS.glob("kerchunk-fixtures/*")):
        with open(p, "rb") as f:
            if keep(p, f.read(8)):
                out.append(p)
    return out


def hdf5_corpus() -> list[Path]:
    """The corpus's HDF5/NetCDF4 files."""
    import h5py

    return corpus_files(lambda p, head: head[:3] != b"CDF" and h5py.is_hdf5(p))


@pytest.fixture(scope="session")
def corpus() -> Path:
    """Directory of real NetCDF/HDF5 files and reference sets from other projects."""
    if not (CORPUS / "MANIFEST.md").exists():
        pytest.skip(f"shared corpus not found at {CORPUS} (CI provides it; a user's clone does not)")
    return CORPUS


@pytest.fixture(scope="session")
def shared_bench() -> Path:
    """../shared/bench: scripts that make benchmark corpora."""
    d = SHARED / "bench"
    if not (d / "synth_refs.py").exists():
        pytest.skip(f"shared bench scripts not found at {d}")
    return d


@pytest.fixture(scope="session")
def s3():
    """storage_options for a real S3 server (moto) on 127.0.0.1 with a bucket named ``refs``."""
    server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    srv = server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    opts = {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    import boto3

    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                 region_name="us-east-1").create_bucket(Bucket="refs")
    yield opts
    srv.stop()
