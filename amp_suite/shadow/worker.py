"""Traces one run of ``amp-suite numerics`` in a process of its own (``python -c BOOTSTRAP``) or inline.

The process builds its own plugin host for the run's framework, loads the
canonical initial variables of the run's seed, builds the model in the run's
precision and calls ``trace_step`` once per step, each on the next batch of
the host's pipeline: every run of a workload starts from the same weights
and sees the same batches.  It writes the traced steps to an ``.npz`` file
(:mod:`amp_suite.shadow.traces`) and a :class:`~amp_suite.numerics.records.NumericsRun`
as JSON beside it; whatever happens, that JSON says how the run ended.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from amp_suite.cell.kind_check import undeclared_kinds
from amp_suite.cell.worker import classify_exception
from amp_suite.datasets import run_pipeline
from amp_suite.errors import FrameworkUnavailableError, UnsupportedError, one_line
from amp_suite.host_watch import die_with_host_from_env
from amp_suite.launchers.single import path_setter
from amp_suite.machine import devices
from amp_suite.modes import scaled_learning_rate
from amp_suite.numerics.records import NumericsRun, StepTrace
from amp_suite.plugins.host import PluginHost
from amp_suite.precision import declared_choices as precision_choices
from amp_suite.records import PrecisionApplied, RunSpec, Workload, run_from_dict, to_plain, workload_from_dict
from amp_suite.safe_files import write_file_atomically
from amp_suite.shadow.traces import save_traces
from amp_suite.workloads.workload import init_variables

# The process's entry: the import path is set before anything else is imported.
BOOTSTRAP = path_setter(".pop") + "from amp_suite.shadow.worker import main; sys.exit(main(sys.argv[2:]))"


def trace_steps(run: RunSpec, workload: Workload, host: PluginHost) -> tuple[list[StepTrace], PrecisionApplied]:
    """``run.steps`` traced steps from the canonical initial variables, and what ``set_precision`` applied.

    Raises what the plugin raises; a framework that is not installed, a layer
    kind it does not build, or no ``trace_step`` are one-line errors.
    """
    info = host.frameworks().get(run.framework)
    if info is None:
        raise FrameworkUnavailableError(f"no plugin provides framework {run.framework!r}; loaded: "
                                        f"{', '.join(host.frameworks()) or 'none'}")
    missing = info.missing_modules()
    if missing:
        raise FrameworkUnavailableError(f"{info.display_name} is not installed (missing {', '.join(missing)}): "
                                        f"{info.install_hint()}")
    undeclared = undeclared_kinds(info, workload)
    if undeclared:
        raise UnsupportedError(f"{info.display_name} does not build layer kind(s) {', '.join(undeclared)} of "
                               f"workload {workload.name!r}")
    if not host.pm.hook.trace_step.get_hookimpls():
        raise UnsupportedError(f"{info.display_name} cannot trace a step: its plugin does not implement trace_step")
    for name, value in info.env.items():
        os.environ.setdefault(name, value)
    weights, state = init_variables(workload, run.seed)
    pipeline = run_pipeline(run, workload)
    # As a cell does: the schedule decays over the steps this run takes, the learning rate follows the batch size
    # by the run's rule (the workload's own batch size is the reference).
    learning_rate = scaled_learning_rate(run.learning_rate_rule, workload.optimizer.learning_rate, run.batch_size,
                                         workload.batch_size)
    workload = dataclasses.replace(workload, optimizer=dataclasses.replace(
        workload.optimizer, decay_steps=pipeline.steps_per_epoch, learning_rate=learning_rate))
    device = devices.select_checked(run, info, host.select_device)
    applied = host.set_precision(run, device)
    model = host.build_model(run, workload, weights, state, applied, device)
    steps = []
    for step in range(run.steps):
        staged = host.stage_batches(run, model, pipeline.batches(0, step, step + 1))
        steps.append(host.trace_step(run, model, staged))
    return steps, applied


def trace_run(run: RunSpec, workload: Workload, traces_path: Path, host: PluginHost | None = None) -> NumericsRun:
    """Trace ``run`` and write its steps to ``traces_path``; every outcome becomes a :class:`NumericsRun`."""
    try:
        if host is None:
            host = PluginHost(extra_modules=run.plugin_modules, framework=run.framework)
        steps, applied = trace_steps(run, workload, host)
        save_traces(traces_path, steps)
    except Exception as exc:
        print("".join(traceback.format_exception(exc)), file=sys.stderr)
        return NumericsRun(run.framework, run.workload, run.precision, classify_exception(exc), one_line(exc))
    return NumericsRun(run.framework, run.workload, run.precision, "ok", steps=len(steps),
                       compute_dtype=applied.compute_dtype, losses=tuple(s.loss for s in steps),
                       loss_scales=tuple(s.loss_scale for s in steps),
                       layers=tuple(steps[0].activations) if steps else (), choices=declared_choices(applied))


def declared_choices(applied: PrecisionApplied) -> str:
    """What a run declared away from its precision's default recipe (:func:`amp_suite.precision.declared_choices`)."""
    return precision_choices(applied.precision, applied.loss_scaling, applied.keep_fp32)


def run_to_dict(outcome: NumericsRun) -> dict[str, Any]:
    return to_plain(dataclasses.asdict(outcome))


def main(argv: list[str]) -> int:
    """``REQUEST.json``: trace the run it names; the traces and the outcome go where it says."""
    die_with_host_from_env()
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    run = run_from_dict(request["run"])
    workload = workload_from_dict(request["workload"])
    outcome = trace_run(run, workload, Path(request["traces"]))
    write_file_atomically(Path(request["outcome"]), json.dumps(run_to_dict(outcome)) + "\n")
    return 0
