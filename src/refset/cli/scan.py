"""``refset scan``: data files (NetCDF4/HDF5/NetCDF3) into reference sets, one per file, or with
``--concat-dim`` combined into one."""

from __future__ import annotations

import argparse
import os
import sys

from refset.cli.combine import _combine_and_save
from refset.cli.common import (
    EXIT_OK,
    UsageError,
    _costs,
    _inputs,
    _json_arg,
    _refuse_existing,
    _save,
    _scan_options,
    _size_on_disk,
    _summary,
    _unused_drops,
    _writer_options,
)
from refset.cli.progress import Bar, wanted
from refset.errors import RefsetError


def _scan_output(src: str, out: str, many: bool, fmt: str | None) -> str:
    """OUT itself for one file; for several, ``OUT/<file name>.<suffix of the format>``."""
    if not many and not out.endswith("/"):
        return out
    from refset.formats.registry import forms

    suffix = {"v1": ".json", "json": ".json"}.get(fmt or "json") or forms()[fmt or "json"].suffixes[0]
    name = src.rstrip("/").rsplit("/", 1)[-1]
    return os.path.join(out, name + suffix)


def cmd_scan(a: argparse.Namespace) -> int:
    import time

    t0 = time.perf_counter()
    so = _json_arg(a.storage_options, "--storage-options")
    a.files = _inputs(a.files, so)
    if a.concat_dim:
        return _combine_and_save(a, a.files, so)
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
    dests = [_scan_output(src, a.output, many, a.format) for src in a.files]
    options = _writer_options(a, dests[0], check_suffix=not (many or a.output.endswith("/")))
    _refuse_existing(a, dests, made=a.output if many or a.output.endswith("/") else None)
    if (many or a.output.endswith("/")) and "://" not in a.output:
        os.makedirs(a.output, exist_ok=True)
    arrays = refs = 0
    where = a.files[0] if not many else f"any of the {len(a.files)} files"
    from refset.scan import Scan

    run = Scan(**_scan_options(a))  # one run: files of one product share parsed headers
    skipped: list[RefsetError] = []
    with Bar(len(a.files), "scanning", many and wanted(a.quiet)) as bar, _unused_drops(a, len(a.files), where):
        scanned = run.many_or_errors(a.files, so, concurrency=a.concurrency)  # remote files many at once
        tick = bar.counting_bytes(run.read_so_far)
        for src, dest, got in zip(a.files, dests, scanned, strict=True):
            if isinstance(got, RefsetError):
                if a.on_error != "skip":
                    raise got
                skipped.append(got)
                tick(1)
                continue
            rs = got
            _save(rs, dest, a, options, so)
            n = sum(rs.table(p).count() for p in rs.grids)
            arrays, refs = arrays + len(rs.grids), refs + n
            if not a.quiet and many:
                bar.write(f"wrote {dest} ({len(rs.grids)} arrays, {n:,} references) from {src}")
            tick(1)
    if not a.quiet and many:
        size = sum(_size_on_disk(d) or 0 for d in dests)
        extra = "".join(f", {x}" for x in (_costs(run), f"{len(skipped)} skipped" if skipped else "") if x)
        sys.stderr.write(f"scanned {len(a.files):,} inputs into {a.output}: {arrays} arrays, {refs:,} "
                         f"references, {size:,} bytes{extra} in {time.perf_counter() - t0:.1f} s\n")
        for err in skipped:
            sys.stderr.write(f"skipped: {err}\n")
    elif not a.quiet and not skipped:
        _summary(dests[0], 1, rs, t0, _costs(run))
    if skipped and not many:
        raise skipped[0]  # the only input: nothing was written
    return EXIT_OK
