"""A sweep request resolved into its plan, before anything runs: :func:`resolve`.

The steps, in order: the configuration loaded once and made the device
kind's; the preset expanded and the command line applied; the settings
checked and ``--devices all`` counted; the plugins loaded; each framework
placed in its environment and the executor picked and checked; the
workloads, datasets and batch splits checked; every cell planned
(:mod:`amp_suite.sweep.cells`) and its time estimated
(:mod:`amp_suite.sweep.estimate`).  Bad input is a one-line
:class:`~amp_suite.errors.UsageError` from here, so a dry run refuses exactly
what the sweep refuses.  Nothing here creates a file, fetches data or starts a
worker: the output directory is only checked (the engine creates it), and
warnings are collected into the plan's ``notes``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

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
from amp_suite.config.settings import SweepSettings, check_names
from amp_suite.config.workload_datasets import DatasetChoice, dataset_choice, splits_for_given_dataset
from amp_suite.envs.placement import Placement, place_frameworks
from amp_suite.errors import UsageError
from amp_suite.report.text import path_text
from amp_suite.sweep.cells import batch_sizes_of, device_counts, environment_records, plan_cells
from amp_suite.sweep.plan import SweepPlan, SweepRequest

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


# --- the request's settings ------------------------------------------------------


def sweep_device_kind(config: SuiteConfig, request: SweepRequest) -> str:
    """``"gpu"`` or ``"cpu"``: the device the sweep asks for (flag, else preset, else [defaults]).

    ``auto`` is a GPU when the machine has an NVIDIA one (nvidia-smi or the
    driver's /proc entry; no framework is imported).
    """
    device = request.overrides.get("device")
    if device is None and request.preset is not None and request.preset in config.presets:
        device = config.presets[request.preset].settings.get("device")
    device = device or config.settings.device
    from amp_suite.machine.devices import sweep_device_kind

    return sweep_device_kind(device if device in ("cpu", "gpu") else "auto")


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


def environment_notes(placements: Iterable[Placement], *, inline: bool) -> list[str]:
    """One warning per environment that cannot run or runs outdated requirements; --inline refuses them."""
    notes = []
    for place in placements:
        if place.environment and inline:
            raise UsageError(f"--inline runs cells in this process, not in environment {place.environment!r} "
                             f"(for {place.label}); drop --inline")
        if place.problem:
            notes.append(f"warning: {place.label}: {place.problem}; its cells will be unavailable")
        elif place.stale:
            notes.append(f"warning: environment {place.environment!r} was built for other requirements (or "
                         f"another amp-suite); `amp-suite env create {place.environment}` rebuilds it")
    return notes


def synthetic_by_default(config: SuiteConfig, request: SweepRequest) -> str:
    """A note for the sweep's first line when a ``benchmarks.toml`` ``[defaults]`` table that sets no dataset
    replaced the packaged one, so the cells train on the built-in synthetic data instead of the catalog's."""
    if "defaults" not in config.replaced or "dataset" in config.defaults_keys or config.settings.dataset != "synthetic":
        return ""
    if request.overrides.get("dataset") is not None:
        return ""
    if request.preset is not None and "dataset" in config.presets[request.preset].settings:
        return ""
    packaged = config.packaged_dataset
    if packaged in ("", "synthetic"):
        return ""
    return (f"; synthetic data: the [defaults] of {path_text(config.path or Path('benchmarks.toml'))} sets no "
            f"dataset (the packaged one's is {packaged}): add dataset = \"{packaged}\" to it, or pass --dataset")


def sweep_datasets(config: SuiteConfig, settings: SweepSettings, dataset_given: bool) -> dict[str, DatasetChoice]:
    """Each workload of the sweep -> the dataset and splits its cells train on (unknown names refused)."""
    return {name: dataset_choice(settings, config.workloads[name], dataset_given=dataset_given)
            for name in settings.workloads}


def _check_data(config: SuiteConfig, settings: SweepSettings, datasets: dict[str, DatasetChoice]) -> None:
    """Every workload's batches fit its dataset's splits and split evenly over every device count."""
    from amp_suite.datasets import check_request
    from amp_suite.datasets.fetch import DATA_DIR_ENV, check_data_dir

    for name in settings.workloads:
        workload = config.workloads[name]
        data = datasets[name]
        for batch_size in batch_sizes_of(settings, workload):
            check_request(data.dataset, workload, data.train_split, data.val_split, batch_size=batch_size)
            for count in settings.devices:
                assert isinstance(count, int), count  # "all" was resolved before
                check_batch_split(name, batch_size, count)
    for data_dir in (settings.data_dir, os.environ.get(DATA_DIR_ENV)):
        if data_dir:  # --data-dir, and $AMP_SUITE_DATA, which the loader reads too
            check_data_dir(data_dir)


def _check_frameworks(host, settings: SweepSettings, config: SuiteConfig) -> None:
    """A requested framework whose plugin failed to load, or that the user disabled, is refused."""
    from amp_suite.plugins.host import DISABLE_ENV

    broken = {f.name: f.error for f in host.failures}
    for name in settings.frameworks:
        if name in broken and name not in host.frameworks():
            raise UsageError(f"framework {name!r}: its plugin failed to load: {broken[name]}")
    for name in settings.frameworks:
        if name in absent_plugins(host) and name not in host.frameworks() and name not in config.environments:
            raise UsageError(f"framework {name!r} is disabled ({DISABLE_ENV} names it); take it out of "
                             f"{DISABLE_ENV} to run it")


# --- the plan ------------------------------------------------------------------------


def resolve(request: SweepRequest) -> SweepPlan:
    """The request checked and planned: a :class:`SweepPlan` the engine runs as it is.

    Raises :class:`UsageError` for bad input and
    :class:`~amp_suite.errors.PluginError` for a broken plugin; runs no cell.
    """
    from amp_suite.config.cost import cost_settings
    from amp_suite.datasets import DATASETS
    from amp_suite.sweep.estimate import estimate_cells, stored_results
    from amp_suite.sweep.executors.select import check_executor
    from amp_suite.sweep.output_dir import check_output_dir, check_sweep_paths
    from amp_suite.sweep.report_files import check_report_files_replaceable
    from amp_suite.sweep.runner import cell_log_path

    config = load_config(find_config(request.config))
    device_kind = sweep_device_kind(config, request)
    config = for_device_kind(config, device_kind)
    preset = None
    settings = config.settings
    if request.preset is not None:
        from amp_suite.config.presets import expand_preset

        preset = expand_preset(config, request.preset, request.overrides)
        settings = preset.settings
    settings = with_overrides(settings, **request.overrides)
    settings.check()
    cost = cost_settings(config.cost, **request.cost)
    if request.inline and any(count != 1 for count in settings.devices):
        raise UsageError("--inline runs cells in this process, which cannot be several data-parallel processes "
                         "or split into devices; drop --inline or use --devices 1")
    # "all" resolved once (it may ask nvidia-smi): the checks, the plan and the environment record agree.
    settings = replace(settings, devices=device_counts(settings))
    if preset is not None and preset.preset.fit_devices and request.overrides.get("devices") is None:
        settings = _fit_preset_devices(config, settings, preset.record)
    if request.inline and request.overrides.get("timeout") is not None:
        raise UsageError("--timeout cannot be enforced with --inline (cells then run in this process); "
                         "drop one of the two")
    host = make_host(request.plugins)
    _check_frameworks(host, settings, config)
    frameworks = host.frameworks()
    placements = place_frameworks(settings.frameworks, config.environments, frameworks,
                                  environments_dir(config.path), device_kind, timeout_s=settings.timeout)
    notes = environment_notes(placements.values(), inline=request.inline)
    executor = config.executor.with_flags(request.executor, request.ray_address)
    check_executor(executor, settings.pools, config.pools, inline=request.inline)
    config = check_framework_tables(config, frameworks, absent=absent_plugins(host))
    check_names("workload", settings.workloads, config.workloads)
    check_precision_options(config.framework_options, [place.framework for place in placements.values()],
                            settings.precisions, {name: config.workloads[name] for name in settings.workloads})
    check_names("dataset", (settings.dataset,), DATASETS)
    dataset_given = request.overrides.get("dataset") is not None
    settings, note = splits_for_given_dataset(settings, request.overrides)
    if note:
        notes.append(f"note: {note}")
    datasets = sweep_datasets(config, settings, dataset_given)
    _check_data(config, settings, datasets)
    if request.inline:
        notes.append("note: --inline runs every cell in this process, without a timeout")
    out_dir = check_output_dir(settings.out)
    if out_dir.is_dir():  # a report you edited, or your own results.csv, is replaced only with --force
        check_report_files_replaceable(out_dir, force=request.force)
    explicit_steps = request.overrides.get("steps")
    if explicit_steps is None and preset is not None:
        explicit_steps = preset.steps
    definitions = environment_records(placements, frameworks, config.environments)

    def cells_of(repeats: int):
        return plan_cells(config, replace(settings, repeats=repeats), worker_plugin_modules(host, request.plugins),
                          explicit_steps=explicit_steps,
                          launchers={name: info.launcher for name, info in frameworks.items()},
                          launcher_programs={name: info.launcher_program for name, info in frameworks.items()},
                          default_modes={name: info.default_mode for name, info in frameworks.items()},
                          placements=placements, environments=definitions, dataset_given=dataset_given)

    cells = cells_of(settings.repeats)
    check_sweep_paths(out_dir, [cell_log_path(out_dir, cell.run) for cell in cells])
    more: list[tuple] = []
    if request.auto_repeats > settings.repeats:  # --repeats auto: the further repeats it may add
        extra = cells_of(request.auto_repeats)
        more = [tuple(c for c in extra if c.run.repeat == r) for r in range(settings.repeats, request.auto_repeats)]
    return SweepPlan(
        request=request, config=config, settings=settings, cells=tuple(cells),
        estimates=estimate_cells(cells, device_kind, stored_results(out_dir), resume=request.resume),
        placements=MappingProxyType(dict(placements)), datasets=MappingProxyType(datasets), executor=executor,
        device_kind=device_kind, out_dir=out_dir, cost=MappingProxyType(dict(cost)), host=host,
        notes=tuple(notes), preset=MappingProxyType(preset.record) if preset is not None else None,
        more_repeats=tuple(more),
        synthetic_note=synthetic_by_default(config, request))
