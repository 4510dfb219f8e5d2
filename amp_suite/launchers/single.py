"""One worker process for the cell (every one-device cell, and ``process`` cells).

The worker's import path is set before anything is imported, so a module in
the current directory never shadows one the worker needs; the result comes
back through an inherited pipe (``--result-fd``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from amp_suite.records import RunSpec

# The worker's entry: the import path is set before anything else is imported.
WORKER_BOOTSTRAP = (
    "import os, sys; sys.path[:] = os.environ.pop('AMP_SUITE_WORKER_PATH').split(os.pathsep); "
    "from amp_suite.worker import main; sys.exit(main(sys.argv[2:]))"
)


def worker_command(*result: str) -> list[str]:
    """The worker's command line; ``result`` is ``("--result-fd", N)`` or ``("--result-file", PATH)``."""
    return [sys.executable, "-c", WORKER_BOOTSTRAP, "amp_suite.worker", *result]


@dataclass(frozen=True)
class SingleProcess:
    """The :class:`~amp_suite.launchers.Launcher` of one worker process, fed through inherited pipes."""

    name: str = "process"
    inherits_pipes: bool = True

    def command(self, run: RunSpec, result: str) -> list[str]:
        return worker_command("--result-fd", result)

    def failed_with_result(self, code: int, seen: str) -> str:
        return seen

    def failed_without_result(self, code: int | None) -> str:
        return f"worker exited with code {code} and no result"


SINGLE_PROCESS = SingleProcess()
