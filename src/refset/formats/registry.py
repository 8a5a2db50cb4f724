"""The one table of on-disk forms: name, reader, writer, suffixes and magic bytes.

``load`` and ``save``, the CLI and the xarray backend all ask here; nothing else knows a suffix or a
magic number. Readers and writers are named as ``module:function`` and imported on first use, so this
module stays light (``import refset`` loads no pyarrow, zarr or jinja2).
"""

from __future__ import annotations

import glob
import importlib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from refset.errors import InvalidOption, InvalidReferences, Unsupported
from refset.io.local import is_local, local_path
from refset.io.magic import (
    GZIP_MAGIC,
    PACKED_MAGIC,
    PARQUET_MAGIC,
    ZARR_STORE_FILES,
    ZSTD_MAGIC,
    data_format,
    file_reader,
    starts_like_refs,
)

__all__ = ["Option", "FormatSpec", "FORMATS", "by_name", "for_dest", "detect", "looks_like_refs",
           "detect_with_head", "HEAD_SIZE", "COMPRESSION_SUFFIXES"]

COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd")

def refuse_non_refs(source: str, read_at: Callable[[int, int], bytes], size: int) -> None:
    """Raise :class:`~refset.errors.InvalidReferences` naming what ``source`` is when it is a
    NetCDF/HDF5 data file or one parquet record file, and what to do instead; else return."""
    if data_format(read_at, size) is not None:
        out = source.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[0] + ".json"
        raise InvalidReferences(f"{source}: is a NetCDF/HDF5 file, not a reference set: make one with "
                                f"`refset scan {source} -o {out}` (in Python: refset.scan)")
    if read_at(0, 4) == PARQUET_MAGIC:
        base = source.rstrip("/")
        parent = base.rsplit("/", 2)[0] if base.count("/") >= 2 else "the directory two levels up"
        raise InvalidReferences(f"{source}: is one record file of a parquet reference set, not a set: "
                                f"load the set's directory (the one holding .zmetadata), {parent}")


def _refuse_zmetadata(source: str, storage_options: Mapping[str, Any] | None) -> None:
    """A ``.zmetadata`` file given for its set (parquet) or store (zarr): name the directory to give."""
    import json

    from refset.io.store import read_bytes

    directory = source.rstrip("/").rsplit("/", 1)[0] if "/" in source.rstrip("/") else "."
    try:
        doc = json.loads(read_bytes(source, dict(storage_options or {})))
    except (OSError, ValueError):
        return  # not readable as JSON: the readers say why
    if isinstance(doc, dict) and "record_size" in doc:
        raise InvalidReferences(f"{source}: is the .zmetadata of a parquet reference set, not a set: give "
                                f"its directory, {directory}")
    if isinstance(doc, dict) and "metadata" in doc:
        raise InvalidReferences(f"{source}: is the .zmetadata of a zarr store, not a reference set: open "
                                f"the store, {directory}, with zarr or xarray.open_zarr")


def zarr_store_problem(source: str, has: Callable[[str], bool]) -> str | None:
    """The message for a zarr store given where a reference set was expected (``has(name)``: whether
    the directory holds ``name``), else None."""
    found = [n for n in ZARR_STORE_FILES if has(n)]
    if not found:
        return None
    return (f"{source}: is a zarr store ({found[0]}), not a reference set: open it with zarr or "
            "xarray.open_zarr (refset reads reference sets: JSON, a parquet directory with "
            ".zmetadata holding record_size, or packed)")


@dataclass(frozen=True, slots=True)
class Option:
    """One writer option: its name, type and allowed values, checked by ``save`` and the CLI alike."""

    name: str
    kind: type  # int, float, bool or str
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    none_ok: bool = False  # None (``none`` on the command line) means the writer's default

    def allowed(self) -> str:
        """What the option takes, in words."""
        if self.kind is bool:
            text = "true or false"
        elif self.choices:
            text = "one of " + ", ".join(self.choices)
        else:
            what = "an integer" if self.kind is int else "a number"
            if self.minimum is not None and self.maximum is not None:
                text = f"{what} from {self.minimum:g} to {self.maximum:g}"
            elif self.minimum is not None:
                text = f"{what} >= {self.minimum:g}"
            else:
                text = what
        return text + (" (or none)" if self.none_ok else "")

    def check(self, value: Any, fmt: str) -> Any:
        """``value`` when allowed, else :class:`~refset.errors.InvalidOption` naming option, value and
        what is allowed."""
        if value is None and self.none_ok:
            return None
        ok = False
        if self.kind is bool:
            ok = isinstance(value, bool)
        elif self.kind is str:
            ok = isinstance(value, str) and value in self.choices
        elif self.kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value == value
        if ok and self.kind in (int, float):
            ok = ((self.minimum is None or value >= self.minimum)
                  and (self.maximum is None or value <= self.maximum))
        if not ok:
            raise InvalidOption(f"{fmt} option {self.name}={value!r}: expected {self.allowed()}")
        return value

    def parse(self, text: str, fmt: str) -> Any:
        """The value of command-line text ``text`` (``true``/``false``, numbers, ``none``), checked."""
        t = text.strip().lower()
        value: Any = text
        if self.none_ok and t in ("none", "null"):
            return None
        if self.kind is bool:
            value = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}.get(t, text)
        elif self.kind is str:
            value = t
        else:
            try:
                value = self.kind(t)
            except ValueError:
                pass
        return self.check(value, fmt)


