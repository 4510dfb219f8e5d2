"""The sweep engine: a request checked, planned into cells, run under the output lock, reported.

``amp-suite run`` and :func:`amp_suite.run` both come here (:func:`sweep`), so
the command line and the API check the same inputs, hold the same lock and
write the same files.  The steps, in order: the configuration and the preset
expanded into :class:`~amp_suite.config.settings.SweepSettings`; the frameworks placed
in their environments; every cell planned (:func:`plan_cells`); data fetched
and the output directory prepared; the cells run by the chosen executor (one
process per cell); ``environment.json`` and the report written.  Reading a
finished sweep back is :mod:`amp_suite.sweep.stored`.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_suite.config.catalog import (
    SuiteConfig,
    check_batch_split,
    check_framework_tables,
    find_config,
    for_device_kind,
    load_config,
    with_overrides,
)
from amp_suite.config.environments import environments_dir
from amp_suite.config.precision_options import check_precision_options
from amp_suite.config.settings import CELL_FIELDS, SweepSettings, check_names
from amp_suite.config.workload_datasets import DatasetChoice, dataset_choice, splits_for_given_dataset
from amp_suite.envs.placement import Placement, place_frameworks
from amp_suite.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, StorageError, SweepInterrupted, UsageError, one_line
from amp_suite.records import BENIGN_STATUSES, CellResult, RunSpec, Workload
from amp_suite.report.text import path_text
from amp_suite.sweep.output_dir import ENVIRONMENT_FILE
from amp_suite.sweep.stored import warn_about_other_settings, warn_skipped_lines

if TYPE_CHECKING:  # pandas is imported only when a frame is built
    pass



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


@dataclass
class SweepOutcome:
    """What a sweep did: its results, the report files, how it ended and its exit code."""

    out_dir: Path
    results: list[CellResult]
    environment: dict[str, Any]
    written: list[Path]
    reporter_failures: list[Any]
    stopped_by: int | None = None
    storage_failed: bool = False

    @property
    def exit_code(self) -> int:
        if self.stopped_by is not None:
            return 128 + self.stopped_by
        if self.storage_failed or self.reporter_failures:
            return EXIT_USAGE
        return EXIT_OK if all(r.status in BENIGN_STATUSES for r in self.results) else EXIT_FAILED


# --- plugins -----------------------------------------------------------------


def make_host(modules: Iterable[str], *, strict: bool = True):
    """The plugin host, warning in one line about every plugin that failed to load.

    A module asked for by name (``-p MODULE``) that fails to load is a
    :class:`UsageError` (exit 2) with ``strict``: the user asked for it, so a
    run without it would not be the one asked for.  ``amp-suite plugins``
    passes ``strict=False`` to list it as failed.
    """
    from amp_suite.plugins.host import PluginHost

    modules = tuple(modules)
    host = PluginHost(extra_modules=modules)
    for failure in host.failures:
        if strict and failure.name in modules:
            raise UsageError(f"plugin module {failure.name!r} (-p) failed to load: {failure.error}")
    for failure in host.failures:
        print(f"amp-suite: warning: plugin {failure.name!r} failed to load: {failure.error}", file=sys.stderr)
    for text in dict.fromkeys(host.moved_imports):  # DeprecationWarnings a plugin module's import never shows
        print(f"amp-suite: warning: {text}", file=sys.stderr)
    return host


def worker_plugin_modules(host, requested: Iterable[str]) -> tuple[str, ...]:
    """The extra plugin modules the host really loaded (the worker loads exactly these)."""
    from amp_suite.plugins.host import EXTRA_PLUGINS_ENV

    loaded = {plugin.name for plugin in host.describe()}
    from_env = [m.strip() for m in os.environ.get(EXTRA_PLUGINS_ENV, "").split(",") if m.strip()]
    return tuple(dict.fromkeys(m for m in [*requested, *from_env] if m in loaded))


def absent_plugins(host) -> set[str]:
    """Plugins disabled by the user or failed to load in the host."""
    from amp_suite.plugins.host import DISABLE_ENV

    blocked = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    return blocked | {failure.name for failure in host.failures}


def worker_env(host) -> dict[str, str]:
    """Environment overrides that keep a worker from loading a plugin the host did not load."""
    from amp_suite.plugins.host import DISABLE_ENV, EXTRA_PLUGINS_ENV

    return {DISABLE_ENV: ",".join(sorted(absent_plugins(host))), EXTRA_PLUGINS_ENV: ""}


# --- planning ------------------------------------------------------------------


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
               environments: dict[str, dict[str, Any]] | None = None, dataset_given: bool = False):
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
    one-device cells always run in one process.  ``environments`` maps a
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
                    variant=name if name != framework else "", environment=place.environment,
                    python=place.python, pool=pool,
                )
                cells.append(Cell(run, workload, unavailable=place.problem,
                                  environment=dict((environments or {}).get(name, {}))))
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


def sweep_datasets(config: SuiteConfig, settings: SweepSettings, dataset_given: bool) -> dict[str, DatasetChoice]:
    """Each workload of the sweep -> the dataset and splits its cells train on (unknown names refused)."""
    return {name: dataset_choice(settings, config.workloads[name], dataset_given=dataset_given)
            for name in settings.workloads}


def _fetch_data(settings: SweepSettings, choices: Iterable[DatasetChoice]) -> None:
    """Verify (or download) every data file of every workload's dataset before the first cell starts."""
    from amp_suite.datasets import fetch
    from amp_suite.datasets.fetch import ChecksumMismatch, DatasetError

    for choice in {(c.dataset, c.train_split, c.val_split): c for c in choices}.values():  # each data once
        try:
            fetch(choice.dataset, choice.train_split, choice.val_split,
                  data_dir=settings.data_dir, allow_download=settings.download)
        except ChecksumMismatch as exc:
            raise UsageError(str(exc)) from None
        except DatasetError as exc:
            if not settings.synthetic_fallback:
                raise UsageError(f"{exc}; or set synthetic_fallback = true to run on synthetic data") from None
            print(f"amp-suite: warning: {exc}; synthetic data will stand in for {choice.dataset} (the report "
                  "says so)", file=sys.stderr)


def sweep(request: SweepRequest, progress: Callable | None = None) -> SweepOutcome:
    """Check the request, run every cell under the output lock, write the report.

    Raises :class:`UsageError` for bad input (before any cell runs) and
    :class:`~amp_suite.errors.PluginError` for a broken plugin.  A stop signal
    (Ctrl-C, SIGTERM, SIGHUP) during the sweep ends it early: the report is
    written from the finished cells and ``stopped_by`` names the signal.
    """
    from amp_suite.config.cost import cost_settings
    from amp_suite.datasets import DATASETS, check_request
    from amp_suite.sweep.output_dir import OutputLock, prepare_output_dir

    config = load_config(find_config(request.config))
    config = for_device_kind(config, sweep_device_kind(config, request))
    plan = None
    settings = config.settings
    if request.preset is not None:
        from amp_suite.config.presets import expand_preset

        plan = expand_preset(config, request.preset, request.overrides)
        settings = plan.settings
    settings = with_overrides(settings, **request.overrides)
    settings.check()
    cost = cost_settings(config.cost, **request.cost)
    if request.inline and any(count != 1 for count in settings.devices):
        raise UsageError("--inline runs cells in this process, which cannot be several data-parallel processes "
                         "or split into devices; drop --inline or use --devices 1")
    # "all" resolved once (it may ask nvidia-smi): the checks, the plan and the environment record agree.
    settings = replace(settings, devices=device_counts(settings))
    if plan is not None and plan.preset.fit_devices and request.overrides.get("devices") is None:
        settings = _fit_preset_devices(config, settings, plan.record)
    if request.inline and request.overrides.get("timeout") is not None:
        raise UsageError("--timeout cannot be enforced with --inline (cells then run in this process); "
                         "drop one of the two")
    host = make_host(request.plugins)
    broken = {f.name: f.error for f in host.failures}
    for name in settings.frameworks:
        if name in broken and name not in host.frameworks():
            raise UsageError(f"framework {name!r}: its plugin failed to load: {broken[name]}")
    from amp_suite.plugins.host import DISABLE_ENV

    for name in settings.frameworks:
        if name in absent_plugins(host) and name not in host.frameworks() and name not in config.environments:
            raise UsageError(f"framework {name!r} is disabled ({DISABLE_ENV} names it); take it out of "
                             f"{DISABLE_ENV} to run it")
    placements = place_frameworks(settings.frameworks, config.environments, host.frameworks(),
                                  environments_dir(config.path), sweep_device_kind(config, request),
                                  timeout_s=settings.timeout)
    _warn_about_environments(placements.values(), inline=request.inline)
    from amp_suite.sweep.executors.select import check_executor

    check_executor(executor_of(config, request), settings.pools, config.pools, inline=request.inline)
    config = check_framework_tables(config, host.frameworks(), absent=absent_plugins(host))
    check_names("workload", settings.workloads, config.workloads)
    check_precision_options(config.framework_options, [place.framework for place in placements.values()],
                            settings.precisions, {name: config.workloads[name] for name in settings.workloads})
    check_names("dataset", (settings.dataset,), DATASETS)
    dataset_given = request.overrides.get("dataset") is not None
    settings, note = splits_for_given_dataset(settings, request.overrides)
    if note:
        print(f"amp-suite: note: {note}", file=sys.stderr)
    datasets = sweep_datasets(config, settings, dataset_given)
    for name in settings.workloads:
        workload = config.workloads[name]
        data = datasets[name]
        for batch_size in batch_sizes_of(settings, workload):
            check_request(data.dataset, workload, data.train_split, data.val_split, batch_size=batch_size)
            for count in settings.devices:
                assert isinstance(count, int), count  # "all" was resolved above
                check_batch_split(name, batch_size, count)
    if request.inline:
        print("amp-suite: note: --inline runs every cell in this process, without a timeout", file=sys.stderr)
    from amp_suite.datasets.fetch import DATA_DIR_ENV, check_data_dir

    for data_dir in (settings.data_dir, os.environ.get(DATA_DIR_ENV)):
        if data_dir:  # --data-dir, and $AMP_SUITE_DATA, which the loader reads too
            check_data_dir(data_dir)
    out_dir = prepare_output_dir(settings.out)
    explicit_steps = request.overrides.get("steps")
    if explicit_steps is None and plan is not None:
        explicit_steps = plan.steps
    definitions = environment_records(placements, host.frameworks(), config.environments)
    cells = plan_cells(config, settings, worker_plugin_modules(host, request.plugins),
                       explicit_steps=explicit_steps,
                       launchers={name: info.launcher for name, info in host.frameworks().items()},
                       placements=placements, environments=definitions, dataset_given=dataset_given)
    from amp_suite.sweep.output_dir import check_sweep_paths
    from amp_suite.sweep.runner import cell_log_path

    check_sweep_paths(out_dir, [cell_log_path(out_dir, cell.run) for cell in cells])
    with OutputLock(out_dir):
        _fetch_data(settings, datasets.values())

        def plan_repeat(repeat: int):
            """Every cell's repeat ``repeat`` (for ``--repeats auto``)."""
            more = plan_cells(config, replace(settings, repeats=repeat + 1),
                              worker_plugin_modules(host, request.plugins), explicit_steps=explicit_steps,
                              launchers={name: info.launcher for name, info in host.frameworks().items()},
                              placements=placements, environments=definitions, dataset_given=dataset_given)
            return [cell for cell in more if cell.run.repeat == repeat]

        return _run_locked(request, host, config, settings, cost, cells, out_dir, progress,
                           plan.record if plan is not None else None, plan_repeat=plan_repeat,
                           datasets=datasets)


