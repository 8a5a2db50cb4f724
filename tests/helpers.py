"""Small builders for test reference sets (real metadata documents, no mocks)."""

from __future__ import annotations

import json
from typing import Any


def zarray(shape: list[int], chunks: list[int], *, sep: str | None = None, dtype: str = "<f4",
           fill_value: Any = 0) -> str:
    meta: dict[str, Any] = {"shape": shape, "chunks": chunks, "dtype": dtype, "compressor": None,
                            "fill_value": fill_value, "filters": None, "order": "C", "zarr_format": 2}
    if sep is not None:
        meta["dimension_separator"] = sep
    return json.dumps(meta)


def zarr_json(shape: list[int], chunks: list[int], *, encoding: str = "default", sep: str = "/") -> str:
    return json.dumps({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": encoding, "configuration": {"separator": sep}},
        "fill_value": 0.0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
    })


def run_tty_stderr(args: list[str], timeout: float = 120) -> tuple[int, str, str]:
    """Run ``args`` with stderr on a pseudo-terminal (as a user at a terminal sees it) and stdout on a
    pipe; return (exit status, stdout, what the terminal received)."""
    import os
    import pty
    import subprocess
    import threading

    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:  # read as it comes: a full terminal buffer would block the child
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        out, _ = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
    reader.join(timeout=10)
    os.close(master)
    return p.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


def read_through_fsspec(rs: Any, name: str) -> Any:
    """Array ``name`` of the set ``rs`` as a foreign reader gets it: fsspec's ReferenceFileSystem and
    zarr (v2), with imagecodecs' numcodecs codecs registered as a user of TIFF/FITS sets does."""
    import fsspec
    import imagecodecs.numcodecs
    import numpy as np
    import zarr

    imagecodecs.numcodecs.register_codecs(verbose=False)
    mapper = fsspec.filesystem("reference", fo=rs.to_dict()).get_mapper("")
    return np.asarray(zarr.open_group(mapper, mode="r", zarr_format=2)[name][...])
