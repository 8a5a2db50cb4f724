"""What several ``refset`` commands share: exit statuses, the errors that become them, checks of the
arguments (JSON options, ``NAME=VALUE`` pairs, URLs' protocols, outputs that exist), inputs, writer
and scan options, saving a set and the summary line that ends scan, combine and convert."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from refset.model.refset import ReferenceSet
    from refset.scan import Scan

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A command line that cannot mean anything: exit status 2, the message on stderr."""


class NotInstalled(Exception):
    """A URL whose fsspec implementation is not installed: exit status 1, the message on stderr."""


def _remote(dest: str) -> bool:
    return "://" in dest and not dest.startswith("file://")


def _size_on_disk(path: str) -> int | None:
    if "://" in path and not path.startswith("file://"):
        return None
    path = path.removeprefix("file://")
    if os.path.isdir(path):
        return sum(
            os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
        )
    return os.path.getsize(path) if os.path.exists(path) else None


def _json_arg(text: str | None, flag: str) -> dict[str, Any]:
    """The fsspec options given as JSON text to ``flag``; a :class:`UsageError` unless a JSON object."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise UsageError(f"{flag} {text!r}: not JSON ({e}); expected an object such as "
                         "'{\"anon\": true}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} {text!r}: expected a JSON object such as '{{\"anon\": true}}', "
                         f"got {type(value).__name__}")
    return value


def _pair(item: str, flag: str, shape: str = "OLD=NEW") -> tuple[str, str]:
    """``NAME=VALUE`` taken apart; a :class:`UsageError` in the words of ``flag`` and ``shape``."""
    old, sep, new = item.partition("=")
    if not sep or not old:
        raise UsageError(f"{flag} {item!r}: expected {shape}")
    return old, new


_SCHEDULER = re.compile(r"(?:[a-z]+://)?(?:\[[0-9a-fA-F:]+\]|[\w.-]+):\d+")


def _check_args(a: argparse.Namespace) -> None:
    """Values the option types let through but no command can use, and URLs of a protocol fsspec
    does not know or cannot load: each a one-line error before any work."""
    if getattr(a, "inline_threshold", 0) < 0:
        raise UsageError(f"--inline-threshold {a.inline_threshold}: expected a number of bytes >= 0")
    if getattr(a, "subchunk", None) is not None and a.subchunk < 1:
        raise UsageError(f"--subchunk {a.subchunk}: expected a number of bytes >= 1")
    if getattr(a, "workers", None) is not None and a.workers < 0:
        raise UsageError(f"--workers {a.workers}: expected a number of processes >= 0")
    if getattr(a, "scheduler", None) and not _SCHEDULER.fullmatch(a.scheduler):
        raise UsageError(f"--scheduler {a.scheduler!r}: expected a scheduler address, HOST:PORT or "
                         "tcp://HOST:PORT")
    start, end = getattr(a, "start", None), getattr(a, "end", None)
    if start is not None and end is not None and (start < 0) == (end < 0) and start > end:
        raise UsageError(f"--start {start} --end {end}: the start is after the end")
    for attr in ("refs", "input", "output", "files", "inputs"):
        value = getattr(a, attr, None)
        for url in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
            _check_protocol(url)


def _check_protocol(url: str) -> None:
    if "://" not in url:
        return
    if url.lower().startswith("icechunk://"):  # a stored form's scheme: the repository's own URL follows
        url = url[len("icechunk://"):]
        if "://" not in url:
            return
    from fsspec.registry import get_filesystem_class, known_implementations

    for part in url.split("::"):
        protocol = part.split("://", 1)[0] if "://" in part else None
        if protocol is None or protocol == "file":
            continue
        try:
            get_filesystem_class(protocol)
        except ValueError:
            raise UsageError(f"{url}: unknown protocol {protocol}:// (fsspec knows none by that name)") from None
        except ImportError:
            package = known_implementations.get(protocol, {}).get("class", protocol).split(".")[0]
            raise NotInstalled(f"{url}: install {package} to read {protocol}:// URLs") from None


def _inputs(items: Sequence[str], storage_options: dict[str, Any] | None = None) -> list[str]:
    """Inputs as given, with globs expanded (sorted; over ``s3://`` and the like too, and over HTTP
    where the server lists its directories) and ``@list.txt`` read one per line."""
    import glob

    out: list[str] = []
    for item in items:
        if item.startswith("@"):
            with open(item[1:], encoding="utf-8") as f:
                out.extend(line.strip() for line in f if line.strip() and not line.startswith("#"))
        elif glob.has_magic(item.split("://", 1)[-1]):
            from refset.io.store import glob as glob_urls

            found = glob_urls(item, storage_options)
            if not found:
                raise UsageError(f"{item}: no file matches")
            out.extend(found)
        else:
            out.append(item)
    return out


def _writer_options(a: argparse.Namespace, dest: str, check_suffix: bool = True) -> dict[str, Any]:
    """The ``-o NAME=VALUE`` writer options for ``dest``, checked against its format's options.

    The format is ``--format`` or told by ``dest``'s suffix; an unknown suffix (``out.xyz``), an
    unknown option or a value the option does not allow is a :class:`UsageError`, raised before
    anything is read or written.
    """
    from refset.errors import InvalidOption, Unsupported
    from refset.formats.registry import by_name, for_dest

    if a.format is not None:
        spec = by_name(a.format)
    else:
        try:
            spec = for_dest(dest, strict=check_suffix and "://" not in dest)
        except Unsupported as e:
            raise UsageError(f"{e}; or give --format") from None
    try:
        return spec.parse_options(a.option or [])
    except InvalidOption as e:
        raise UsageError(str(e)) from None


def _refuse_existing(a: argparse.Namespace, dests: Sequence[str], made: str | None = None) -> None:
    """A local output in a directory that does not exist, or without ``--overwrite`` one that exists
    (file or parquet directory), is a :class:`UsageError`, found before any work starts, so that
    the old output stays as it was. ``made``: the directory of the outputs, made (with its parents)
    when missing."""
    for dest in [] if made is not None else dests:  # a directory of outputs is made with its parents
        if not _remote(dest):
            parent = os.path.dirname(dest.removeprefix("file://").rstrip("/")) or "."
            if not os.path.isdir(parent):
                raise UsageError(f"output directory {parent} does not exist")
            _writable(parent)
    if a.overwrite:
        return
    for dest in dests:
        if "://" in dest and not dest.startswith("file://"):
            continue  # remote outputs are not probed (their options are the reader's)
        path = dest.removeprefix("file://").rstrip("/") or "/"
        if os.path.lexists(path):
            what = "directory" if os.path.isdir(path) else "file"
            raise UsageError(f"output {dest} exists ({what}); give --overwrite to replace it")


def _writable(directory: str) -> None:
    """A :class:`UsageError` now, before any work, when no file can be made in ``directory`` (read
    only, not ours, a full disk): what writing the output at the end would find."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".refset-probe-"):
            pass
    except OSError as e:
        raise UsageError(f"output directory {directory} is not writable: {e.strerror or e}") from None


