"""Runs one cell: in a fresh worker process (``python -m amp_suite.worker``) or inline.

The worker builds its own plugin host, so a framework is imported only here,
after the framework's environment variables are set.  Whatever happens, the
worker returns a :class:`~amp_suite.records.CellResult` with a status.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import json
import math
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from amp_suite import devices, host_measure
from amp_suite.datasets import epoch_batches, load_dataset
from amp_suite.environment import cpu_info
from amp_suite.errors import DivergedError, FrameworkUnavailableError, UnsupportedError, one_line
from amp_suite.plugin_host import PluginHost
from amp_suite.records import (
    CellResult,
    FrameworkInfo,
    RunSpec,
    Workload,
    cell_for_run,
    run_from_dict,
    workload_from_dict,
)
from amp_suite.results import to_plain
from amp_suite.stats import steady_state
from amp_suite.workloads import init_weights

# Exception names (any module) that mean the device or host ran out of memory.
OOM_EXCEPTION_NAMES = ("OutOfMemoryError", "ResourceExhaustedError", "MemoryError")
OOM_MESSAGES = ("RESOURCE_EXHAUSTED", "out of memory", "Out of memory")


def missing_modules(info: FrameworkInfo) -> list[str]:
    """Modules of ``info`` that are not installed (checked without importing them)."""
    missing = []
    for module in info.modules:
        try:
            if importlib.util.find_spec(module) is None:
                missing.append(module)
        except (ImportError, ValueError):
            missing.append(module)
    return missing


def classify_exception(exc: BaseException) -> str:
    """The cell status an exception stands for."""
    if isinstance(exc, UnsupportedError):
        return "unsupported"
    if isinstance(exc, FrameworkUnavailableError):
        return "unavailable"
    if isinstance(exc, DivergedError):
        return "diverged"
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names.intersection(OOM_EXCEPTION_NAMES) or any(m in str(exc) for m in OOM_MESSAGES):
        return "oom"
    return "failed"


def _check_finite(losses: list[float], epoch: int) -> None:
    for step, loss in enumerate(losses):
        if not math.isfinite(loss):
            raise DivergedError(f"loss became {loss} at epoch {epoch} step {step}")


def validate(host: PluginHost, run: RunSpec, model: Any, images: np.ndarray, labels: np.ndarray,
             batch_size: int) -> dict[str, float]:
    """Validation accuracy and loss, from logits the framework computes in the run's precision."""
    correct = 0
    loss_sum = 0.0
    for start in range(0, int(labels.shape[0]), batch_size):
        logits = np.asarray(host.predict(run, model, images[start:start + batch_size]), dtype=np.float64)
        y = labels[start:start + batch_size]
        correct += int((logits.argmax(axis=1) == y).sum())
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        loss_sum += float(-log_probs[np.arange(y.size), y].sum())
    count = int(labels.shape[0])
    return {"val_accuracy": correct / count, "val_loss": loss_sum / count, "val_examples": count}


def execute(run: RunSpec, workload: Workload, host: PluginHost | None = None) -> CellResult:
    """Run one cell in this process and return its result (never raises)."""
    started = time.perf_counter()
    result = cell_for_run(run, "failed",
                          started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    try:
        if host is None:
            host = PluginHost(extra_modules=run.plugin_modules)
        _execute(run, workload, host, result)
        result.environment.update(devices.runtime_versions())
        result.status = "ok"
    except BaseException as exc:  # every outcome becomes a row
        if isinstance(exc, KeyboardInterrupt):
            raise
        result.status = classify_exception(exc)
        result.error = one_line(exc)
        result.metrics["traceback"] = traceback.format_exc(limit=8)[-4000:]
    result.wall_time_s = time.perf_counter() - started
    return result


def _execute(run: RunSpec, workload: Workload, host: PluginHost, result: CellResult) -> None:
    frameworks = host.frameworks()
    info = frameworks.get(run.framework)
    if info is None:
        raise FrameworkUnavailableError(
            f"no plugin provides framework {run.framework!r}; loaded: {', '.join(frameworks) or 'none'}"
        )
    missing = missing_modules(info)
    if missing:
        raise FrameworkUnavailableError(
            f"{info.display_name} is not installed (missing {', '.join(missing)}): {info.install_hint()}"
        )
    for name, value in info.env.items():
        os.environ.setdefault(name, value)
    if run.warmup >= run.steps * run.epochs:
        raise ValueError(f"warm-up {run.warmup} leaves no timed step out of {run.steps * run.epochs}")

    weights = init_weights(workload, run.seed)
    data = load_dataset(run.dataset, workload, steps=run.steps, batch_size=run.batch_size, seed=run.seed,
                        train_split=run.train_split, val_split=run.val_split, data_dir=run.data_dir,
                        allow_download=run.download, synthetic_fallback=run.synthetic_fallback)

    device = devices.select_checked(run, info, host.select_device)  # no silent CPU fallback
    result.device = asdict(device)
    applied = host.set_precision(run, device)
    result.applied = asdict(applied)
    host_measure.reset_peak_rss()
    rss_before = host_measure.current_rss_bytes()
    model = host.build_model(run, workload, weights, applied, device)

    epochs = []
    for epoch in range(run.epochs):
        batches = epoch_batches(data.train_images, data.train_labels, batch_size=run.batch_size,
                                steps=run.steps, seed=run.seed, epoch=epoch)
        staged = host.stage_batches(run, model, batches)
        del batches
        epoch_result = host.train_epoch(run, model, staged, epoch)
        del staged
        _check_finite(epoch_result.step_losses, epoch)
        epochs.append(epoch_result)

    metrics: dict[str, Any] = steady_state(epochs, warmup=run.warmup, batch_size=run.batch_size)
    metrics.update(validate(host, run, model, data.val_images, data.val_labels, run.batch_size))
    metrics["dataset_note"] = data.note
    metrics["dataset_substituted"] = data.substituted
    metrics["train_examples"] = int(data.train_labels.shape[0])
    metrics["rss_before_model_bytes"] = rss_before
    measured = host.measure(run, model, device)
    clash = set(measured) & set(metrics)
    if clash:
        raise ValueError(f"measure returned keys the host computes itself: {', '.join(sorted(clash))}")
    metrics.update(measured)
    result.metrics = metrics
    result.environment = {
        "pid": os.getpid(), "hostname": platform.node(), "python": platform.python_version(), **cpu_info(),
        **{k: v for k, v in measured.items() if k.endswith("_version")},
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m amp_suite.worker REQUEST.json RESULT.json``."""
    args = sys.argv[1:] if argv is None else argv
    request = json.loads(Path(args[0]).read_text())
    run = run_from_dict(request["run"])
    workload = workload_from_dict(request["workload"])
    result = execute(run, workload)
    tmp = Path(args[1] + ".tmp")
    tmp.write_text(json.dumps(to_plain(asdict(result))))
    os.replace(tmp, args[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
