"""``refset validate``: every problem of a set, one line each on stdout, and a verdict on stderr."""

from __future__ import annotations

import argparse
import sys

from refset.cli.common import EXIT_INVALID, EXIT_OK, _json_arg


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
