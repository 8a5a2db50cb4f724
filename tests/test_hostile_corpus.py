"""The hostile corpus (tests/hostile/, one README row per file) replayed through the library and through
every CLI command that reads (info, validate, ls, cat, convert): each input ends in a ``refset.errors`` error; each command exits 1 with
its problems on stderr, one line each, no traceback, and leaves no output behind. Most commands run
in this process (``refset.cli.main``); a few run as real subprocesses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import refset
from refset.cli import main

from .fuzzing import exercise, no_hang

HOSTILE = Path(__file__).parent / "hostile"
ROW = re.compile(r"^\| `([^`]+)` \| `([^`]*)` \|")


def _rows() -> dict[str, str]:
    """File name -> the key ``cat`` asks for, from the README's table."""
    rows = {}
    for line in (HOSTILE / "README.md").read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = m.group(2)
    return rows


ROWS = _rows()
FILES = sorted(ROWS)


def test_every_file_has_a_readme_row():
    on_disk = sorted(p.name for p in HOSTILE.iterdir() if p.name != "README.md")
    assert on_disk == FILES


@pytest.mark.parametrize("name", FILES)
def test_library_refuses(name):
    assert exercise(str(HOSTILE / name)) == "error"
    if ".json" in name:
        assert exercise(str(HOSTILE / name), lazy=True) == "error"


COMMANDS = ["info", "validate", "ls", "cat", "convert"]


def _argv(command: str, name: str, out: Path) -> list[str]:
    src = str(HOSTILE / name)
    return {"info": ["info", src], "validate": ["validate", src], "ls": ["ls", "-l", src],
            "cat": ["cat", src, ROWS[name]],
            "convert": ["convert", src, str(out / "out.json")]}[command]


def _check_output(command: str, status: int, out: str, err: str, dest: Path) -> None:
    assert status == 1, (status, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.splitlines()
    assert lines and all(line.strip() for line in lines), err  # one non-empty line per problem
    if command == "validate" and out:  # the problems on stdout, one a line; their count on stderr
        m = re.search(r": (\d+) problem\(s\)$", lines[-1])
        assert m and int(m.group(1)) == len(out.splitlines()), (out, err)
    else:  # "refset COMMAND: ..." and then the problems
        assert lines[0].startswith(f"refset {command}: "), err
    assert list(dest.iterdir()) == [], "output left behind"


@pytest.mark.parametrize("command", COMMANDS)
def test_cli_commands_in_process(command, tmp_path, capsys):
    for name in FILES:
        dest = tmp_path / name
        dest.mkdir()
        with no_hang():
            status = main(_argv(command, name, dest))
        captured = capsys.readouterr()
        _check_output(command, status, captured.out, captured.err, dest)


@pytest.mark.parametrize(("command", "name"), [
    ("info", "v1-template-pow.json"), ("validate", "parquet-offset-2p63.parq"),
    ("cat", "packed-block-past-end.packed"), ("convert", "json-deep.json.gz"),
])
def test_cli_commands_in_subprocesses(command, name, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(Path(refset.__file__).parents[1]))
    p = subprocess.run([sys.executable, "-m", "refset.cli", *_argv(command, name, tmp_path)],
                       capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    _check_output(command, p.returncode, p.stdout, p.stderr, tmp_path)
