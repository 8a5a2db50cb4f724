"""Every mistake of issue 13's first hour, as a user types it: one line naming what is wrong, exit 2 for
a command line that cannot work and 1 for wrong input, no traceback, and nothing written.

Elsewhere: an unknown output suffix (test_cli.py::test_unknown_output_suffix_is_a_usage_error), a reader
leaving a pipe early (test_cli.py::test_reader_leaving_early_is_not_an_error), wrong inputs to ``info``
(tests/test_wrong_inputs.py::test_cli_one_line_exit_1)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refset
from refset.scan import UnusedDropWarning

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample.json"


# the refset under test, whatever the working directory of the command (a relative PYTHONPATH=src is not)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(refset.__file__).parents[1]),
                                                    os.environ.get("PYTHONPATH", "")])}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "refset.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=ENV)


def _tree(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


OPTION_MISTAKES = [  # output, -o options, what the message says
    ("o.packed", ["level=abc"], "packed option level='abc': expected an integer from 1 to 22"),
    ("o.packed", ["level=99"], "packed option level=99: expected an integer from 1 to 22"),
    ("o.parq", ["compression_level=99"], "parquet option compression_level=99: expected an integer from 0 to 22"),
    ("o.parq", ["categorical_threshold=x"], "parquet option categorical_threshold='x': expected a number >= 0"),
    ("o.parq", ["compression=bogus"], "parquet option compression='bogus': expected one of zstd, snappy,"),
    ("o.packed", ["segment_chunks=0"], "packed option segment_chunks=0: expected an integer >= 1"),
    ("o.parq", ["record_size=0"], "parquet option record_size=0: expected an integer >= 1"),
    ("o.parq", ["pad=maybe"], "parquet option pad='maybe': expected true or false"),
    ("o.parq", ["pad"], "parquet option 'pad': expected pad=VALUE, VALUE true or false"),
    ("o.parq", ["level=3"], "format 'parquet' has no option 'level'; it takes: record_size"),
    ("o.json", ["record_size=10"], "format 'json' has no option 'record_size'; it takes no options"),
]


@pytest.mark.parametrize("out,options,says", OPTION_MISTAKES,
                         ids=[f"{o}-{'_'.join(opts)}" for o, opts, _ in OPTION_MISTAKES])
@pytest.mark.parametrize("cmd,flag", [("convert", "-o"), ("convert", "-O"), ("combine", "-O")])
def test_writer_option_mistakes(tmp_path: Path, cmd: str, flag: str, out: str, options: list[str], says: str):
    before = _tree(tmp_path)
    # every command takes writer options as -O NAME=VALUE; convert, whose output is its second argument, -o too
    args = [str(SAMPLE), out] if cmd == "convert" else [str(SAMPLE), "--concat-dim", "t", "-o", out]
    r = _run(cmd, *args, *[a for o in options for a in (flag, o)], cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"refset {cmd}: error: {r.stderr.split(': error: ', 1)[1]}" and says in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert _tree(tmp_path) == before  # checked before any work: nothing written


@pytest.mark.parametrize("name", ["old.json", "old.parq", "old.packed"])
def test_existing_output_needs_overwrite(tmp_path: Path, name: str):
    refset.save(refset.load({".zgroup": '{"zarr_format": 2}'}), tmp_path / name)
    before = _tree(tmp_path)
    r = _run("convert", str(SAMPLE), name, cwd=tmp_path)
    what = "directory" if name.endswith(".parq") else "file"
    assert r.returncode == 2 and r.stderr == (f"refset convert: error: output {name} exists ({what}); "
                                              "give --overwrite to replace it\n")
    assert _tree(tmp_path) == before and len(refset.load(tmp_path / name)) == 1  # the old output, untouched
    r = _run("convert", str(SAMPLE), name, "--overwrite", cwd=tmp_path)
    new, want = refset.load(tmp_path / name), refset.load(SAMPLE)
    assert r.returncode == 0 and set(new) == set(want) and all(new[k] == want[k] for k in want.chunk_keys("t"))


@pytest.mark.parametrize("text,says", [
    ("{bad", "--storage-options '{bad': not JSON ("),
    ("[1]", "--storage-options '[1]': expected a JSON object such as '{\"anon\": true}', got list"),
    ('"anon"', "expected a JSON object such as '{\"anon\": true}', got str"),
])
@pytest.mark.parametrize("cmd", ["info", "convert"])
def test_bad_storage_options(tmp_path: Path, cmd: str, text: str, says: str):
    args = [str(SAMPLE)] + (["out.json"] if cmd == "convert" else [])
    r = _run(cmd, *args, "--storage-options", text, cwd=tmp_path)
    assert r.returncode == 2 and says in r.stderr and r.stderr.startswith(f"refset {cmd}: error: ")
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr and _tree(tmp_path) == {}


@pytest.fixture(scope="module")
def wrong_inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nc4 = pytest.importorskip("netCDF4")
    zarr = pytest.importorskip("zarr")
    d = tmp_path_factory.mktemp("wrong")
    with nc4.Dataset(d / "data.nc", "w") as ds:
        ds.createDimension("x", 4)
        ds.createVariable("v", "f4", ("x",))[:] = np.arange(4)
    rs = refset.scan(d / "data.nc")
    refset.save(rs, d / "set.parq")
    (d / "list.json").write_text(json.dumps([rs.to_dict(), rs.to_dict()]))
    zarr.open_group(d / "store.zarr", mode="w", zarr_format=2).create_array("a", shape=(4,), dtype="f4")
    return d


@pytest.mark.parametrize("name,says", [
    ("data.nc", "is a NetCDF/HDF5 file, not a reference set: make one with `refset scan "),
    ("set.parq/v/refs.0.parq", "is one record file of a parquet reference set, not a set: load the set's"),
    ("store.zarr", "is a zarr store (.zgroup), not a reference set"),
    ("list.json", "is a list of 2 reference sets, not one: combine them with `refset combine`"),
])
@pytest.mark.parametrize("cmd", ["convert", "validate", "ls", "cat"])
def test_wrong_input_writes_nothing(wrong_inputs: Path, tmp_path: Path, cmd: str, name: str, says: str):
    args = {"convert": [str(wrong_inputs / name), "out.parq"], "cat": [str(wrong_inputs / name), "v/0"]}.get(
        cmd, [str(wrong_inputs / name)])
    r = _run(cmd, *args, cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr and _tree(tmp_path) == {}
    if cmd == "validate" and r.stdout:  # the problems of what it read, one per line, and their count
        assert r.stdout.count("\n") == 1 and says in r.stdout and r.stderr.endswith(": 1 problem(s)\n")
    else:
        assert r.stdout == "" and says in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_info_into_head_is_quiet(tmp_path: Path):
    """`refset info big.json | head -3` in a shell: the first lines, status 0, nothing on stderr."""
    n = 200_000
    refset.save(refset.ReferenceSet.from_arrays(
        {".zgroup": {"zarr_format": 2}} | {f"v{i}/.zarray": {
            "shape": [n], "chunks": [1], "dtype": "<f4", "compressor": None, "fill_value": 0, "filters": None,
            "order": "C", "zarr_format": 2} for i in range(3000)},  # a long table of arrays
        {"v0": {"path_id": np.zeros(n, int), "offset": np.arange(n) * 4, "length": np.full(n, 4)}},
        ["data.bin"]), tmp_path / "big.json")
    r = subprocess.run(["bash", "-o", "pipefail", "-c", f"{sys.executable} -m refset.cli info big.json | head -3"],
                       capture_output=True, text=True, cwd=tmp_path, env=ENV)
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[:2] == ["source:           big.json", "format:           json (version 0)"]


@pytest.mark.parametrize("cmd", ["scan", "combine"])
def test_convert_style_options_on_scan_and_combine(wrong_inputs: Path, tmp_path: Path, cmd: str):
    """``-o out.parq -o record_size=10``, as convert takes it: here -o is the output, so say so instead of
    writing a set named ``record_size=10``."""
    r = _run(cmd, str(wrong_inputs / "data.nc"), "--concat-dim", "x", "-o", "out.parq", "-o", "record_size=10",
             cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and _tree(tmp_path) == {}
    assert r.stderr.endswith(f"refset {cmd}: error: -o/--output given twice ('out.parq', 'record_size=10'); "
                             "writer options are -O NAME=VALUE here\n")


def _one_line_no_traceback(r: subprocess.CompletedProcess[str], status: int, says: str) -> None:
    assert r.returncode == status, r.stderr
    assert says in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("cmd,args,says", [
    ("scan", ["--inline-threshold", "-1"], "refset scan: error: --inline-threshold -1: expected a number of bytes >= 0"),
    ("scan", ["--subchunk", "0"], "refset scan: error: --subchunk 0: expected a number of bytes >= 1"),
    ("combine", ["--concat-dim", "x", "--coo-map", "x=re:("],
     "refset combine: error: --coo-map 'x=re:(': '(' is not a regular expression (missing )"),
    ("combine", ["--concat-dim", "x", "--coo-map", "x=bogus"],
     "refset combine: error: --coo-map 'x=bogus': unknown selector 'bogus'; expected INDEX, attr:NAME, "
     "vattr:VAR:NAME, data:VAR, cf:VAR or re:PATTERN"),
    ("combine", ["--concat-dim", "run", "--coo-dtype", "run=notadtype"],
     "refset combine: error: --coo-dtype 'run=notadtype': 'notadtype' is not a numpy dtype"),
    ("scan", ["--concat-dim", "run", "--coo-dtype", "run"], "--coo-dtype 'run': expected DIM=DTYPE"),
    ("combine", ["--concat-dim", "x", "--scheduler", "nonsense"],
     "refset combine: error: --scheduler 'nonsense': expected a scheduler address, HOST:PORT or tcp://HOST:PORT"),
    ("combine", ["--concat-dim", "x", "--workers", "-1"], "--workers -1: expected a number of processes >= 0"),
])
def test_option_values_checked_up_front(wrong_inputs: Path, tmp_path: Path, cmd: str, args: list[str], says: str):
    r = _run(cmd, str(wrong_inputs / "data.nc"), "-o", "out.json", *args, cwd=tmp_path)
    _one_line_no_traceback(r, 2, says)
    assert _tree(tmp_path) == {}


@pytest.mark.parametrize("url,status,says", [
    ("foo://bucket/r.json", 2, "refset info: error: foo://bucket/r.json: unknown protocol foo://"),
    ("gs://bucket/r.json", 1, "refset info: gs://bucket/r.json: install gcsfs to read gs:// URLs"),
])
def test_unusable_protocols(tmp_path: Path, url: str, status: int, says: str):
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401

        if url.startswith("gs"):
            pytest.skip("gcsfs is installed here")
    except ImportError:
        pass
    _one_line_no_traceback(_run("info", url, cwd=tmp_path), status, says)


def test_s3_without_credentials(tmp_path: Path, s3: dict):
    """A real S3 server, no credentials anywhere: botocore's NoCredentialsError as one line naming the
    URL, the reason and how to read public data."""
    so = {"client_kwargs": s3["client_kwargs"]}
    env = {k: v for k, v in ENV.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    env |= {"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_EC2_METADATA_DISABLED": "true"}
    r = subprocess.run([sys.executable, "-m", "refset.cli", "info", "s3://refs/r.json", "--storage-options",
                        json.dumps(so)], capture_output=True, text=True, cwd=tmp_path, env=env)
    _one_line_no_traceback(r, 1, "refset info: cannot read s3://refs/r.json: Unable to locate credentials "
                                 "(public S3 data: --storage-options '{\"anon\": true}' or FSSPEC_S3_ANON=true")


def test_unforeseen_failure_is_one_line(tmp_path: Path):
    """Whatever escapes every specific handler: its type and message on one line, exit 1; the
    traceback only with REFSET_DEBUG=1. (An fsspec option aiohttp does not take fails deep inside, before
    any connection is tried.)"""
    args = ["info", "http://127.0.0.1:1/r.json", "--storage-options", '{"nosuch": 1}']
    r = _run(*args, cwd=tmp_path)
    _one_line_no_traceback(r, 1, "refset info: error: TypeError: ")
    assert "unexpected keyword argument 'nosuch'" in r.stderr
    debug = subprocess.run([sys.executable, "-m", "refset.cli", *args], capture_output=True,
                           text=True, cwd=tmp_path, env=ENV | {"REFSET_DEBUG": "1"})
    assert debug.returncode == 1 and debug.stderr.startswith("Traceback") and debug.stderr.endswith(r.stderr)


@pytest.fixture(scope="module")
def days(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two daily NetCDF4 files: time (one step each), lat, v(time, lat)."""
    nc4 = pytest.importorskip("netCDF4")
    d = tmp_path_factory.mktemp("days")
    files = []
    for i in range(2):
        with nc4.Dataset(d / f"d{i}.nc", "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", 3)
            t = ds.createVariable("time", "i4", ("time",))
            t.units, t[:] = "days since 2000-01-01", [i]
            ds.createVariable("lat", "f4", ("lat",))[:] = [1, 2, 3]
            ds.createVariable("v", "f4", ("time", "lat"))[:] = np.full((1, 3), i)
        files.append(d / f"d{i}.nc")
    return files


@pytest.mark.parametrize("cmd", ["scan", "combine"])
def test_identical_dims_typo_is_named(days: list[Path], tmp_path: Path, cmd: str):
    r = _run(cmd, *map(str, days), "--concat-dim", "time", "--identical-dims", "lat,lno", "-o", "out.json",
             cwd=tmp_path)
    _one_line_no_traceback(r, 1, "--identical-dims names 'lno', which no input has (its variables: lat, time, v)")
    assert _tree(tmp_path) == {}
    with pytest.raises(refset.errors.InvalidReferences, match="identical_dims names 'lno'"):
        refset.combine(days, concat_dims="time", identical_dims=["lat", "lno"])


@pytest.mark.parametrize("concat", [False, True])
def test_drop_variables_typo_warns(days: list[Path], tmp_path: Path, concat: bool):
    """Not an error (a list meant for heterogeneous files names variables some files lack): one warning
    line for a name no file has, none for a name some file has."""
    args = ["--concat-dim", "time", "-o", "out.json"] if concat else ["-o", "out/"]
    r = _run("scan", *map(str, days), *args, "--drop-variables", "nosuch,v", cwd=tmp_path)
    where = "inputs" if concat else "files"
    assert r.returncode == 0 and "Traceback" not in r.stderr
    warned = [line for line in r.stderr.splitlines() if "warning" in line]
    assert warned == [f"refset scan: warning: --drop-variables nosuch: no such variable in any of the 2 {where}"]
    with pytest.warns(UnusedDropWarning,
                      match="drop_variables: no variable 'nosuch' in "):
        rs = refset.scan(days[0], drop_variables=["nosuch", "v"])
    assert "v" not in rs.grids


def test_convert_says_how_many_urls_were_renamed(days: list[Path], tmp_path: Path):
    refset.save(refset.scan(days[0], inline_threshold=0), tmp_path / "d.json")
    r = _run("convert", "d.json", "out.json", "--rename", "nomatch/=x/", cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == "refset convert: warning: renamed 0 of 1 URLs: none starts with 'nomatch/'"
    assert ", renamed 0 of 1 URLs in " in lines[1] and len(lines) == 2
    r = _run("convert", "d.json", "moved.json", "--rename", f"{days[0].parent}/=s3://bucket/", cwd=tmp_path)
    assert r.returncode == 0 and ", renamed 1 of 1 URLs in " in r.stderr and r.stderr.count("\n") == 1
    assert refset.load(tmp_path / "moved.json").urls == ("s3://bucket/d0.nc",)


def test_ls_of_nothing_and_cat_backwards(tmp_path: Path):
    r = _run("ls", str(SAMPLE), "nosuch", cwd=tmp_path)
    assert r.stdout == "" and r.returncode == 1 and r.stderr == f"refset ls: nosuch: no such key or directory in {SAMPLE}\n"
    _one_line_no_traceback(_run("cat", str(SAMPLE), "t/0", "--start", "10", "--end", "4", cwd=tmp_path), 2,
                           "refset cat: error: --start 10 --end 4: the start is after the end")


def test_combine_takes_a_list_of_sets(days: list[Path], tmp_path: Path):
    """kerchunk's JSON list of sets (plain or compressed) is a combine input: its items, named
    ``list.json[0]``..."""
    sets = [refset.scan(f, inline_threshold=0).to_dict() for f in days[::-1]]
    (tmp_path / "list.json").write_text(json.dumps(sets))
    r = _run("combine", "list.json", "--concat-dim", "time", "-o", "out.json", cwd=tmp_path)
    assert r.returncode == 0 and "wrote out.json: 2 inputs, " in r.stderr, r.stderr
    want = refset.combine(days[::-1], concat_dims="time", scan_options={"inline_threshold": 0})
    assert refset.load(tmp_path / "out.json").to_dict() == want.to_dict()
    (tmp_path / "list.json.zst").write_bytes(__import__("zstandard").compress(json.dumps(sets).encode()))
    assert refset.combine([tmp_path / "list.json.zst"], concat_dims="time").to_dict() == want.to_dict()
    (tmp_path / "bad.json").write_text(json.dumps([sets[0], {"a": 1}, 3]))
    r = _run("combine", "bad.json", "--concat-dim", "time", "-o", "bad-out.json", cwd=tmp_path)
    _one_line_no_traceback(r, 1, "refset combine: invalid input: bad.json[2]: must be a JSON object (a reference "
                                 "set), got int")


@pytest.mark.parametrize("make,says", [
    (lambda d, days: str(days[0]), "make one with `refset scan {src} -o d0.json`"),
    (lambda d, days: str(d / "set.parq" / ".zmetadata"),
     "is the .zmetadata of a parquet reference set, not a set: give its directory, {dir}"),
])
def test_info_advice_that_runs(wrong_inputs: Path, days: list[Path], tmp_path: Path, make, says: str):
    src = make(wrong_inputs, days)
    r = _run("info", src, cwd=tmp_path)
    _one_line_no_traceback(r, 1, says.format(src=src, dir=str(wrong_inputs / "set.parq")))
    if "refset scan" in says:  # the command it gives runs
        cmd = says.format(src=src).split("`")[1].split()[1:]
        assert _run(*cmd, cwd=tmp_path).returncode == 0 and (tmp_path / "d0.json").exists()


def test_unknown_concat_dim_in_command_line_words(days: list[Path], tmp_path: Path):
    r = _run("combine", *map(str, days), "--concat-dim", "tiem", "-o", "out.json", cwd=tmp_path)
    _one_line_no_traceback(r, 1, "concat dim 'tiem': no input has a variable 'tiem' to take its values from (did "
                                 "you mean 'time'?); give --coo-map tiem=SELECTOR (e.g. tiem=INDEX, ")
    assert "coo_map" not in r.stderr
    with pytest.raises(refset.errors.InvalidReferences, match=r"give coo_map=\{'tiem': \.\.\.\}") as got:
        refset.combine(days, concat_dims="tiem")  # Python callers keep Python's words
    # the problem keeps the option it names through a pickle (a Dask worker's error), for the CLI's words
    problem = pickle.loads(pickle.dumps(got.value)).problems[0]
    assert problem == got.value.problems[0]
    assert problem.spelled(lambda ref: f"<{ref.option} {ref.key} {ref.form}>").endswith("give <coo_map tiem give>")


@pytest.mark.parametrize("name,says", [
    ("set.parq", "set.parq: is a parquet reference set, not a data file: scan takes data files; `refset convert` "
                 "rewrites a set, `refset combine` joins sets"),
    ("list.json", "list.json: is a list of reference sets (JSON), not a data file: scan takes data files; "
                  "`refset convert` rewrites a set, `refset combine` joins sets"),
    (".", "is a directory, not a data file: scan takes data files (a glob such as DIR/*.nc scans its files)"),
])
def test_scan_of_something_else_says_what_it_is(wrong_inputs: Path, tmp_path: Path, name: str, says: str):
    r = _run("scan", str(wrong_inputs / name), "-o", "out.json", cwd=tmp_path)
    _one_line_no_traceback(r, 1, says)
    assert _tree(tmp_path) == {}


def test_scan_of_a_zarr_store_references_it(wrong_inputs: Path, tmp_path: Path):
    """A zarr store is scanned like a data file (docs/scan.md), no longer named as a mistake."""
    r = _run("scan", str(wrong_inputs / "store.zarr"), "-o", "out.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "zarr_format" in (tmp_path / "out.json").read_text()


@pytest.mark.parametrize("cmd", ["scan", "combine", "convert"])
def test_output_in_a_missing_directory(days: list[Path], tmp_path: Path, cmd: str):
    out = str(tmp_path / "nonexistent" / "dir" / "out.json")
    args = {"scan": [str(days[0]), "-o", out], "combine": [*map(str, days), "--concat-dim", "time", "-o", out],
            "convert": [str(SAMPLE), out]}[cmd]
    r = _run(cmd, *args, cwd=tmp_path)
    _one_line_no_traceback(r, 2, f"refset {cmd}: error: output directory {tmp_path}/nonexistent/dir does not exist")
    assert ".tmp" not in r.stderr and _tree(tmp_path) == {}
    with pytest.raises(FileNotFoundError, match=f"^output directory {tmp_path}/nonexistent/dir does not exist$"):
        refset.save(refset.load(SAMPLE), out)


@pytest.mark.parametrize("args", [["-o", "out.json"], ["-O", "dir/out.parq"]])
def test_convert_output_given_as_option(tmp_path: Path, args: list[str]):
    r = _run("convert", str(SAMPLE), *args, cwd=tmp_path)
    _one_line_no_traceback(r, 2, "refset convert: error: convert takes the output as its second argument (refset "
                                 "convert IN OUT); writer options are -O NAME=VALUE")
    assert _tree(tmp_path) == {}


def test_convert_second_output_given_as_option(tmp_path: Path):
    r = _run("convert", str(SAMPLE), "out.json", "-o", "other.json", cwd=tmp_path)
    _one_line_no_traceback(r, 2, "refset convert: error: -o other.json: not a writer option NAME=VALUE (the output "
                                 "is already out.json); writer options are -O NAME=VALUE")
    assert _tree(tmp_path) == {}


def test_convert_takes_capital_o_like_scan_and_combine(tmp_path: Path):
    r = _run("convert", str(SAMPLE), "out.parq", "-O", "record_size=7", "--quiet", cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == ""
    assert refset.load(tmp_path / "out.parq").format_info()["record_size"] == 7


@pytest.mark.parametrize("args,says", [
    (["info", "--jsn", str(SAMPLE)], "refset info: error: unrecognized argument --jsn (did you mean --json?)"),
    (["ls", str(SAMPLE), "--lng"], "refset ls: error: unrecognized argument --lng (did you mean --long?)"),
    (["convert", str(SAMPLE), "o.json", "--overwirte"],
     "refset convert: error: unrecognized argument --overwirte (did you mean --overwrite?)"),
    (["info", str(SAMPLE), "extra"], "refset info: error: unrecognized argument extra"),
])
def test_option_typos_named_by_their_command(tmp_path: Path, args: list[str], says: str):
    r = _run(*args, cwd=tmp_path)
    usage = {"info": "usage: refset info REFS [options]", "ls": "usage: refset ls REFS [PREFIX] [options]",
             "convert": "usage: refset convert IN OUT [options]"}[args[0]]
    assert r.returncode == 2 and r.stderr == f"{usage}\n{says}\n" and _tree(tmp_path) == {}


@pytest.mark.parametrize("args,usage,says", [
    (["scan", "x.nc"], "usage: refset scan FILE... -o OUT [options]",
     "refset scan: error: the following arguments are required: -o/--output"),
    (["combine", "x.json", "-o", "o.json"], "usage: refset combine INPUT... -o OUT --concat-dim DIM [options]",
     "refset combine: error: the following arguments are required: --concat-dim"),
    ([], "usage: refset COMMAND [options]", "refset: error: the following arguments are required: COMMAND"),
])
def test_missing_arguments_with_a_one_line_usage(tmp_path: Path, args: list[str], usage: str, says: str):
    r = _run(*args, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr == f"{usage}\n{says}\n"


@pytest.mark.parametrize("name,version,compression", [("o.v1.json", 1, None), ("o.v1.json.gz", 1, "gzip"),
                                                      ("o.v1.json.zst", 1, "zstd"), ("o.json", 0, None),
                                                      ("o.refs", None, None)])
def test_output_suffixes(tmp_path: Path, name: str, version: int | None, compression: str | None):
    """``.v1.json`` (the demo's name for its V1 file) writes Version 1, compressed by a further suffix;
    ``.refs`` is packed. The command line and Python agree."""
    r = _run("convert", str(SAMPLE), name, "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    refset.save(refset.load(SAMPLE), tmp_path / f"py-{name}")
    for got in (refset.load(tmp_path / name), refset.load(tmp_path / f"py-{name}")):
        fi = got.format_info()
        assert (fi["format"], fi.get("version"), fi.get("compression")) == (
            ("json", version, compression) if version is not None else ("packed", fi.get("version"), None))
        assert got.to_dict() == refset.load(SAMPLE).to_dict()


@pytest.mark.parametrize("name,fmt,compression", [
    ("OUT.JSON", "json", None), ("o.json.GZ", "json", "gzip"), ("O.PARQ", "parquet", None),
    ("refs.2024-01-01", "json", None), ("out.xyz", "json", None)])
def test_python_save_takes_suffixes_in_any_case_and_other_names_as_json(tmp_path: Path, name: str, fmt: str,
                                                                       compression: str | None):
    """Python's save is not the command line: a name it cannot place (a date after a dot) is JSON, as
    always; suffixes match in any case."""
    refset.save(refset.load(SAMPLE), tmp_path / name)
    got = refset.load(tmp_path / name)
    assert got.format_info()["format"] == fmt and got.format_info().get("compression") == compression
    want, have = refset.load(SAMPLE).to_dict(), got.to_dict()
    assert have.keys() == want.keys()
    for k, v in want.items():  # parquet keeps metadata as compact JSON
        assert (json.loads(have[k]) == json.loads(v)) if k.endswith((".zarray", ".zattrs", ".zgroup")) else have[k] == v


@pytest.mark.parametrize("name", ["out.json", "out.parq"])
def test_storage_options_write_a_remote_output(tmp_path: Path, s3: dict, name: str):
    """--storage-options reaches a remote OUT, as refset.save(..., storage_options=) does (a real S3 server)."""
    r = _run("convert", str(SAMPLE), f"s3://refs/cli13/{name}", "--storage-options", json.dumps(s3), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got, want = refset.load(f"s3://refs/cli13/{name}", storage_options=s3), refset.load(SAMPLE)
    assert set(got) == set(want) and _tree(tmp_path) == {}
    assert all(got[k] == want[k] if k.startswith("t/") and ".z" not in k else json.loads(got[k]) == json.loads(want[k])
               for k in want)


def test_s3_endpoint_unreachable(tmp_path: Path):
    """botocore's EndpointConnectionError (nothing listens on the port) as one line naming the URL."""
    pytest.importorskip("s3fs")
    so = {"key": "k", "secret": "s", "config_kwargs": {"retries": {"max_attempts": 1}},
          "client_kwargs": {"endpoint_url": "http://127.0.0.1:1", "region_name": "us-east-1"}}
    r = _run("info", "s3://refs/r.json", "--storage-options", json.dumps(so), cwd=tmp_path)
    _one_line_no_traceback(r, 1, "refset info: cannot read s3://refs/r.json: Could not connect to the endpoint URL")
    assert r.stderr.endswith("(check the endpoint or network; fsspec options go in --storage-options)\n")


@pytest.mark.parametrize("flag", [["--identical-dims", "lat"], ["--coo-map", "time=INDEX"],
                                  ["--coo-dtype", "time=i8"], ["--append"], ["--scheduler", "tcp://127.0.0.1:1"]])
def test_combine_options_without_concat_dim(days: list[Path], tmp_path: Path, flag: list[str]):
    """Options that only mean something when files are combined are not dropped silently by a plain scan."""
    r = _run("scan", str(days[0]), "-o", "one.json", *flag, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{flag[0]}: applies when files are combined: give --concat-dim DIM too" in r.stderr
    assert not (tmp_path / "one.json").exists()


def test_ls_of_one_chunk_key(tmp_path: Path):
    """`ls SET KEY` of an exact chunk key lists it (before: "no such key or directory")."""
    r = _run("ls", "-l", str(SAMPLE), "t/0.0.0", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ref = refset.load(SAMPLE)["t/0.0.0"]
    assert r.stdout.split("\t")[0] == "t/0.0.0" and r.stdout.rstrip("\n").split("\t")[-1] == str(ref[-1])
    _one_line_no_traceback(_run("ls", str(SAMPLE), "t/9.9.9", cwd=tmp_path), 1,
                           "refset ls: t/9.9.9: no such key or directory")


def test_scan_into_a_new_nested_directory(tmp_path: Path):
    """`-o a/b/` (a directory of outputs) is made with its parents, as before."""
    tiny = REPO / "examples" / "tiny.nc"
    r = _run("scan", str(tiny), "-o", "nest/a/", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert refset.load(tmp_path / "nest" / "a" / "tiny.nc.json").to_dict() == refset.scan(str(tiny)).to_dict()


@pytest.mark.parametrize("text,says", [("[", "bad.json: invalid JSON (Expecting value"),
                                       ("[]", "bad.json: an empty list, not a reference set or a list of them")])
def test_combine_of_a_broken_or_empty_list_file(tmp_path: Path, text: str, says: str):
    (tmp_path / "bad.json").write_text(text)
    r = _run("combine", "bad.json", str(SAMPLE), "--concat-dim", "time", "-o", "c.json", cwd=tmp_path)
    _one_line_no_traceback(r, 1, f"refset combine: invalid input: {says}")
    with pytest.raises(refset.errors.InvalidReferences, match=says.replace("(", r"\(")):
        refset.combine([str(tmp_path / "bad.json"), str(SAMPLE)], concat_dims="time")


def test_a_remote_output_that_cannot_be_written_is_named(tmp_path: Path):
    """The failing URL is the output, not data the input points into (an endpoint nothing listens on)."""
    so = {"key": "a", "secret": "b", "endpoint_url": "http://127.0.0.1:9",
          "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}}}
    r = _run("convert", str(SAMPLE), "s3://bucket/o.json", "--storage-options", json.dumps(so), cwd=tmp_path)
    _one_line_no_traceback(r, 1, "refset convert: cannot write s3://bucket/o.json: Could not connect to the "
                                 "endpoint URL")
    assert "fsspec options go in --storage-options" in r.stderr
