"""The ``refset`` command. Exit status: 0 ok, 1 invalid input (or a failed read), 2 usage."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from refset.cli.progress import Bar, wanted

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def _size_on_disk(path: str) -> int | None:
    if "://" in path and not path.startswith("file://"):
        return None
    path = path.removeprefix("file://")
    if os.path.isdir(path):
        return sum(
            os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
        )
    return os.path.getsize(path) if os.path.exists(path) else None


def info_dict(path: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    import numpy as np

    import refset
    from refset.model.table import INLINE, RANGE, WHOLE

    rs = refset.load(path, storage_options=storage_options)
    kinds = np.bincount(rs.key_table().kind, minlength=4).astype(np.int64)
    arrays = []
    for p, g in rs.grids.items():
        t = rs.table(p)
        counts = t.kind_counts()
        kinds[1:] += counts[1:]
        present = int(counts[1:].sum())
        arrays.append({
            "path": p,
            "shape": list(g.shape),
            "chunks": list(g.chunks),
            "grid": list(g.grid_shape),
            "chunks_present": present,
            "chunks_total": g.nchunks,
            "fraction_present": round(present / g.nchunks, 4) if g.nchunks else 1.0,
            "dtype": _dtype(rs, p),
        })
    out: dict[str, Any] = {
        "source": path,
        "format": _format_name(rs.format_info()),
        "size_on_disk": _size_on_disk(path),
        "keys": int(kinds.sum()),
        "inline": int(kinds[INLINE]),
        "range": int(kinds[RANGE]),
        "whole_file": int(kinds[WHOLE]),
        "references": sum(a["chunks_present"] for a in arrays),
        "unique_urls": len(rs.urls),
        "referenced_bytes": rs.referenced_bytes(),
        "arrays": arrays,
    }
    out.update({k: v for k, v in rs.format_info().items()
                if k not in ("format", "version", "compression")})
    return out


def _dtype(rs: Any, path: str) -> str | None:
    """The data type an array's metadata declares, as it spells it."""
    dt = rs.metadata[path].dtype_json
    if isinstance(dt, dict) and isinstance(dt.get("name"), str):
        return str(dt["name"])
    return dt if isinstance(dt, str) else json.dumps(dt)


def _format_name(stored: dict[str, Any]) -> str:
    name = str(stored.get("format", "?"))
    extra = [f"version {stored['version']}"] if "version" in stored else []
    if stored.get("compression"):
        extra.append(f"{stored['compression']}-compressed")
    return f"{name} ({', '.join(extra)})" if extra else name


_HEADER_KEYS = {"source", "format", "size_on_disk", "keys", "inline", "range", "whole_file", "references",
                "unique_urls",
                "referenced_bytes", "arrays"}
# figures the packed format keeps per array, shown as columns (the rest with --json)
_PACKED_COLUMNS = (("bytes", "packed bytes"), ("bytes_per_ref", "bytes/ref"), ("gfactor", "gfactor"))


