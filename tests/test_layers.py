"""The source tree keeps its layers: each package imports only the packages its layer may (ALLOWED),
no module imports itself through others (no cycles, function-level imports and a package's own
submodules included), no private name (``_x``) is used outside its folder, and xarray and zarr are
used through their public API only, but in ``refset/compat.py``. Read from the source with ``ast``,
nothing is imported."""

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
    "compat": set(),
    "model": {"errors", "options", "abc"},
    "abc": {"errors", "options", "model", "io"},
    "io": {"errors", "options", "abc"},
    "formats": {"errors", "options", "parallel", "model", "abc", "io"},
    "scan": {"errors", "options", "parallel", "model", "abc", "io"},
    "combine": {"errors", "options", "parallel", "model", "abc", "io", "formats", "scan"},
    "serve": {"errors", "options", "parallel", "compat", "model", "abc", "io", "formats"},
    "cli": {"errors", "options", "parallel", "compat", "model", "abc", "io", "formats", "scan", "combine", "serve",
            "(top)"},
    "testing": {"errors", "options", "model", "abc", "io", "formats", "scan", "(top)"},
    "(top)": {"errors", "options", "compat", "model", "abc", "io", "formats", "scan", "combine", "serve"},
}

#: The modules of xarray and zarr that are their public API: anything else of theirs (``zarr.core``,
#: ``xarray.core``, ``xarray.backends.zarr``, ``xarray.coding``...) and any ``_name`` is private, and
#: only :data:`COMPAT` may reach it (an upstream minor release may change it).
PUBLIC = {
    "xarray": {"xarray", "xarray.backends", "xarray.conventions", "xarray.coders", "xarray.testing"},
    "zarr": {"zarr", "zarr.abc", "zarr.abc.store", "zarr.abc.buffer", "zarr.abc.codec", "zarr.buffer",
             "zarr.storage", "zarr.codecs", "zarr.errors", "zarr.api", "zarr.api.asynchronous",
             "zarr.api.synchronous", "zarr.registry", "zarr.dtype"},
}
COMPAT = "refset.compat"


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


