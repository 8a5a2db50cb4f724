"""refset and fsspec side by side on the same hostile inputs and faults (the counts in docs/reliability.md).

    python bench/hostile_fsspec.py [--flips 200] [--reads 20]

Each probe ends as ``right`` (the right data), ``error`` (an exception: for refset always a
``refset.errors`` error, anything else is reported as ``crash``) or ``wrong`` (other data, no error).
Probes:

- single-bit flips (seeded) in a parquet record file, in ``.zmetadata`` and in a ``.json.zst``, all
  written by refset; fsspec reads them with ``ReferenceFileSystem`` (its ``LazyReferenceMapper`` for
  parquet), every key compared with the set written;
- reads of 4-byte references from tests/httpserver.py in each fault mode (``shift``, ``short``,
  ``ignore``, ``truncate``, ``500``) through each library's ``ReferenceFileSystem.cat_file``;
- references to a local file with ``offset + length`` in [2**63, 2**64 + 2**20);
- with ``--corpus``: each file of tests/hostile (not packed: fsspec has no reader) opened by both,
  fsspec in a subprocess with a memory cap and a timeout (template bombs).

The silent-server fault (``stall``) is left out: refset gives up after ~91 s by default
(tests/test_hostile.py), fsspec's aiohttp after 300 s per attempt.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fuzzing
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # httpserver

import fsspec

import refset
from httpserver import RangeServer
from refset.errors import RefsetError

ROOT = Path(__file__).resolve().parents[1]
META = (".zarray", ".zattrs", ".zgroup")


def _refs() -> dict[str, Any]:
    """The set of tests/formats/test_integrity.py: ranges over 7 URLs, whole files, inline bytes, metadata."""
    za = {"shape": [60], "chunks": [1], "dtype": "<f4", "compressor": None, "fill_value": 0, "filters": None,
          "order": "C", "zarr_format": 2}
    zb = dict(za, shape=[6, 5], chunks=[1, 1])
    refs: dict[str, Any] = {".zgroup": '{"zarr_format":2}', "a/.zarray": json.dumps(za),
                            "a/.zattrs": '{"units":"K"}', "b/.zarray": json.dumps(zb)}
    for i in range(60):
        refs[f"a/{i}"] = [f"s3://bucket/file{i % 7}.nc", 1000 + 37 * i, 100 + i % 5]
    for i in range(6):
        for j in range(5):
            refs[f"b/{i}.{j}"] = "base64:" + "AAEC" * (i + j) if (i + j) % 3 == 0 else [f"f{j}.nc"]
    return refs


def _norm(key: str, value: Any) -> Any:
    """A reference in one form for both libraries: metadata parsed, inline bytes, ranges as tuples."""
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return json.loads(value) if key.rpartition("/")[2] in META else value
    return tuple(v if isinstance(v, str) else int(v) for v in value)


def _refset_outcome(path: Path, expected: dict[str, Any]) -> str:
    try:
        rs = refset.load(str(path))
        got = {k: _norm(k, rs[k]) for k in rs}
    except RefsetError:
        return "error"
    except Exception:
        return "crash"
    return "right" if got == expected else "wrong"


def _fsspec_outcome(path: Path, expected: dict[str, Any]) -> str:
    with contextlib.redirect_stdout(io.StringIO()):  # fastparquet prints its thrift errors
        return _fsspec_read(path, expected)


def _fsspec_read(path: Path, expected: dict[str, Any]) -> str:
    try:
        options = {"target_options": {"compression": "zstd"}} if path.suffix == ".zst" else {}
        fs = fsspec.filesystem("reference", fo=str(path), remote_protocol="s3", remote_options={"anon": True},
                               skip_instance_cache=True, **options)
        got = {k: _norm(k, fs.references[k]) for k in expected}
    except Exception:
        return "error"
    return "right" if got == expected else "wrong"


def flips(n: int, tmp: Path) -> dict[str, dict[str, collections.Counter]]:
    refs = _refs()
    expected = {k: _norm(k, v) for k, v in refset.load(refs).items()}
    out: dict[str, dict[str, collections.Counter]] = {}
    for fmt, pick in [("out.parq", "a/refs.0.parq"), ("out.parq", ".zmetadata"), ("out.json.zst", "")]:
        label = f"bit flip in {pick or fmt}"
        counts = {"refset": collections.Counter(), "fsspec": collections.Counter()}
        rng = random.Random(12)
        for i in range(n):
            dest = tmp / f"{i}-{fmt}"
            refset.save(refs, dest)
            victim = dest / pick if pick else dest
            data = bytearray(victim.read_bytes())
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            victim.write_bytes(bytes(data))
            counts["refset"][_refset_outcome(dest, expected)] += 1
            counts["fsspec"][_fsspec_outcome(dest, expected)] += 1
        out[label] = counts
    return out


def _read(lib: str, refs: dict[str, Any]) -> bytes:
    if lib == "refset":
        fs = refset.ReferenceFileSystem(fo=refs)
    else:
        fs = fsspec.filesystem("reference", fo=refs, skip_instance_cache=True)
    return fs.cat_file("k")


def _outcome(lib: str, refs: dict[str, Any], want: bytes) -> str:
    try:
        got = _read(lib, refs)
    except RefsetError:
        return "error"
    except Exception:
        return "error" if lib == "fsspec" else "crash"
    return "right" if got == want else "wrong"


def http_faults(n: int, tmp: Path) -> dict[str, dict[str, collections.Counter]]:
    data = random.Random(3).randbytes(4096)
    (tmp / "data.bin").write_bytes(data)
    out = {}
    rng = random.Random(5)
    with RangeServer(tmp) as srv:
        for fault in ("shift", "short", "ignore", "truncate", "500"):
            counts = {"refset": collections.Counter(), "fsspec": collections.Counter()}
            for _ in range(n):
                off = rng.randrange(len(data) - 64)
                refs = {"k": [srv.url + "/data.bin", off, 16]}
                srv.fault = fault
                for lib in counts:
                    counts[lib][_outcome(lib, refs, data[off:off + 16])] += 1
                srv.fault = None
            out[f"HTTP fault {fault}"] = counts
    return out


def huge_offsets(n: int, tmp: Path) -> dict[str, dict[str, collections.Counter]]:
    p = tmp / "small.bin"
    p.write_bytes(bytes(range(256)) * 16)
    rng = random.Random(7)
    counts = {"refset": collections.Counter(), "fsspec": collections.Counter()}
    for _ in range(n):
        off = rng.randrange(2**63 - 4, 2**64 + 2**20)
        refs = {"k": [str(p), off, 4]}
        for lib in counts:
            try:
                got = _read(lib, refs)
            except RefsetError:
                counts[lib]["error"] += 1
                continue
            except Exception:
                counts[lib]["error" if lib == "fsspec" else "crash"] += 1
                continue
            counts[lib]["wrong"] += 1  # no 4 bytes exist at such an offset: any answer is wrong
            del got
    return {"offset + length in [2**63, 2**64 + 2**20)": counts}


_FSSPEC_CORPUS = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
import fsspec
path = sys.argv[1]
options = {"simple_templates": False} if sys.argv[2:] == ["jinja"] else {}
if path.endswith(".gz"):
    options["target_options"] = {"compression": "gzip"}
elif path.endswith(".zst"):
    options["target_options"] = {"compression": "zstd"}
try:
    fs = fsspec.filesystem("reference", fo=path, skip_instance_cache=True, **options)
    refs = fs.references
    n = 0
    for k in list(refs):
        refs[k]
        n += 1
    print("accepted", n)
except MemoryError:
    print("memory")
except Exception as e:
    print("error", type(e).__name__)
"""


