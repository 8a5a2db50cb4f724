"""``refset verify`` (is every file of a set still what it recorded?) and ``refset refresh`` (rescan
the ones that changed and put their rows in place), over :mod:`refset.combine.refresh`."""

from __future__ import annotations

import argparse
import json
import sys
import time

from refset.cli.common import EXIT_INVALID, EXIT_OK, _json_arg
from refset.cli.progress import Bar, wanted


def _shown(c: object) -> str:
    from refset.errors import shown_record
    from refset.io.verify import Check

    assert isinstance(c, Check)
    if c.status == "missing":
        return f"missing    {c.url}: recorded {shown_record(c.recorded)}; now no such file"
    if c.status == "unreadable":
        return f"unreadable {c.url}: {c.error}"
    return f"changed    {c.url}: recorded {shown_record(c.recorded)}; now {shown_record(c.now)}"


def cmd_verify(a: argparse.Namespace) -> int:
    from refset.combine.refresh import verify
    from refset.formats import load

    t0 = time.perf_counter()
    so = _json_arg(a.storage_options, "--storage-options")
    ro = _json_arg(a.remote_options, "--remote-options") if a.remote_options else None
    rs = load(a.refs, storage_options=so)
    n = len(rs.fingerprints)
    with Bar(n, "verifying", wanted(a.quiet or a.json)) as bar:
        ver = verify(rs, remote_options=ro, concurrency=a.concurrency, progress=bar.update)
    if a.json:
        sys.stdout.write(json.dumps({"source": a.refs, **ver.to_json()}, indent=1) + "\n")
        return EXIT_OK if ver.ok else EXIT_INVALID
    for c in ver.of("changed", "missing", "unreadable"):
        sys.stdout.write(_shown(c) + "\n")
    counts = ver.counts()
    parts = [f"{counts.get(s, 0):,} {s}" for s in ("unchanged", "changed", "missing", "unreadable") if counts.get(s)]
    note = ""
    if not n:
        note = " (the set records no fingerprints of its files: made by kerchunk or an older refset)"
    elif ver.unrecorded:
        note = f"; {len(ver.unrecorded):,} file(s) it references have no record"
    sys.stderr.write(f"{a.refs}: {n:,} file(s) checked in {time.perf_counter() - t0:.1f} s: "
                     f"{', '.join(parts) or 'nothing to check'}{note}\n")
    return EXIT_OK if ver.ok else EXIT_INVALID


def cmd_refresh(a: argparse.Namespace) -> int:
    from refset.combine.refresh import refresh_report
    from refset.formats import load

    t0 = time.perf_counter()
    so = _json_arg(a.storage_options, "--storage-options")
    ro = _json_arg(a.remote_options, "--remote-options") if a.remote_options else None
    n = len(load(a.refs, storage_options=so).fingerprints)
    with Bar(n, "verifying", wanted(a.quiet)) as bar:
        got = refresh_report(a.refs, dest=a.output, concat_dim=a.concat_dim, drop_missing=a.drop_missing,
                             storage_options=so, remote_options=ro, concurrency=a.concurrency,
                             progress=bar.update)
    for url in got.rescanned:
        sys.stdout.write(f"rescanned  {url}\n")
    for c in got.verification.of("missing"):
        if c.url in got.missing:
            sys.stdout.write(("dropped    " if c.url in got.dropped else "missing    ") + c.url + "\n")
    if not a.quiet:
        where = a.output or a.refs
        did = (f"rescanned {len(got.rescanned):,} of {n:,} file(s)" if got.rescanned or got.dropped
               else f"all {n:,} file(s) unchanged, nothing written")
        extra = []
        if got.parts:
            extra.append(f"variables now made of parts: {', '.join(sorted(set(got.parts)))}")
        left = [m for m in got.missing if m not in got.dropped]
        if left:
            extra.append(f"{len(left):,} missing left as they are (--drop-missing drops them)")
        if got.dropped:
            extra.append(f"{len(got.dropped):,} missing dropped")
        wrote = f"; wrote {where}" if got.rescanned or got.dropped else ""
        sys.stderr.write(f"refset refresh: {did} in {time.perf_counter() - t0:.1f} s{wrote}"
                         + ("".join(f"; {e}" for e in extra)) + "\n")
    return EXIT_OK
