"""Every fenced block of README.md and docs/*.md runs as written, as a user at the repository root
would paste it, so the docs cannot rot.

Per document, in order, in one temporary directory holding the repository's ``examples/`` and the
small data the command-line examples name (``data/day*.nc``, ``sets/ens_*.json``): ```python blocks
share one namespace; ```bash and ```console blocks (console: the lines after ``$ ``) must be
``refset ...`` commands and run in bash with this checkout's refset first on PATH, each exiting 0;
```text and ```json blocks show output or layouts and are not run. A block is left out only with
``<!-- docs-test: skip (REASON) -->`` among the HTML comment lines right before it: those are reported as skipped tests
(``pytest -rs`` lists them with their reasons).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN = {"python", "bash", "console"}
SHOW = {"text", "json"}
SKIP = re.compile(r"<!-- docs-test: skip \((.+)\) -->")
COMMENT = re.compile(r"<!--.*-->")


@dataclass
class Block:
    doc: Path
    line: int  # of the opening fence
    lang: str
    code: str
    skip: str | None  # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO)}:{self.line}"


def _blocks(doc: Path) -> list[Block]:
    lines = doc.read_text().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, lang = i, lines[i][3:].strip()
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                i += 1
            j, reason = start - 1, None
            while j >= 0 and COMMENT.fullmatch(lines[j].strip()):  # the HTML comments right before it
                if m := SKIP.fullmatch(lines[j].strip()):
                    reason = m.group(1)
                j -= 1
            out.append(Block(doc, start + 1, lang, "\n".join(lines[start + 1:i]) + "\n", reason))
        i += 1
    return out


BLOCKS = {doc: _blocks(doc) for doc in DOCS}
RUNNABLE = [doc for doc, bs in BLOCKS.items() if any(b.lang in RUN and not b.skip for b in bs)]
SKIPPED = [b for bs in BLOCKS.values() for b in bs if b.skip]


def test_every_block_says_what_it_is():
    """Untagged blocks would escape the test: each is code that runs or output/layout that does not."""
    bad = [f"{b.where}: ```{b.lang}" for bs in BLOCKS.values() for b in bs if b.lang not in RUN | SHOW]
    assert not bad, f"tag each block with one of {sorted(RUN | SHOW)}: {bad}"
    misplaced = [b.where for b in SKIPPED if b.lang not in RUN]
    assert not misplaced, f"skip markers on blocks that never run: {misplaced}"


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where for b in SKIPPED])
def test_skipped_block(block):
    print(f"{block.where}: not run ({block.skip})")
    pytest.skip(f"{block.where}: {block.skip}")


@pytest.fixture(scope="session")
def doc_data(tmp_path_factory) -> Path:
    """The files the docs' commands name: ``data/day01..03.nc`` (daily, time x lat x lon) and
    ``sets/ens_1..3.json`` (reference sets of three members of one run), made small."""
    netCDF4 = pytest.importorskip("netCDF4")
    import refset

    root = tmp_path_factory.mktemp("docdata")
    (root / "data").mkdir()
    (root / "members").mkdir()
    (root / "sets").mkdir()

    def write(path: Path, day: int, offset: float) -> None:
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", 4)
            ds.createDimension("lon", 6)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2024-01-01"
            t[:] = [day]
            ds.createVariable("lat", "f4", ("lat",))[:] = np.linspace(-45, 45, 4)
            ds.createVariable("lon", "f4", ("lon",))[:] = np.linspace(0, 300, 6)
            v = ds.createVariable("tas", "f4", ("time", "lat", "lon"), chunksizes=(1, 2, 3), zlib=True)
            v[:] = offset + np.arange(24, dtype="f4").reshape(1, 4, 6) + day

    for day in range(3):
        write(root / "data" / f"day{day + 1:02d}.nc", day, 280.0)
    for member in (1, 2, 3):
        nc = root / "members" / f"ens_{member}.nc"
        write(nc, 0, 270.0 + member)
        refset.save(refset.scan(str(nc)), str(root / "sets" / f"ens_{member}.json"))
    return root


@pytest.fixture()
def doc_dir(doc_data, tmp_path, monkeypatch) -> Path:
    for name in ("data", "members", "sets"):
        os.symlink(doc_data / name, tmp_path / name)
    os.symlink(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _shell_env(tmp_path: Path) -> dict[str, str]:
    """``refset`` on PATH is this checkout's CLI run by this interpreter."""
    bin_dir = tmp_path.parent / f"{tmp_path.name}-bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "refset"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m refset.cli "$@"\n')
    script.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "src"), env.get("PYTHONPATH")]))
    return env


def _commands(block: Block) -> list[str]:
    """The commands of a shell block: continuation lines joined; console output lines dropped."""
    lines = block.code.splitlines()
    if block.lang == "console":
        lines = [ln[2:] for ln in lines if ln.startswith("$ ")]
    out: list[str] = []
    for ln in lines:
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + " " + ln.strip()
        elif ln.strip() and not ln.lstrip().startswith("#"):
            out.append(ln.strip())
    return out


def _run_shell(block: Block, env: dict[str, str]) -> None:
    for cmd in _commands(block):
        assert cmd.startswith("refset "), (
            f"{block.where}: only `refset ...` commands run here, got {cmd!r}; mark the block "
            "<!-- docs-test: skip (REASON) --> if it installs packages or needs the network")
        p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, f"{block.where}: `{cmd}` exited {p.returncode}:\n{p.stdout}{p.stderr}"
        sys.stdout.write(f"$ {cmd}\n{p.stdout}")


# kerchunk.md runs fsspec's parquet reader and writer (fastparquet through pandas 3): their warnings
@pytest.mark.filterwarnings("ignore:.*fastparquet.*", "ignore:.*infer_string.*")
@pytest.mark.parametrize("doc", RUNNABLE, ids=[str(d.relative_to(REPO)) for d in RUNNABLE])
def test_doc_runs(doc, doc_dir):
    namespace = {"__name__": "__docs__"}
    env = _shell_env(doc_dir)
    for block in BLOCKS[doc]:
        if block.lang not in RUN:
            continue
        if block.skip:
            print(f"{block.where}: skipped ({block.skip})")
            continue
        if block.lang == "python":
            # padded so that a traceback names the document's own line numbers
            exec(compile("\n" * block.line + block.code, str(block.doc), "exec"), namespace)
        else:
            _run_shell(block, env)
