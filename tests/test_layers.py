"""The source tree keeps its layers: each package imports only the packages below it, no module
imports itself through others (no cycles, function-level imports included), and no private name
(``_x``) is imported from another package. Read from the source with ``ast``, nothing is imported."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "refset"

#: What each package may import (besides itself). ``abc`` holds the interfaces, typed against the
#: model; ``io`` is the byte layer; stored forms and scanners sit on both; combine and serving on
#: those; the command line, the conformance suites and the top-level API on everything.
ALLOWED = {
    "errors": set(),
    "options": set(),
    "parallel": set(),
    "model": {"errors", "options", "abc"},
    "abc": {"errors", "options", "model", "io"},
    "io": {"errors", "options", "abc"},
    "formats": {"errors", "options", "parallel", "model", "abc", "io"},
    "scan": {"errors", "options", "parallel", "model", "abc", "io"},
    "combine": {"errors", "options", "parallel", "model", "abc", "io", "formats", "scan"},
    "serve": {"errors", "options", "parallel", "model", "abc", "io", "formats"},
    "cli": {"errors", "options", "parallel", "model", "abc", "io", "formats", "scan", "combine", "serve",
            "(top)"},
    "testing": {"errors", "options", "model", "abc", "io", "formats", "scan", "(top)"},
    "(top)": {"errors", "options", "model", "abc", "io", "formats", "scan", "combine", "serve"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(SRC.rglob("*.py")):
        name = ".".join(p.relative_to(SRC.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _package(module: str) -> str:
    parts = module.split(".")
    return "(top)" if len(parts) == 1 else parts[1]


def _imports(modules: dict[str, Path]) -> list[tuple[str, str, list[str]]]:
    """(importer, imported module, names) for every refset import, at any depth of the code."""
    out = []
    for m, p in modules.items():
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{m}: relative import (refset's imports are absolute)"
                if node.module and node.module.split(".")[0] == "refset":
                    names = [a.name for a in node.names]
                    out.append((m, node.module, names))
                    out += [(m, f"{node.module}.{n}", []) for n in names if f"{node.module}.{n}" in modules]
            elif isinstance(node, ast.Import):
                out += [(m, a.name, []) for a in node.names if a.name.split(".")[0] == "refset"]
    return out


def test_packages_import_only_the_layers_below():
    modules = _modules()
    assert set(map(_package, modules)) <= set(ALLOWED), set(map(_package, modules)) - set(ALLOWED)
    wrong = sorted({(m, t) for m, t, _ in _imports(modules)
                    if _package(t) != _package(m) and _package(t) not in ALLOWED[_package(m)]})
    assert not wrong, "imports against the layers:\n" + "\n".join(f"  {m} -> {t}" for m, t in wrong)


def test_no_private_names_across_packages():
    modules = _modules()
    wrong = []
    for m, t, names in _imports(modules):
        if _package(t) == _package(m):
            continue
        private = [s for s in t.split(".")[1:] + names if s.startswith("_") and not s.startswith("__")]
        if private:
            wrong.append(f"  {m} imports {t}: {', '.join(private)}")
    assert not wrong, "private names used from another package:\n" + "\n".join(wrong)


def test_no_import_cycles():
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, t, _ in _imports(modules):
        if t in modules and t != m and not m.startswith(t + "."):  # a package's own __init__ runs first anyway
            graph[m].add(t)
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    assert not cycles, f"import cycles: {cycles}"


def test_the_check_sees_a_cycle_and_a_layer_breach(tmp_path, monkeypatch):
    """The checks above fail on a planted cycle and a model module importing serve."""
    pkg = tmp_path / "refset"
    for d in ("model", "serve"):
        (pkg / d).mkdir(parents=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "a.py").write_text("from refset.model.b import x\nfrom refset.serve import _y\n")
    (pkg / "model" / "b.py").write_text("def f():\n    from refset.model.a import z\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", pkg)
    for check in (test_packages_import_only_the_layers_below, test_no_private_names_across_packages,
                  test_no_import_cycles):
        with pytest.raises(AssertionError):
            check()


def test_import_refset_loads_its_names_on_first_use():
    """``import refset`` loads the errors and Limits only; a name imports its module when first used,
    and the functions refset.scan and refset.combine stay functions after their packages load."""
    import subprocess

    code = ("import sys, refset; print(sorted(m for m in sys.modules if m.startswith('refset'))); "
            "import refset.scan.hdf5, refset.combine.cluster; from refset import scan; "
            "print(callable(refset.scan), callable(refset.combine), scan is refset.scan, "
            "refset.load({'a': ['u', 1, 2]})['a'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["['refset', 'refset.errors', 'refset.options']",
                                       "True True True ('u', 1, 2)"]
