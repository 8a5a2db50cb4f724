"""The ``refset`` command line's parser: its commands and options (with their help), two-line usage
errors, unknown options reported with the closest known one."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from refset.cli.cat import cmd_cat
from refset.cli.combine import cmd_combine
from refset.cli.common import EXIT_USAGE
from refset.cli.convert import cmd_convert
from refset.cli.demo import cmd_demo
from refset.cli.info import cmd_info
from refset.cli.ls import cmd_ls
from refset.cli.scan import cmd_scan
from refset.cli.sources import cmd_refresh, cmd_verify
from refset.cli.validate import cmd_validate


def _positive(text: str, minimum: int = 1) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if n < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {n}")
    return n


class _OutputOnce(argparse.Action):
    """``-o OUT`` of scan and combine, refused a second time: ``-o out.parq -o record_size=10`` (how
    convert takes writer options) would otherwise write a set named ``record_size=10``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"-o/--output given twice ({getattr(namespace, self.dest)!r}, {values!r}); "
                         "writer options are -O NAME=VALUE here")
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are two lines (a one-line usage, then the error) and whose
    unknown options are reported by the subcommand that got them, with the closest known option."""

    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> Any:
        self.exit(EXIT_USAGE, f"{self.short_usage()}\n{self.prog}: error: {message}\n")

    def short_usage(self) -> str:
        """``usage: refset scan FILE... -o OUT [options]``: positionals and required options only."""
        words = []
        for act in self._actions:
            if isinstance(act, argparse._SubParsersAction):
                words.append(str(act.metavar or "COMMAND"))
            elif not act.option_strings:
                name = str(act.metavar or act.dest)
                optional = act.nargs in ("?", "*") and not getattr(act, "shown_required", False)
                words.append(f"{name}..." if act.nargs in ("+", "*") else name)
                words[-1] = f"[{words[-1]}]" if optional else words[-1]
            elif act.required:
                words.append(f"{act.option_strings[0]} {act.metavar or act.dest.upper()}")
        return " ".join(["usage:", self.prog, *words, "[options]"])

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        a, extras = self.parse_known_args(args, namespace)
        if extras:
            sub = getattr(self, "commands", {}).get(getattr(a, "command", None) or "", self)
            sub.error(_unrecognized(sub, extras))
        return a


def _unrecognized(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """``unrecognized argument --jsn (did you mean --json?)``, one clause per extra argument."""
    import difflib

    known = [o for act in parser._actions for o in act.option_strings if o.startswith("--")]
    said = []
    for x in extras:
        close = difflib.get_close_matches(x.split("=", 1)[0], known, 1) if x.startswith("-") else []
        said.append(x + (f" (did you mean {close[0]}?)" if close else ""))
    return f"unrecognized argument{'s' * (len(said) > 1)} " + ", ".join(said)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``refset`` and its commands; each command's namespace has ``func``, its command."""
    p = _Parser(
        prog="refset",
        description="Make, inspect, validate, convert and read kerchunk-style reference sets.",
    )
    from refset import __version__

    p.add_argument("--version", action="version", version=f"refset {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    from refset.formats.registry import forms
    from refset.scan import INLINE_THRESHOLD

    s = sub.add_parser("scan", help="reference NetCDF4/HDF5/NetCDF3 files",
                       description="Scan each FILE (local path or URL; the format is told by its "
                                   "magic bytes) into a reference set and write it to OUT. Several "
                                   "files: OUT is a directory and each set is named after its file.")
    s.add_argument("files", nargs="+", metavar="FILE")
    s.add_argument("-o", "--output", required=True, metavar="OUT", action=_OutputOnce,
                   help="output file (one FILE) or directory (several, or OUT ending in /)")
    s.add_argument("--format", choices=list(forms()), help="output format (default: from OUT's "
                   "suffix, JSON when it has none)")
    s.add_argument("--inline-threshold", type=int, default=INLINE_THRESHOLD, metavar="BYTES",
                   help=f"store chunks smaller than this in the set (default {INLINE_THRESHOLD})")
    s.add_argument("--group", help="scan only this HDF5 group")
    s.add_argument("--drop-variables", metavar="A,B", help="comma-separated variables to leave out")
    s.add_argument("--subchunk", type=int, metavar="BYTES",
                   help="split uncompressed chunks bigger than this along their first axis")
    _read_options(s, "FILE")
    s.add_argument("-O", "--option", action="append", metavar="NAME=VALUE",
                   help="writer option, e.g. -O record_size=100000 (repeatable)")
    _combine_options(s, required=False)
    s.set_defaults(func=cmd_scan)

    s = sub.add_parser("combine", help="combine reference sets (or data files) along concat dims",
                       description="Combine INPUTs (reference sets in any format, or NetCDF/HDF5 "
                                   "files, scanned) along --concat-dim into one set written to OUT. "
                                   "Inputs may be globs or @list.txt (one per line).")
    s.add_argument("inputs", nargs="+", metavar="INPUT")
    s.add_argument("-o", "--output", required=True, metavar="OUT", action=_OutputOnce, help="output set")
    s.add_argument("--format", choices=list(forms()), help="output format (default: from OUT's suffix)")
    _read_options(s, "the INPUTs")
    s.add_argument("-O", "--option", action="append", metavar="NAME=VALUE", help="writer option")
    _combine_options(s, required=True)
    s.set_defaults(func=cmd_combine)

    s = sub.add_parser("info", help="summarise a reference set",
                       description="Keys by kind, arrays with shape/chunk grid/fraction present, "
                                   "unique URLs, referenced bytes, format and size on disk.")
    s.add_argument("refs", metavar="REFS", help="reference set: JSON (.json/.gz/.zst), parquet directory or packed file")
    s.add_argument("--json", action="store_true", help="print machine-readable JSON")
    _read_options(s, "the reference set")
    s.set_defaults(func=cmd_info)

    s = sub.add_parser("validate", help="check a reference set and list every problem",
                       description="Print one line per problem (where and why); exit 1 if any.")
    s.add_argument("refs", metavar="REFS", help="reference set file or directory")
    s.add_argument("--max-gen", type=int, default=100_000_000,
                   help="refuse Version 1 'gen' producing more keys than this (default 100 million)")
    _read_options(s, "the reference set")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("verify", help="check that the files a set points into are what it recorded",
                       description="Look at every file the set recorded when it was made (a stat per local "
                                   "file, a HEAD per remote one, 64 at a time) and print each that changed "
                                   "or is missing, with what was recorded and what is there now; exit 1 if "
                                   "any (docs/reliability.md).")
    s.add_argument("refs", metavar="SET", help="reference set")
    s.add_argument("--json", action="store_true", help="print machine-readable JSON")
    s.add_argument("--concurrency", type=lambda t: _positive(t, 1), default=64, metavar="N",
                   help="files looked at at once (default 64)")
    _read_options(s, "the reference set", remote="the files it points into")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("refresh", help="rescan the files of a set that changed and update it in place",
                       description="Verify the set's files, rescan those that changed and put their rows "
                                   "in place of the old ones, everything else kept; write the set back "
                                   "atomically (or to -o OUT). A variable a file now stores or decodes "
                                   "otherwise becomes a variable made of parts.")
    s.add_argument("refs", metavar="SET", help="reference set (rewritten in its format)")
    s.add_argument("-o", "--output", metavar="OUT", help="write the refreshed set here instead")
    s.add_argument("--concat-dim", metavar="DIM", help="the dim the set was combined along, when it cannot "
                   "be told from its references")
    s.add_argument("--drop-missing", action="store_true",
                   help="files gone missing: their rows read as missing values (default: left as they are)")
    s.add_argument("--concurrency", type=lambda t: _positive(t, 1), default=64, metavar="N",
                   help="files looked at (and remote files rescanned) at once (default 64)")
    _read_options(s, "the reference set", remote="the files it points into")
    s.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    s.set_defaults(func=cmd_refresh)

    s = sub.add_parser("ls", help="list keys", description="List the keys under PREFIX (all keys "
                       "when omitted), metadata keys first, then chunk keys in C order.")
    s.add_argument("refs", metavar="REFS", help="reference set")
    s.add_argument("prefix", metavar="PREFIX", nargs="?", default="", help="only keys equal to or under this path")
    s.add_argument("-l", "--long", action="store_true", help="also print kind, url, offset, length")
    _read_options(s, "the reference set")
    s.set_defaults(func=cmd_ls)

    s = sub.add_parser("convert", help="convert between formats",
                       description="Read IN (any format) and write OUT atomically. The format is "
                                   "inferred from OUT unless --format is given.")
    s.add_argument("input", metavar="IN")
    out = s.add_argument("output", metavar="OUT", nargs="?")  # required: missing, said in cmd_convert's words
    out.shown_required = True  # type: ignore[attr-defined]
    s.add_argument("--format", choices=list(forms()),
                   help="; ".join(f"{f.name} = {f.description}" for f in forms().values()))
    s.add_argument("-O", "-o", "--option", action="append", metavar="NAME=VALUE",
                   help="writer option, e.g. -O record_size=100000 (repeatable; -o as well)")
    s.add_argument("--rename", action="append", metavar="OLD=NEW",
                   help="URLs starting with OLD start with NEW instead (repeatable; after data moved)")
    _read_options(s, "IN")
    _overwrite(s)
    s.add_argument("--quiet", action="store_true", help="no summary line")
    s.set_defaults(func=cmd_convert)

    s = sub.add_parser("cat", help="write the bytes of one key to stdout",
                       description="Inline data decoded; ranges relative to the referenced block.")
    s.add_argument("refs", metavar="REFS", help="reference set")
    s.add_argument("key", metavar="KEY", help="key, e.g. temp/0.0.0")
    s.add_argument("--start", type=int, default=None, help="first byte (default 0)")
    s.add_argument("--end", type=int, default=None, help="end byte, exclusive (default: the end)")
    _read_options(s, "the reference set", remote="the data files its references point into")
    _no_verify(s)
    s.set_defaults(func=cmd_cat)

    s = sub.add_parser("demo", help="see what refset is for: many NetCDF files -> one dataset",
                       description="Make small daily NetCDF4 files in DIR, scan and combine them along "
                                   "time on a local Dask cluster, save the set in every format (sizes "
                                   "side by side), open it with xarray and check it against the files. "
                                   "Needs the 'all' extra.")
    s.add_argument("dir", nargs="?", metavar="DIR",
                   help="where to write (new, empty, or made by an earlier demo; default: a new "
                        "temporary directory, kept)")
    s.add_argument("--files", type=_positive, default=30, metavar="N", help="daily files (default 30)")
    s.add_argument("--workers", type=lambda t: _positive(t, 0), default=2, metavar="N",
                   help="worker processes of the local Dask cluster (default 2; 0: scan in this process)")
    s.add_argument("--quiet", action="store_true", help="no progress bars")
    s.set_defaults(func=cmd_demo)
    p.commands = dict(sub.choices)
    return p


def _read_options(s: argparse.ArgumentParser, what: str, remote: str | None = None) -> None:
    s.add_argument("--storage-options", metavar="JSON",
                   help=f"fsspec options (a JSON object) for reading {what}, e.g. '{{\"anon\": true}}' "
                        "(FSSPEC_<PROTOCOL>_<NAME> environment variables apply too)")
    if remote:
        s.add_argument("--remote-options", metavar="JSON",
                       help=f"fsspec options (a JSON object) for {remote}")


def _no_verify(s: argparse.ArgumentParser) -> None:
    s.add_argument("--no-verify-sources", action="store_true",
                   help="read files that changed since the set was made (by default a file that is not "
                        "what the set recorded is refused: docs/reliability.md)")


def _overwrite(s: argparse.ArgumentParser) -> None:
    s.add_argument("--overwrite", action="store_true", help="replace an existing output")


def _combine_options(s: argparse.ArgumentParser, required: bool) -> None:
    from refset.combine.cluster import CLUSTER_INPUTS

    s.add_argument("--concat-dim", action="append", required=required, metavar="DIM",
                   help="combine along DIM (repeatable; a dim the inputs lack is new)"
                   + ("" if required else ": the files become one set written to OUT"))
    s.add_argument("--identical-dims", metavar="A,B", help="variables checked equal in every input")
    s.add_argument("--coo-map", action="append", metavar="DIM=SELECTOR",
                   help="where DIM's values come from: INDEX, attr:NAME, vattr:VAR:NAME, data:VAR, "
                        "cf:VAR or re:PATTERN (on the input's name; group 1)")
    s.add_argument("--coo-dtype", action="append", metavar="DIM=DTYPE", help="e.g. member=i4")
    s.add_argument("--append", action="store_true", help="OUT, if it exists, is the first input")
    s.add_argument("--remote-options", metavar="JSON",
                   help="fsspec options (a JSON object) for the data files the inputs' references point "
                        "into, read for coordinate values (default: --storage-options)"
                        + ("" if required else "; with --concat-dim"))
    _overwrite(s)
    _no_verify(s)
    s.add_argument("--scheduler", metavar="ADDR", help="run on this Dask scheduler (tcp://host:port)")
    s.add_argument("--workers", type=int, metavar="N",
                   help=f"processes of an embedded Dask cluster (default: one per core from "
                        f"{CLUSTER_INPUTS} inputs, else none; 0: this process)")
    s.add_argument("--concurrency", type=lambda t: _positive(t, 1), metavar="N",
                   help="remote files read at once, in this process and in each cluster task (default "
                        "64; local files are scanned one after another)")
    s.add_argument("--on-error", choices=("raise", "skip"), default="raise",
                   help="an input that cannot be opened or scanned: stop with its error (raise, the "
                        "default), or leave it out (skip: listed in the summary and in the set's root "
                        "attribute refset_skipped_inputs)")
    s.add_argument("--quiet", action="store_true", help="no progress bar, summary or 'wrote' lines")


