"""``refset convert``: a set read in any form and written in another (or the same), its URLs renamed
with ``--rename``."""

from __future__ import annotations

import argparse
import sys

from refset.cli.common import (
    EXIT_OK,
    UsageError,
    _json_arg,
    _pair,
    _refuse_existing,
    _save,
    _summary,
    _writer_options,
)
from refset.cli.progress import Bar, wanted


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
