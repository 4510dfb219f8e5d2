"""Rooms of one job: no module of the product grows past 400 lines (docs/architecture.md, "Where a change goes").

The product is the host (``amp_suite/``), the built-in plugins (``builtin/``),
the example plugin packages (``examples/*/``, their own tests aside) and the
benchmark scripts (``benchmarks/``).  A module that reaches the limit holds
more than one job: split it by job, as ``doctor/acceptance_*.py`` and the
Flax example's ``net.py``, ``canonical.py``, ``step.py`` and
``data_parallel.py`` were, rather than raising the limit.
"""

from __future__ import annotations

from pathlib import Path

from suite_cli import REPO, source_modules

MAX_LINES = 400
ROOTS = ("amp_suite", "builtin", "examples", "benchmarks")


def product_modules(repo: Path = REPO) -> list[Path]:
    """Every Python module under the product's folders, tests and build leftovers aside."""
    return source_modules(*ROOTS, repo=repo)


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_walk_sees_the_product_and_leaves_tests_and_build_leftovers_out(tmp_path: Path) -> None:
    for name in ("amp_suite/a.py", "builtin/p/b.py", "examples/x/x/c.py", "benchmarks/d.py",
                 "examples/x/tests/test_e.py", "examples/x/build/lib/x/f.py", "amp_suite/__pycache__/g.py",
                 "examples/x/x.egg-info/h.py", "docs/i.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    found = {path.relative_to(tmp_path).as_posix() for path in product_modules(tmp_path)}
    assert found == {"amp_suite/a.py", "builtin/p/b.py", "examples/x/x/c.py", "benchmarks/d.py"}


def test_the_product_has_modules_to_measure() -> None:
    modules = product_modules()
    assert REPO / "amp_suite" / "cli" / "__init__.py" in modules
    assert REPO / "examples" / "amp-suite-flax" / "amp_suite_flax" / "plugin.py" in modules
    assert len(modules) > 200, len(modules)


def test_no_module_is_longer_than_the_limit() -> None:
    longer = {path.relative_to(REPO).as_posix(): lines for path in product_modules()
              if (lines := line_count(path)) > MAX_LINES}
    assert not longer, (f"more than {MAX_LINES} lines (split each by job: docs/architecture.md, "
                        f"'Where a change goes'): {longer}")
