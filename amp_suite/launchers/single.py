"""One worker process for the cell (every one-device cell, and ``process`` cells).

The worker's import path is set before anything is imported, so a module in
the current directory never shadows one the worker needs; the result comes
back through an inherited pipe (``--result-fd``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from amp_suite.records import RunSpec

# ``AMP_SUITE_WORKER_PATH`` entry that stands for the interpreter's own path less its first entry (the
# current directory): an environment's worker keeps its site-packages instead of taking the host's.
OWN_PATH = "<own>"


def path_setter(variable_read: str) -> str:
    """The statement a bootstrap starts with: ``sys.path`` from ``AMP_SUITE_WORKER_PATH`` (``.pop`` or ``.get``)."""
    return ("import os, sys; sys.path[:] = [e for x in os.environ" + variable_read + "('AMP_SUITE_WORKER_PATH')"
            f".split(os.pathsep) for e in (sys.path[1:] if x == {OWN_PATH!r} else [x])]; ")


# The worker's entry: the import path is set before anything else is imported.
WORKER_BOOTSTRAP = path_setter(".pop") + "from amp_suite.worker import main; sys.exit(main(sys.argv[2:]))"


def worker_command(*result: str, python: str = "") -> list[str]:
    """The worker's command line; ``result`` is ``("--result-fd", N)`` or ``("--result-file", PATH)``.

    ``python``: the interpreter (an environment's), else this one.
    """
    return [python or sys.executable, "-c", WORKER_BOOTSTRAP, "amp_suite.worker", *result]


@dataclass(frozen=True)
class SingleProcess:
    """The :class:`~amp_suite.launchers.Launcher` of one worker process, fed through inherited pipes."""

    name: str = "process"
    inherits_pipes: bool = True

    def command(self, run: RunSpec, result: str) -> list[str]:
        return worker_command("--result-fd", result, python=run.python)

    def failed_with_result(self, code: int, seen: str) -> str:
        return seen

    def failed_without_result(self, code: int | None) -> str:
        return f"worker exited with code {code} and no result"


SINGLE_PROCESS = SingleProcess()
