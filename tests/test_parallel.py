"""refset's shared thread pool: a map inside a map (a variable made of parts read part by part, each
part's chunks decoded on the pool) runs, never waits on itself."""

from __future__ import annotations

import subprocess
import sys

CODE = """
from refset.parallel import parallel_map
got = parallel_map(lambda i: sum(parallel_map(lambda j: i * j, range(10))), range(64))
assert got == [45 * i for i in range(64)], got
print("done")
"""


def test_a_map_inside_a_map_finishes() -> None:
    # in a child: a pool that waits on itself would keep a process from ever exiting
    try:
        got = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("parallel_map inside parallel_map waits forever") from e
    assert got.returncode == 0 and got.stdout.strip() == "done", got.stderr
