"""The library's layering, checked on its source: no import circle, ``party.py`` below the methods
and the training loops, ``__version__`` in a leaf, nothing in ``data/`` or ``methods/`` above the
entry points, no attribute looked up by name outside a short allow-list, and the dependency diagram
of docs/architecture.md generated from the import graph.

The import graph is built with :mod:`ast` over ``src/verticalfs``: every ``import`` counts, those
inside functions (a lazy import that only hides a circle is still a circle) and those under ``if
TYPE_CHECKING:`` (a circle of types is still a circle: the two modules cannot be understood, typed
or changed apart). Relative imports are resolved, ``from pkg import module`` is an edge to the
module, ``from pkg import name`` one to the package, and importing ``a.b.c`` from outside package
``a.b`` is also an edge to ``a`` and ``a.b`` (their ``__init__`` runs first).

``python tests/test_architecture.py --write`` writes the diagram into docs/architecture.md.
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


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in its file)."""
    mods = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, (path, is_pkg) in mods.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
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
def test_the_graph_builder_sees_lazy_relative_module_and_type_checking_imports(tmp_path):
    """The checker itself: a circle closed only by a lazy, relative, ``from pkg import module`` or
    ``TYPE_CHECKING`` import is found."""
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
    assert g["pkg.typed"] == {"pkg.top"}  # a type-checking import counts
    cycle = find_cycle(g)
    assert cycle is not None and cycle[0] == cycle[-1] and {"pkg.sub.low", "pkg.top"} <= set(cycle)
    (pkg / "sub" / "low.py").write_text("x = 1\n")
    assert find_cycle(import_graph(pkg)) is None
    (pkg / "top.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import typed\n")
    assert set(find_cycle(import_graph(pkg))) == {"pkg.top", "pkg.typed"}  # a circle of types only


def test_the_library_has_no_import_circle():
    cycle = find_cycle(import_graph(SRC))
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_party_sits_below_the_methods_the_loops_and_the_saved_models():
    """``party.py`` imports nothing from ``methods/``, ``training/`` or ``model.py``, not even
    through the modules it imports: the party side of saving is :mod:`verticalfs.model_files`, of
    checkpoints :mod:`verticalfs.persist`, and the registry (:mod:`verticalfs.method_registry`)
    imports no method."""
    graph = import_graph(SRC)
    above = {m for m in graph if m == "verticalfs.model" or m.startswith(("verticalfs.methods", "verticalfs.training"))}
    assert not graph["verticalfs.party"] & above
    assert not closure(graph, "verticalfs.party") & above, sorted(closure(graph, "verticalfs.party") & above)
    assert {"verticalfs.model_files", "verticalfs.persist.files"} <= graph["verticalfs.party"]
    assert not closure(graph, "verticalfs.method_registry") & above
    assert not closure(graph, "verticalfs.federation") & above


def test_the_version_is_a_leaf_and_no_module_imports_the_package_root():
    """``__version__`` lives in :mod:`verticalfs.version`, which imports nothing; no module of the
    library imports the package ``verticalfs`` itself (its ``__init__`` is the public facade)."""
    graph = import_graph(SRC)
    assert graph["verticalfs.version"] == set()
    assert sorted(m for m, edges in graph.items() if "verticalfs" in edges) == []


#: the entry points: what runs a method end to end (nothing below them may import them)
ENTRY = {"verticalfs.api", "verticalfs.cli", "verticalfs.compare", "verticalfs.tuning", "verticalfs.sklearn",
         "verticalfs.__main__"}


def _is_method_command(module: str) -> bool:
    parts = module.split(".")
    return len(parts) == 4 and parts[1] == "methods" and parts[3] == "cli"


