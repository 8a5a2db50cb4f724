"""A third-party package as another project would write it: a scanner of "TOY1" files (a header of
``TOY1``, a little-endian uint32 count, then that many float64 values: one variable ``x``, one chunk)
and a stored form (JSON under another name), registered under refset's entry-point groups by the
dist-info beside this file."""

from __future__ import annotations

import struct
from typing import Any, ClassVar

import numpy as np

from refset.abc.scanner import Broken, DropList, Scanner
from refset.formats.json import JsonForm
from refset.io.scanfile import ScanFile
from refset.model.setwriter import SetWriter


class ToyScanner(Scanner):
    """A scanner as one is written: the common options through ``Scanner.__init__``, ``sniff`` and the
    walk (the frame around it makes the writer, checks, names the file in errors and builds)."""

    name: ClassVar[str] = "toy"

    @classmethod
    def sniff(cls, head: bytes) -> bool:
        return head[:4] == b"TOY1"

    def walk(self, file: ScanFile, out: SetWriter, drop: DropList) -> None:
        (n,) = struct.unpack("<I", file.read_exact(4, 4))  # the header: the file's metadata
        if 8 + 8 * n > file.size:
            raise Broken(f"{n} values do not fit in {file.size} bytes")
        if "x" not in drop:
            out.array("x", shape=(n,), chunks=(n,), dtype=np.dtype("<f8"), fill_value=None, filters=None, attrs={},
                      dims=["i"], offset=np.array([8]), length=np.array([8 * n]))


class ToyForm(JsonForm):
    name: ClassVar[str] = "toyjson"
    description: ClassVar[str] = "JSON, named by a plugin"
    suffixes: ClassVar[tuple[str, ...]] = (".toyjson",)


def write_toy(path: Any, values: np.ndarray) -> None:
    with open(path, "wb") as f:
        f.write(b"TOY1" + struct.pack("<I", len(values)) + np.asarray(values, "<f8").tobytes())
