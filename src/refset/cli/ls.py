"""``refset ls``: the keys of a set under a prefix (metadata keys first, then chunk keys in C order),
with ``-l`` each one's kind and where it points."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from refset.cli.common import EXIT_INVALID, EXIT_OK, _json_arg

if TYPE_CHECKING:
    from refset.model.refset import ReferenceSet


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


def _ls_line(rs: ReferenceSet, key: str, long: bool) -> str:
    if not long:
        return key + "\n"
    ref = rs[key]
    if isinstance(ref, bytes):
        return f"{key}\tinline\t{len(ref)}\n"
    if len(ref) == 1:
        return f"{key}\tfile\t{ref[0]}\n"
    return f"{key}\trange\t{ref[0]}\t{ref[1]}\t{ref[2]}\n"
