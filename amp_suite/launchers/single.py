"""One worker process for the cell (every one-device cell, and ``process`` cells).

The worker's import path is set before anything is imported, so a module in
the current directory never shadows one the worker needs; the result comes
back through an inherited pipe (``--result-fd``).
"""

from __future__ import annotations

import importlib.machinery
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from amp_suite.markers import PACKAGE_DIR
from amp_suite.records import RunSpec

# ``AMP_SUITE_WORKER_PATH`` entry that stands for the interpreter's own path less its first entry (the
# current directory): an environment's worker keeps its site-packages instead of taking the host's.
OWN_PATH = "<own>"


def path_setter(variable_read: str) -> str:
    """The statement a bootstrap starts with: ``sys.path`` from ``AMP_SUITE_WORKER_PATH`` (``.pop`` or ``.get``)."""
    return ("import os, sys; sys.path[:] = [e for x in os.environ" + variable_read + "('AMP_SUITE_WORKER_PATH')"
            f".split(os.pathsep) for e in (sys.path[1:] if x == {OWN_PATH!r} else [x])]; ")


def import_root(module_name: str) -> str | None:
    """The import-path entry a loaded module was found under."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    if path.name == "__init__.py":
        path = path.parent
    return str(path.parents[len(module_name.split(".")) - 1])


def worker_import_path(plugin_modules: Iterable[str] = ()) -> list[str]:
    """The worker's ``sys.path``: the host's, without the current directory.

    The entry ``python -m``/``-c`` puts first (the current directory) is
    dropped; amp-suite's own location is added (first only where another
    amp_suite on the path would shadow the host's); a plugin module the host
    loaded from a dropped place is found there again, last, so nothing there
    shadows an installed module.
    """
    entries = list(sys.path)
    if entries and not getattr(sys.flags, "safe_path", False):
        first = entries[0]
        if first in ("", ".") or Path(first).resolve() == Path.cwd().resolve():
            entries.pop(0)
    home = str(PACKAGE_DIR.parent)
    if home not in {str(Path(e).resolve()) for e in entries if e}:
        other = importlib.machinery.PathFinder.find_spec("amp_suite", [e for e in entries if e])
        if other is not None and other.origin and Path(other.origin).resolve() != PACKAGE_DIR / "__init__.py":
            entries.insert(0, home)  # another amp_suite on the path would shadow the host's own
        else:
            # Last: a source tree holds an ``amp_suite.egg-info`` that every editable build (``amp-suite env
            # create``, ``pip install -e``) rewrites; first on the path, its metadata would shadow the installed
            # one and, while being rewritten, hide every entry point from a worker starting then.
            entries.append(home)
    for module_name in plugin_modules:
        root = import_root(module_name)
        if root and root not in entries:
            entries.append(root)
    return entries


def worker_command(worker: str, *result: str, python: str = "") -> list[str]:
    """The worker's command line; ``result`` is ``("--result-fd", N)`` or ``("--result-file", PATH)``.

    ``worker`` is the worker's module, whose ``main(argv)`` the process runs
    once its import path is set, before anything else is imported; the runner
    names it (:mod:`amp_suite.cell.worker`: the cell sits above the launchers
    in the layering).  ``python``: the interpreter (an environment's), else
    this one.
    """
    bootstrap = path_setter(".pop") + f"from {worker} import main; sys.exit(main(sys.argv[2:]))"
    return [python or sys.executable, "-c", bootstrap, worker, *result]


@dataclass(frozen=True)
class SingleProcess:
    """The :class:`~amp_suite.launchers.Launcher` of one worker process, fed through inherited pipes."""

    name: str = "process"
    inherits_pipes: bool = True

    def command(self, run: RunSpec, result: str, worker: str) -> list[str]:
        return worker_command(worker, "--result-fd", result, python=run.python)

    def failed_with_result(self, code: int, seen: str) -> str:
        return seen

    def failed_without_result(self, code: int | None) -> str:
        return f"worker exited with code {code} and no result"


SINGLE_PROCESS = SingleProcess()