def executor_of(config: SuiteConfig, request: SweepRequest):
    """The sweep's executor settings: ``[executor]`` with ``--executor`` and ``--ray-address`` over it."""
    return config.executor.with_flags(request.executor, request.ray_address)


def _warn_about_environments(placements: Iterable[Placement], *, inline: bool) -> None:
    """One line per environment that cannot run or runs outdated requirements; --inline refuses them."""
    for place in placements:
        if place.environment and inline:
            raise UsageError(f"--inline runs cells in this process, not in environment {place.environment!r} "
                             f"(for {place.label}); drop --inline")
        if place.problem:
            print(f"amp-suite: warning: {place.label}: {place.problem}; its cells will be unavailable",
                  file=sys.stderr)
        elif place.stale:
            print(f"amp-suite: warning: environment {place.environment!r} was built for other requirements (or "
                  f"another amp-suite); `amp-suite env create {place.environment}` rebuilds it", file=sys.stderr)


def sweep_device_kind(config: SuiteConfig, request: SweepRequest) -> str:
    """``"gpu"`` or ``"cpu"``: the device the sweep asks for (flag, else preset, else [defaults]).

    ``auto`` is a GPU when the machine has an NVIDIA one (nvidia-smi or the
    driver's /proc entry; no framework is imported).
    """
    device = request.overrides.get("device")
    if device is None and request.preset is not None and request.preset in config.presets:
        device = config.presets[request.preset].settings.get("device")
    device = device or config.settings.device
    if device in ("cpu", "gpu"):
        return device
    from amp_suite.machine.devices import detect_nvidia

    return "gpu" if detect_nvidia().present else "cpu"


