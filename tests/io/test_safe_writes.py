"""Safe writes (issue 12): a writer killed (SIGKILL, at a point named by ``REFSET_CRASH_AT``) leaves the
old output or the new one, readable at once; the next write to the target cleans what it left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import refset
from tests.helpers import zarray


def _refs(version: int) -> dict:
    compact = json.dumps(json.loads(zarray([8], [1])), separators=(",", ":"))  # as parquet serves it
    refs = {".zgroup": '{"zarr_format":2}', "a/.zarray": compact, "a/.zattrs": f'{{"v":{version}}}'}
    refs.update({f"a/{i}": [f"f{version}.nc", 100 * i, 100 + version] for i in range(8)})
    return refs


_WRITE = """
import json, sys, refset
dest, refs, opts = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
refset.save(refset.load(refs), dest, storage_options=opts or None)
print("WRITTEN")
"""


def _killed_write(dest: str, refs: dict, point: str, storage_options: dict | None = None) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(refset.__file__).parents[1]), "REFSET_CRASH_AT": point}
    r = subprocess.run([sys.executable, "-c", _WRITE, dest, json.dumps(refs), json.dumps(storage_options or {})],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stdout, r.stderr[-2000:])


def _set(dest: str, storage_options: dict | None = None) -> dict:
    return refset.load(dest, storage_options=storage_options).to_dict()


def _expected(version: int) -> dict:
    return refset.load(_refs(version)).to_dict()


@pytest.mark.parametrize("point,survivor", [("parquet-before-renames", 1), ("parquet-between-renames", 1),
                                            ("parquet-after-renames", 2)])
def test_parquet_killed_between_its_steps(tmp_path, point, survivor):
    dest = str(tmp_path / "out.parq")
    refset.save(refset.load(_refs(1)), dest)
    _killed_write(dest, _refs(2), point)
    assert _set(dest) == _expected(survivor)  # read at once, before any repair
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left != ["out.parq"]  # the kill left something beside it
    refset.save(refset.load(_refs(3)), dest)
    assert _set(dest) == _expected(3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parq"]


def test_parquet_set_aside_is_put_back_by_the_next_write_of_another_format(tmp_path):
    dest = str(tmp_path / "out.parq")
    refset.save(refset.load(_refs(1)), dest)
    _killed_write(dest, _refs(2), "parquet-between-renames")
    assert not os.path.exists(dest)
    refset.save(refset.load(_refs(3)), tmp_path / "other.json")  # another target: not touched
    assert not os.path.exists(dest)
    refset.save(refset.load(_refs(4)), dest)
    assert _set(dest) == _expected(4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.json", "out.parq"]


@pytest.mark.parametrize("name", ["out.json", "out.json.zst", "out.packed"])
def test_single_file_writers_killed_before_rename(tmp_path, name):
    dest = str(tmp_path / name)
    refset.save(refset.load(_refs(1)), dest)
    _killed_write(dest, _refs(2), "write-before-rename")
    assert _set(dest) == _expected(1)
    assert any(p.name.startswith(f".{name}.refset-") and p.name.endswith(".tmp") for p in tmp_path.iterdir())
    refset.save(refset.load(_refs(3)), dest)
    assert _set(dest) == _expected(3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    """Only temporaries of processes no longer running are removed (this process is running)."""
    from refset.io.atomic import temp_prefix

    dest = tmp_path / "out.json"
    live = tmp_path / f"{temp_prefix(str(dest))}abc.tmp"
    live.write_bytes(b"in progress")
    refset.save(refset.load(_refs(1)), dest)
    assert live.exists()


def test_a_left_temporary_whose_pid_was_reused_is_removed(tmp_path):
    """A killed writer's temporary is removed even when its pid now names a running process: its lock
    is free and it is older than STALE_AFTER (before: kept for as long as that pid ran)."""
    from refset.io.atomic import STALE_AFTER, temp_prefix

    dest = tmp_path / "out.json"
    left = tmp_path / f"{temp_prefix(str(dest))}abc.tmp"  # this process's pid: running
    left.write_bytes(b"left by a killed writer")
    old = left.stat().st_mtime - STALE_AFTER - 60
    os.utime(left, (old, old))
    refset.save(refset.load(_refs(1)), dest)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


_HOLDER = """
import os, sys, time
from refset.io.atomic import hold
fd = hold(sys.argv[1])
print("held" if fd is not None else "not held", flush=True)
time.sleep(60)
"""


def test_a_temporary_locked_by_a_live_writer_is_kept_whatever_its_pid(tmp_path):
    """A writer in another pid namespace names its temporary with a pid that looks gone here: its lock
    says it is alive (before: removed under it)."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    dest = tmp_path / "out.json"
    live = tmp_path / f".out.json.refset-{gone}-abc.tmp"
    live.write_bytes(b"in progress elsewhere")
    env = {**os.environ, "PYTHONPATH": str(Path(refset.__file__).parents[1])}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(live)], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        refset.save(refset.load(_refs(1)), dest)
        assert live.exists()
    finally:
        holder.kill()
        holder.wait()
    refset.save(refset.load(_refs(2)), dest)  # the holder is gone, and so is its pid: removed
    assert not live.exists()


