"""Scan fuzzing (issue 30, item 4): seeded byte mutations (flips, truncations, runs of zeros or 0xFF,
mostly in the metadata) of NetCDF3, NetCDF4 and HDF5 files (written here by h5py and netCDF4, and the
shared corpus's real files) through ``refset.scan`` and a read of every variable, against h5py or
scipy/netCDF4 reading the same bytes, in worker processes under a memory limit and a deadline per case
(:mod:`tests.scanfuzz`).

Every case must end in the oracle's values, or in a refset error naming the file: never another
exception, a crash, a hang, running out of memory, values other than the oracle's (when the oracle
reads the file), an error that does not say which file, or a scan's ``InvalidFile`` that no ``Broken``
caused (the scanners' frame turns the one Broken, a format fault or a library's refusal wrapped where
the library is called, into InvalidFile; any other exception is a bug and must surface as one). 500 cases by default; ``FUZZ_SCALE=N`` runs
N times as many (CI's longer hunt). A failing case is replayed, with its traceback, by
``python -m tests.scanfuzz SEED`` (``--keep DIR`` writes the mutated file).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("h5py")
pytest.importorskip("netCDF4")
pytest.importorskip("scipy")
pytest.importorskip("xarray")
pytest.importorskip("psutil")

from tests.scanfuzz import (
    FAILING,
    Pool,
    Result,
    Source,
    counts,
    default_generated_dir,
    load_sources,
    replay_command,
    table,
)

SCALE = int(os.environ.get("FUZZ_SCALE", "1"))
CASES = 500 * SCALE


@pytest.fixture(scope="module")
def sources() -> list[Source]:
    # where `python -m tests.scanfuzz SEED` finds them too (the same bytes: they are written alike)
    return load_sources(default_generated_dir())


def _report(failing: list[Result]) -> str:
    lines = [f"{len(failing)} of {CASES} mutated files went wrong:"]
    for r in failing[:40]:
        lines.append(f"  seed {r.seed} [{r.outcome}] {r.source} ({r.mutation[:60]})")
        if r.exc_type:
            lines.append(f"      {r.exc_type}: {r.message[:160]}")
        if r.where or r.origin:
            lines.append(f"      at {r.where or '-'} (innermost: {r.origin or '-'})")
        if r.detail:
            lines.append(f"      {r.detail[:200]}")
    if len(failing) > 40:
        lines.append(f"  ... and {len(failing) - 40} more")
    lines.append(f"replay one: {replay_command(failing[0].seed)}")
    return "\n".join(lines)


def test_mutated_files_read_right_or_are_refused_by_name(sources: list[Source], tmp_path: Path) -> None:
    # two workers on the 2-core machine; one beside another pytest-xdist process
    workers = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
    pool = Pool(tmp_path / "work", workers=workers)
    clean = pool.calibrate(sources)
    results = pool.run(range(CASES), sources)
    print(f"\n{len(sources)} sources (unmutated, not right: "
          f"{sorted(k for k, r in clean.items() if r.outcome != 'right')}), refset from {pool.refset_file}")
    print(table(results))
    assert sum(counts(results).values()) == CASES
    failing = [r for r in results if r.outcome in FAILING]
    assert not failing, _report(failing)


def test_an_invalid_file_no_broken_caused_fails_a_case() -> None:
    """The check itself: the frame's InvalidFile (from a Broken, or from a library's error with the
    Broken as its context) passes; one raised from anything else fails the case."""
    from refset.errors import InvalidFile
    from refset.io.scanfile import Broken
    from tests.scan.fuzzcheck import refusal_problem
    from tests.scanfuzz import classify

    for cause in (None, OSError("libhdf5 says no")):
        try:
            try:
                raise Broken("cut") from cause
            except Broken as b:
                raise InvalidFile("f.nc: not a valid HDF5 file: cut") from (b.__cause__ or b)
        except InvalidFile as e:
            assert refusal_problem("f.nc", e) is None
    bare = InvalidFile("f.nc: cannot be scanned: KeyError: 3")
    assert refusal_problem("f.nc", bare) == "InvalidFile not from Broken: f.nc: cannot be scanned: KeyError: 3"
    error = {"refset": True, "from_broken": False, "phase": "scan", "memory": False, "names_file": True}
    assert classify({"error": error, "vars": {}}, None, {})[0] == "invalid file not from Broken"
    assert classify({"error": {**error, "from_broken": True}, "vars": {}}, None, {})[0] == \
        "oracle also fails (refset error)"
