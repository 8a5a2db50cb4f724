"""A third-party package as another project would write it: a scanner of "TOY1" files (a header of
``TOY1``, a little-endian uint32 count, then that many float64 values: one variable ``x``, one chunk)
and a stored form (JSON under another name), registered under refset's entry-point groups by the
dist-info beside this file."""

from __future__ import annotations

import struct
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import Scanner
from refset.formats.json import JsonForm
from refset.model.metadata import ArrayMetadata
from refset.model.refset import ReferenceSet
from refset.scan.writer import DropList, common_options


class ToyScanner(Scanner):
    name: ClassVar[str] = "toy"

    def __init__(self, *, inline_threshold: int = 500, drop_variables: Any = (), subchunk: Any = None) -> None:
        self.inline_threshold, self.drop, _ = common_options(inline_threshold, drop_variables, subchunk)
        self.config = {"inline_threshold": inline_threshold, "drop_variables": self.drop}

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return head[:4] == b"TOY1"

    def __call__(self, file: Any) -> ReferenceSet:
        drop = DropList(self.drop)
        file.file.seek(4)
        (n,) = struct.unpack("<I", file.file.read(4))
        arrays = {}
        if "x" not in drop:
            meta = ArrayMetadata.build(shape=(n,), chunks=(n,), dtype=np.dtype("<f8"), dimension_names=["i"])
            arrays["x"] = {"path_id": np.array([0]), "offset": np.array([8]), "length": np.array([8 * n])}
            docs = {f"x/{k}": v for k, v in meta.documents().items()}
        else:
            docs = {}
        drop.warn_unused(file.url)
        return ReferenceSet.from_arrays({".zgroup": {"zarr_format": 2}, **docs}, arrays, [file.url])


class ToyForm(JsonForm):
    name: ClassVar[str] = "toyjson"
    description: ClassVar[str] = "JSON, named by a plugin"
    suffixes: ClassVar[tuple[str, ...]] = (".toyjson",)


def write_toy(path: Any, values: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(b"TOY1" + struct.pack("<I", len(values)) + np.asarray(values, "<f8").tobytes())