def _number(v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    return f"{v:,}" if isinstance(v, int) else f"{v:,.2f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> list[str]:
    """Rows aligned under ``header``; the columns in ``right`` (numbers) aligned right."""
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return ["  ".join((c.rjust(w) if i in right else c.ljust(w)) for i, (c, w) in enumerate(zip(r, widths))
                      ).rstrip() for r in (header, *rows)]


def _print_info(d: dict[str, Any]) -> None:
    """A header of figures about the whole set, then one table of its arrays."""
    head = [("source", d["source"]), ("format", d["format"])]
    if d["size_on_disk"] is not None:
        per = d["size_on_disk"] / d["keys"] if d["keys"] else 0.0
        head.append(("size on disk", f"{d['size_on_disk']:,} bytes ({per:.1f} bytes/key)"))
    head += [("keys", f"{d['keys']:,} (inline {d['inline']:,}, range {d['range']:,}, "
                      f"whole-file {d['whole_file']:,})"),
             ("references", f"{d['references']:,} (chunk keys holding data)"),
             ("unique urls", f"{d['unique_urls']:,}"),
             ("referenced bytes", f"{d['referenced_bytes']:,}")]
    packed = d.get("packed_arrays") if isinstance(d.get("packed_arrays"), dict) else None
    for k, v in d.items():
        if k in _HEADER_KEYS or (k == "packed_arrays" and packed is not None):
            continue
        head.append((k.replace("_", " "), _number(v) if not isinstance(v, dict | list) else json.dumps(v)))
    head.append(("arrays", f"{len(d['arrays']):,}"))
    width = max(len(k) for k, _ in head) + 2
    lines = [f"{k + ':':<{width}}{v}" for k, v in head]
    if d["arrays"]:
        header = ["array", "shape", "chunks", "present", "", "dtype"]
        right = {3, 4}
        if packed is not None:
            right |= set(range(len(header), len(header) + len(_PACKED_COLUMNS)))
            header += [title for _, title in _PACKED_COLUMNS]
        rows = []
        for a in d["arrays"]:
            row = [a["path"] or "/", "x".join(map(str, a["shape"])) or "()",
                   "x".join(map(str, a["chunks"])) or "()",
                   f"{a['chunks_present']:,}/{a['chunks_total']:,}", f"{100 * a['fraction_present']:.1f}%",
                   a.get("dtype") or "?"]
            if packed is not None:
                stats = packed.get(a["path"], {})
                row += [_number(stats.get(key, "")) for key, _ in _PACKED_COLUMNS]
            rows.append(row)
        lines += ["", *_table(header, rows, right)]
    sys.stdout.write("\n".join(lines) + "\n")


def cmd_info(a: argparse.Namespace) -> int:
    d = info_dict(a.refs, _json_arg(a.storage_options, "--storage-options"))
    if a.json:
        sys.stdout.write(json.dumps(d, indent=2, default=str) + "\n")
    else:
        _print_info(d)
    return EXIT_OK


def cmd_validate(a: argparse.Namespace) -> int:
    from refset.errors import InvalidReferences
    from refset.formats import detect_format
    from refset.formats.json.read import document_problems
    from refset.io.compression import decompress
    from refset.io.store import read_bytes

    so = _json_arg(a.storage_options, "--storage-options")
    if detect_format(a.refs, so) == "json":
        problems = document_problems(decompress(read_bytes(a.refs, so), a.refs), max_gen=a.max_gen)
    else:
        import refset

        try:
            rs = refset.load(a.refs, storage_options=so)
            for p in rs.grids:
                rs.table(p)
            problems = []
        except InvalidReferences as e:
            problems = e.problems
    for p in problems:
        sys.stdout.write(p + "\n")
    if problems:
        sys.stderr.write(f"{a.refs}: {len(problems)} problem(s)\n")
        return EXIT_INVALID
    sys.stderr.write(f"{a.refs}: valid\n")
    return EXIT_OK


def cmd_ls(a: argparse.Namespace) -> int:
    import refset
    from refset.model.keys import array_key

    rs = refset.load(a.refs, storage_options=_json_arg(a.storage_options, "--storage-options"))
    prefix = (a.prefix or "").strip("/")

    def under(key: str) -> bool:
        return not prefix or key == prefix or key.startswith(prefix + "/")

    out = sys.stdout
    if prefix and rs.locate(prefix) is not None and prefix in rs:  # one chunk key, named exactly
        out.write(_ls_line(rs, prefix, a.long))
        return EXIT_OK
    listed = 0
    for key in rs.key_table().keys.tolist():
        if under(key):
            out.write(_ls_line(rs, key, a.long))
            listed += 1
    for path in rs.grids:
        if prefix and not under(path) and not under(array_key(path, "x")):
            continue
        for key in rs.chunk_keys(path):
            if under(key):
                out.write(_ls_line(rs, key, a.long))
                listed += 1
    if prefix and not listed:
        sys.stderr.write(f"refset ls: {a.prefix}: no such key or directory in {a.refs}\n")
        return EXIT_INVALID
    return EXIT_OK


def _ls_line(rs: Any, key: str, long: bool) -> str:
    if not long:
        return key + "\n"
    ref = rs[key]
    if isinstance(ref, bytes):
        return f"{key}\tinline\t{len(ref)}\n"
    if len(ref) == 1:
        return f"{key}\tfile\t{ref[0]}\n"
    return f"{key}\trange\t{ref[0]}\t{ref[1]}\t{ref[2]}\n"


def cmd_convert(a: argparse.Namespace) -> int:
    import time

    import refset

    t0 = time.perf_counter()
    paths = [o for o in a.option or [] if "=" not in o and ("." in o or "/" in o)]
    if a.output is not None and paths:
        raise UsageError(f"-o {paths[0]}: not a writer option NAME=VALUE (the output is already "
                         f"{a.output}); writer options are -O NAME=VALUE")
    if a.output is None or paths:  # `convert IN -o OUT`, as scan and combine take it
        raise UsageError("convert takes the output as its second argument (refset convert IN OUT); "
                         "writer options are -O NAME=VALUE")
    so = _json_arg(a.storage_options, "--storage-options")
    renames = dict(_pair(r, "--rename") for r in a.rename or [])
    options = _writer_options(a, a.output)
    _refuse_existing(a, [a.output])
    rs = refset.load(a.input, storage_options=so)
    with Bar(len(rs.grids), "reading", wanted(a.quiet), unit="array") as bar:
        for p in bar.iterate(list(rs.grids)):  # lazy forms (parquet, packed) read each table here
            rs.table(p)
    renamed = ""
    if renames:
        urls = rs.loaded().urls
        n = sum(1 for u in urls if any(u.startswith(old) for old in renames))
        if n == 0:
            sys.stderr.write(f"refset convert: warning: renamed 0 of {len(urls):,} URLs: none starts with "
                             f"{' or '.join(map(repr, renames))}\n")
        rs = refset.rename_urls(rs, renames)
        renamed = f"renamed {n:,} of {len(urls):,} URLs"
    _save(rs, a.output, a, options, so)
    if not a.quiet:
        _summary(a.output, 1, rs, t0, renamed)
    return EXIT_OK


class UsageError(Exception):
    """A command line that cannot mean anything: exit status 2, the message on stderr."""


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
    if a.overwrite:
        return
    for dest in dests:
        if "://" in dest and not dest.startswith("file://"):
            continue  # remote outputs are not probed (their options are the reader's)
        path = dest.removeprefix("file://").rstrip("/") or "/"
        if os.path.lexists(path):
            what = "directory" if os.path.isdir(path) else "file"
            raise UsageError(f"output {dest} exists ({what}); give --overwrite to replace it")


def _summary(out: str, n_inputs: int, rs: Any, t0: float, extra: str = "") -> None:
    """The line that ends scan, combine and convert: inputs, arrays, references, output size, time."""
    import time

    n = sum(rs.table(p).count() for p in rs.grids)
    size = _size_on_disk(out)
    sized = f"{size:,} bytes" if size is not None else "size unknown"
    sys.stderr.write(f"wrote {out}: {n_inputs:,} input{'s' * (n_inputs != 1)}, {len(rs.grids)} arrays, "
                     f"{n:,} references, {sized}{', ' + extra if extra else ''} in "
                     f"{time.perf_counter() - t0:.1f} s\n")


def _pair(item: str, flag: str, shape: str = "OLD=NEW") -> tuple[str, str]:
    """``NAME=VALUE`` taken apart; a :class:`UsageError` in the words of ``flag`` and ``shape``."""
    old, sep, new = item.partition("=")
    if not sep or not old:
        raise UsageError(f"{flag} {item!r}: expected {shape}")
    return old, new


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


class NotInstalled(Exception):
    """A URL whose fsspec implementation is not installed: exit status 1, the message on stderr."""


def _check_protocol(url: str) -> None:
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


def _remote(dest: str) -> bool:
    return "://" in dest and not dest.startswith("file://")


def _save(rs: Any, dest: str, a: argparse.Namespace, options: dict[str, Any], so: dict[str, Any]) -> None:
    """``rs`` written to ``dest``; a remote ``dest`` with ``--storage-options``, as Python's ``save``."""
    import refset

    refset.save(rs, dest, format=a.format, storage_options=so if _remote(dest) else None, **options)


def _scan_output(src: str, out: str, many: bool, fmt: str | None) -> str:
    """OUT itself for one file; for several, ``OUT/<file name>.<suffix of the format>``."""
    if not many and not out.endswith("/"):
        return out
    from refset.formats.registry import forms

    suffix = {"v1": ".json", "json": ".json"}.get(fmt or "json") or forms()[fmt or "json"].suffixes[0]
    name = src.rstrip("/").rsplit("/", 1)[-1]
    return os.path.join(out, name + suffix)


def _inputs(items: Sequence[str]) -> list[str]:
    """Inputs as given, with globs expanded (sorted) and ``@list.txt`` read one per line."""
    import glob

    out: list[str] = []
    for item in items:
        if item.startswith("@"):
            with open(item[1:], encoding="utf-8") as f:
                out.extend(line.strip() for line in f if line.strip() and not line.startswith("#"))
        elif "://" not in item and glob.has_magic(item):
            found = sorted(glob.glob(item))
            if not found:
                raise UsageError(f"{item}: no file matches")
            out.extend(found)
        else:
            out.append(item)
    return out


def _coo_map(items: Sequence[str] | None) -> dict[str, Any]:
    """``D=SELECTOR``: ``re:PATTERN`` is a regex on the input's name; other selectors as in Python."""
    out: dict[str, Any] = {}
    for item in items or []:
        dim, sel = _pair(item, "--coo-map", "DIM=SELECTOR")
        try:
            out[dim] = re.compile(sel[3:]) if sel.startswith("re:") else sel
        except re.error as e:
            raise UsageError(f"--coo-map {item!r}: {sel[3:]!r} is not a regular expression ({e})") from None
        if not (sel.startswith("re:") or sel == "INDEX" or re.fullmatch(r"(attr|data|cf):.+|vattr:[^:]+:.+", sel)):
            raise UsageError(f"--coo-map {item!r}: unknown selector {sel!r}; expected INDEX, attr:NAME, "
                             "vattr:VAR:NAME, data:VAR, cf:VAR or re:PATTERN")
    return out


def _coo_dtypes(items: Sequence[str] | None) -> dict[str, Any]:
    """``D=DTYPE``, each a numpy dtype (``i4``, ``f8``, ``M8[ns]``), checked before any input is read."""
    import numpy as np

    out: dict[str, Any] = {}
    for item in items or []:
        dim, name = _pair(item, "--coo-dtype", "DIM=DTYPE")
        try:
            out[dim] = np.dtype(name)
        except TypeError:
            raise UsageError(f"--coo-dtype {item!r}: {name!r} is not a numpy dtype (such as i4, f8, M8[ns], "
                             "U10)") from None
    return out


# Inputs from which an embedded local cluster pays for its start-up (about two seconds).
CLUSTER_INPUTS = 500


def _client(a: argparse.Namespace, n_inputs: int) -> Any:
    """The Dask client for ``--scheduler``/``--workers``, else None (work in this process)."""
    if a.scheduler:
        from distributed import Client

        return Client(a.scheduler)
    workers = a.workers if a.workers is not None else (os.cpu_count() or 1) if n_inputs >= CLUSTER_INPUTS else 0
    if workers <= 0:
        return None
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = Client(cluster)
    client.refset_cluster = cluster  # closed with the client below
    return client


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


def _scan_options(a: argparse.Namespace) -> dict[str, Any]:
    """The keywords of ``refset.scan`` that scan's options give (combine's data-file inputs: defaults)."""
    from refset.scan import INLINE_THRESHOLD

    return {"inline_threshold": getattr(a, "inline_threshold", INLINE_THRESHOLD),
            "group": getattr(a, "group", None),
            "drop_variables": [v for v in (getattr(a, "drop_variables", None) or "").split(",") if v],
            "subchunk": getattr(a, "subchunk", None)}


def _cli_words(problem: str) -> str:
    """A combine problem in the command line's words: ``coo_map={'d': ...}`` -> ``--coo-map d=SELECTOR``."""
    problem = re.sub(r"give coo_map=\{'([^']*)': \.\.\.\} \(e\.g\. 'INDEX', a regex on the file name, 'attr:NAME'\)",
                     r"give --coo-map \1=SELECTOR (e.g. \1=INDEX, \1=re:PATTERN on the file name, \1=attr:NAME)",
                     problem)
    problem = re.sub(r"coo_map\['([^']*)'\]", r"--coo-map \1", problem)
    return problem.replace("identical_dims names", "--identical-dims names")


def _combine_and_save(a: argparse.Namespace, inputs: list[Any], so: dict[str, Any]) -> int:
    import time

    import refset
    from refset.errors import InvalidReferences

    t0 = time.perf_counter()
    ro = _json_arg(a.remote_options, "--remote-options") if a.remote_options is not None else None
    options = _writer_options(a, a.output)
    coo_map, coo_dtypes = _coo_map(a.coo_map), _coo_dtypes(a.coo_dtype)
    if a.append and os.path.exists(a.output):
        inputs = [a.output, *inputs]
    else:
        _refuse_existing(a, [a.output])
    client = _client(a, len(inputs))
    bar = Bar(len(inputs), "opening" if client is None else "scanning on the cluster", wanted(a.quiet))
    try:
        with _unused_drops(a, 1, f"any of the {len(inputs)} inputs"):
            rs = refset.combine(inputs, concat_dims=a.concat_dim,
                                identical_dims=[v for v in (a.identical_dims or "").split(",") if v],
                                coo_map=coo_map, coo_dtypes=coo_dtypes,
                                storage_options=so, remote_options=ro, scan_options=_scan_options(a),
                                client=client, progress=bar.update)
    except InvalidReferences as e:
        raise InvalidReferences([_cli_words(p) for p in e.problems]) from None
    finally:
        bar.close()
        if client is not None:
            cluster = getattr(client, "refset_cluster", None)
            client.close()
            if cluster is not None:
                cluster.close()
    _save(rs, a.output, a, options, so)
    if not a.quiet:
        _summary(a.output, len(inputs), rs, t0)
    return EXIT_OK


def cmd_combine(a: argparse.Namespace) -> int:
    from refset.combine import expand_lists

    # a list-of-sets file counted as its items (in the progress bar and the summary)
    return _combine_and_save(a, expand_lists(_inputs(a.inputs)), _json_arg(a.storage_options, "--storage-options"))


def cmd_scan(a: argparse.Namespace) -> int:
    import time


    t0 = time.perf_counter()
    a.files = _inputs(a.files)
    if a.concat_dim:
        return _combine_and_save(a, a.files, _json_arg(a.storage_options, "--storage-options"))
    if a.remote_options is not None:
        raise UsageError("--remote-options: used with --concat-dim (reading coordinate values); a scan "
                         "reads only FILE, with --storage-options")
    given = [flag for flag, v in (("--identical-dims", a.identical_dims), ("--coo-map", a.coo_map),
                                  ("--coo-dtype", a.coo_dtype), ("--append", a.append),
                                  ("--scheduler", a.scheduler)) if v]
    if given:
        raise UsageError(f"{given[0]}: applies when files are combined: give --concat-dim DIM too")
    many = len(a.files) > 1
    if many and "://" not in a.output and os.path.isfile(a.output):
        raise UsageError(f"-o {a.output}: several files need a directory (end it with /)")
    so = _json_arg(a.storage_options, "--storage-options")
    dests = [_scan_output(src, a.output, many, a.format) for src in a.files]
    options = _writer_options(a, dests[0], check_suffix=not (many or a.output.endswith("/")))
    _refuse_existing(a, dests, made=a.output if many or a.output.endswith("/") else None)
    if (many or a.output.endswith("/")) and "://" not in a.output:
        os.makedirs(a.output, exist_ok=True)
    arrays = refs = 0
    where = a.files[0] if not many else f"any of the {len(a.files)} files"
    from refset.scan import Scan

    run = Scan(**_scan_options(a))  # one run: files of one product share parsed headers
    with Bar(len(a.files), "scanning", many and wanted(a.quiet)) as bar, _unused_drops(a, len(a.files), where):
        for src, dest in bar.iterate(zip(a.files, dests, strict=True)):
            rs = run(src, storage_options=so)
            _save(rs, dest, a, options, so)
            n = sum(rs.table(p).count() for p in rs.grids)
            arrays, refs = arrays + len(rs.grids), refs + n
            if not a.quiet and many:
                bar.write(f"wrote {dest} ({len(rs.grids)} arrays, {n:,} references) from {src}")
    if not a.quiet and many:
        size = sum(_size_on_disk(d) or 0 for d in dests)
        sys.stderr.write(f"scanned {len(a.files):,} inputs into {a.output}: {arrays} arrays, {refs:,} "
                         f"references, {size:,} bytes in {time.perf_counter() - t0:.1f} s\n")
    elif not a.quiet:
        _summary(dests[0], 1, rs, t0)
    return EXIT_OK


def cmd_cat(a: argparse.Namespace) -> int:
    import refset

    rs = refset.load(a.refs, storage_options=_json_arg(a.storage_options, "--storage-options"))
    fs = refset.ReferenceFileSystem(fo=rs, remote_options=_json_arg(a.remote_options, "--remote-options"))
    data = fs.cat_file(a.key, start=a.start, end=a.end)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return EXIT_OK


def cmd_demo(a: argparse.Namespace) -> int:
    from refset.cli.demo import MARKER, prepare, run
    from refset.errors import Unsupported

    if a.dir is not None and os.path.isfile(os.path.join(a.dir, MARKER)) and not a.quiet:
        sys.stderr.write(f"replacing the files of an earlier refset demo in {a.dir}\n")
    try:
        directory = prepare(a.dir)
    except Unsupported as e:
        raise UsageError(str(e)) from None
    run(directory, files=a.files, workers=a.workers, progress=wanted(a.quiet))
    return EXIT_OK


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

    def error(self, message: str) -> Any:  # type: ignore[override]
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


def _overwrite(s: argparse.ArgumentParser) -> None:
    s.add_argument("--overwrite", action="store_true", help="replace an existing output")


def _combine_options(s: argparse.ArgumentParser, required: bool) -> None:
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
    s.add_argument("--scheduler", metavar="ADDR", help="run on this Dask scheduler (tcp://host:port)")
    s.add_argument("--workers", type=int, metavar="N",
                   help=f"processes of an embedded Dask cluster (default: one per core from "
                        f"{CLUSTER_INPUTS} inputs, else none; 0: this process)")
    s.add_argument("--quiet", action="store_true", help="no progress bar, summary or 'wrote' lines")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    from refset.errors import (
        InvalidOption,
        InvalidReferences,
        ReferenceNotReachable,
        RefsetError,
        Unsupported,
    )

    try:
        _check_args(a)
        status = int(a.func(a))
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except BrokenPipeError:  # the reader left (`refset ls ... | head`): what it wanted was written
        _silence_stdout()
        return EXIT_OK
    except (UsageError, InvalidOption) as e:
        sys.stderr.write(f"refset {a.command}: error: {e}\n")
        return EXIT_USAGE
    except (InvalidReferences, Unsupported) as e:
        text = str(e)  # one problem on the same line, several below it
        sys.stderr.write(f"refset {a.command}: invalid input:" + ("\n" if "\n" in text else " ") + text + "\n")
        return EXIT_INVALID
    except NotInstalled as e:
        sys.stderr.write(f"refset {a.command}: {e}\n")
        return EXIT_INVALID
    except FileNotFoundError as e:
        sys.stderr.write(f"refset {a.command}: not found: {e}\n")
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if os.environ.get("REFSET_DEBUG") == "1":  # every line below, with its traceback
            import traceback

            traceback.print_exc()
        if _is_access_error(e):
            sys.stderr.write(f"refset {a.command}: {_access_message(a, e)}\n")
        elif isinstance(e, ReferenceNotReachable | RefsetError):
            sys.stderr.write(f"refset {a.command}: {e}\n")
        elif isinstance(e, OSError):  # named after what was read, unless the message names it
            subject = _subject(a)
            said = _one_line(e)
            sys.stderr.write(f"refset {a.command}: " + ("" if subject in said else f"{subject}: ") + said + "\n")
        elif isinstance(e, KeyError):
            sys.stderr.write(f"refset {a.command}: no such key: {e}\n")
        else:  # a failure nothing above foresaw: one line; the traceback with REFSET_DEBUG=1
            sys.stderr.write(f"refset {a.command}: error: {type(e).__name__}: {_one_line(e)}\n")
        return EXIT_INVALID


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or "(no message)"


def _is_access_error(e: BaseException) -> bool:
    """Credentials missing or refused, an endpoint unreachable: botocore's errors, or the
    PermissionError s3fs turns a refusal into."""
    root = type(e).__module__.split(".")[0]
    return root in ("botocore", "aiobotocore") or (isinstance(e, PermissionError) and "s3://" in str(e))


def _subject(a: argparse.Namespace) -> str:
    """The input a command reads first (its set, IN, or first FILE/INPUT)."""
    return next((v if isinstance(v, str) else v[0] for v in (
        getattr(a, n, None) for n in ("refs", "input", "files", "inputs")) if v), "?")


def _access_message(a: argparse.Namespace, e: BaseException) -> str:
    """One line: what was being read (or written), why it failed, and the options that give
    credentials."""
    subject = _subject(a)
    said = _one_line(e)
    out = getattr(a, "output", None)
    verb = "read"
    if isinstance(out, str) and _remote(out) and (
            (a.command in ("scan", "convert") and not _remote(subject))  # they read no remote data
            or (urlsplit(out).netloc and urlsplit(out).netloc in said)):
        where, flag, verb = out, "--storage-options", "write"
    elif _remote(subject):
        where, flag = subject, "--storage-options"
    else:  # a local set: the data files it points into
        where = f"the data files {subject} points into"
        flag = "--remote-options" if hasattr(a, "remote_options") else "--storage-options"
    if re.search(r"credential|access ?denied|forbidden|signature|permission", type(e).__name__ + said, re.I):
        hint = (f"public S3 data: {flag} '{{\"anon\": true}}' or FSSPEC_S3_ANON=true; else AWS credentials "
                "(environment or profile)")
    else:
        hint = f"check the endpoint or network; fsspec options go in {flag}"
    return f"cannot {verb} {where}: {said} ({hint})"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush cannot fail again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass
