"""What a cell answers: :class:`CellResult` (one row of ``results.jsonl``) and its statuses."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from amp_suite.records.run import RunSpec

# Status of a finished cell.  Only "ok" carries figures.
STATUSES = ("ok", "failed", "timeout", "oom", "diverged", "unavailable", "unsupported")


# Statuses that do not make the sweep's exit code 1: the cell was not
# measurable on this machine by design (e.g. tf32 on a CPU).
BENIGN_STATUSES = ("ok", "unsupported")


@dataclass
class CellResult:
    """One finished cell, as written to ``results.jsonl``.

    ``framework`` is the cell's label (:attr:`RunSpec.label`): an environment's
    name for a variant (``torch@2.12``), the plugin's otherwise; the plugin is
    ``config["framework"]``.  ``mode`` is the execution mode the cell ran in
    (the framework's default mode named, when the sweep asked for none; empty
    when not known: a record from before modes, or a framework that names
    none).  ``fingerprint`` is the short hash of ``definition``, everything
    that determines the cell's figures (:mod:`amp_suite.sweep.fingerprint`);
    both are empty in a result stored before fingerprints.
    """

    key: str
    framework: str
    workload: str
    precision: str
    repeat: int
    status: str
    error: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    applied: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_time_s: float = 0.0
    mode: str = ""
    fingerprint: str = ""
    definition: dict[str, Any] = field(default_factory=dict)


def cell_for_run(run: RunSpec, status: str, **fields: Any) -> CellResult:
    """A :class:`CellResult` for ``run`` with its identity and configuration filled in."""
    fields.setdefault("mode", run.mode)
    return CellResult(key=run.key, framework=run.label, workload=run.workload, precision=run.precision,
                      repeat=run.repeat, status=status, config=asdict(run), **fields)


def cell_from_dict(data: dict[str, Any]) -> CellResult:
    """Rebuild a :class:`CellResult` read from ``results.jsonl``."""
    known = set(CellResult.__dataclass_fields__)
    return CellResult(**{k: v for k, v in data.items() if k in known})
