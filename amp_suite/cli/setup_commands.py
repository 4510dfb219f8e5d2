"""The commands about the machine and what is installed: ``list``, ``init``, ``doctor``, ``env`` and ``plugins``."""

from __future__ import annotations

import argparse
import math
import sys
from functools import partial
from pathlib import Path

from amp_suite.cli.shared import (
    _csv,
    _host,
    _one_line_text,
    own_command,
)
from amp_suite.config.catalog import find_config, load_config
from amp_suite.config.settings import check_names
from amp_suite.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError
from amp_suite.modes import MODES
from amp_suite.precision import PRECISIONS


def cmd_list(args: argparse.Namespace) -> int:
    from amp_suite.machine.environment import package_version

    host = _host(args.plugin)
    print("frameworks:")
    frameworks = host.frameworks()
    width = max([8, *(len(name) for name in frameworks)])
    display = max([12, *(len(info.display_name) for info in frameworks.values())])
    for name, info in frameworks.items():
        missing = info.missing_modules()
        # every installed distribution by name: keras's row is TensorFlow 2.21 and Keras 3, not one version
        versions = ", ".join(f"{d} {v}" for d in info.distributions if (v := package_version(d)))
        state = f"installed {versions}".strip() if not missing else f"not installed ({info.install_hint()})"
        precisions = "; ".join(f"{kind}: {', '.join(p)}" for kind, p in info.precisions.items())
        modes = "; ".join(f"{kind}: {', '.join(m)}" for kind, m in info.modes.items())
        print(f"  {name:<{width}} {info.display_name:<{display}} {state}  [{precisions}]"
              + (f"  modes [{modes}; default {info.default_mode}]" if modes else ""))
    config_error = None
    try:
        config = load_config(find_config(getattr(args, "config", None)))
    except UsageError as exc:
        # the frameworks and precisions are still listed; the exit status is a bad config's, as for run
        config_error = _one_line_text(exc)
        print(f"workloads and presets: unavailable ({config_error})")
    else:
        extended = f", extended by {config.path}" if config.path is not None else ""
        print(f"workloads (the packaged catalog{extended}; [source] after each):")
        width = max(map(len, config.workloads), default=0)
        from amp_suite.config.workload_datasets import workload_dataset_text

        for name, workload in config.workloads.items():
            shape = (f"context {workload.input_shape[0]} tokens" if workload.tokens else
                     f"input {workload.input_size}x{workload.input_size}x{workload.channels}")
            print(f"  {name:<{width}}  {workload.description or workload.model}, {shape}, batch "
                  f"{workload.batch_size}, {workload_dataset_text(workload)}  [{config.source('workloads.' + name)}]")
        print("presets (amp-suite run --preset NAME; docs/presets.md):")
        width = max(map(len, config.presets), default=0)
        for name, preset in config.presets.items():
            missing = [w for w in preset.settings.get("workloads", ()) if w not in config.workloads]
            state = f" (needs workloads not declared: {', '.join(missing)})" if missing else ""
            print(f"  {name:<{width}}  {preset.description}{state}  [{config.source('presets.' + name)}]")
    print("precisions:")
    for name, text in PRECISIONS.items():
        print(f"  {name:<9} {text}")
    print("modes (--modes):")
    for name, text in MODES.items():
        print(f"  {name:<10} {text}")
    from amp_suite.datasets import DATASETS

    print("datasets:\n  " + ", ".join(DATASETS))
    if config_error is not None:
        print(f"amp-suite: error: {config_error}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from amp_suite.config.catalog import CONFIG_NAME
    from amp_suite.config.starter import starter_text
    from amp_suite.safe_files import write_file_atomically

    path = Path.cwd() / CONFIG_NAME
    if (path.exists() or path.is_symlink()) and not args.force:
        raise UsageError(f"{path} already exists; pass --force to overwrite it")
    if path.exists() and not path.is_file():
        raise UsageError(f"{path} exists and is not a regular file")
    try:
        write_file_atomically(path, starter_text())
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"wrote {path}: it extends the packaged catalog (amp-suite list shows it); uncomment what you "
          "want to change")
    return EXIT_OK