def test_data_and_methods_import_no_entry_point():
    """Nothing in ``data/`` or ``methods/`` imports ``api``, ``cli`` (or ``compare``, ``tuning``,
    ``sklearn``), even through other modules. A method's own commands (``methods/<name>/cli.py``,
    which the CLI loads by file, :func:`verticalfs.method_registry.commands`) are command-line code
    kept beside the method: they may."""
    graph = import_graph(SRC)
    for m in graph:
        if m.startswith(("verticalfs.data", "verticalfs.methods")) and not _is_method_command(m):
            assert not closure(graph, m) & ENTRY, (m, sorted(closure(graph, m) & ENTRY))


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
    ("dispatch.py", 'getattr(call.msg, "n_bins"'):
        "any message kind may ask for a number of bins; the work-bounds layer checks every one (issue 50)",
    ("dispatch.py", 'getattr(call.msg, "n_classes"'):
        "any message kind may ask for sums over classes; the work-bounds layer checks every one (issue 50)",
    ("methods/deployable.py", 'getattr(params, "hidden"'):
        "the generated page reads a method's default bottom model where its parameters have one",
    ("methods/deployable.py", 'getattr(params, "lr"'):
        "the generated page reads a method's default learning rate where its parameters have one",
    ("methods/deployable.py", 'getattr(params, "batch_size"'):
        "the generated page reads a method's default batch size where its parameters have one",
    ("methods/deployable.py", 'getattr(params, "embedding_dim"'):
        "the generated page reads a method's default embedding width where its parameters have one",
    ("trust.py", 'hasattr(obj, "__dict__")'):
        "the reseeding walks any object reachable from a role for its random generators",
    ("trust.py", 'getattr(spec, "dp_noise"'):
        "a method's Join spec may or may not carry DP noise; max_epsilon refuses those without",
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


# --------------------------------------------------------------------------- the dependency diagram
DOC = SRC.parents[1] / "docs" / "architecture.md"
START, END = "<!-- import-graph:start -->", "<!-- import-graph:end -->"
#: modules every layer uses (left out of the diagram: an arrow from nearly every box)
BASE = {"exceptions", "names", "version", "utils"}


def group(module: str) -> str:
    """A module's box in the diagram: its top-level package or module; ``transport.grpc`` (the
    networked transport, above the party) and ``evaluation.chance`` (it reads a method's run) apart,
    and a method's own commands (``methods/<name>/cli.py``) as ``methods.cli``."""
    parts = module.split(".")[1:]
    if not parts:
        return "verticalfs"
    if len(parts) == 3 and parts[0] == "methods" and parts[2] == "cli":
        return "methods.cli"
    if ".".join(parts[:2]) in ("transport.grpc", "evaluation.chance"):
        return ".".join(parts[:2])
    return parts[0]


def group_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Box -> the boxes it imports from (the base modules and the package facade left out)."""
    out: dict[str, set[str]] = {}
    for a, targets in graph.items():
        ga = group(a)
        if ga in ("verticalfs", "__main__") or ga in BASE:
            continue
        out.setdefault(ga, set())
        for b in targets:
            gb = group(b)
            if gb != ga and gb not in BASE and gb != "verticalfs":
                out[ga].add(gb)
    return out


def reduced(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The arrows of ``graph`` (acyclic) that no longer path implies: its transitive reduction."""
    out = set()
    for a, targets in graph.items():
        for b in targets:
            others = [x for x in targets if x != b]
            seen, todo = set(), list(others)
            while todo:
                v = todo.pop()
                if v not in seen:
                    seen.add(v)
                    todo.extend(graph.get(v, ()))
            if b not in seen:
                out.add((a, b))
    return out


def diagram() -> str:
    """The mermaid block of docs/architecture.md: box ``A --> B`` when A imports from B and no
    longer path says so."""
    g = group_graph(import_graph(SRC))
    lines = ["```mermaid", "flowchart TB"]
    for box in sorted(g):
        lines.append(f'    {box.replace(".", "_")}["{box}"]')
    lines += [f"    {a.replace('.', '_')} --> {b.replace('.', '_')}" for a, b in sorted(reduced(g))]
    lines.append("```")
    return "\n".join(lines)


def test_the_boxes_of_the_library_have_no_circle_either():
    g = group_graph(import_graph(SRC))
    cycle = find_cycle(g)
    assert cycle is None, "circle between the diagram's boxes: " + " -> ".join(cycle)


def test_the_dependency_diagram_in_the_docs_is_the_import_graph():
    text = DOC.read_text()
    assert START in text and END in text
    shown = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert shown == diagram(), "docs/architecture.md's diagram is stale: run python tests/test_architecture.py --write"


if __name__ == "__main__":  # python tests/test_architecture.py --write: the diagram into the docs
    import sys

    if sys.argv[1:] == ["--write"]:
        text = DOC.read_text()
        head, rest = text.split(START, 1)
        DOC.write_text(head + START + "\n" + diagram() + "\n" + END + rest.split(END, 1)[1])

