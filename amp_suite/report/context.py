"""The report's context: the machine record, the runtimes the workers loaded, the ceiling and the method.

What a reader needs to trust or reproduce the figures: the environment
section (amp-suite, Python, CPU, GPUs, packages, the sweep's settings and
preset), the CUDA runtime and libraries each framework ran with, the
calibrated peaks behind the hardware ceiling, and how every figure is
measured (and priced).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from amp_suite.calibration.ceiling import datasheet_peaks
from amp_suite.records import CellResult
from amp_suite.report.text import flat_text


def ceiling_lines(environment: dict[str, Any], cells: pd.DataFrame) -> list[str]:
    """The measured peaks the report compares with, and datasheet peaks of known GPUs."""
    calibration = environment.get("calibration")
    if not calibration:
        return ["No calibration of this machine: run `amp-suite calibrate`, then `amp-suite report DIR`, "
                "to see each speed-up beside its ceiling and each TFLOP/s as a fraction of the peak.", ""]
    lines = ["Peak TFLOP/s measured by `amp-suite calibrate` (the larger of a square matmul and a 3x3 "
             "convolution, 2 FLOPs per multiply-add), per framework and device:", ""]
    for framework, devices in sorted((calibration.get("frameworks") or {}).items()):
        for kind, entry in sorted(devices.items()):
            peaks = []
            for dtype in ("fp32", "tf32", "fp16", "bf16"):
                values = [v for v in ((entry.get(op) or {}).get(dtype) for op in ("matmul", "conv")) if v]
                if values:
                    peaks.append(f"{dtype} {max(values):.3g}")
            lines.append(f"- {framework} {entry.get('version', '')} on {kind} ({entry.get('device', '')}): "
                         + ", ".join(peaks))
    for gpu in environment.get("gpus") or []:
        sheet = datasheet_peaks(gpu.get("name", ""))
        if sheet:
            lines.append(f"- datasheet of {gpu['name']} (dense): "
                         + ", ".join(f"{k} {v:g}" for k, v in sheet.items()))
    return lines + [""]


def _gpu_text(gpu: dict[str, Any]) -> str:
    """One GPU of the host record: name, driver, memory, compute capability, max clocks, power limit."""
    parts = [f"driver {gpu.get('driver') or '?'}", gpu.get("memory") or "",
             f"sm {gpu['compute_capability']}" if gpu.get("compute_capability") else ""]
    if gpu.get("sm_clock_max_mhz") is not None:
        parts.append(f"max clocks {gpu['sm_clock_max_mhz']:g} MHz sm"
                     + (f" / {gpu['memory_clock_max_mhz']:g} MHz memory"
                        if gpu.get("memory_clock_max_mhz") is not None else ""))
    if gpu.get("power_limit_w") is not None:
        parts.append(f"power limit {gpu['power_limit_w']:g} W")
    return f"{gpu.get('name', '?')} ({', '.join(p for p in parts if p)})"


def runtime_lines(results: list[CellResult]) -> list[str]:
    """CUDA runtime and cuDNN each framework ran with, from the workers' records."""
    seen: dict[str, set[str]] = {}
    for r in results:
        env = r.environment or {}
        if env.get("cuda_runtime_version") or env.get("cudnn_version"):
            seen.setdefault(r.framework, set()).add(
                f"CUDA {env.get('cuda_runtime_version') or '?'}, cuDNN {env.get('cudnn_version') or '?'}")
    loaded: dict[str, set[str]] = {}
    for r in results:
        libraries = (r.environment or {}).get("loaded_libraries") or {}
        names = [f"{name} {libraries[name]}" for name in ("cudart", "cudnn", "cublas", "cublasLt", "nccl")
                 if libraries.get(name)]
        if names:
            loaded.setdefault(r.framework, set()).add(", ".join(names))
    if not seen:
        return ["- CUDA runtime / cuDNN: none used (no run reached a CUDA device)"]
    lines = ["- CUDA runtime / cuDNN: " + "; ".join(f"{f} {' / '.join(sorted(v))}" for f, v in seen.items())]
    if loaded:
        lines.append("- CUDA libraries as loaded by the workers (from /proc/self/maps): "
                     + "; ".join(f"{f}: {' / '.join(sorted(v))}" for f, v in loaded.items()))
    return lines


# Beside the sweep's settings when the folder holds cells of runs with other settings.
LAST_RUN_TEXT = " (the last run into this folder; the cells of other settings are named under Not compared)"


