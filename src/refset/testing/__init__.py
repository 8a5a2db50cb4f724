"""Conformance suites for refset's extension points, for pytest: each implementation's tests subclass one
and supply what it needs (zarr-python's ``StoreTests`` are the model).

- :class:`FormTests`: a stored form (:class:`~refset.abc.format.StoredForm`): what it writes it reads back
  exactly, every lookup of its :class:`~refset.abc.source.Source` agrees with the whole table, and a set
  opened from it pickles and reopens to the same keys.
- :class:`ScannerTests`: a scanner (:class:`~refset.abc.scanner.Scanner`): it knows its own files and no
  others, the set it makes reads back the values its format's own reader gives, names to drop that the
  file lacks warn, and it pickles as its options.

Importing this module imports pytest.
"""

from __future__ import annotations

import json
import pickle
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import pytest

import refset
from refset.abc.format import StoredForm
from refset.abc.scanner import HEAD, Scanner
from refset.model.refset import ReferenceSet

__all__ = ["FormTests", "ScannerTests", "sample_sets"]


def sample_sets(*, other_keys: bool = True, zarr_v3: bool = True) -> dict[str, dict[str, Any]]:
    """Version 0 documents a stored form must hold exactly: a dense grid with every kind of reference, a
    sparse grid, a scalar, nested groups, NaN in attributes; keys outside any array (``other_keys``);
    an array with zarr v3 metadata (``zarr_v3``)."""
    def zarray(shape: list[int], chunks: list[int], dtype: str = "<f4", fill: Any = "NaN") -> str:
        return json.dumps({"chunks": chunks, "compressor": None, "dtype": dtype, "fill_value": fill,
                           "filters": None, "order": "C", "shape": shape, "zarr_format": 2})

    dense = {".zgroup": '{"zarr_format":2}', ".zattrs": '{"title":"t","bad":NaN}',
             "v/.zarray": zarray([4, 6], [2, 3]), "v/.zattrs": '{"_ARRAY_DIMENSIONS":["y","x"]}',
             "v/0.0": ["s3://bucket/a.nc", 100, 24], "v/0.1": ["s3://bucket/a.nc", 124, 24],
             "v/1.0": ["s3://bucket/b.nc"], "v/1.1": "base64:AAECAwQFBgcICQoL",
             "g/.zgroup": '{"zarr_format":2}', "g/s/.zarray": zarray([], [], "<i8", 0), "g/s/0": "text value",
             "notes/readme": "a generic key", "notes/blob": ["s3://bucket/c.bin", 0, 10]}
    sparse = {"big/.zarray": zarray([1 << 22], [1], "<i4", None), "big/7": ["s3://bucket/d.nc", 0, 4],
              "big/4194303": ["s3://bucket/d.nc", 4, 4]}
    out = {"dense": dense, "sparse": {**dense, **sparse}}
    if zarr_v3:
        v3 = {"zarr_format": 3, "node_type": "array", "shape": [6], "data_type": "int32",
              "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
              "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
              "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
              "attributes": {"units": "m"}, "dimension_names": ["x"]}
        out["v3"] = {"zarr.json": json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}),
                     "a/zarr.json": json.dumps(v3), "a/c/0": ["s3://bucket/e.nc", 0, 8],
                     "a/c/2": "base64:AQAAAAIAAAA="}
    if not other_keys:
        out = {name: {k: v for k, v in doc.items() if not k.startswith("notes/")} for name, doc in out.items()}
    return out


class FormTests:
    """The conformance suite of a stored form. Subclasses set ``form`` (an instance) and, if the form
    reads and writes only some sets, override :meth:`documents`."""

    form: ClassVar[StoredForm]

    def documents(self) -> Mapping[str, Mapping[str, Any]]:
        """The Version 0 documents this form is tested with: :func:`sample_sets` of what its flags say
        it holds."""
        return sample_sets(other_keys=self.form.other_keys, zarr_v3=self.form.zarr_v3)

    def dest(self, tmp_path: Path, name: str) -> str:
        return str(tmp_path / f"{name}{self.form.suffixes[0]}")

    def written(self, tmp_path: Path, name: str, doc: Mapping[str, Any]) -> str:
        dest = self.dest(tmp_path, name)
        # a plugin's form name too: save's Literal names only the built-in forms
        refset.save(doc, dest, format=self.form.name)
        return dest

    def test_writes_and_reads_back_exactly(self, tmp_path: Path) -> None:
        for name, doc in self.documents().items():
            want = refset.load(doc)
            got = refset.load(self.written(tmp_path, name, doc))
            if self.form.verbatim_metadata:
                assert got.to_dict() == want.to_dict(), name
            else:  # the documents as parsed JSON, the rest byte for byte
                a, b = got.to_dict(), want.to_dict()
                assert a.keys() == b.keys(), name
                for k in a:
                    # a document's value is its JSON text
                    same = a[k] == b[k] or (k in want.documents
                                            and json.loads(cast(str, a[k])) == json.loads(cast(str, b[k])))
                    assert same, (name, k)
            assert set(got.metadata) == set(want.metadata) and len(got) == len(want), name
            assert got.format_info()["format"] in (self.form.name, "json"), name

    def test_lookups_agree_with_the_whole_tables(self, tmp_path: Path) -> None:
        """Single-key lookups on a freshly opened set (a lazy form reads a block or a table for each)
        give what the set gives once every table is read; absent keys are absent."""
        for name, doc in self.documents().items():
            path = self.written(tmp_path, name, doc)
            whole = refset.load(path).to_dict()
            for key in list(whole)[::3]:
                fresh = refset.load(path)
                assert fresh.get(key) is not None and key in fresh, (name, key)
            probe = refset.load(path)
            for key in ("v/9.9", "nope", "v/0.0.0", "notes", "a/c/9"):
                assert key not in probe and probe.get(key) is None, (name, key)
            rs = refset.load(path)
            for p in rs.grids:
                t = rs.table(p)
                refs = rs.chunk_refs(p, t.present())
                assert all(r is not None for r in refs), (name, p)

    def test_a_set_opened_from_it_pickles_and_reopens(self, tmp_path: Path) -> None:
        for name, doc in self.documents().items():
            path = self.written(tmp_path, name, doc)
            rs = refset.load(path)
            blob = pickle.dumps(rs)
            assert len(blob) < 4096, (name, len(blob))  # by what reopens it, not its columns
            assert pickle.loads(blob).to_dict() == rs.to_dict(), name

    def test_writer_options_are_checked_before_any_work(self, tmp_path: Path) -> None:
        with pytest.raises(refset.errors.InvalidOption, match=f"format {self.form.name!r} has no option"):
            refset.save(self.documents()["dense"], self.dest(tmp_path, "x"), format=self.form.name,
                        no_such_option=1)
        assert not list(tmp_path.iterdir())


