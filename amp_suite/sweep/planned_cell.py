"""A cell as the sweep hands it to an executor: the run, its workload, and why it cannot start, if it cannot."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amp_suite.records import RunSpec, Workload


@dataclass(frozen=True)
class Cell:
    """A cell to run: the run and the workload it names.

    ``unavailable`` says why the cell cannot start (its environment is not
    built): the runner then stores it ``unavailable`` with that reason and
    starts no worker.  ``environment`` is the environment part of the cell's
    definition (:func:`amp_suite.sweep.fingerprint.environment_record`; empty:
    the environment's name alone).
    """

    run: RunSpec
    workload: Workload
    unavailable: str = ""
    environment: dict[str, Any] = field(default_factory=dict)

    @property
    def definition(self) -> dict[str, Any]:
        """Everything that determines the cell's figures (:func:`amp_suite.sweep.fingerprint.cell_definition`)."""
        from amp_suite.sweep.fingerprint import cell_definition

        return cell_definition(self.run, self.workload, self.environment or None)
