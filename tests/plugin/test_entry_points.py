"""Scanners and stored forms of other packages, found through the refset.scanners and refset.formats
entry-point groups of an installed distribution (a dist-info made here, as zarr-python's tests fake one)
and held to the same conformance suites as refset's own."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.formats import registry as forms_registry
from refset.scan import registry as scan_registry
from refset.testing import FormTests, ScannerTests

HERE = Path(__file__).parent


@pytest.fixture(scope="module", autouse=True)
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    site = tmp_path_factory.mktemp("site")
    info = site / "toy_refset_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-refset-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[refset.scanners]\ntoy = toy_refset_plugin:ToyScanner\n"
        "[refset.formats]\ntoyjson = toy_refset_plugin:ToyForm\nbroken = toy_refset_plugin:NoSuchThing\n")
    sys.path[:0] = [str(site), str(HERE)]
    scan_registry.scanners.cache_clear()
    forms_registry.forms.cache_clear()
    yield
    sys.path.remove(str(site))
    sys.path.remove(str(HERE))
    scan_registry.scanners.cache_clear()
    forms_registry.forms.cache_clear()


def test_a_plugin_scanner_is_found_by_content(tmp_path: Path) -> None:
    from toy_refset_plugin import ToyScanner, write_toy

    p = tmp_path / "data.bin"  # no suffix tells it: its first bytes do
    write_toy(p, np.arange(5.0))
    assert ToyScanner in scan_registry.scanners()
    rs = refset.scan(p)
    np.testing.assert_array_equal(refset.open_dataset(rs).x.values, np.arange(5.0))
    q = tmp_path / "more.bin"
    write_toy(q, np.arange(5.0) + 10)
    both = refset.combine([str(p), str(q)], concat_dims="run", coo_map={"run": "INDEX"})  # scanned, by content
    np.testing.assert_array_equal(refset.open_dataset(both).x.values, [np.arange(5.0), np.arange(5.0) + 10])


def test_a_plugin_form_is_written_and_read_and_a_broken_one_warns(tmp_path: Path) -> None:
    with pytest.warns(RuntimeWarning, match="stored form 'broken'.*could not be loaded"):
        forms_registry.forms.cache_clear()
        names = list(forms_registry.forms())
    assert "toyjson" in names and "broken" not in names
    refset.save({"a": "b"}, tmp_path / "s.toyjson")
    assert refset.load(tmp_path / "s.toyjson")["a"] == b"b"


def _toy_scanner() -> type:
    from toy_refset_plugin import ToyScanner

    return ToyScanner


class TestToyScanner(ScannerTests):
    @property
    def scanner(self):  # type: ignore[override]
        return _toy_scanner()

    def make_files(self, tmp_path: Path) -> dict[Path, dict[str, np.ndarray]]:
        from toy_refset_plugin import write_toy

        out = {}
        for n in (1, 3, 100):
            p = tmp_path / f"t{n}.toy"
            write_toy(p, np.linspace(0, 1, n))
            out[p] = {"x": np.linspace(0, 1, n)}
        return out


class TestToyForm(FormTests):
    @property
    def form(self):  # type: ignore[override]
        return forms_registry.forms()["toyjson"]


def test_a_scanner_written_before_the_frame_still_scans_and_is_told_to_move(tmp_path: Path) -> None:
    """A plugin that overrides ``Scanner.__call__`` (the interface before the frame) is warned at its
    class statement, is instantiable without a walk, and scans with its own ``__call__``."""
    import struct
    from typing import Any, ClassVar

    from refset.abc.scanner import DropList, Scanner
    from refset.io.scanfile import Opener
    from refset.model.metadata import ArrayMetadata
    from refset.model.refset import ReferenceSet

    with pytest.warns(DeprecationWarning, match=r"overrides Scanner.__call__.*implement walk\(file, out, drop\)"):
        class OldToy(Scanner):
            name: ClassVar[str] = "oldtoy"

            @classmethod
            def sniff(cls, head: bytes) -> bool:
                return head[:4] == b"TOY1"

            def __call__(self, file: Any) -> ReferenceSet:  # type: ignore[misc]
                drop = DropList(self.drop)
                file.file.seek(4)
                (n,) = struct.unpack("<I", file.file.read(4))
                meta = ArrayMetadata.build(shape=(n,), chunks=(n,), dtype=np.dtype("<f8"), dimension_names=["i"])
                drop.warn_unused(file.url)
                return ReferenceSet.from_arrays({".zgroup": {"zarr_format": 2},
                                                 **{f"x/{k}": v for k, v in meta.documents().items()}},
                                                {"x": {"path_id": np.array([0]), "offset": np.array([8]),
                                                       "length": np.array([8 * n])}}, [file.url])

    from toy_refset_plugin import write_toy

    p = tmp_path / "old.toy"
    write_toy(p, np.arange(4.0))
    with Opener() as opener:
        rs = OldToy()(opener.open(str(p)))
    np.testing.assert_array_equal(refset.open_dataset(rs).x.values, np.arange(4.0))