class ScannerTests:
    """The conformance suite of a scanner. Subclasses set ``scanner`` (the class) and implement
    :meth:`make_files` (files of the kind, or directories for a scanner of directories, each with the
    values its format's own reader gives) and
    :meth:`other_file` (a file of another kind), and :meth:`referenced_files` where the set names other
    files than the one scanned."""

    scanner: ClassVar[type[Scanner]]

    def make_files(self, tmp_path: Path) -> dict[Path, Mapping[str, np.ndarray]]:
        """Files of this kind and, per file, ``{variable: values}`` as the format's own reader reads
        them (the oracle)."""
        raise NotImplementedError

    def referenced_files(self, path: Path) -> set[str]:
        """What the set of the file at ``path`` may reference: the file itself (its absolute path, or
        as given); a directory's scanner the files in it. A sidecar's scanner names the file it
        describes."""
        if path.is_dir():
            return {str(p) for p in path.resolve().rglob("*") if p.is_file()}
        return {str(path.resolve()), str(path)}

    def other_file(self, tmp_path: Path) -> Path:
        """A file of another kind, which this scanner must not take."""
        p = tmp_path / "other.bin"
        p.write_bytes(b"GRIB" + bytes(2000))
        return p

    def test_knows_its_files_and_no_others(self, tmp_path: Path) -> None:
        from refset.io.store import open_store

        for path in self.make_files(tmp_path):
            if self.scanner.directory:  # a store: told by what the directory holds
                assert self.scanner.probe_directory(open_store(str(path.resolve()))), path
                continue
            head = path.read_bytes()[:HEAD]
            assert self.scanner.sniff(head), path
            with open(path, "rb") as f:
                from refset.io.magic import file_reader

                assert self.scanner.probe(file_reader(f), path.stat().st_size), path
        other = self.other_file(tmp_path)
        assert not self.scanner.sniff(other.read_bytes()[:HEAD])
        plain = tmp_path / "plain-directory"
        plain.mkdir()
        (plain / "other.bin").write_bytes(other.read_bytes())
        assert not self.scanner.probe_directory(open_store(str(plain)))

    def test_reads_back_what_the_format_reader_reads(self, tmp_path: Path) -> None:
        from refset.scan import Scan

        run = Scan()
        for path, want in self.make_files(tmp_path).items():
            rs = run(str(path))
            assert isinstance(rs, ReferenceSet)
            assert set(rs.urls) <= self.referenced_files(path), (path, rs.urls)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = refset.open_dataset(rs, mask_and_scale=False, decode_times=False)
                for name, values in want.items():
                    np.testing.assert_array_equal(ds[name].values, values, err_msg=f"{path.name}: {name}")

    def test_a_name_to_drop_that_the_file_lacks_warns(self, tmp_path: Path) -> None:
        from refset.scan.writer import UnusedDropWarning

        path = next(iter(self.make_files(tmp_path)))
        with pytest.warns(UnusedDropWarning, match="no_such_variable"):
            with _scan_file(path) as f:
                # every scanner takes the common options (Scanner.options); the abstract class declares no constructor
                self.scanner(drop_variables=["no_such_variable"])(f)

    def test_pickles_as_its_options(self, tmp_path: Path) -> None:
        # every scanner takes the common options (Scanner.options); the abstract class declares no constructor
        s = self.scanner(inline_threshold=7)
        again = pickle.loads(pickle.dumps(s))
        assert type(again) is self.scanner and again.config == s.config
        path = next(iter(self.make_files(tmp_path)))
        with _scan_file(path) as f, _scan_file(path) as g:
            assert again(f).to_dict() == s(g).to_dict()


def _scan_file(path: Path) -> Any:
    from refset.io.scanfile import Opener

    opener = Opener()
    return opener.open_directory(str(path.resolve())) if path.is_dir() else opener.open(str(path.resolve()))