def _fit_preset_devices(config: SuiteConfig, settings: SweepSettings, record: dict[str, Any]) -> SweepSettings:
    """A ``fit_devices`` preset's device counts made to fit this machine (the change is recorded)."""
    from amp_suite.config.presets import fit_device_counts
    from amp_suite.launchers import visible_devices

    visible = visible_devices(settings.device)
    batches = [batch for name in settings.workloads for batch in batch_sizes_of(settings, config.workloads[name])]
    fitted = fit_device_counts(tuple(int(n) for n in settings.devices), visible, batches)
    if fitted != tuple(settings.devices):
        record["adjusted"].append(
            f"devices {', '.join(map(str, settings.devices))} asked; this machine offers {visible} "
            f"(GPUs, else logical CPU devices, one per core): ran {', '.join(map(str, fitted))}")
    return replace(settings, devices=fitted)


def _run_locked(request: SweepRequest, host, config: SuiteConfig, settings: SweepSettings, cost: dict[str, Any],
                cells, out_dir: Path, progress: Callable | None,
                preset: dict[str, Any] | None = None, plan_repeat: Callable | None = None,
                datasets: dict[str, DatasetChoice] | None = None) -> SweepOutcome:
    from amp_suite.calibration.ceiling import attach_calibration
    from amp_suite.machine.environment import host_environment
    from amp_suite.safe_files import write_file_atomically
    from amp_suite.sweep.executors.select import run_cells
    from amp_suite.sweep.store import ResultStore

    store = ResultStore(out_dir)
    if request.resume:
        warn_skipped_lines(store)
        warn_about_other_settings(out_dir, asdict(settings))
    environment = host_environment(host.distributions())
    environment["config_file"] = str(config.path) if config.path is not None else "none (the packaged catalog)"
    environment["settings"] = asdict(settings)
    if datasets:  # which dataset and splits each workload trained on (the report's header says so)
        environment["workload_datasets"] = {name: asdict(choice) for name, choice in datasets.items()}
    if preset is not None:
        environment["preset"] = preset
    if cost:
        environment["cost"] = cost
    attach_calibration(environment)
    try:
        write_file_atomically(out_dir / ENVIRONMENT_FILE, json.dumps(environment, indent=2, default=str))
    except OSError as exc:
        raise UsageError(f"cannot write {out_dir / ENVIRONMENT_FILE}: {exc.strerror or exc}") from None

    print(f"amp-suite: {cells_announced(len(cells), settings.repeats, request.auto_repeats)} -> "
          f"{path_text(out_dir)}/{synthetic_by_default(config, request)}", file=sys.stderr)
    if datasets and len({choice.dataset for choice in datasets.values()}) > 1:
        print("amp-suite: datasets: " + "; ".join(f"{name}: {choice.text}" for name, choice in datasets.items()),
              file=sys.stderr)
    started = time.perf_counter()
    outcome = SweepOutcome(out_dir, [], environment, [], [])
    try:
        for result in run_cells(executor_of(config, request), cells, store, inline=request.inline,
                                resume=request.resume, env=worker_env(host),
                                progress=None if request.quiet else progress, pools=config.pools,
                                environment=environment):
            outcome.results.append(result)
        if request.auto_repeats and plan_repeat is not None:
            _auto_repeats(request, config, settings, store, host, environment, outcome, progress, plan_repeat)
    except KeyboardInterrupt as exc:
        outcome.stopped_by = exc.signum if isinstance(exc, SweepInterrupted) else signal.SIGINT
        print(f"amp-suite: interrupted by {signal.Signals(outcome.stopped_by).name}; finished cells are kept in "
              "results.jsonl (the same command with --resume runs the rest)", file=sys.stderr)
    except StorageError as exc:
        outcome.storage_failed = True
        print(f"amp-suite: error: {one_line(exc)}; the sweep stops, {len(outcome.results)} finished cells are "
              "stored (free space or fix permissions, then run again with --resume)", file=sys.stderr)
    if outcome.stopped_by is not None or outcome.storage_failed:  # the report says what did not run
        finished = {result.key for result in outcome.results}
        environment["incomplete"] = {
            "reason": (f"interrupted by {signal.Signals(outcome.stopped_by).name}" if outcome.stopped_by is not None
                       else "stopped: a result could not be stored"),
            "planned": len(cells), "not_run": [cell.run.key for cell in cells if cell.run.key not in finished]}
    # what the cluster's nodes of each pool are, learnt while the cells ran; or what did not run
    if "pools" in environment or "incomplete" in environment:
        try:
            write_file_atomically(out_dir / ENVIRONMENT_FILE, json.dumps(environment, indent=2, default=str))
        except OSError as exc:
            print(f"amp-suite: warning: cannot update {out_dir / ENVIRONMENT_FILE}: {exc.strerror or exc}",
                  file=sys.stderr)
    report = host.write_report(outcome.results, out_dir, environment)
    outcome.written, outcome.reporter_failures = list(report.written), list(report.failures)
    print_verdict(outcome.results, environment)  # the answer first, then where the files are
    print(f"amp-suite: {len(outcome.results)} cell{'' if len(outcome.results) == 1 else 's'} in "
          f"{time.perf_counter() - started:.0f} s; wrote "
          + (", ".join(path_text(p) for p in report.written) or "no report"), file=sys.stderr)
    for failure in report.failures:
        print(f"amp-suite: error: reporter {failure.plugin!r} failed: {failure.error}", file=sys.stderr)
    return outcome


def print_verdict(results: list[CellResult], environment: dict[str, Any]) -> None:
    """The sweep's verdict (:mod:`amp_suite.report.verdict`) on standard output; nothing when no cell ran."""
    from amp_suite.report.normalize import sweep_verdict
    from amp_suite.report.verdict import terminal_lines

    lines = terminal_lines(sweep_verdict(results, environment)) if results else []
    if lines:
        sys.stderr.flush()  # the progress lines before it, where both streams reach one terminal
        print("\n".join(lines), flush=True)


def synthetic_by_default(config: SuiteConfig, request: SweepRequest) -> str:
    """A note for the sweep's first line when a ``benchmarks.toml`` ``[defaults]`` table that sets no dataset
    replaced the packaged one, so the cells train on the built-in synthetic data instead of the catalog's."""
    if "defaults" not in config.replaced or "dataset" in config.defaults_keys or config.settings.dataset != "synthetic":
        return ""
    if request.overrides.get("dataset") is not None:
        return ""
    if request.preset is not None and "dataset" in config.presets[request.preset].settings:
        return ""
    packaged = load_config(None).settings.dataset
    if packaged == "synthetic":
        return ""
    return (f"; synthetic data: the [defaults] of {path_text(config.path or Path('benchmarks.toml'))} sets no "
            f"dataset (the packaged one's is {packaged}): add dataset = \"{packaged}\" to it, or pass --dataset")