def corpus(timeout: float = 20.0) -> dict[str, tuple[str, ...]]:
    """Each file of tests/hostile that fsspec can open (JSON, parquet; not packed) read by each library:
    fsspec in a subprocess under a 2 GiB address space and ``timeout`` seconds, with its defaults and,
    for Version 1 files, with ``simple_templates=False`` (jinja2, needed for ``gen``). fsspec's
    outcome: ``accepted N`` (N keys listed and read, no error), ``error TYPE``, or no end."""
    import subprocess
    import time

    from tests.fuzzing import exercise

    root = ROOT / "tests" / "hostile"
    out = {}
    for p in sorted(root.iterdir()):
        if p.name == "README.md" or p.suffix == ".packed":
            continue
        try:
            mine = exercise(str(p))
        except Exception as e:
            mine = f"crash {type(e).__name__}"
        theirs = []
        for how in ["default", "jinja"] if p.name.startswith("v1-") else ["default"]:
            t0 = time.monotonic()
            try:
                r = subprocess.run([sys.executable, "-c", _FSSPEC_CORPUS, str(p), how], capture_output=True,
                                   text=True, timeout=timeout)
                got = r.stdout.strip() or f"killed ({r.stderr.strip().splitlines()[-1:]})"
            except subprocess.TimeoutExpired:
                got = f"no end within {timeout:.0f} s"
            theirs.append(f"{got} ({time.monotonic() - t0:.1f} s)")
        out[p.name] = (mine, *theirs, *[""] * (2 - len(theirs)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flips", type=int, default=200)
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--corpus", action="store_true", help="also tests/hostile, file by file")
    a = ap.parse_args()
    results: dict[str, dict[str, collections.Counter]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for fn, n in ((flips, a.flips), (http_faults, a.reads), (huge_offsets, a.reads)):
            sub = t / fn.__name__
            sub.mkdir()
            results.update(fn(n, sub))
    print("| probe | n | refset right / error / wrong | fsspec right / error / wrong |")
    print("|---|---:|---|---|")
    for label, counts in results.items():
        n = sum(counts["refset"].values())
        cells = []
        for lib in ("refset", "fsspec"):
            c = counts[lib]
            crash = f" / **crash {c['crash']}**" if c["crash"] else ""
            cells.append(f"{c['right']} / {c['error']} / {c['wrong']}{crash}")
        print(f"| {label} | {n} | {cells[0]} | {cells[1]} |")
    if a.corpus:
        print("\n| tests/hostile file | refset | fsspec | fsspec, simple_templates=False |\n|---|---|---|---|")
        for name, (mine, theirs, jinja) in corpus().items():
            print(f"| `{name}` | {mine} | {theirs} | {jinja} |")


if __name__ == "__main__":
    main()