@dataclass(frozen=True, slots=True)
class FormatSpec:
    """One stored form of a reference set."""

    name: str
    description: str
    reader: str | None  # "module:function" returning a Source
    writer: str | None  # "module:function" writing a ReferenceSet
    suffixes: tuple[str, ...]
    magic: tuple[bytes, ...] = ()
    directory: bool = False
    options: tuple[Option, ...] = ()  # writer options

    def check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` for this format's writer, each checked; :class:`~refset.errors.InvalidOption`
        names an unknown option or a value outside what the option allows."""
        known = {o.name: o for o in self.options}
        out = {}
        for name, value in options.items():
            if name not in known:
                raise InvalidOption(f"format {self.name!r} has no option {name!r}; {self.takes()}")
            out[name] = known[name].check(value, self.name)
        return out

    def parse_options(self, items: Iterable[str]) -> dict[str, Any]:
        """Command-line ``NAME=VALUE`` items, parsed and checked (see :meth:`check_options`)."""
        known = {o.name: o for o in self.options}
        out = {}
        for item in items:
            name, sep, text = item.partition("=")
            name = name.strip()
            if name not in known:
                raise InvalidOption(f"format {self.name!r} has no option {name!r}; {self.takes()}")
            if not sep:
                raise InvalidOption(f"{self.name} option {item!r}: expected {name}=VALUE, VALUE "
                                    f"{known[name].allowed()}")
            out[name] = known[name].parse(text, self.name)
        return out

    def takes(self) -> str:
        """The options this format's writer takes, in words."""
        if not self.options:
            return "it takes no options"
        return "it takes: " + "; ".join(f"{o.name} ({o.allowed()})" for o in self.options)

    def _fn(self, ref: str | None, what: str) -> Any:
        if ref is None:
            raise Unsupported(f"format {self.name!r} cannot be {what}")
        mod, _, fn = ref.partition(":")
        return getattr(importlib.import_module(mod), fn)

    def read(self, source: str, *, storage_options: Mapping[str, Any] | None = None,
             head: bytes | None = None, **options: Any) -> Any:
        """The :class:`~refset.abc.source.Source` of ``source``; ``head``: its first bytes when already
        read (detection), which the reader uses instead of reading them again."""
        return self._fn(self.reader, "read")(source, storage_options=storage_options, head=head,
                                             **options)

    def write(self, rs: Any, dest: str, *, storage_options: Mapping[str, Any] | None = None,
              **options: Any) -> None:
        self._fn(self.writer, "written")(rs, dest, storage_options=storage_options, **options)


_F = "refset.formats."
FORMATS: dict[str, FormatSpec] = {
    f.name: f for f in (
        FormatSpec("json", "Version 0 JSON (.gz/.zst compress)", _F + "json.read:read_json",
                   _F + "json.v0:write_json", (".json",), (b"{", GZIP_MAGIC, ZSTD_MAGIC)),
        FormatSpec("v1", "Version 1 JSON with templates (gen=True: and gen)", _F + "json.read:read_json",
                   _F + "json.v1_writer:write_v1", (".v1.json",),
                   options=(Option("gen", bool, "add gen entries for regular runs of chunks"),)),
        FormatSpec("parquet", "fsspec's parquet layout (a directory)", _F + "parquet.reader:read_parquet",
                   _F + "parquet.writer:write_parquet", (".parq", ".parquet"), directory=True,
                   options=(
                       Option("record_size", int, "chunks per record file", minimum=1),
                       Option("categorical_threshold", float, "dictionary-encode paths above this many "
                              "rows per unique path", minimum=0),
                       Option("pad", bool, "pad each array's last record to record_size rows"),
                       Option("compression", str, "parquet codec",
                              choices=("zstd", "snappy", "gzip", "brotli", "lz4", "none")),
                       Option("compression_level", int, "codec level (zstd 1-22, gzip 1-9, brotli 0-11)",
                              minimum=0, maximum=22, none_ok=True),
                   )),
        FormatSpec("packed", "refset's packed binary form", _F + "packed.file:read_packed",
                   _F + "packed.file:write_packed", (".packed", ".refs", ".rfs"), (PACKED_MAGIC,),
                   options=(Option("level", int, "zstd level of every block", minimum=1, maximum=22),
                            Option("segment_chunks", int, "chunk-grid cells per segment", minimum=1))),
    )
}


def by_name(name: str) -> FormatSpec:
    spec = FORMATS.get(name)
    if spec is None:
        raise Unsupported(f"format: unknown format {name!r}, expected one of {', '.join(FORMATS)}")
    return spec


def _strip_compression(name: str) -> str:
    for suffix in COMPRESSION_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def for_dest(dest: str, *, strict: bool = False) -> FormatSpec:
    """The format a destination's name asks for (JSON Version 0 when nothing matches).

    ``strict`` (the command line): a name whose suffix no format knows (``out.xyz``) raises
    :class:`InvalidOption` naming the known suffixes; a name without a suffix is still JSON.
    """
    name = _strip_compression(dest.rstrip("/")).lower()  # suffixes in any case: OUT.JSON
    matches = [(len(x), spec) for spec in FORMATS.values() for x in spec.suffixes if name.endswith(x)]
    if matches:  # the longest suffix: out.v1.json is Version 1
        return max(matches, key=lambda m: m[0])[1]
    suffix = os.path.splitext(os.path.basename(name))[1]
    if strict and suffix and not dest.endswith("/"):
        known = ", ".join(s for spec in FORMATS.values() for s in spec.suffixes)
        raise InvalidOption(f"output {dest!r}: unknown suffix {suffix!r}; known suffixes: {known} "
                          f"(JSON may end in {' or '.join(COMPRESSION_SUFFIXES)} too)")
    return FORMATS["json"]


def looks_like_refs(name: str) -> bool:
    """Whether a path names a reference set by its suffix, or (local files) by its magic bytes."""
    stripped = _strip_compression(name.rstrip("/"))
    if any(stripped.endswith(s.suffixes) for s in FORMATS.values()):
        return True
    if "://" not in name and os.path.isfile(name):
        try:
            with open(name, "rb") as f:
                return f.read(len(PACKED_MAGIC)) == PACKED_MAGIC
        except OSError:
            return False
    return False


def _local(source: str, storage_options: Mapping[str, Any] | None) -> str | None:
    return local_path(source) if is_local(source, storage_options) else None


HEAD_SIZE = 1 << 16  # bytes read to detect a remote format; the reader starts from them


def detect(source: str, storage_options: Mapping[str, Any] | None = None) -> FormatSpec:
    """The format of the reference set at ``source``, from its content (not its name).

    A directory holding ``.zmetadata`` is parquet. Remotely, where directories may not be listable
    (plain HTTP servers), ``<source>/.zmetadata`` is tried when the source cannot be read as a file or
    does not start like JSON or packed.
    """
    return detect_with_head(source, storage_options)[0]


def detect_with_head(source: str, storage_options: Mapping[str, Any] | None = None
                     ) -> tuple[FormatSpec, bytes | None]:
    """:func:`detect`, and for a remote file its first ``HEAD_SIZE`` bytes (all of it when shorter),
    which the reader takes instead of asking for them again."""
    if source.rstrip("/").rsplit("/", 1)[-1] == ".zmetadata":
        _refuse_zmetadata(source, storage_options)
    local = _local(source, storage_options)
    if local is not None:
        if os.path.isdir(local):
            return FORMATS["parquet"], None
        if not os.path.lexists(local) and glob.glob(glob.escape(local) + ".refset-old-*"):
            return FORMATS["parquet"], None  # a killed write set it aside (see _parquet._set_aside)
        with open(local, "rb") as f:
            head = f.read(16)
            if not starts_like_refs(head):  # the error path only: name what it is
                refuse_non_refs(source, file_reader(f), os.fstat(f.fileno()).st_size)
        return (FORMATS["packed"] if head.startswith(PACKED_MAGIC) else FORMATS["json"]), None
    from refset.io.store import FsspecStore

    store = FsspecStore(source.rstrip("/"), storage_options)

    def has(name: str) -> bool:
        try:
            return store.exists(name)
        except Exception:  # a server that refuses the probe: not there, rather than fail differently
            return False

    if _strip_compression(source.rstrip("/")).endswith(FORMATS["parquet"].suffixes) or source.endswith("/"):
        if has(".zmetadata"):
            return FORMATS["parquet"], None

    def refuse_zarr_store() -> None:
        problem = zarr_store_problem(source, has)
        if problem:
            raise InvalidReferences(problem)

    try:
        head = bytes(store.read("", 0, HEAD_SIZE))
    except Exception:
        if has(".zmetadata"):
            return FORMATS["parquet"], None
        from refset.io.atomic import remote_leftovers

        if remote_leftovers(store.fs, store.root):  # a write killed while copying its tree into place left it
            return FORMATS["parquet"], None
        refuse_zarr_store()
        raise
    if head.startswith(PACKED_MAGIC):
        return FORMATS["packed"], head
    if not starts_like_refs(head):
        refuse_non_refs(source, lambda offset, n: head[offset:offset + n], len(head))
        if has(".zmetadata"):  # e.g. an HTML directory listing
            return FORMATS["parquet"], None
        refuse_zarr_store()
    return FORMATS["json"], head
