"""How long each planned cell should take: measured before where the output directory knows, else rough.

A cell of the same name and definition (the same key but for its repeat, and
the same fingerprint, :mod:`amp_suite.sweep.fingerprint`) stored ``ok`` in
the output directory's ``results.jsonl`` took ``wall_time_s`` there: the mean
of those figures is the estimate (``measured``).  Otherwise the estimate is ``rough``: a start-up time per
process (the interpreter, the framework's import, the first compile) plus the
workload's training FLOPs for the cell's steps at a rate assumed for the
device kind.  Both rates are deliberately round: on a 2-core CPU the default
sweep's ``mnist_cnn`` cells take 10 to 25 s each, and the rough figure says
about 13 s.  Under ``--resume`` a cell whose stored result would be kept is
``done``, and a cell whose environment cannot run it ``unavailable``; neither counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from amp_suite.records import CellResult


@dataclass(frozen=True)
class CellEstimate:
    """How long one planned cell is expected to take, and where the figure comes from.

    ``source`` is ``"measured"`` (a stored result of a cell of the same
    definition, :mod:`amp_suite.sweep.fingerprint`), ``"rough"`` (a start-up
    time plus the workload's training FLOPs at an assumed rate,
    :mod:`amp_suite.sweep.estimate`), ``"done"`` (``--resume`` keeps its
    stored result) or ``"unavailable"`` (its environment cannot run it); the
    last two start no worker and take no time.  ``rerun``: why ``--resume``
    runs a cell whose stored result was ok again (``rerun, its options changed
    (steps 6 -> 7)``), as the run itself will say; else "".
    """

    seconds: float
    source: str
    rerun: str = ""


# Seconds every cell's process spends before its first step: interpreter, framework import, first compile.
STARTUP_S = {"cpu": 10.0, "gpu": 20.0}
# Training FLOP/s a small workload's cell reaches, rounded down: a 2-core CPU, and one data-centre GPU.
ASSUMED_FLOPS = {"cpu": 25e9, "gpu": 20e12}


def stored_results(out_dir: Path) -> list[CellResult]:
    """The results ``out_dir/results.jsonl`` holds (none when it does not exist or cannot be read)."""
    from amp_suite.sweep.store import ResultStore

    if not (out_dir / "results.jsonl").is_file():
        return []
    try:
        return ResultStore(out_dir).load()
    except (OSError, ValueError):
        return []


def _cell_name(key: str) -> str:
    """A cell's key without its repeat: ``torch/mnist_cnn/fp32/r1`` -> ``torch/mnist_cnn/fp32``."""
    return key.rpartition("/r")[0]


def measured_seconds(results: Iterable[CellResult]) -> dict[tuple[str, str], float]:
    """(cell key without its repeat, fingerprint) -> the mean ``wall_time_s`` of its ``ok`` results.

    The fingerprint holds what defines a cell but not what names it (the
    precision among others), so the cell's name goes with it.
    """
    times: dict[tuple[str, str], list[float]] = {}
    for result in results:
        if result.status == "ok" and result.fingerprint and result.wall_time_s > 0:
            times.setdefault((_cell_name(result.key), result.fingerprint), []).append(result.wall_time_s)
    return {key: sum(values) / len(values) for key, values in times.items()}


def rough_seconds(cell, device_kind: str) -> float:
    """A start-up time plus the cell's training FLOPs at :data:`ASSUMED_FLOPS` for ``device_kind``."""
    from amp_suite.workloads.workload import train_flops_per_image

    kind = device_kind if device_kind in STARTUP_S else "cpu"
    run = cell.run
    try:
        flops = train_flops_per_image(cell.workload) * run.batch_size * run.steps * run.epochs
    except Exception:  # a workload the FLOP count does not cover: the start-up alone
        flops = 0
    return STARTUP_S[kind] + flops / ASSUMED_FLOPS[kind]


def estimate_cells(cells: Iterable, device_kind: str, stored: list[CellResult], *,
                   resume: bool) -> tuple[CellEstimate, ...]:
    """One :class:`CellEstimate` per cell, in order."""
    from amp_suite.records.definition import fingerprint
    from amp_suite.sweep.fingerprint import kept_results

    measured = measured_seconds(stored)
    cells = list(cells)
    # what the sweep itself would keep and rerun (each key's last stored result)
    kept, reruns = kept_results({r.key: r for r in stored}, cells) if resume else ({}, {})
    estimates = []
    for cell in cells:
        same = (_cell_name(cell.run.key), fingerprint(cell.definition))
        rerun = reruns.get(cell.run.key, "")
        if cell.unavailable:  # no worker starts: the cell is stored unavailable at once
            estimates.append(CellEstimate(0.0, "unavailable"))
        elif cell.run.key in kept:
            estimates.append(CellEstimate(0.0, "done"))
        elif same in measured:
            estimates.append(CellEstimate(measured[same], "measured", rerun))
        else:
            estimates.append(CellEstimate(rough_seconds(cell, device_kind), "rough", rerun))
    return tuple(estimates)


def duration_text(seconds: float) -> str:
    """``45 s``, ``12 min``, ``3 h 20 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