def _scan_options(a: argparse.Namespace) -> dict[str, Any]:
    """The keywords of ``refset.scan`` that scan's options give (combine's data-file inputs: defaults)."""
    from refset.scan import INLINE_THRESHOLD

    return {"inline_threshold": getattr(a, "inline_threshold", INLINE_THRESHOLD),
            "group": getattr(a, "group", None),
            "drop_variables": [v for v in (getattr(a, "drop_variables", None) or "").split(",") if v],
            "subchunk": getattr(a, "subchunk", None)}


@contextlib.contextmanager
def _unused_drops(a: argparse.Namespace, n: int, where: str) -> Iterator[None]:
    """One warning line for the ``--drop-variables`` names that none of the ``n`` scans (or one combine,
    which warns once for all its inputs) found; other warnings pass through."""
    from refset.scan import UnusedDropWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnusedDropWarning)
        yield
    counts: dict[str, int] = {}
    for w in caught:
        if isinstance(w.message, UnusedDropWarning):
            for name in w.message.names:
                counts[name] = counts.get(name, 0) + 1
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    never = [k for k, c in counts.items() if c >= n]
    if never:
        sys.stderr.write(f"refset {a.command}: warning: --drop-variables {','.join(never)}: no such variable "
                         f"in {where}\n")


def _save(rs: ReferenceSet, dest: str, a: argparse.Namespace, options: dict[str, Any], so: dict[str, Any]) -> None:
    """``rs`` written to ``dest``; a remote ``dest`` with ``--storage-options``, as Python's ``save``."""
    import refset

    refset.save(rs, dest, format=a.format, storage_options=so if _remote(dest) else None, **options)


def _costs(run: Scan) -> str:
    """What the remote scans of ``run`` cost, for a summary line ("" when nothing was remote)."""
    if not run.requests:
        return ""
    return (f"{run.requests:,} requests and {run.nbytes:,} bytes read "
            f"({run.requests / max(run.files, 1):.1f} and {run.nbytes / max(run.files, 1):,.0f} a file)")


def _summary(out: str, n_inputs: int, rs: ReferenceSet, t0: float, extra: str = "") -> None:
    """The line that ends scan, combine and convert: inputs, arrays, references, output size, time."""
    import time

    n = sum(rs.table(p).count() for p in rs.grids)
    size = _size_on_disk(out)
    sized = f"{size:,} bytes" if size is not None else "size unknown"
    sys.stderr.write(f"wrote {out}: {n_inputs:,} input{'s' * (n_inputs != 1)}, {len(rs.grids)} arrays, "
                     f"{n:,} references, {sized}{', ' + extra if extra else ''} in "
                     f"{time.perf_counter() - t0:.1f} s\n")
