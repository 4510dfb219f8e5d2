"""Executors: where a sweep's cells run — here one after another, or spread over a cluster.

``local`` is the runner as it always was: each cell a fresh worker process on
this machine, one after another.  ``ray`` submits each cell as a task to a
Ray cluster and ``slurm`` as a job through submitit; on the node, the task
or job starts the very same worker process (:func:`.node.run_cell_on_node`),
with the same timeout, statuses and containment.  In every executor the host
that planned the sweep is the only writer of ``results.jsonl``: it appends
each result as it comes back, and ``--resume`` skips finished cells the same
way (:func:`amp_suite.sweep.runner.resumable`).

Nothing here imports Ray or submitit until that executor runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from amp_suite.records import CellResult
    from amp_suite.sweep.runner import Cell, ProgressCallback
    from amp_suite.sweep.store import ResultStore

EXECUTORS = ("local", "ray", "slurm")


class Executor(Protocol):
    """Runs a sweep's cells and yields each result once it is stored."""

    name: str

    def run_cells(self, cells: list[Cell], store: ResultStore, *, resume: bool, env: dict[str, str],
                  progress: ProgressCallback | None) -> Iterator[CellResult]:
        """Run ``cells`` (skipping those ``resume`` finds done), append each result to ``store``, yield it.

        Raises :class:`~amp_suite.errors.StorageError` when a result cannot be
        stored; a ``KeyboardInterrupt`` cancels every queued and running cell.
        """
        ...
