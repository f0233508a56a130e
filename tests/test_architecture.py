"""The library's layering, checked on its source: no import circle, ``party.py`` below the methods,
and no optional method hook looked up by name where the runner and the saved models use methods.

The import graph is built with :mod:`ast` over ``src/verticalfs``: every ``import`` counts, also
those inside functions (a lazy import that only hides a circle is still a circle); only
``if TYPE_CHECKING:`` blocks are left out (they never run). Relative imports are resolved, ``from
pkg import module`` is an edge to the module, ``from pkg import name`` one to the package, and
importing ``a.b.c`` from outside package ``a.b`` is also an edge to ``a`` and ``a.b`` (their
``__init__`` runs first).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "verticalfs"


# ------------------------------------------------------------------------------------ the graph
def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package) for every ``.py`` file under ``root``."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            t = node.test
            if (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
                    isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"):
                for child in node.body:
                    skip.update(id(n) for n in ast.walk(child))
    return skip


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in its file)."""
    mods = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _type_checking_nodes(tree)
        edges: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    here = name.split(".") if is_pkg else name.split(".")[:-1]
                    here = here[:len(here) - (node.level - 1)]
                    target = ".".join(here + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for a in node.names:
                    if f"{target}.{a.name}" in mods:
                        edges.add(f"{target}.{a.name}")
                    elif target in mods:
                        edges.add(target)
        package = name if is_pkg else name.rpartition(".")[0]
        for target in list(edges):
            parts = target.split(".")
            for k in range(1, len(parts)):
                ancestor = ".".join(parts[:k])
                if ancestor in mods and not (package == ancestor or package.startswith(ancestor + ".")):
                    edges.add(ancestor)
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        v = todo.pop()
        for w in graph.get(v, ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


# ------------------------------------------------------------------------------------- the tests
def test_the_graph_builder_sees_lazy_relative_and_module_imports(tmp_path):
    """The checker itself: a circle closed only by a lazy, relative or ``from pkg import module``
    import is found, and a ``TYPE_CHECKING`` import is not one."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.low import x\n")
    (pkg / "sub" / "low.py").write_text("x = 1\ndef f():\n    from ..top import y\n    return y\n")
    (pkg / "top.py").write_text("from pkg.sub import low\ny = 2\n")
    (pkg / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import top\n")
    g = import_graph(pkg)
    assert "pkg.top" in g["pkg.sub.low"]  # lazy and relative
    assert {"pkg.sub.low", "pkg.sub"} <= g["pkg.top"]  # from pkg import module, and the package's __init__
    assert g["pkg.typed"] == set()
    cycle = find_cycle(g)
    assert cycle is not None and cycle[0] == cycle[-1] and {"pkg.sub.low", "pkg.top"} <= set(cycle)
    (pkg / "sub" / "low.py").write_text("x = 1\n")
    assert find_cycle(import_graph(pkg)) is None


def test_the_library_has_no_import_circle():
    cycle = find_cycle(import_graph(SRC))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_party_sits_below_the_methods_and_the_saved_models():
    """``party.py`` imports nothing from ``methods/`` or ``model.py``, not even through the modules
    it imports (the party side of saving is :mod:`verticalfs.model_files`)."""
    graph = import_graph(SRC)
    above = {m for m in graph if m == "verticalfs.model" or m.startswith("verticalfs.methods")}
    assert not graph["verticalfs.party"] & above
    assert not closure(graph, "verticalfs.party") & above, sorted(closure(graph, "verticalfs.party") & above)
    assert "verticalfs.model_files" in graph["verticalfs.party"]


def _string_getattrs(path: Path) -> list[tuple[int, str]]:
    """``getattr(x, "name", ...)`` / ``hasattr(x, "name")`` calls in ``path``: attributes looked up
    by a name written in the code, ``(line, call)`` each."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            out.append((node.lineno, ast.unparse(node)))
    return out


#: the only lines of ``src/`` that look an attribute up by name: (file, text on the line) -> why
LOOKUP_ALLOWED: dict[tuple[str, str], str] = {
    ("dispatch.py", 'getattr(msg, "public_key"'):
        "any message kind may carry a Paillier public key; the key-size layer checks every one",
    ("deploy/scoring.py", 'getattr(msg, "split"'):
        "a method's inference messages name the split staged for them; scoring routes them by it",
    ("evaluation/chance.py", 'getattr(method_obj.params, "epochs"'):
        "the chance advice names the method's epochs where its parameters have some",
    ("training/split.py", 'getattr(self.model, "input_layer"'):
        "a bottom model may or may not have an input layer whose groups score the features",
    ("sklearn.py", 'getattr(self, "feature_names_in_"'):
        "scikit-learn's convention: set only by fitting on a table with column names",
    ("methods/icafs/transform.py", 'getattr(self, "n_features_in_"'):
        "scikit-learn's convention: set only by fitting",
    ("methods/icafs/transform.py", "getattr(self, 'n_features_in_'"):
        "scikit-learn's convention: set only by fitting",
    ("selection/evaluate.py", 'hasattr(model, "predict_proba")'):
        "scikit-learn's convention: a classifier may or may not give probabilities",
    ("transport/serde.py", '"detach") and hasattr('): "a torch tensor, recognised without importing torch",
    ("codecs/rle.py", '"detach") and hasattr('): "a torch tensor, recognised without importing torch",
    ("events.py", 'hasattr(x, "item")'): "a numpy or torch scalar, recognised without importing either",
    ("transport/serde.py", '"_vf_kind"'): "the @message mark of a class (its kind id)",
    ("transport/messages.py", '"_vf_name"'): "the @message mark of a class (its wire name)",
    ("transport/messages.py", '"_vf_kind"'): "the @message mark of a class (its kind id)",
    ("transport/node.py", 'getattr(px, "route"'):
        "a proxy that can be batched names its route (PartyProxy, a deployment's); a LocalProxy cannot",
    ("transport/grpc/channel.py", 'getattr(self.endpoint, "receive_in"'):
        "a networked party receives per session; a bare node has no sessions",
    ("transport/grpc/wire.py", 'getattr(socket, "TCP_INFO"'): "the socket constant exists on Linux only",
    ("data/stream.py", '"_mmap"'): "numpy's memory map of a memmap array (to advise the kernel)",
    ("data/stream.py", 'hasattr(mm, "madvise")'): "madvise and MADV_DONTNEED exist on some platforms only",
    ("data/vertical.py", 'hasattr(b, "check_values")'):
        "a block read in pieces (data/stream.py's streamed block) checks its own values",
    ("data/vertical.py", 'hasattr(block, "prepare")'):
        "a block read in pieces (data/stream.py's streamed block) prepares itself",
    ("data/user.py", 'hasattr(dec, "getstate")'): "an incremental text decoder's buffered bytes, if it keeps any",
    ("data/user.py", 'hasattr(v, "item")'): "a numpy scalar among the values shown in an error message",
    ("psi.py", 'getattr(mod, "lib_path"'): "the path of rbcl's shared library, which only some versions name",
    ("psi.py", "getattr(proxy, 'name'"): "a proxy's name for an error message, which a test double may lack",
    ("deploy/serve.py", 'getattr(self.model, "channel"'):
        "the batcher scores any model (score, reopen, parties); only a deployed one has a channel to watch",
    ("deploy/serve.py", 'hasattr(channel, "reachable")'): "a channel that can probe a party's port (gRPC's)",
    ("deploy/serve.py", 'hasattr(channel, "connectivity")'): "a channel that reports its connectivity (gRPC's)",
}


def test_no_attribute_is_looked_up_by_name_outside_the_allow_list():
    """Across ``src/`` (issue 49: 89 such calls before), a ``getattr``/``hasattr`` with a written name
    is on :data:`LOOKUP_ALLOWED` with its reason: the methods, the runner, the parties and the
    saved models use the attributes and hooks their classes declare."""
    found, used = [], set()
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        lines = path.read_text().splitlines()
        for line, call in _string_getattrs(path):
            ok = [k for k in LOOKUP_ALLOWED if k[0] == rel and k[1] in lines[line - 1]]
            used.update(ok)
            if not ok:
                found.append(f"{rel}:{line}: {call}")
    assert found == [], ("attributes looked up by name (declare them, or add them to LOOKUP_ALLOWED with a "
                         "reason):\n" + "\n".join(found))
    assert sorted(set(LOOKUP_ALLOWED) - used) == []  # an entry no line needs any more is removed


def test_model_py_names_no_method():
    """``model.py`` keeps the file format and its checks: it names no registered method, no
    classifier class, and imports no method's module (the method is found by the manifest's name)."""
    from verticalfs.methods import registry

    tree = ast.parse((SRC / "model.py").read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not strings & set(registry.available())
    assert not {s for s in strings if any(k in s for k in ("LogisticRegression", "Ridge", "sklearn"))}
    graph = import_graph(SRC)
    methods = {m for m in graph["verticalfs.model"] if m.startswith("verticalfs.methods")}
    assert methods <= {"verticalfs.methods", "verticalfs.methods.registry", "verticalfs.methods.base"}, methods