def test_parquet_on_s3_killed_while_copying_into_place(s3):
    import s3fs

    dest = "s3://refs/killed/out.parq"
    refset.save(refset.load(_refs(1)), dest, storage_options=s3)
    _killed_write(dest, _refs(2), "parquet-remote-copying", s3)
    fs = s3fs.S3FileSystem(**s3)
    fs.invalidate_cache()
    assert not fs.exists("refs/killed/out.parq/.zmetadata")
    assert fs.glob("refs/killed/out.parq.refset-*.tmp")
    assert _set(dest, s3) == _expected(2)  # the complete new tree beside it is read
    refset.save(refset.load(_refs(3)), dest, storage_options=s3)
    fs.invalidate_cache()
    assert _set(dest, s3) == _expected(3)
    assert fs.glob("refs/killed/out.parq.refset-*.tmp") == []


def test_parquet_on_s3_paths_with_glob_characters_name_only_themselves(s3):
    """fsspec expands [..], * and ? in rm/copy/glob: a set named run[1].parq must never read, replace or
    remove run1.parq (before: it read run1's leftover tree, and writing it deleted run1.parq)."""
    import s3fs

    run1, other = "s3://refs/g/run1.parq", "s3://refs/g/run[1].parq"
    refset.save(refset.load(_refs(1)), run1, storage_options=s3)
    _killed_write(run1, _refs(2), "parquet-remote-copying", s3)  # run1's new tree left beside it
    with pytest.raises(FileNotFoundError):
        refset.load(other, storage_options=s3)  # never written: not run1's leftover
    refset.save(refset.load(_refs(7)), other, storage_options=s3)
    refset.save(refset.load(_refs(8)), other, storage_options=s3)
    assert _set(other, s3) == _expected(8)
    s3fs.S3FileSystem(**s3).invalidate_cache()
    assert _set(run1, s3) == _expected(2)  # run1's leftover still there, read in its place


def test_parquet_remote_copy_failing_keeps_the_new_set(tmp_path, monkeypatch):
    """An error while the tree is copied into place (a transient S3 error, Ctrl-C) leaves the complete
    new tree beside the target: readers use it and the next write puts it in place (before: both sets
    were deleted)."""
    from fsspec.implementations.memory import MemoryFileSystem

    dest = "memory://failing/out.parq"
    refset.save(refset.load(_refs(1)), dest)
    real, calls = MemoryFileSystem.cp_file, [0]

    def flaky(self, *args, **kwargs):
        calls[0] += 1
        if calls[0] == 2:
            raise PermissionError("simulated transient error")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "cp_file", flaky)
    with pytest.raises(refset.errors.RefsetError, match=r"memory://failing/out.parq: writing the parquet set "
                       r"failed \(PermissionError: simulated transient error\); the new set is kept complete"):
        refset.save(refset.load(_refs(2)), dest)
    monkeypatch.setattr(MemoryFileSystem, "cp_file", real)
    assert _set(dest) == _expected(2)
    refset.save(refset.load(_refs(3)), dest)
    assert _set(dest) == _expected(3)
    assert MemoryFileSystem().glob("/failing/out.parq.refset-*") == []


_GET_FILE = """
import sys, refset
fs = refset.ReferenceFileSystem({"version": 1, "refs": {"k": [sys.argv[1], 10, 5]}})
fs.get_file("k", sys.argv[2])
"""


def test_reference_filesystem_get_file_writes_through_a_temporary(tmp_path):
    data = tmp_path / "d.bin"
    data.write_bytes(bytes(range(200)))
    out = tmp_path / "k.out"
    out.write_bytes(b"old content")
    env = {**os.environ, "PYTHONPATH": str(Path(refset.__file__).parents[1]), "REFSET_CRASH_AT": "write-before-rename"}
    r = subprocess.run([sys.executable, "-c", _GET_FILE, str(data), str(out)], capture_output=True, timeout=120,
                       env=env)
    assert r.returncode == -signal.SIGKILL
    assert out.read_bytes() == b"old content"  # killed before the rename: the old file whole
    fs = refset.ReferenceFileSystem({"version": 1, "refs": {"k": [str(data), 10, 5], "i": "inline"}})
    fs.get_file("k", str(out))
    fs.get_file("i", str(tmp_path / "i.out"))
    assert out.read_bytes() == bytes(range(10, 15))
    assert (tmp_path / "i.out").read_bytes() == b"inline"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.bin", "i.out", "k.out"]  # the killed temporary removed
