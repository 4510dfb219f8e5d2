"""A sweep's cells: frameworks x workloads x precisions x devices x modes x batch sizes x seeds x repeats.

:func:`plan_cells` expands the checked settings into the cells a sweep runs,
in the order they run; :func:`environment_records` gives the environment
part of each cell's definition.  Both are steps of
:func:`amp_suite.sweep.resolve.resolve`; nothing here runs a cell.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

from amp_suite.config.catalog import SuiteConfig
from amp_suite.config.settings import CELL_FIELDS, SweepSettings
from amp_suite.config.workload_datasets import dataset_choice
from amp_suite.envs.placement import Placement
from amp_suite.errors import UsageError
from amp_suite.records import RunSpec, Workload


def device_counts(settings: SweepSettings) -> tuple[int, ...]:
    """The sweep's device counts, ``all`` resolved (see :func:`amp_suite.launchers.visible_devices`)."""
    counts: list[int] = []
    for count in settings.devices:
        if count == "all":
            from amp_suite.launchers import visible_devices

            count = visible_devices(settings.device)
        assert isinstance(count, int), count  # SweepSettings.check allows no other text
        if count not in counts:
            counts.append(count)
    return tuple(counts)


def batch_sizes_of(settings: SweepSettings, workload: Workload) -> tuple[int, ...]:
    """The global batch sizes a workload's cells run: ``--batch-sizes``, else ``--batch-size``, else its own."""
    return tuple(settings.batch_sizes) or (settings.batch_size or workload.batch_size,)


def plan_cells(config: SuiteConfig, settings: SweepSettings, plugin_modules: tuple[str, ...] = (),
               explicit_steps: int | None = None, launchers: dict[str, str] | None = None,
               placements: dict[str, Placement] | None = None,
               environments: dict[str, dict[str, Any]] | None = None, dataset_given: bool = False,
               launcher_programs: dict[str, str] | None = None, default_modes: dict[str, str] | None = None):
    """Every cell of the sweep, repeats interleaved so slow drifts spread over all cells.

    Every cell's repeat 0 runs, then every cell's repeat 1, and so on; within
    a framework the precisions run in the configured order on even repeats
    and in the reverse order on odd ones, so neither fp32 nor an AMP
    precision always runs first (on a warming machine) or last.  Cell keys
    do not depend on the order.

    Steps per epoch: ``explicit_steps`` when given (``--steps``, else a
    preset's ``steps``), else the workload's own ``steps``, else the
    settings' ``steps``.  ``launchers`` maps
    a framework to its :attr:`FrameworkInfo.launcher` (how its data-parallel
    cells start; empty: it has none, and those cells end ``unsupported``);
    one-device cells always run in one process.  ``launcher_programs`` maps a
    framework to its :attr:`FrameworkInfo.launcher_program`, ``default_modes`` to its
    :attr:`FrameworkInfo.default_mode` (the mode of a result the sweep makes itself, a timeout's).  ``environments`` maps a
    requested framework name to the environment part of its cells' definitions
    (:func:`environment_records`; missing: the environment's name alone).
    Each cell's dataset and
    splits are its workload's (:func:`~amp_suite.config.workload_datasets.dataset_choice`;
    ``dataset_given``: the user's ``--dataset`` overrides them all).
    """
    from amp_suite.sweep.runner import Cell

    counts = device_counts(settings)
    # Every setting a cell carries, under its RunSpec name (amp_suite.config.settings declares which).
    per_cell = {cell: getattr(settings, name) for name, cell in CELL_FIELDS.items()}
    per_cell["data_dir"] = str(Path(settings.data_dir).resolve()) if settings.data_dir else None
    per_cell["coordinator"] = settings.coordinator or ""  # RunSpec: "" on one node
    cells = []
    for repeat in range(settings.repeats):
        for workload_name in settings.workloads:
            workload = config.workloads[workload_name]
            if settings.target_accuracy is not None:  # --target-accuracy overrides the workload's own
                workload = replace(workload, target_accuracy=settings.target_accuracy)
            steps = explicit_steps if explicit_steps is not None else (workload.steps or settings.steps)
            if settings.warmup >= steps:
                raise UsageError(f"warmup ({settings.warmup}) must be smaller than the {steps} steps per epoch "
                                 f"of workload {workload_name!r}: no step would be timed")
            data = dataset_choice(settings, workload, dataset_given=dataset_given)
            cell_data = {"dataset": data.dataset, "train_split": data.train_split, "val_split": data.val_split}
            precisions = settings.precisions if repeat % 2 == 0 else tuple(reversed(settings.precisions))
            for name, pool, devices, mode, batch_size, seed, precision in itertools.product(
                    settings.frameworks, settings.pools or ("",), counts, settings.modes or ("",),
                    batch_sizes_of(settings, workload), settings.seed_list, precisions):
                place = (placements or {}).get(name) or Placement(name, name)
                framework = place.framework
                run = RunSpec(
                    framework=framework, workload=workload_name, precision=precision, repeat=repeat,
                    **{**per_cell, **cell_data, "steps": steps, "batch_size": batch_size, "seed": seed},
                    mode=mode, batch_axis=bool(settings.batch_sizes), seed_axis=bool(settings.seeds),
                    options=dict(config.framework_options.get(framework, {})),
                    plugin_modules=plugin_modules, devices=devices,
                    launcher=(launchers or {}).get(framework, "") if devices > 1 else "process",
                    launcher_program=(launcher_programs or {}).get(framework, "") if devices > 1 else "",
                    variant=name if name != framework else "", environment=place.environment,
                    python=place.python, pool=pool,
                )
                cells.append(Cell(run, workload, unavailable=place.problem,
                                  environment=dict((environments or {}).get(name, {})),
                                  default_mode=(default_modes or {}).get(framework, "")))
    return cells


def environment_records(placements: dict[str, Placement], frameworks: dict[str, Any],
                        environments: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The environment part of the definition of each requested name's cells (see
    :func:`amp_suite.sweep.fingerprint.environment_record`): the installed versions of the framework's
    distributions in this interpreter, or the environment's name with its requirements or interpreter."""
    from amp_suite.machine.environment import package_version
    from amp_suite.sweep.fingerprint import environment_record

    records = {}
    for name, place in placements.items():
        spec = environments.get(place.environment) if place.environment else None
        if spec is not None:
            records[name] = environment_record(place.framework, place.environment,
                                               requirements=tuple(spec.requirements), python=spec.python)
            continue
        info = frameworks.get(place.framework)
        versions = {dist: version for dist in (info.distributions if info is not None else ())
                    if (version := package_version(dist))}
        records[name] = environment_record(place.framework, place.environment, versions=versions)
    return records