def cells_announced(planned: int, repeats: int, auto_repeats: int = 0) -> str:
    """``18 cells``; under ``--repeats auto`` also the most it may run: ``4 cells now, up to 10 (--repeats
    auto adds repeats of the cells whose speed-up intervals are wider than asked, up to 5 per cell)``."""
    text = f"{planned} cell{'' if planned == 1 else 's'}"
    if not auto_repeats or auto_repeats <= repeats or repeats <= 0:
        return text
    most = planned // repeats * auto_repeats
    return (f"{text} now, up to {most} (--repeats auto adds repeats of the cells whose speed-up intervals are "
            f"wider than asked, up to {auto_repeats} per cell)")


# The first round of ``--repeats auto`` (two repeats: the fewest that give an interval).
AUTO_FIRST_REPEATS = 2
# ``--repeats auto``'s default cap on repeats per cell.
AUTO_MAX_REPEATS = 5


def wide_speedups(results: list[CellResult], environment: dict[str, Any], width: float) -> list[tuple]:
    """``(workload, framework, devices, precision, half-width)`` of each speed-up whose interval is too wide.

    A speed-up without an interval (fewer than two paired repeats) counts as
    too wide (half-width NaN).
    """
    from amp_suite.report.normalize import summary_frame

    summary = summary_frame(results, environment)
    wide = []
    for row in summary.itertuples():
        if row.precision == "fp32" or row.status != "ok" or row.speedup != row.speedup:
            continue
        low, high = row.speedup_low, row.speedup_high
        half = (high - low) / 2 / row.speedup if low == low and high == high and row.speedup else float("nan")
        if not half <= width:
            wide.append((row.workload, row.framework, int(row.devices), row.precision, half))
    return wide


def _auto_repeats(request: SweepRequest, config: SuiteConfig, settings: SweepSettings, store, host,
                  environment: dict[str, Any],
                  outcome: SweepOutcome, progress: Callable | None, plan_repeat: Callable) -> None:
    """Add repeats of the cells whose speed-ups' intervals are too wide, up to the cap; record what happened."""
    from amp_suite.safe_files import write_file_atomically
    from amp_suite.sweep.executors.select import run_cells

    cap, width = request.auto_repeats, request.auto_width
    repeat = settings.repeats
    wide = wide_speedups(outcome.results, environment, width)
    while wide and repeat < cap:
        groups = {(w, f, d) for w, f, d, _, _ in wide}
        cells = [c for c in plan_repeat(repeat) if (c.run.workload, c.run.label, c.run.devices) in groups]
        print(f"amp-suite: --repeats auto: {len(wide)} speed-up(s) wider than ±{width:.0%}; repeat {repeat} of "
              f"{len(cells)} cells", file=sys.stderr)
        for result in run_cells(executor_of(config, request), cells, store, inline=request.inline,
                                resume=request.resume, env=worker_env(host),
                                progress=None if request.quiet else progress, pools=config.pools,
                                environment=environment):
            outcome.results.append(result)
        repeat += 1
        wide = wide_speedups(outcome.results, environment, width)
    if wide:
        names = ", ".join(f"{w}/{f}/{p}" + (f" (±{h:.1%})" if h == h else " (no interval)")
                          for w, f, _, p, h in wide)
        text = (f"the cap of {cap} repeats was hit with {len(wide)} speed-up(s) still wider than ±{width:.0%}: "
                f"{names}")
    else:
        text = f"every speed-up's 95% interval is within ±{width:.0%} after at most {repeat} repeats (cap {cap})"
    environment["auto_repeats"] = {"cap": cap, "width": width, "repeats": repeat, "wide": len(wide), "summary": text}
    print(f"amp-suite: --repeats auto: {text}", file=sys.stderr)
    try:
        write_file_atomically(outcome.out_dir / ENVIRONMENT_FILE, json.dumps(environment, indent=2, default=str))
    except OSError:
        pass  # the report still says it
