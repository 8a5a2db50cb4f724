"""``refset info``: a set's figures (:func:`refset.model.summary.summary`, with its source and size on
disk), printed as a header and a table of its arrays, or as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from refset.cli.common import EXIT_OK, _json_arg, _size_on_disk


def info_dict(path: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The summary of the set at ``path``, after its ``source`` and ``format``, its ``size_on_disk``
    (None when remote)."""
    import refset
    from refset.model.summary import summary

    figures = summary(refset.load(path, storage_options=storage_options))
    return {"source": path, "format": figures.pop("format"), "size_on_disk": _size_on_disk(path), **figures}


_HEADER_KEYS = {"source", "format", "size_on_disk", "keys", "inline", "range", "whole_file", "references",
                "unique_urls",
                "referenced_bytes", "arrays", "parts"}
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
    for path, layout in (d.get("parts") or {}).items():
        spans = ", ".join(f"{n} {a}:{b}" for n, a, b in layout["parts"])
        head.append((f"parts of {path or '/'}", f"{len(layout['parts'])} along {layout['dim']!r} "
                                                f"(shape {'x'.join(map(str, layout['shape']))}): {spans}"))
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
