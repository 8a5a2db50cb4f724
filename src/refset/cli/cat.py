"""``refset cat``: the bytes of one key on stdout (inline data decoded; a range read from its file)."""

from __future__ import annotations

import argparse
import sys

from refset.cli.common import EXIT_OK, _json_arg


def cmd_cat(a: argparse.Namespace) -> int:
    import refset

    rs = refset.load(a.refs, storage_options=_json_arg(a.storage_options, "--storage-options"))
    fs = refset.ReferenceFileSystem(fo=rs, remote_options=_json_arg(a.remote_options, "--remote-options"),
                                    verify_sources=not a.no_verify_sources)
    data = fs.cat_file(a.key, start=a.start, end=a.end)
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return EXIT_OK
