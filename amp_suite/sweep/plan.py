"""A sweep request and the plan resolved from it: what will run, where, in which order, for how long.

:class:`SweepRequest` is what ``amp-suite run`` (or :func:`amp_suite.run`) was
asked; :func:`amp_suite.sweep.resolve.resolve` turns it into a
:class:`SweepPlan`, and :func:`amp_suite.sweep.engine.execute` runs a plan and
nothing else.  A plan is immutable and built before anything runs: every name
checked, every cell planned, every framework placed in its environment and the
executor picked, so ``amp-suite run --dry-run`` prints exactly the sweep the
same command would run (:meth:`SweepPlan.lines`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_suite.report.text import path_text
from amp_suite.sweep.estimate import CellEstimate, duration_text

if TYPE_CHECKING:
    from amp_suite.config.catalog import SuiteConfig
    from amp_suite.config.executors import ExecutorSettings
    from amp_suite.config.settings import SweepSettings
    from amp_suite.config.workload_datasets import DatasetChoice
    from amp_suite.envs.placement import Placement
    from amp_suite.sweep.runner import Cell


@dataclass(frozen=True)
class SweepRequest:
    """What ``amp-suite run`` (or :func:`run`) was asked to do.

    ``overrides`` maps :class:`~amp_suite.config.settings.SweepSettings` field names to
    values that replace the config's ``[defaults]`` and the preset's settings
    (``None`` keeps them).  ``cost`` holds ``price_per_hour``/``currency``
    overrides of ``[cost]``.
    """

    config: str | Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    resume: bool = False
    force: bool = False  # --force: replace report files in the output directory that amp-suite did not write
    inline: bool = False
    quiet: bool = False
    cost: dict[str, Any] = field(default_factory=dict)
    preset: str | None = None  # a [presets.NAME] table filling the sweep before ``overrides``
    # ``--repeats auto``: run repeats (from ``overrides["repeats"]``, at least AUTO_FIRST_REPEATS) and add
    # more, up to this many, until every speed-up's 95% interval is within ±auto_width of it; 0: off.
    auto_repeats: int = 0
    auto_width: float = 0.05
    executor: str | None = None  # --executor local|ray|slurm over [executor] kind
    ray_address: str | None = None  # --ray-address over [executor] ray_address


@dataclass(frozen=True)
class SweepPlan:
    """Everything a sweep will do, resolved before any cell runs.

    ``cells`` are in the order they run (repeats interleaved), each with its
    :class:`CellEstimate` in ``estimates`` (same order).  ``placements`` maps
    each requested framework name to the interpreter that runs it;
    ``datasets`` each workload to its data; ``executor`` is where the cells
    run.  ``host`` is the plugin host the plan was resolved with: the engine
    writes the report through it.  ``notes`` are the warnings and notes the
    resolution found (the engine prints them before the first cell, a dry run
    with the plan).  ``preset`` is the environment record's ``preset`` entry.
    ``more_repeats`` holds, for ``--repeats auto``, the further repeats'
    cells, repeat by repeat.
    """

    request: SweepRequest
    config: SuiteConfig
    settings: SweepSettings
    cells: tuple[Cell, ...]
    estimates: tuple[CellEstimate, ...]
    placements: Mapping[str, Placement]
    datasets: Mapping[str, DatasetChoice]
    executor: ExecutorSettings
    device_kind: str
    out_dir: Path
    cost: Mapping[str, Any]
    host: Any
    notes: tuple[str, ...] = ()
    preset: Mapping[str, Any] | None = None
    more_repeats: tuple[tuple[Cell, ...], ...] = ()
    synthetic_note: str = ""  # the sweep's first line's note when benchmarks.toml left the data synthetic

    def repeat_cells(self, repeat: int) -> tuple[Cell, ...]:
        """Every cell's repeat ``repeat`` beyond the planned ones (``--repeats auto``); none past the cap."""
        index = repeat - self.settings.repeats
        return self.more_repeats[index] if 0 <= index < len(self.more_repeats) else ()

    @property
    def seconds(self) -> float:
        """The estimated time of the planned cells together (those ``--resume`` keeps count nothing)."""
        return sum(estimate.seconds for estimate in self.estimates)

    def lines(self) -> list[str]:
        """The plan as ``amp-suite run --dry-run`` prints it: the sweep, its environments, then one line per cell."""
        count = len(self.cells)
        lines = [f"plan: {count} cell{'' if count == 1 else 's'} on {self.device_kind}, executor {self.executor.kind}"
                 + (f" ({self.executor.ray_address})" if self.executor.ray_address else "")
                 + f", output {path_text(self.out_dir)}",
                 f"estimated time: {duration_text(self.seconds)} ({self._estimate_sources()})"]
        if self.preset is not None:
            lines.append(f"preset: {self.preset['name']}")
        lines.append("environments:")
        for label, place in self.placements.items():
            where = (f"environment {place.environment!r} ({place.python or 'not built'})" if place.environment
                     else f"this interpreter ({place.python or sys.executable})")
            state = f"; unavailable: {place.problem}" if place.problem else ""
            lines.append(f"  {label}: framework {place.framework}, {where}{state}")
        lines.append("datasets:")
        lines += [f"  {name}: {choice.text}" for name, choice in self.datasets.items()]
        lines.append("cells (in the order they run):")
        for cell, estimate in zip(self.cells, self.estimates, strict=True):
            run = cell.run
            launch = f"{run.devices} devices ({run.launcher or 'unsupported'})" if run.devices > 1 else "1 device"
            where = run.environment or "this interpreter"
            pool = f", pool {run.pool}" if run.pool else ""
            state = f"  [unavailable: {cell.unavailable}]" if cell.unavailable else ""
            time_text = (estimate.source if estimate.source in ("done", "unavailable")
                         else f"~{duration_text(estimate.seconds)} ({estimate.source})")
            if estimate.rerun:  # what --resume will say as it runs the cell again
                time_text += f", {estimate.rerun}"
            lines.append(f"  {run.key}: {run.steps} steps x {run.epochs} epoch{'' if run.epochs == 1 else 's'}, batch {run.batch_size}, "
                         f"{launch}, {where}{pool}, {time_text}{state}")
        if self.request.auto_repeats:
            lines.append(f"--repeats auto may add repeats up to {self.request.auto_repeats} per cell")
        lines += [f"note: {note}" for note in self.notes]
        if self.synthetic_note:  # what the run's first line would add
            lines.append(f"note: {self.synthetic_note.removeprefix('; ')}")
        return lines

    def _estimate_sources(self) -> str:
        counts: dict[str, int] = {}
        for estimate in self.estimates:
            counts[estimate.source] = counts.get(estimate.source, 0) + 1
        words = {"measured": "measured before, same definition", "rough": "rough, from the workload's FLOPs",
                 "done": "kept by --resume", "unavailable": "unavailable"}
        return "; ".join(f"{n} {words.get(source, source)}" for source, n in counts.items()) or "no cells"