def cmd_doctor(args: argparse.Namespace) -> int:
    from amp_suite.doctor import DoctorPlan, render_table, run_checks, summary_line

    if args.device not in ("auto", "cpu", "gpu"):
        raise UsageError(f"unknown device {args.device!r}; allowed: auto, cpu, gpu")
    known = _host(args.plugin).frameworks()
    config_path = find_config(args.config)
    declared = load_config(config_path).environments
    asked = _csv(args.frameworks, "--frameworks")
    if asked:
        check_names("framework", asked, [*known, *declared])
    names = tuple(n for n in asked if n in known) if asked else tuple(known)
    environments = _doctor_environments(declared, known, asked, config_path)
    if not args.acceptance:
        # each framework is probed where a sweep on this device would run it (docs/environments.md)
        from amp_suite.doctor.runner import EnvironmentProbe
        from amp_suite.envs.placement import place_for_checks
        from amp_suite.machine.devices import sweep_device_kind

        placements = place_for_checks(names, declared, known, config_path, sweep_device_kind(args.device))
        moved = tuple(EnvironmentProbe(name, p.python, known[p.framework], p.problem, environment=p.environment)
                      for name, p in placements.items() if p.environment)
        taken = {p.environment for p in placements.values()}
        environments = moved + tuple(e for e in environments if e.name not in taken)
        names = tuple(n for n in names if not placements[n].environment)
    if args.acceptance:
        from amp_suite.doctor.acceptance import run_acceptance
        from amp_suite.doctor.acceptance_run import run_supervised_command
        from amp_suite.doctor.phases import parse_checks

        if args.budget is not None and (not math.isfinite(args.budget) or args.budget <= 0):
            raise UsageError(f"--budget must be a finite number of seconds above 0, got {args.budget:g}")
        return run_acceptance(device=args.device, frameworks=_csv(args.frameworks, "--frameworks"), known=known,
                              run_command=partial(run_supervised_command, program=own_command()),
                              report=args.report, plugins=args.plugin, force=args.force,
                              emit=lambda line: print(line, flush=True),
                              progress=lambda text: print(f"amp-suite doctor: {text}", file=sys.stderr, flush=True),
                              checks=parse_checks(args.checks), budget_s=args.budget, resume=args.resume)
    for flag, given in (("--report", args.report is not None), ("--checks", args.checks is not None),
                        ("--budget", args.budget is not None), ("--resume", args.resume), ("--force", args.force)):
        if given:
            raise UsageError(f"{flag} goes with --acceptance")
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UsageError(f"--timeout must be a finite number of seconds above 0, got {args.timeout:g}")
    plan = DoctorPlan(device=args.device, frameworks=tuple(known[n] for n in names), timeout_s=args.timeout,
                      environments=environments)
    rows = run_checks(plan, progress=lambda text: print(f"amp-suite doctor: {text}", file=sys.stderr, flush=True))
    print(render_table(rows))
    print(summary_line(rows))
    return EXIT_FAILED if any(r.failed for r in rows) else EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    from amp_suite.envs.command import cmd_env as run_env

    return run_env(args, frameworks=lambda: _host(getattr(args, "plugin", None) or []).frameworks())


def _doctor_environments(declared: dict, known: dict, asked: tuple[str, ...] | None, config_path) -> tuple:
    """The environments the doctor probes: those asked for by name, else every declared one (the GPU set's
    only once built)."""
    from amp_suite.doctor.runner import EnvironmentProbe
    from amp_suite.envs import environments_dir, state_of

    envs_dir = environments_dir(config_path)
    probes = []
    for name, spec in declared.items():
        state = state_of(spec, envs_dir)
        wanted = name in asked if asked else (state.built or not spec.gpu)
        if wanted and spec.framework in known:
            probes.append(EnvironmentProbe(name, str(state.python), known[spec.framework],
                                           "" if state.built else state.problem))
    return tuple(probes)


def cmd_plugins(args: argparse.Namespace) -> int:
    host = _host(args.plugin, strict=False)  # a -p module that fails to load is listed, as FAILED TO LOAD
    for plugin in host.describe():
        version = f" {plugin.version}" if plugin.version else ""
        print(f"{plugin.name}{version}  ({plugin.source})")
        print(f"    hooks: {', '.join(plugin.hooks) or 'none'}")
    for failure in host.failures:
        print(f"{failure.name}  FAILED TO LOAD ({failure.source}): {failure.error}")
    asked = [failure.name for failure in host.failures if failure.name in args.plugin]
    if asked:
        print(f"amp-suite: error: plugin module{'s' if len(asked) > 1 else ''} asked for with -p failed to load: "
              f"{', '.join(asked)}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK
