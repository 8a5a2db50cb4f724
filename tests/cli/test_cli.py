"""The refset command: every subcommand, --help everywhere, exit codes, and a light start-up."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import refset
from refset.cli import main
from tests.helpers import run_tty_stderr, zarray

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "examples" / "sample.json"


def _run(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "refset.cli", *args], capture_output=True, text=True,
                          check=check)


@pytest.mark.parametrize("cmd", [[], ["scan"], ["combine"], ["info"], ["validate"], ["ls"], ["convert"], ["cat"],
                                 ["demo"]])
def test_help_everywhere(cmd: list[str]):
    r = _run(*cmd, "--help")
    assert r.returncode == 0 and "usage: refset" in r.stdout


def test_usage_errors_exit_2():
    assert _run().returncode == 2
    assert _run("info").returncode == 2
    assert _run("nosuch").returncode == 2
    assert _run("convert", "a.json", "b", "--format", "xml").returncode == 2


def test_info_on_sample(capsys):
    assert main(["info", str(SAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "json (version 0)" in out
    assert out.splitlines()[-2:] == ["array  shape  chunks  present         dtype",
                                     "t      4x6x8  1x3x4     13/16  81.2%  <f4"]
    assert main(["info", str(SAMPLE), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    doc = json.loads(SAMPLE.read_text())
    ranges = [v for v in doc.values() if isinstance(v, list)]
    assert d["keys"] == len(doc) and d["range"] == len(ranges) and d["inline"] == len(doc) - len(ranges)
    assert d["unique_urls"] == len({v[0] for v in ranges})
    assert d["referenced_bytes"] == sum(v[2] for v in ranges)
    assert d["size_on_disk"] == SAMPLE.stat().st_size
    assert d["arrays"][0]["chunks_present"] == 13 and d["arrays"][0]["chunks_total"] == 16
    assert d["arrays"][0]["grid"] == [4, 2, 2] and d["arrays"][0]["dtype"] == "<f4"


# the keys of `info --json` that scripts read: added to, never renamed
INFO_KEYS = {"source", "format", "size_on_disk", "keys", "inline", "range", "whole_file", "unique_urls",
             "referenced_bytes", "arrays"}
ARRAY_KEYS = {"path", "shape", "chunks", "grid", "chunks_present", "chunks_total", "fraction_present", "dtype"}


@pytest.mark.parametrize("fmt,name,extra", [
    ("json", "s.json", []), ("v1", "s.json", []),
    ("parquet", "s.parq", ["record size:      20,000", "records:          2", "rows used:        16"]),
    ("packed", "s.packed", ["refs:             21"]),
])
def test_info_tables_for_every_format(tmp_path: Path, capsys, fmt: str, name: str, extra: list[str]):
    """A header block, then one aligned table of arrays (path, shape, chunks, present, dtype)."""
    rs = refset.load(SAMPLE)
    meta = {k: v for k, v in rs.to_dict().items() if "/" not in k or k.endswith((".zarray", ".zattrs"))}
    meta["longer_name/.zarray"] = json.dumps(json.loads(zarray([5, 10], [1, 2], dtype="<i8")))
    for i in (0, 2, 4):
        meta[f"longer_name/{i}.0"] = [rs.urls[0], 8 * i, 8]
    refset.save(refset.load({**rs.to_dict(), **meta}), tmp_path / name, format=fmt)
    assert main(["info", str(tmp_path / name)]) == 0
    out = capsys.readouterr().out.splitlines()
    blank = out.index("")
    head, table = out[:blank], out[blank + 1:]
    assert head[0] == f"source:           {tmp_path / name}" and head[-1] == "arrays:           2"
    assert head[1].startswith("format:           " + {"v1": "json (version 1)"}.get(fmt, fmt))
    assert all(line in head for line in extra), head
    common = ["array        shape  chunks  present         dtype",
              "longer_name  5x10   1x2        3/25  12.0%  <i8",
              "t            4x6x8  1x3x4     13/16  81.2%  <f4"]
    table = [table[0], *sorted(table[1:])]
    if fmt == "packed":  # its figures per array as more columns, right-aligned to their titles
        assert table[0] == common[0] + "  packed bytes  bytes/ref  gfactor"
        assert [line[:len(common[0])] for line in table[1:]] == [c.ljust(len(common[0])) for c in common[1:]]
        assert all(len(line) == len(table[0]) for line in table)
        assert table[2].split()[-2:] == ["12.77", "0.19"]  # 166 bytes for 13 references
    else:
        assert table == common
    assert main(["info", str(tmp_path / name), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert INFO_KEYS <= set(d) and all(ARRAY_KEYS <= set(a) for a in d["arrays"])
    assert {a["path"]: a["chunks_present"] for a in d["arrays"]} == {"t": 13, "longer_name": 3}
    if fmt == "packed":
        assert set(d["packed_arrays"]) == {"t", "longer_name"}
        assert abs(d["packed_arrays"]["t"]["bytes_per_ref"] - d["packed_arrays"]["t"]["bytes"] / 13) < 1e-3


def test_info_reports_compression_and_v1(tmp_path: Path, capsys):
    refset.save(refset.load(SAMPLE), tmp_path / "s.json.zst", format="json")
    refset.save(refset.load(SAMPLE), tmp_path / "s.v1.json", format="v1")
    assert main(["info", str(tmp_path / "s.json.zst")]) == 0
    assert "json (version 0, zstd-compressed)" in capsys.readouterr().out
    assert main(["info", str(tmp_path / "s.v1.json")]) == 0
    assert "json (version 1)" in capsys.readouterr().out


def test_ls_respects_path_boundaries(tmp_path: Path, capsys):
    d = {"x/.zarray": zarray([2], [1]), "x/0": ["u", 0, 1], "xy/.zarray": zarray([2], [1]),
         "xy/1": ["u", 2, 3], "other": "text"}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    assert main(["ls", str(p), "x"]) == 0
    assert capsys.readouterr().out.split() == ["x/.zarray", "x/0"]
    assert main(["ls", str(p), "xy", "-l"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("xy/.zarray\tinline\t") and lines[1] == "xy/1\trange\tu\t2\t3"
    assert main(["ls", str(p)]) == 0
    assert sorted(capsys.readouterr().out.split()) == sorted(d)


@pytest.mark.parametrize("fmt,name", [("json", "o.json"), ("v1", "o.json"), ("json", "o.json.gz"),
                                      ("parquet", "o.parq"), ("packed", "o.packed")])
def test_convert_round_trip(tmp_path: Path, fmt: str, name: str):
    out = tmp_path / name
    r = _run("convert", str(SAMPLE), str(out), "--format", fmt)
    assert r.returncode == 0, r.stderr
    got, want = refset.load(out).to_dict(), refset.load(SAMPLE).to_dict()
    if fmt == "parquet":  # .zmetadata holds parsed JSON: metadata comes back re-serialised
        got = {k: json.loads(v) if k.endswith((".zarray", ".zattrs", ".zgroup")) else v for k, v in got.items()}
        want = {k: json.loads(v) if k.endswith((".zarray", ".zattrs", ".zgroup")) else v for k, v in want.items()}
    assert got == want


def test_invalid_input_exit_1(tmp_path: Path):
    p = tmp_path / "bad.json"
    p.write_text('{"a": ["u", -1, 2]}')
    r = _run("info", str(p))
    assert r.returncode == 1 and 'refs["a"][1]: offset must be a non-negative integer' in r.stderr
    r = _run("info", str(tmp_path / "missing.json"))
    assert r.returncode == 1 and "not found" in r.stderr
    r = _run("convert", str(p), str(tmp_path / "out.json"))
    assert r.returncode == 1 and not (tmp_path / "out.json").exists()


def test_cat_inline_and_range(tmp_path: Path):
    data = bytes(range(256)) * 4
    (tmp_path / "blob.bin").write_bytes(data)
    d = {"inline": "base64:AAEC", "r": [str(tmp_path / "blob.bin"), 100, 50]}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    assert subprocess.run([sys.executable, "-m", "refset.cli", "cat", str(p), "inline"],
                          capture_output=True, check=True).stdout == b"\x00\x01\x02"
    out = subprocess.run([sys.executable, "-m", "refset.cli", "cat", str(p), "r", "--start", "10",
                          "--end", "20"], capture_output=True, check=True).stdout
    assert out == data[110:120]
    r = _run("cat", str(p), "nokey")
    assert r.returncode == 1


HEAVY = ["xarray", "zarr", "h5py", "pyarrow", "jinja2", "dask", "pandas", "aiohttp", "netCDF4", "h5netcdf", "tqdm"]


def test_import_and_help_are_light():
    code = ("import sys, refset, refset.cli; refset.cli.build_parser().format_help(); "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = ("import sys, refset; refset.load({'a': ['u', 1, 2]}); "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_scan_one_file_and_several_into_a_directory(tmp_path: Path):
    h5py = pytest.importorskip("h5py")
    np = pytest.importorskip("numpy")
    zarr = pytest.importorskip("zarr")
    files = []
    for i in range(2):
        p = tmp_path / f"d{i}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("v", data=np.arange(1000, dtype="i4") + i, chunks=(250,), compression="gzip")
            f.create_dataset("refs", data=[f.ref], dtype=h5py.ref_dtype)
        files.append(p)
    r = _run("scan", str(files[0]), "-o", str(tmp_path / "one.parq"))
    assert r.returncode == 1 and "'refs'" in r.stderr and not (tmp_path / "one.parq").exists()
    r = _run("scan", str(files[0]), "-o", str(tmp_path / "one.parq"), "--drop-variables", "refs",
             "--inline-threshold", "0")
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stderr and refset.load(tmp_path / "one.parq").format_info()["format"] == "parquet"
    r = _run("scan", *map(str, files), "-o", str(tmp_path / "out") + "/", "--format", "packed",
             "--drop-variables", "refs")
    assert r.returncode == 0, r.stderr
    for i, p in enumerate(files):
        rs = refset.load(tmp_path / "out" / f"{p.name}.packed")
        got = zarr.open_group(refset.ZarrStore(rs), mode="r")["v"][...]
        np.testing.assert_array_equal(got, np.arange(1000) + i)
    r = _run("scan", str(files[0]), "-o", str(tmp_path / "x.json"), "--storage-options", "[1]")
    assert r.returncode != 0 and "--storage-options" in r.stderr


def test_version_is_the_package_version():
    import tomllib

    r = _run("--version")
    want = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert r.returncode == 0 and r.stdout == f"refset {want}\n" and want == refset.__version__


def _big_set(tmp_path: Path) -> tuple[Path, bytes]:
    """A JSON set of 100,000 keys (``ls`` prints megabytes) and a 1 MiB key ``blob``."""
    np = pytest.importorskip("numpy")
    data = np.random.default_rng(0).bytes(1 << 20)
    (tmp_path / "data.bin").write_bytes(data)
    n = 100_000
    meta = {".zgroup": {"zarr_format": 2}, "v/.zarray": zarray([n], [1])}
    rs = refset.ReferenceSet.from_arrays(
        meta, {"v": {"path_id": np.zeros(n, int), "offset": np.arange(n) * 4, "length": np.full(n, 4)}},
        [str(tmp_path / "data.bin")])
    d = rs.to_dict()
    d["blob"] = [str(tmp_path / "data.bin"), 0, len(data)]
    (tmp_path / "big.json").write_text(json.dumps(d))
    return tmp_path / "big.json", data


@pytest.mark.parametrize("cmd", [["ls", "-l"], ["cat"], ["info", "--json"]])
def test_reader_leaving_early_is_not_an_error(tmp_path: Path, cmd: list[str]):
    """`refset ls big.json | head -1`: the pipe closes under refset, which stops quietly with status 0."""
    big, data = _big_set(tmp_path)
    args = [*cmd, str(big)] + (["blob"] if cmd == ["cat"] else [])
    if cmd[0] == "info":  # small output: the reader is gone before refset writes at all
        p = subprocess.Popen([sys.executable, "-m", "refset.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        p.stdout.close()
    else:
        p = subprocess.Popen([sys.executable, "-m", "refset.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        first = p.stdout.read(100)
        assert first == data[:100] if cmd == ["cat"] else first.startswith(b".zgroup\tinline")
        p.stdout.close()  # refset still has megabytes to write
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0 and err == b""


def test_unknown_output_suffix_is_a_usage_error(tmp_path: Path):
    r = _run("convert", str(SAMPLE), str(tmp_path / "out.xyz"))
    assert r.returncode == 2 and not (tmp_path / "out.xyz").exists()
    assert "unknown suffix '.xyz'" in r.stderr and ".json, .parq, .parquet, .packed" in r.stderr
    assert "--format" in r.stderr
    r = _run("combine", str(SAMPLE), "--concat-dim", "t", "-o", str(tmp_path / "out.xyz"))
    assert r.returncode == 2 and "unknown suffix '.xyz'" in r.stderr
    for name, fmt in [("out.xyz", ["--format", "json"]), ("out", []), ("out.json.zst", []), ("o.v1.json", [])]:
        r = _run("convert", str(SAMPLE), str(tmp_path / name), *fmt)
        assert r.returncode == 0, (name, r.stderr)
        assert refset.load(tmp_path / name).to_dict() == refset.load(SAMPLE).to_dict()


def test_scan_progress_only_on_a_terminal(tmp_path: Path):
    h5py = pytest.importorskip("h5py")
    np = pytest.importorskip("numpy")
    files = []
    for i in range(3):
        files.append(str(tmp_path / f"d{i}.h5"))
        with h5py.File(files[-1], "w") as f:
            f.create_dataset("v", data=np.arange(100) + i, chunks=(25,))
    args = ["scan", *files, "-o", str(tmp_path / "out") + "/"]
    rc, _, tty = run_tty_stderr([sys.executable, "-m", "refset.cli", *args])
    assert rc == 0 and "scanning" in tty and "3/3" in tty and tty.count("wrote ") == 3
    assert "scanned 3 inputs" in tty  # the summary
    r = _run(*args, "--overwrite")
    assert r.returncode == 0 and "scanning" not in r.stderr and "\r" not in r.stderr
    assert r.stderr.count("wrote ") == 3 and "scanned 3 inputs" in r.stderr
    rc, _, tty = run_tty_stderr([sys.executable, "-m", "refset.cli", *args, "--quiet", "--overwrite"])
    assert rc == 0 and tty.strip() == ""
    # combined on a cluster: the bar follows the scan tasks
    pytest.importorskip("distributed")
    rc, _, tty = run_tty_stderr([sys.executable, "-m", "refset.cli", "scan", *files, "--concat-dim", "run",
                                 "--coo-map", "run=INDEX", "-o", str(tmp_path / "all.json"), "--workers", "1"])
    assert rc == 0 and "scanning" in tty and "3/3" in tty and "wrote" in tty, tty
    assert refset.load(tmp_path / "all.json").grids["v"].shape == (3, 100)


def test_the_bar_of_a_remote_scan_counts_bytes_read(tmp_path: Path):
    """Scanning remote files, the bar shows the bytes read so far beside the files (read by the scan
    threads while they run), and the summary the requests and bytes in all."""
    h5py = pytest.importorskip("h5py")
    np = pytest.importorskip("numpy")
    from tests.httpserver import RangeServer

    for i in range(3):
        with h5py.File(tmp_path / f"d{i}.h5", "w") as f:
            f.create_dataset("v", data=np.arange(100) + i, chunks=(25,))
    with RangeServer(tmp_path) as srv:
        urls = [f"{srv.url}/d{i}.h5" for i in range(3)]
        rc, _, tty = run_tty_stderr([sys.executable, "-m", "refset.cli", "scan", *urls, "--concat-dim", "run",
                                     "--coo-map", "run=INDEX", "-o", str(tmp_path / "all.json")])
        total = srv.bytes
    assert rc == 0 and "3/3" in tty, tty
    assert re.search(r"\d[\d.,]* (B|KB) read", tty), tty
    assert f"3 requests and {total:,} bytes read" in tty


@pytest.mark.parametrize("cmd", ["combine", "convert"])
def test_combine_and_convert_progress_only_on_a_terminal(tmp_path: Path, cmd: str):
    """A bar under a pseudo-terminal, none on a pipe, none with --quiet; the summary line unless --quiet."""
    h5py = pytest.importorskip("h5py")
    np = pytest.importorskip("numpy")
    sets = []
    for i in range(3):
        with h5py.File(tmp_path / f"d{i}.h5", "w") as f:
            f.create_dataset("v", data=np.arange(100) + i, chunks=(25,))
            f.create_dataset("w", data=np.arange(10) * i, chunks=(5,))
        sets.append(str(tmp_path / f"d{i}.packed"))
        refset.save(refset.scan(tmp_path / f"d{i}.h5"), sets[-1])
    out = str(tmp_path / "out.parq")
    if cmd == "combine":
        args = ["combine", *sets, "--concat-dim", "run", "--coo-map", "run=INDEX", "-o", out]
        bar, summary = ("opening", "3/3"), f"wrote {out}: 3 inputs, 3 arrays, 19 references, "  # with the run coordinate
    else:
        args = ["convert", sets[1], out]
        bar, summary = ("reading", "2/2"), f"wrote {out}: 1 input, 2 arrays, 6 references, "
    rc, _, tty = run_tty_stderr([sys.executable, "-m", "refset.cli", *args])
    assert rc == 0 and all(b in tty for b in bar), tty
    assert summary in tty and tty.rstrip().endswith(" s")
    r = _run(*args, "--overwrite")
    assert r.returncode == 0 and r.stderr.startswith(summary) and r.stderr.count("\n") == 1, r.stderr
    assert bar[0] not in r.stderr and "\r" not in r.stderr
    size = sum(f.stat().st_size for f in Path(out).rglob("*") if f.is_file())
    assert f"references, {size:,} bytes in " in r.stderr
    rc, _, tty = run_tty_stderr([sys.executable, "-m", "refset.cli", *args, "--quiet", "--overwrite"])
    assert rc == 0 and tty.strip() == ""
    want = refset.combine(sets, concat_dims="run", coo_map={"run": "INDEX"}) if cmd == "combine" else sets[1]
    assert refset.load(out).to_dict() == refset.load(want).to_dict()


def test_scan_a_glob_over_s3_into_one_set(tmp_path: Path, s3, capsys):
    """`refset scan 's3://bucket/dir/*.nc' --concat-dim time` lists the bucket, scans what matches
    (concurrently) and combines it; a glob matching nothing is a usage error naming it."""
    import fsspec
    import netCDF4
    import numpy as np

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3)
    for i in range(3):
        p = tmp_path / f"day{i}.nc"
        with netCDF4.Dataset(p, "w") as ds:
            ds.createDimension("time", None)
            t = ds.createVariable("time", "f8", ("time",))
            t.units = "days since 2000-01-01"
            t[:] = [float(i)]
            ds.createVariable("v", "f4", ("time",), chunksizes=(1,))[:] = [10.0 * i]
        fs.put_file(str(p), f"refs/glob/day{i}.nc")
    fs.put_file(str(p), "refs/glob/other.txt")
    so = json.dumps(s3)
    out = tmp_path / "all.json"
    assert main(["scan", "s3://refs/glob/day*.nc", "--concat-dim", "time", "-o", str(out),
                 "--storage-options", so, "--quiet", "--workers", "0", "--inline-threshold", "0"]) == 0
    rs = refset.load(out)
    assert sorted(rs.urls) == [f"s3://refs/glob/day{i}.nc" for i in range(3)]
    ds = refset.open_dataset(out, remote_options=s3)
    np.testing.assert_array_equal(ds.v.values, [0.0, 10.0, 20.0])
    assert main(["scan", "s3://refs/glob/none*.nc", "-o", str(tmp_path / "x.json"), "--storage-options", so]) == 2
    assert "s3://refs/glob/none*.nc: no file matches" in capsys.readouterr().err


def test_a_remote_combine_says_what_it_cost(tmp_path: Path, capsys):
    """The summary of a scan over HTTP says the requests and bytes it took, as the server counts them."""
    import netCDF4

    from tests.httpserver import RangeServer

    for i in range(3):
        with netCDF4.Dataset(tmp_path / f"d{i}.nc", "w") as ds:
            ds.createDimension("time", None)
            ds.createVariable("time", "f8", ("time",))[:] = [float(i)]
            ds.createVariable("v", "f4", ("time",), chunksizes=(1,))[:] = [float(i)]
    with RangeServer(tmp_path) as srv:
        urls = [f"{srv.url}/d{i}.nc" for i in range(3)]
        assert main(["scan", *urls, "--concat-dim", "time", "-o", str(tmp_path / "all.json"), "--workers", "0"]) == 0
        err = capsys.readouterr().err
        assert f"{srv.requests} requests and {srv.bytes:,} bytes read (1.0 and" in err, err