def _home(module: str, modules: dict[str, Path]) -> str:
    """The folder a module lives in (a package is its own)."""
    return module if modules[module].name == "__init__.py" else module.rpartition(".")[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_names_across_folders():
    """A private name (``_x``) is used only in its own folder: not imported from another, nor reached
    as an attribute of a module or class imported from another (``table._trusted``)."""
    modules = _modules()
    wrong = []
    for m, t, names in _imports(modules):
        home = t if t in modules else t.rpartition(".")[0]
        if home not in modules or _home(home, modules) == _home(m, modules):
            continue
        private = [s for s in t.split(".")[1:] + names if _private(s)]
        if private:
            wrong.append(f"  {m} imports {t}: {', '.join(private)}")
    for m, p in modules.items():
        tree = ast.parse(p.read_text(), str(p))
        bound: dict[str, str] = {}  # a local name -> the module it came from
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "refset":
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    bound[a.asname or a.name] = full if full in modules else node.module
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "refset" and a.asname:
                        bound[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in bound and bound[node.value.id] in modules
                    and _home(bound[node.value.id], modules) != _home(m, modules)):
                wrong.append(f"  {m} uses {node.value.id}.{node.attr} (from {bound[node.value.id]})")
    assert not wrong, "private names used from another folder:\n" + "\n".join(sorted(set(wrong)))


def _foreign_private(module: str, names: list[str]) -> list[str]:
    """What of ``from module import names`` (or ``import module``) is private xarray or zarr."""
    top = module.split(".")[0]
    if top not in PUBLIC:
        return []
    if module not in PUBLIC[top] or any(_private(p) for p in module.split(".")):
        return [module]
    return [f"{module}.{n}" for n in names if _private(n) or f"{module}.{n}".startswith(("xarray.core", "zarr.core"))]


def test_xarray_and_zarr_through_their_public_api_only():
    """No module but refset/compat.py imports a private name of xarray or zarr (``zarr.core.*``,
    ``xarray.core.*``, ``xarray.backends.zarr``, a ``_name``), nor reaches one as an attribute of a
    module it imported (``xr.core.indexing``, ``zarr.core.sync``)."""
    wrong = []
    for m, p in _modules().items():
        if m == COMPAT:
            continue
        tree = ast.parse(p.read_text(), str(p))
        bound: dict[str, str] = {}  # a local name -> the xarray/zarr module it is
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                bad = _foreign_private(node.module, [a.name for a in node.names])
                wrong += [f"  {m} imports {b}" for b in bad]
                for a in node.names:
                    if node.module.split(".")[0] in PUBLIC:
                        bound[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    wrong += [f"  {m} imports {b}" for b in _foreign_private(a.name, [])]
                    if a.name.split(".")[0] in PUBLIC:
                        bound[a.asname or a.name.split(".")[0]] = (a.asname and a.name) or a.name.split(".")[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain, cur = [node.attr], node.value
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in bound:
                full = ".".join([bound[cur.id], *reversed(chain)])
                parts = full.split(".")
                if any(_private(x) for x in parts) or full.startswith(("xarray.core", "zarr.core",
                                                                       "xarray.backends.zarr")):
                    wrong.append(f"  {m} uses {full}")
    assert not wrong, "private xarray/zarr names outside refset/compat.py:\n" + "\n".join(sorted(set(wrong)))


def test_no_import_cycles():
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, t, _ in _imports(modules):
        if t in modules and t != m:
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


@pytest.mark.parametrize("plant,fails", [
    ({"model/a.py": "from refset.serve import engine\n"}, "layers"),
    ({"formats/json/a.py": "from refset.formats.parquet.reader import _rows\n"}, "private"),
    ({"scan/a.py": "from refset.model import table\nx = table._trusted\n"}, "private"),
    ({"scan/a.py": "from refset.model.table import ChunkTable\nx = ChunkTable._trusted\n"}, "private"),
    ({"combine/__init__.py": "from refset.combine.cluster import f\n",
      "combine/cluster.py": "def f():\n    from refset.combine import g\n"}, "cycles"),
    ({"model/a.py": "from refset.model.b import x\n", "model/b.py": "def f():\n    import refset.model.a\n"},
     "cycles"),
    ({"serve/a.py": "def f():\n    from zarr.core.sync import sync\n"}, "upstream"),
    ({"serve/a.py": "from xarray.core import indexing\n"}, "upstream"),
    ({"serve/a.py": "from xarray.backends.zarr import ZarrStore\n"}, "upstream"),
    ({"serve/a.py": "import xarray as xr\nx = xr.core.indexing\n"}, "upstream"),
    ({"serve/a.py": "import zarr\nx = zarr._version\n"}, "upstream"),
])
def test_the_checks_see_what_they_guard(tmp_path, monkeypatch, plant, fails):
    """Each check fails on a planted breach of its rule, and only that check."""
    pkg = tmp_path / "refset"
    for d in ("model", "serve", "scan", "combine", "formats/json", "formats/parquet"):
        (pkg / d).mkdir(parents=True, exist_ok=True)
        (pkg / d / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "model" / "table.py").write_text("")
    (pkg / "serve" / "engine.py").write_text("")
    (pkg / "formats" / "parquet" / "reader.py").write_text("")
    (pkg / "combine" / "cluster.py").write_text("")
    for path, text in plant.items():
        (pkg / path).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "SRC", pkg)
    checks = {"layers": test_packages_import_only_the_layers_below, "private": test_no_private_names_across_folders,
              "cycles": test_no_import_cycles, "upstream": test_xarray_and_zarr_through_their_public_api_only}
    for name, check in checks.items():
        if name == fails:
            with pytest.raises(AssertionError):
                check()
        else:
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


def test_removed_names_say_what_replaces_them():
    import refset

    with pytest.raises(AttributeError, match=r"set_limits is gone: limits are given where a set is read"):
        refset.set_limits  # noqa: B018
    with pytest.raises(AttributeError, match=r"has no attribute 'no_such_name'$"):
        refset.no_such_name  # noqa: B018


def test_the_package_says_it_is_typed():
    """py.typed ships with the package (PEP 561), so users' type checkers read refset's annotations."""
    assert (SRC / "py.typed").exists()
    import subprocess

    out = subprocess.run([sys.executable, "-c", "import importlib.resources as r; "
                          "print(r.files('refset').joinpath('py.typed').is_file())"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_one_broken_class():
    """A scanned file's broken structure is said with one exception class, ``refset.io.scanfile.Broken``,
    which the scanners' frame turns into ``InvalidFile`` naming the file: no format keeps its own (six
    did), and none derives another from it."""
    defined, derived = [], []
    for p in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.ClassDef):
                where = f"{p.relative_to(SRC)}:{node.lineno}"
                if node.name == "Broken":
                    defined.append(where)
                if any(isinstance(b, ast.Name | ast.Attribute) and ast.unparse(b).rsplit(".", 1)[-1] == "Broken"
                       for b in node.bases):
                    derived.append(where)
    assert len(defined) == 1 and defined[0].startswith("io/scanfile.py:"), defined
    assert not derived, derived