def environment_lines(environment: dict[str, Any], several_runs: bool = False) -> list[str]:
    """The report's environment section.  ``several_runs``: the folder holds cells of runs with other settings, so
    the sweep's settings named are the last run's (environment.json is each run's own), not every cell's."""
    packages = environment.get("packages", {})
    gpus = environment.get("gpus") or []
    substituted = environment.get("environment_substituted")
    lines = [f"- recorded environment: none ({substituted}); the lines below describe the machine that wrote this "
             "report, not necessarily the one the cells ran on"] if isinstance(substituted, str) else []
    lines += [
        f"- amp-suite {environment.get('amp_suite_version', '?')}"
        + (f", commit {environment['git_commit']}" if environment.get("git_commit") else ""),
        f"- date: {environment.get('date', '?')}",
        f"- Python {environment.get('python', '?')} on {environment.get('platform', '?')}",
        f"- CPU: {environment.get('cpu_model', '?')}, {environment.get('cpu_count', '?')} logical cores;"
        f" flags: {', '.join(environment.get('cpu_flags', [])) or 'none of interest'}",
        "- GPU: " + ("; ".join(_gpu_text(g) for g in gpus) if gpus else "none"),
        "- packages: " + ", ".join(f"{k} {v}" for k, v in packages.items()),
    ]
    settings = environment.get("settings")
    if settings:
        lines.append(
            f"- sweep{LAST_RUN_TEXT if several_runs else ''}: {settings.get('steps')} steps per epoch at most, "
            f"{settings.get('epochs')} epoch(s), "
            f"warm-up {settings.get('warmup')} steps, batch size "
            f"{settings.get('batch_size') or 'per workload'}, {settings.get('repeats')} repeat(s), "
            f"{_seeds_text(settings)}, device {settings.get('device')}"
            + (f", config {environment['config_file']}" if environment.get("config_file") else "")
        )
    preset = environment.get("preset")
    if isinstance(preset, dict) and preset.get("name"):
        lines.append(f"- preset: {preset['name']} ({preset.get('source', '?')}); flags given on the command line: "
                     + (", ".join(preset.get("command_line") or {}) or "none"))
    return [flat_text(line) for line in lines]  # stored text: one line each, bounded


def _seeds_text(settings: dict[str, Any]) -> str:
    """``seed 0``, or ``seeds 0, 1, 2`` for a sweep with a seed axis (``--seeds``)."""
    seeds = settings.get("seeds")
    if isinstance(seeds, (list, tuple)) and seeds:
        if len(seeds) > 3 and list(seeds) == list(range(len(seeds))):
            return f"{len(seeds)} seeds, 0 to {len(seeds) - 1}"
        return "seeds " + ", ".join(str(s) for s in seeds[:20]) + (", ..." if len(seeds) > 20 else "")
    return f"seed {settings.get('seed')}"


def methodology_lines(environment: dict[str, Any]) -> list[str]:
    """How every figure of the report is measured: the paragraph that follows the tables."""
    return [
        "Throughput is steady-state training images per second (warm-up steps excluded). "
        "Peak memory on a GPU is the training step's device memory without the staged input batches "
        "(PyTorch, and Keras on TensorFlow or PyTorch: the allocator's peak after warm-up, less the bytes of the "
        "largest window's batches, and in PyTorch's cudagraphs mode the CUDA graphs' private pools' free blocks, "
        "which a replay writes into without allocating; JAX and Keras on JAX, whose peak cannot be reset: XLA's "
        "memory analysis of the compiled step, less its batch); on a CPU it is the worker process's peak resident memory. Latency (the every-run table's "
        "step times) is single steps each waited for on the host, in every framework. Energy, where a "
        "table shows it, is the GPU's energy counter (NVML) or the CPU package's (RAPL) over the timed "
        "windows, divided by the images trained in them. Figures are medians over ok repeats; every ratio "
        "compares with the same framework's fp32 run of the same workload. Training FLOPs per "
        "image are three times the forward pass's convolution and dense multiply-adds (2 FLOPs "
        "each); achieved TFLOP/s is throughput times that.",
        "",
    ] + cost_method_lines(environment)


def cost_method_lines(environment: dict[str, Any]) -> list[str]:
    """How the cost columns are computed, when the sweep has a price."""
    cost = environment.get("cost") or {}
    if not cost:
        return []
    return [f"Cost at {cost['price_per_hour']:g} {cost.get('currency', '')} per hour, from steady-state "
            "throughput (warm-up excluded): per epoch = images per epoch / images/s x price / 3600; per "
            "million training images = 10^6 / images/s x price / 3600.", ""]
