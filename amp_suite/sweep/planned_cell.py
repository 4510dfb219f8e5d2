"""A cell as the sweep hands it to an executor: the run, its workload, and why it cannot start, if it cannot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amp_suite.records import CellResult, RunSpec, Workload, cell_for_run


@dataclass(frozen=True)
class Cell:
    """A cell to run: the run and the workload it names.

    ``unavailable`` says why the cell cannot start (its environment is not
    built): the runner then stores it ``unavailable`` with that reason and
    starts no worker.  ``environment`` is the environment part of the cell's
    definition (:func:`amp_suite.sweep.fingerprint.environment_record`; empty:
    the environment's name alone).  ``default_mode`` is the mode the
    framework runs when the run asks for none (its
    :attr:`~amp_suite.records.FrameworkInfo.default_mode`).
    """

    run: RunSpec
    workload: Workload
    unavailable: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    default_mode: str = ""

    def result(self, status: str, **fields: Any) -> CellResult:
        """A result of this cell that the sweep makes itself (a timeout, a worker that died, an unavailable
        environment): in the mode the cell would have run, so the report puts it beside the cells that ran (a
        timed-out amp_bf16 cell without its mode had made a row of its own and an fp32 baseline that "did not
        run")."""
        return cell_for_run(self.run, status, **{"mode": self.run.mode or self.default_mode, **fields})

    @property
    def definition(self) -> dict[str, Any]:
        """Everything that determines the cell's figures (:func:`amp_suite.sweep.fingerprint.cell_definition`)."""
        from amp_suite.sweep.fingerprint import cell_definition

        return cell_definition(self.run, self.workload, self.environment or None)
