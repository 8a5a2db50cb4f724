"""``refset combine`` (and ``refset scan --concat-dim``): sets or data files combined into one set,
in this process or on a Dask cluster; the ``--coo-map``/``--coo-dtype`` options read, and combine's
problems said in the command line's words."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from refset.cli.common import (
    EXIT_OK,
    UsageError,
    _costs,
    _inputs,
    _json_arg,
    _pair,
    _refuse_existing,
    _remote,
    _save,
    _scan_options,
    _summary,
    _unused_drops,
    _writer_options,
)
from refset.cli.progress import Bar, wanted
from refset.errors import OptionRef, Problem

if TYPE_CHECKING:
    from distributed import Client


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


def _client(a: argparse.Namespace, n_inputs: int) -> Client | None:
    """The Dask client for ``--scheduler``/``--workers``, else None (work in this process); without
    either, an embedded cluster of a worker per core from ``CLUSTER_INPUTS`` inputs."""
    from refset.combine.cluster import CLUSTER_INPUTS, local_client

    if a.scheduler:
        from distributed import Client

        return Client(a.scheduler)
    workers = a.workers if a.workers is not None else (os.cpu_count() or 1) if n_inputs >= CLUSTER_INPUTS else 0
    return local_client(workers) if workers > 0 else None


def _flag(ref: OptionRef) -> str | None:
    """An option of ``refset.combine`` named in a problem, as the command line spells it."""
    if ref.option == "coo_map":
        if ref.form == "give":
            k = ref.key
            return f"--coo-map {k}=SELECTOR (e.g. {k}=INDEX, {k}=re:PATTERN on the file name, {k}=attr:NAME)"
        return f"--coo-map {ref.key}"
    if ref.option == "identical_dims":
        return "--identical-dims"
    return None


def _cli_words(problem: str) -> str:
    """A combine problem in the command line's words: ``coo_map['d']`` is ``--coo-map d``."""
    return problem.spelled(_flag) if isinstance(problem, Problem) else problem


def _combine_and_save(a: argparse.Namespace, inputs: list[Any], so: dict[str, Any]) -> int:
    import time

    import refset
    from refset.errors import InvalidReferences, Unsupported

    t0 = time.perf_counter()
    ro = _json_arg(a.remote_options, "--remote-options") if a.remote_options is not None else None
    options = _writer_options(a, a.output)
    coo_map, coo_dtypes = _coo_map(a.coo_map), _coo_dtypes(a.coo_dtype)
    icechunk = _icechunk_output(a, options, ro, so)  # True: refset.append adds the inputs to it
    if not icechunk:
        if a.append and os.path.exists(a.output):
            inputs = [a.output, *inputs]
        else:
            _refuse_existing(a, [a.output])
    client = _client(a, len(inputs))
    from refset.scan import Scan

    run = Scan(**_scan_options(a))
    bar = Bar(len(inputs), "opening" if client is None else "scanning on the cluster", wanted(a.quiet))
    kw: dict[str, Any] = dict(identical_dims=[v for v in (a.identical_dims or "").split(",") if v],
                              coo_map=coo_map, coo_dtypes=coo_dtypes, storage_options=so, remote_options=ro,
                              scan=run, client=client, progress=bar.counting_bytes(run.read_so_far),
                              concurrency=a.concurrency, on_error=a.on_error,
                              verify_sources=not a.no_verify_sources)
    try:
        with _unused_drops(a, 1, f"any of the {len(inputs)} inputs"):
            if icechunk:
                kw["remote_options"] = options.pop("remote_options", ro)
                rs = refset.append(inputs, a.output, concat_dim=a.concat_dim[0], format="icechunk", **options, **kw)
            else:
                rs = refset.combine(inputs, concat_dims=a.concat_dim, **kw)
    except InvalidReferences as e:
        raise InvalidReferences([_cli_words(p) for p in e.problems]) from None
    except Unsupported as e:
        raise Unsupported(_cli_words(e.args[0]) if e.args else str(e)) from None
    finally:
        bar.close()
        if client is not None:
            client.close()  # and the embedded cluster with it
    if not icechunk:
        _save(rs, a.output, a, options, so)
    skipped = _skipped(rs)
    if not a.quiet:
        extra = ", ".join(x for x in (_costs(run), f"{len(skipped)} skipped" if skipped else "") if x)
        _summary(a.output, len(inputs), rs, t0, extra)
        for s in skipped:
            sys.stderr.write(f"skipped input {s['index']}: {s['error']}\n")
    return EXIT_OK


def _icechunk_output(a: argparse.Namespace, options: dict[str, Any], ro: dict[str, Any] | None,
                     so: dict[str, Any]) -> bool:
    """Whether the inputs are appended to an Icechunk repository (``--append``: refset.append makes it
    when there is none). For any Icechunk output the data files' options go to its virtual chunk
    containers (unless ``-O remote_options=`` says otherwise); a repository there without ``--append``
    is a :class:`UsageError` before any work."""
    from refset.formats.registry import by_name, for_dest

    spec = by_name(a.format) if a.format is not None else for_dest(a.output)
    if spec.name != "icechunk":
        return False
    from refset.formats.icechunk.repo import exists

    if ro is not None:
        options.setdefault("remote_options", ro)
    if a.append:
        if len(a.concat_dim) != 1:
            raise UsageError("--append to an Icechunk repository takes one --concat-dim")
        return True
    if exists(a.output, so if _remote(a.output) else None):
        raise UsageError(f"output {a.output}: an Icechunk repository exists there; give --append to add the "
                         "inputs to it in a new commit")
    return False


def _skipped(rs: Any) -> list[dict[str, Any]]:
    """The inputs ``--on-error skip`` left out, as the set's root attribute lists them."""
    import json

    from refset.combine import SKIPPED_ATTR

    try:
        ref = rs[".zattrs"]
    except KeyError:
        return []
    attrs = json.loads(ref) if isinstance(ref, bytes | str) else {}
    got = attrs.get(SKIPPED_ATTR) if isinstance(attrs, dict) else None
    return got if isinstance(got, list) else []


def cmd_combine(a: argparse.Namespace) -> int:
    from refset.combine.inputs import expand_lists

    # a list-of-sets file counted as its items (in the progress bar and the summary)
    so = _json_arg(a.storage_options, "--storage-options")
    return _combine_and_save(a, expand_lists(_inputs(a.inputs, so)), so)
