"""The package's import graph: no framework in ``amp_suite/``, and no module or package importing one that imports it back.

Every ``import`` statement counts, those inside functions included: a lazy
import still ties two modules together, it only hides the tie from the
interpreter.  The package root (``amp_suite/__init__.py``) is the top floor
of the layering, checked like every other module: it hands out ``run``,
``load`` and ``compare`` from ``amp_suite.api`` on first use, and no module of
the package imports it (the pluggy markers and the version it re-exports live
in the leaf ``amp_suite.markers``).  A module named in a string (a bootstrap's
``from X import main``, ``python -m X``) is an import these checks cannot see,
so the package names no module of a framework or of the built-in plugins.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from suite_cli import REPO

PACKAGE = REPO / "amp_suite"
FRAMEWORK_MODULES = ("torch", "tensorflow", "keras", "jax", "jaxlib", "haiku", "flax", "jmp", "optax")


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[str, ...]]:
    """What ``path`` imports, each as the names to try, most specific first.

    ``from X import y`` tries ``X.y`` (a submodule) before ``X``; importing a
    submodule also runs its packages' ``__init__``, which Python does whatever
    the layering, so that is not an edge of its own.
    """
    found: list[tuple[str, ...]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name,) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(f"{node.module}.{alias.name}", node.module) for alias in node.names]
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (the nearest existing module of each dotted name)."""
    paths = {_module_name(path, package): path for path in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets = set()
        for candidates in _imports(path):
            name = next((c for c in candidates if c in paths), candidates[-1])
            while name and name not in paths:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            target = next(edges, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_graphs(graph: dict[str, set[str]]) -> dict[str, dict[str, set[str]]]:
    """Each package -> the graph of its direct children (modules and subpackages).

    A child imports another when any module inside it imports any module
    inside the other; importing the package itself (its ``__init__``) is no
    edge, since every module of it runs that anyway.
    """
    packages = {name for name in graph if any(other.startswith(name + ".") for other in graph)}
    graphs: dict[str, dict[str, set[str]]] = {}
    for package in packages:
        depth = package.count(".") + 1

        def child(name: str, package: str = package, depth: int = depth) -> str | None:
            return ".".join(name.split(".")[:depth + 1]) if name.startswith(package + ".") else None

        children: dict[str, set[str]] = {}
        for module, targets in graph.items():
            source = child(module)
            if source is None:
                continue
            children.setdefault(source, set())
            for target in map(child, targets):
                if target is not None and target != source:
                    children[source].add(target)
        graphs[package] = children
    return graphs


def test_the_cycle_finder_finds_a_lazy_back_edge(tmp_path: Path) -> None:
    package = tmp_path / "amp_suite"
    (package / "cell").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "cell" / "__init__.py").write_text("from amp_suite.store import save\nLIMIT = 3\n")
    (package / "store.py").write_text("def save():\n    from amp_suite.cell import LIMIT\n")
    (package / "cell" / "worker.py").write_text("import numpy\n")
    graph = import_graph(package)
    assert graph["amp_suite.store"] == {"amp_suite.cell"}
    assert cycles(graph) == [["amp_suite.cell", "amp_suite.store"]]
    (package / "store.py").write_text("def save():\n    from amp_suite.cell import worker\n")  # a submodule
    graph = import_graph(package)
    assert graph["amp_suite.store"] == {"amp_suite.cell.worker"} and cycles(graph) == []


def test_packages_that_import_each_other_through_different_modules_are_found(tmp_path: Path) -> None:
    package = tmp_path / "amp_suite"
    for name in ("cell", "sweep"):
        (package / name).mkdir(parents=True)
        (package / name / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "cell" / "worker.py").write_text("from amp_suite.sweep.store import save\n")
    (package / "sweep" / "store.py").write_text("")
    (package / "sweep" / "runner.py").write_text("import amp_suite.cell.worker\n")
    graph = import_graph(package)
    assert cycles(graph) == []  # no module imports one that imports it back ...
    children = package_graphs(graph)["amp_suite"]
    assert children["amp_suite.cell"] == {"amp_suite.sweep"}
    assert cycles(children) == [["amp_suite.cell", "amp_suite.sweep"]]  # ... but the two packages do
    (package / "sweep" / "runner.py").write_text("import amp_suite.sweep\n")  # its own package: no edge
    assert cycles(package_graphs(import_graph(package))["amp_suite"]) == []


def test_no_module_of_the_package_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    assert len(graph) > 50 and "amp_suite.cell.worker" in graph["amp_suite.sweep.runner"]
    assert "amp_suite.api" in graph["amp_suite"]  # the root's lazy facade is an edge like any other
    assert cycles(graph) == [], "modules that import each other, directly or through others"


def test_no_package_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    graphs = package_graphs(graph)
    assert {"amp_suite", "amp_suite.sweep", "amp_suite.config", "amp_suite.cell"} <= set(graphs)
    assert "amp_suite.cell" in graphs["amp_suite"]["amp_suite.sweep"]  # the sweep runs cells ...
    found = {package: cycles(children) for package, children in graphs.items() if cycles(children)}
    assert found == {}, "packages (or a package's modules) that import each other, directly or through others"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_package_imports_no_framework(path: Path) -> None:
    frameworks = [name for (name, *_) in _imports(path) if name.split(".")[0] in FRAMEWORK_MODULES]
    assert frameworks == [], f"{path.relative_to(REPO)} imports {frameworks}: framework code belongs in plugins/"


# The one module named on purpose: the conformance kit's JAX-only helper (testing.jax_compiles_to_build, part of the
# kit's documented API) runs the JAX plugin's probe that counts XLA compiles; it moves when the kit is split.
NAMED_ON_PURPOSE = {"testing/frameworks.py": ["amp_suite_plugins.jax.build_compiles"]}


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_package_names_no_module_of_a_framework_or_of_the_built_in_plugins(path: Path) -> None:
    # A module named in a string (``python -m torch.distributed.run``, ``"amp_suite_plugins.x:f"``) is an import
    # the checks above cannot see: a plugin declares such a module (FrameworkInfo), the package never names one.
    modules = "|".join((*FRAMEWORK_MODULES, "amp_suite_plugins"))
    named = re.findall(rf"""["'](?:-m )?((?:{modules})(?:\.[a-z_]+)+)(?::[a-z_]+)?["']""",
                       path.read_text(encoding="utf-8"))
    named = [name for name in named if name not in NAMED_ON_PURPOSE.get(str(path.relative_to(PACKAGE)), [])]
    assert named == [], f"{path.relative_to(REPO)} names {named} in a string: a plugin declares it instead"


ARCHITECTURE = REPO / "docs" / "architecture.md"


def _described_layers() -> list[tuple[str, str]]:
    """docs/architecture.md's packages in the order given there: (bold name, its paragraph)."""
    text = ARCHITECTURE.read_text(encoding="utf-8").split("## Packages, lowest layer first", 1)[1]
    text = text.split("\n## ", 1)[0]
    return [(match.group(1), match.group(2)) for match in
            re.finditer(r"^\*\*(.+?)\*\*(.*?)(?=^\*\*|\Z)", text, re.M | re.S)]


def test_the_architecture_page_describes_every_package_lowest_first() -> None:
    layers = _described_layers()
    graph = import_graph()
    roots = {name.split(".")[1] for name in graph if name.count(".") == 1 and not (PACKAGE / name.split(".")[1]).is_dir()}
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    rank: dict[str, int] = {}
    for position, (name, paragraph) in enumerate(layers):
        if name.startswith("`"):
            rank[name.strip("`/")] = position
        else:  # a group of the root's modules (or small packages, `name/`), each named in its paragraph
            for module in re.findall(r"`([a-z_]+)(?:\.py|/)`", paragraph):
                rank.setdefault(module, position)
    assert set(rank) >= packages | roots - {"__init__"}, "packages or root modules the page does not describe"
    assert {"config", "sweep", "records", "cli"} <= set(rank) and rank["records"] < rank["config"] < rank["sweep"]
    assert rank["__init__"] > rank["cli"], "the package root is the top floor, above the front"

    def floor(module: str) -> int:  # the package root, amp_suite/__init__.py, is named "__init__" on the page
        return rank[(module.split(".") + ["__init__"])[1]]

    upward = sorted(f"{source} -> {target}" for source, targets in graph.items() for target in targets
                    if floor(source) < floor(target))
    assert upward == [], "imports of a package the page lists above the importer (layers lowest first)"
