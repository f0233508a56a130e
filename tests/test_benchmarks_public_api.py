"""The library and its benchmarks stay apart.

``benchmarks/`` uses only verticalfs's public API, as ``verticalfs``'s docstring defines it (a module
path and a name without a leading underscore; no assignment to a library module's or class's
attributes). The scan is static (:mod:`ast`), so it knows what a benchmark imports, not the type of
every object: it flags any ``obj._name`` outside a benchmark's own ``self`` / ``cls``.

And ``tests/`` imports no benchmark: what a test checks of the library goes through the library;
the checks of a benchmark script live beside it (``benchmarks/<name>/test_*.py``, run by ``.ci/run``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIB = "verticalfs"


def private(name: str) -> bool:
    """A leading underscore, but not a dunder (``__version__``, ``__name__`` are public)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _root(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (``a`` of ``a.b[0].c``), if it is a plain name."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def private_uses(source: str, where: str = "<source>") -> list[str]:
    """What ``source`` (a benchmark script) uses of the library beyond its public API."""
    tree = ast.parse(source, where)
    bound: set[str] = set()  # names bound to library modules, classes or functions by an import
    out: list[str] = []

    def flag(node: ast.AST, what: str) -> None:
        out.append(f"{where}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == LIB:
                    if any(private(p) for p in a.name.split(".")):
                        flag(node, f"imports the private module {a.name}")
                    bound.add(a.asname or LIB)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == LIB:
            if any(private(p) for p in node.module.split(".")):
                flag(node, f"imports from the private module {node.module}")
            for a in node.names:
                if private(a.name):
                    flag(node, f"imports the private name {a.name} from {node.module}")
                bound.add(a.asname or a.name)
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                flag(node, f"reaches into the private attribute .{node.attr}")
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        for t in targets:
            for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                if isinstance(el, ast.Attribute) and _root(el) in bound:
                    flag(el, f"assigns to {ast.unparse(el)} (monkey-patching the library)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id in ("setattr", "delattr") and _root(node.args[0]) in bound:
                flag(node, f"{node.func.id}() on {ast.unparse(node.args[0])} (monkey-patching the library)")
            if (node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
                    and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                    and private(node.args[1].value)):
                flag(node, f"{node.func.id}(..., {node.args[1].value!r}) names a private attribute")
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                and node.value.split(".")[0] == LIB and all(p.isidentifier() for p in node.value.split("."))
                and any(private(p) for p in node.value.split("."))):
            flag(node, f"names the private path {node.value!r}")
    return out


BENCHMARK_SCRIPTS = sorted((REPO / "benchmarks").rglob("*.py"))


def test_there_are_benchmarks_to_check():
    assert len(BENCHMARK_SCRIPTS) > 10


@pytest.mark.parametrize("path", BENCHMARK_SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_benchmarks_use_the_public_api_only(path: Path):
    found = private_uses(path.read_text(), str(path.relative_to(REPO)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source", [
    "from verticalfs.transport.grpc.channel import _OPTIONS",
    "from verticalfs.crypto._bigint import powmod",
    "import verticalfs.crypto._bigint",
    "import verticalfs\nx = verticalfs.federation._Local",
    "def f(fed):\n    return fed._local",
    "from verticalfs.methods.icafs.method import ICAFSTrainer\nICAFSTrainer.synthesize = lambda t: None",
    "def f():\n    from verticalfs.methods.icafs import method as m\n    m.ICAFSTrainer.fit = None",
    "import verticalfs as v\nsetattr(v.federation.Federation, 'run', None)",
    "import verticalfs\nverticalfs.api.run = print",
    "from verticalfs import api\ndel api.run",
    "x = getattr(obj, '_secret')",
    "import importlib\nimportlib.import_module('verticalfs.crypto._bigint')",
])
def test_the_scan_catches(source: str):
    """Each way of leaving the public API is caught (the scan is not vacuous)."""
    assert private_uses(source)


@pytest.mark.parametrize("source", [
    "import verticalfs\nfrom verticalfs.methods import create\nm = create('vfl', seed=0)\nm.fit(verticalfs.Federation)",
    "class T:\n    def go(self):\n        return self._now()",
    "from verticalfs import __version__",
    "from run import _retrained",  # a benchmark's own helper, not the library
    "import numpy as np\nnp.seterr = None",  # not the library (and not this test's business)
    "from verticalfs.federation import Federation\nfed = Federation\nresult = {}\nresult['x'] = 1",
])
def test_the_scan_lets_public_use_pass(source: str):
    assert private_uses(source) == []


# ----------------------------------------------------------------------------- tests/ and benchmarks/
def benchmark_imports(source: str, where: str = "<source>") -> list[str]:
    """Where ``source`` (a test module) imports or loads a benchmark script."""
    tree = ast.parse(source, where)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        if any(n.split(".")[0] == "benchmarks" for n in names):
            out.append(f"{where}:{node.lineno}: imports {', '.join(names)}")
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                and "benchmarks" in node.value.replace("\\", "/").split("/")):
            out.append(f"{where}:{node.lineno}: names the benchmarks folder ({node.value!r}): load no benchmark "
                       "script from a test; test the library through its API, the script beside it")
    return out


@pytest.mark.parametrize("path", sorted((REPO / "tests").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_tests_import_no_benchmark(path: Path):
    if path == Path(__file__):
        return  # this file names the folder to scan it
    found = benchmark_imports(path.read_text(), str(path.relative_to(REPO)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("source", [
    "import benchmarks.icafs.run",
    "from benchmarks.sparsevfl import datasets",
    "import importlib.util\nspec = importlib.util.spec_from_file_location('r', REPO / 'benchmarks' / 'icafs' / 'run.py')",
    "import sys\nsys.path.insert(0, 'benchmarks/icafs')",
])
def test_the_benchmark_import_scan_catches(source: str):
    assert benchmark_imports(source)


def test_the_library_carries_no_benchmark_module():
    """Measuring belongs to ``benchmarks/`` (``crypto/benchmark.py`` moved to ``benchmarks/feast``)."""
    assert not [p for p in (REPO / "src" / LIB).rglob("*.py") if "benchmark" in p.stem]
