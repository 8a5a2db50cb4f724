"""Every ```python block of README.md and docs/*.md runs as written (from a directory holding the
repository's examples/, as a user at the repository root would)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, str]]:
    out = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text()
        for m in BLOCK.finditer(text):
            out.append((f"{doc.relative_to(REPO)}:{text[:m.start()].count(chr(10)) + 1}", m.group(1)))
    return out


@pytest.mark.parametrize("where, code", _blocks(), ids=[w for w, _ in _blocks()])
def test_code_block_runs(where, code, tmp_path, monkeypatch):
    os.symlink(REPO / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, where, "exec"), {"__name__": "__doc_block__"})
