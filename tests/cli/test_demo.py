"""``refset demo`` end to end: what it prints is what it wrote, and what xarray reads from the files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refset
from tests.helpers import run_tty_stderr

pytest.importorskip("h5netcdf")
pytest.importorskip("distributed")
xr = pytest.importorskip("xarray")

REPO = Path(__file__).resolve().parents[2]
DEMO = [sys.executable, "-m", "refset.cli", "demo"]
ROW = re.compile(r"^   (json V0|json V1|parquet|packed) +(\S+) +([\d,]+) +([\d.]+)$", re.M)
BARS = ("making files", "scanning on")


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def _steps(text: str) -> list[str]:
    """The first five words of the numbered step lines, numbers blanked."""
    return [re.sub(r"\d[\d,.]*", "N", " ".join(line.split()[:5])) for line in text.splitlines()
            if re.match(r"\d\. ", line)]


def _mean_from_files(files: list[Path]) -> float:
    """tas's mean over the NetCDF files, read by netCDF-C (not the h5netcdf the demo wrote them with)."""
    parts = [xr.open_dataset(f, engine="netcdf4") for f in files]
    try:
        return float(xr.concat(parts, dim="time")["tas"].mean(dtype="f8"))
    finally:
        for p in parts:
            p.close()


def test_demo_on_a_cluster_prints_what_it_wrote(tmp_path: Path):
    pytest.importorskip("netCDF4")
    d = tmp_path / "demo"
    rc, out, tty = run_tty_stderr([*DEMO, str(d), "--files", "6"])
    assert rc == 0, out + tty

    files = sorted((d / "data").glob("*.nc"))
    assert [f.name for f in files] == [f"daily-2024-01-0{i}.nc" for i in range(1, 7)]
    made = re.search(r"Made 6 daily NetCDF4 files \(([\d,]+) bytes\)", out)
    assert made and int(made[1].replace(",", "")) == sum(f.stat().st_size for f in files)
    assert "local Dask cluster (2 worker processes" in out

    rows = ROW.findall(out)
    assert [r[0] for r in rows] == ["json V0", "json V1", "parquet", "packed"]
    want = refset.load(d / "combined.json")
    for _, name, size, per_key in rows:
        path = d / name.rstrip("/")
        assert int(size.replace(",", "")) == _size(path)
        rs = refset.load(path)
        assert per_key == f"{_size(path) / len(rs):.1f}"
        assert set(rs) == set(want) and rs["tas/5.2.3"] == want["tas/5.2.3"]
        assert rs["tas/5.2.3"][0] == str(files[5])

    mean = re.search(r"Mean of tas over 6 days and the globe, through the references: (\S+) K", out)
    assert mean and float(mean[1]) == _mean_from_files(files)
    ds = refset.open_dataset(d / "combined.parq")
    assert float(ds["tas"].mean(dtype="f8")) == float(mean[1])
    assert int(np.isnan(ds["pr"].values).sum()) == 6 * 90 * 45  # one chunk column never written a day

    # progress bars on the terminal, following the tasks to the end
    assert "making files" in tty and "scanning on 2 workers" in tty and "6/6" in tty

    # README shows a real run: the same steps and table
    pasted = (REPO / "README.md").read_text().split("```text\n", 1)[1].split("```", 1)[0]
    assert _steps(pasted) == _steps(out) and len(_steps(out)) == 5
    assert [r[0] for r in ROW.findall(pasted)] == [r[0] for r in rows]
    assert 'pip install -e ".[all]" && refset demo\n```\n<!-- /main-command -->' in (REPO / "README.md").read_text()

    # every command it suggests works as printed
    steps = out.split("Try next", 1)[1].splitlines()[1:]
    assert len(steps) == 5
    for line in steps:
        r = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and not r.stderr.startswith("Traceback"), (line, r.stderr)
    assert (d / "again.json").exists() and (d / "combined.json.zst").exists()


def test_demo_progress_only_on_a_terminal_and_not_quiet(tmp_path: Path):
    d = tmp_path / "demo"
    r = subprocess.run([*DEMO, str(d), "--files", "2", "--workers", "0"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "in this process" in r.stdout and "Done in" in r.stdout
    assert not any(b in r.stderr for b in BARS) and "\r" not in r.stderr
    mean = re.search(r"through the references: (\S+) K", r.stdout)
    assert mean and float(mean[1]) == float(refset.open_dataset(d / "combined.packed")["tas"].mean(dtype="f8"))

    # again in the same directory (made by the demo: overwritten), on a terminal but --quiet
    rc, out, tty = run_tty_stderr([*DEMO, str(d), "--files", "3", "--workers", "0", "--quiet"])
    assert rc == 0 and "Done in" in out
    assert not any(b in tty for b in BARS)
    assert len(list((d / "data").glob("*.nc"))) == 3


def test_demo_refuses_a_directory_it_did_not_make(tmp_path: Path):
    (tmp_path / "mine.txt").write_text("keep me")
    r = subprocess.run([*DEMO, str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 2 and "not empty" in r.stderr and str(tmp_path) in r.stderr
    assert os.listdir(tmp_path) == ["mine.txt"]
    r = subprocess.run([*DEMO, "--files", "0"], capture_output=True, text=True)
    assert r.returncode == 2 and "--files" in r.stderr
