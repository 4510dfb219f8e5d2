"""The hardware ceiling: peak matmul and convolution TFLOP/s per framework, device and dtype.

``amp-suite calibrate`` runs one probe process per framework: the module its
plugin names in ``FrameworkInfo.calibration_probe`` (the framework is imported
only there, as in a worker; :mod:`amp_suite.calibration.kit` has the protocol
and the shared timing), which times

* a square matmul ``n x n @ n x n`` (2·n³ FLOPs), and
* a 3x3 convolution, stride 1, "same" padding, 64 -> 64 channels on 28x28
  NHWC images (2·N·28·28·64·64·9 FLOPs),

in fp32, tf32 (GPUs with TF32 only), fp16 and bf16 — the same FLOP convention
as the workloads (two per multiply-add).  Sizes grow until one call takes
about :data:`~amp_suite.calibration.kit.TARGET_CALL_S` (up to 2048 on a CPU,
8192 on a GPU), so a dtype without fast kernels is measured small instead of
for minutes; then calls are timed for ``budget`` seconds after two warm-up
calls, and the fastest call gives the figure (a peak: other processes only
ever slow a call down).  A dtype's peak is the larger of its matmul and conv
figures.

On a GPU the built-in PyTorch and JAX probes dispatch
:data:`~amp_suite.calibration.kit.GPU_CALLS_PER_SYNC` calls between two waits
(a wait per call would time the launch gap too), and PyTorch's convolutions
run with ``cudnn.benchmark`` on, as the suite's cells do.  ``--device gpu``
measures a GPU or nothing: a framework that cannot use the GPU fails its
calibration with the reason, and nothing is cached for it.

Results are cached as JSON under the user cache directory
(``$AMP_SUITE_CACHE``, else ``$XDG_CACHE_HOME/amp-suite``, else
``~/.cache/amp-suite``), in ``calibration/<machine key>.json``; the key hashes
the CPU model, its reduced-precision flags, the core count and, per GPU, its
name, MIG profile, power limit and driver (each changes the peaks).
Each framework's entry records its version.  Reports look the file up for the
machine a sweep ran on.

Known GPUs also get their datasheet peaks (:data:`DATASHEET_TFLOPS`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from amp_suite.processes import tree as process_tree
from amp_suite.records import FrameworkInfo

# Precision of a cell -> the dtype whose peak bounds it.
PRECISION_DTYPES = {"fp32": "fp32", "tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16", "fp8": "fp8"}
# fp8: the matmul of e4m3 operands on FP8 tensor cores (compute capability 8.9+; PyTorch's probe only, for now).
DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
PROBE_TIMEOUT_S = 600
# Largest calibration cache read (a real one is a few kilobytes).
CACHE_BYTES = 2**20

# Dense (no sparsity) peaks in TFLOP/s from NVIDIA's published specifications.
# fp32 is the non-tensor FP32 figure; tf32, fp16 and bf16 are tensor-core
# figures with float32 accumulation.  NVIDIA prints the tensor-core figures
# "with sparsity": the dense peak is half of that.  A dtype a GPU has no
# tensor cores for is absent (no TF32 or BF16 before Ampere).  Sources:
#   H100 SXM5, H100 PCIe, H100 NVL: "NVIDIA H100 Tensor Core GPU" datasheet
#     (SXM: FP32 67, TF32 989*, BF16/FP16 1,979*, FP8 3,958*; PCIe: 51, 756*,
#     1,513*, 3,026*; NVL: 60, 835*, 1,671*, 3,341*; * = with sparsity).
#   H200 SXM, H200 NVL: "NVIDIA H200 Tensor Core GPU" datasheet (SXM: the H100 SXM
#     figures; NVL: 60, 835*, 1,671*, 3,341*).
#   A100 40GB/80GB, SXM4 and PCIe: "NVIDIA A100 Tensor Core GPU" datasheet (2021):
#     FP32 19.5, TF32 156 (312*), BF16/FP16 312 (624*) for all four.
#   L4: "NVIDIA L4 Tensor Core GPU" datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*, FP8 485*.
#   L40S: "NVIDIA L40S GPU" datasheet: FP32 91.6, TF32 366*, BF16/FP16 733*, FP8 1,466*.
#   T4: "NVIDIA T4 Tensor Core GPU" datasheet: FP32 8.1, FP16 (mixed) 65; no TF32/BF16.
#   V100: "NVIDIA Tesla V100 GPU Accelerator" datasheet (2018): SXM2 FP32 15.7,
#     tensor 125; PCIe 14, 112; V100S PCIe 16.4, 130; no TF32/BF16.
#   RTX 4090: "NVIDIA Ada GPU Architecture" whitepaper, appendix table of the
#     GeForce RTX 4090: FP32 82.6, TF32 82.6 (165.2*), FP16/BF16 with FP32
#     accumulate 165.2 (330.4*), FP8 with FP32 accumulate 330.3 (660.6*).
# fp8 (e4m3/e5m2 tensor cores, Ada and Hopper) is what `torch._scaled_mm` can reach.
# Matched against the GPU name by substring, longest key first; a MIG slice
# matches nothing (see datasheet_peaks).
_H100_SXM = {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5, "fp8": 1979.0}
_NVL = {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5}
_A100 = {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}
DATASHEET_TFLOPS: dict[str, dict[str, float]] = {
    "H100 80GB HBM3": _H100_SXM,  # what an H100 SXM5 calls itself
    "H100 SXM": _H100_SXM,
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5, "fp8": 1513.0},
    "H100 NVL": _NVL,
    "H200": _H100_SXM,  # the SXM board: "NVIDIA H200"
    "H200 NVL": _NVL,
    "A100-SXM4-40GB": _A100,
    "A100-SXM4-80GB": _A100,
    "A100-SXM4": _A100,
    "A100-PCIE-40GB": _A100,
    "A100 80GB PCIe": _A100,
    "A100-PCIE": _A100,
    "L4": {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0, "fp8": 242.5},
    "L40S": {"fp32": 91.6, "tf32": 183.0, "fp16": 366.5, "bf16": 366.5, "fp8": 733.0},
    "T4": {"fp32": 8.1, "fp16": 65.0},
    "V100-SXM2": {"fp32": 15.7, "fp16": 125.0},
    "V100-PCIE": {"fp32": 14.0, "fp16": 112.0},
    "V100S": {"fp32": 16.4, "fp16": 130.0},
    "RTX 4090": {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2, "fp8": 330.3},
}
# Keys that must be whole words of the name ("L4" is not in "L40S").
_WHOLE_WORD_KEYS = ("T4", "L4")
# "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "MIG 3g.40gb": a slice of a GPU.
_MIG_NAME = re.compile(r"\bMIG\b|\b\d+g\.\d+gb\b", re.IGNORECASE)


def is_mig_name(gpu_name: str) -> bool:
    """Whether a device name is a MIG slice rather than a whole GPU."""
    return bool(_MIG_NAME.search(gpu_name or ""))


def datasheet_peaks(gpu_name: str) -> dict[str, float] | None:
    """The datasheet's dense peaks of a GPU named like ``NVIDIA A100-SXM4-80GB``, if known.

    A MIG slice gets None: it has a fraction of the GPU's SMs, and the whole
    GPU's peak would make every figure look far from its ceiling.
    """
    if is_mig_name(gpu_name):
        return None
    name = (gpu_name or "").replace("Tesla ", "").replace("tesla ", "")
    for key in sorted(DATASHEET_TFLOPS, key=len, reverse=True):
        if key.lower() in name.lower():
            if key in _WHOLE_WORD_KEYS and key not in name.split():
                continue
            return dict(DATASHEET_TFLOPS[key])
    return None


# --- the machine and its cache file ------------------------------------------


def gpu_identity(gpu: dict[str, Any]) -> str:
    """What of one GPU decides its peaks: name, MIG profile (if any), power limit, driver."""
    mig = gpu.get("mig_profiles") or ([gpu["mig_mode"]] if gpu.get("mig_mode") else [])
    return json.dumps([gpu.get("name", ""), sorted(str(p) for p in mig), gpu.get("power_limit_w"),
                       gpu.get("driver", "")])


def machine_key(environment: dict[str, Any]) -> str:
    """A short hash of what decides the peaks: CPU model, flags, core count, and each GPU's identity."""
    identity = {
        "cpu_model": environment.get("cpu_model"),
        "cpu_flags": sorted(environment.get("cpu_flags") or []),
        "cpu_count": environment.get("cpu_count"),
        "gpus": sorted(gpu_identity(g) for g in environment.get("gpus") or []),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def cache_path(environment: dict[str, Any]) -> Path:
    from amp_suite.datasets.fetch import cache_root

    return cache_root() / "calibration" / f"{machine_key(environment)}.json"


def read_cache(environment: dict[str, Any]) -> dict[str, Any] | None:
    """The calibration of the machine ``environment`` describes, if this user has one."""
    from amp_suite.safe_files import read_regular
    from amp_suite.stored_values import calibration_problem

    path = cache_path(environment)
    if not os.path.lexists(path):
        return None
    try:
        data = json.loads(read_regular(path, limit=CACHE_BYTES).decode("utf-8"))
        problem = calibration_problem(data)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        problem = f"unreadable ({exc.strerror or exc})" if isinstance(exc, OSError) else "not JSON"
    if problem is None:
        return data
    print(f"amp-suite: warning: ignoring the calibration cache {path}: {problem}; `amp-suite calibrate` "
          "rebuilds it", file=sys.stderr)
    return None


def attach_calibration(environment: dict[str, Any]) -> None:
    """Add the cached calibration of ``environment``'s machine to it, unless it holds a usable one already."""
    from amp_suite.stored_values import calibration_problem

    if "calibration" in environment:
        problem = calibration_problem(environment["calibration"])
        if problem is None:
            return
        print(f"amp-suite: warning: ignoring the stored calibration: {problem}", file=sys.stderr)
        del environment["calibration"]
    found = read_cache(environment)
    if found:
        environment["calibration"] = found


def peak_tflops(calibration: dict[str, Any] | None, framework: str, device_kind: str,
                precision: str) -> float | None:
    """The measured peak for ``precision``'s dtype (max of matmul and conv), or None."""
    dtype = PRECISION_DTYPES.get(precision)
    if not calibration or dtype is None:
        return None
    entry = ((calibration.get("frameworks") or {}).get(framework) or {}).get(device_kind) or {}
    figures = [(entry.get(op) or {}).get(dtype) for op in ("matmul", "conv")]
    numbers = [f for f in figures if isinstance(f, (int, float)) and f > 0]
    return max(numbers) if numbers else None


def ceiling_ratio(calibration: dict[str, Any] | None, framework: str, device_kind: str,
                  precision: str) -> float | None:
    """Peak of the precision's dtype over the fp32 peak: the speed-up the hardware allows."""
    peak = peak_tflops(calibration, framework, device_kind, precision)
    base = peak_tflops(calibration, framework, device_kind, "fp32")
    return peak / base if peak and base else None


# --- the command -------------------------------------------------------------


def _run_probe(framework: FrameworkInfo, device: str, budget_s: float, python: str = "") -> dict[str, Any]:
    """``python -m CALIBRATION_PROBE DEVICE BUDGET`` with the plugin's environment; the figures it printed."""
    from amp_suite.calibration.kit import read_report
    from amp_suite.launchers.child_process import exit_description, isolated_command, isolated_env

    child_env = dict(os.environ)
    for key, value in framework.env.items():  # the plugin's defaults, as a worker sets them: the user's value wins
        child_env.setdefault(key, value)
    # isolated path; a supervised tree that dies with this process, and the time limit ends all of it;
    # python: the interpreter of the environment a sweep would run this framework in ("" for this one)
    done = process_tree.run(isolated_command(framework.calibration_probe, device, str(budget_s), python=python),
                            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                            env=isolated_env(child_env, own_path=bool(python)), stdin=subprocess.DEVNULL)
    figures = read_report(done.stdout)
    if figures is not None:
        return figures
    tail = " ".join((done.stderr or "").strip().splitlines()[-1:])
    raise RuntimeError(f"probe {exit_description(done.returncode)}: {tail}")


def calibrate(*, frameworks: tuple[str, ...] | None, device: str, force: bool, host, budget_s: float = 1.0,
              stream=None, config_path: Path | None = None, environments: dict | None = None) -> int:
    """Measure (or show the cached) peaks of every installed framework whose plugin names a probe; exit code.

    Each framework is measured where a sweep on ``device`` would run it (its built GPU environment, an
    environment of its name in ``environments``, else this interpreter), and each line says where.
    """
    from amp_suite.envs.placement import describe_placement, place_for_checks
    from amp_suite.errors import UsageError
    from amp_suite.machine.environment import host_environment
    from amp_suite.safe_files import (
        UnsafeFileError,
        check_real_directory,
        check_regular_or_absent,
        write_file_atomically,
    )
    from amp_suite.schema import closest

    stream = stream or sys.stdout
    if not (0 < budget_s <= 60):
        raise UsageError(f"--budget must be above 0 and at most 60 seconds, got {budget_s}")
    infos = host.frameworks()
    probed = [name for name, info in infos.items() if info.calibration_probe]
    names = list(frameworks) if frameworks else probed
    for name in names:
        if name not in probed:
            reason = ("its plugin names no FrameworkInfo.calibration_probe" if name in infos
                      else f"no plugin provides it{closest(name, list(infos))}")
            raise UsageError(f"no calibration probe for framework {name!r} ({reason}); "
                             f"known: {', '.join(probed) or 'none'}")
    environment = host_environment()
    path = cache_path(environment)
    try:  # a link or special file where the figures go is refused before a minute of measuring, not after
        check_regular_or_absent(path)
        check_real_directory(path.parent)
    except UnsafeFileError as exc:
        raise UsageError(f"cannot write the calibration cache: {exc}") from None
    cached = read_cache(environment) or {}
    data: dict[str, Any] = {"machine": {k: environment.get(k) for k in ("cpu_model", "cpu_flags", "cpu_count", "gpus")},
            "key": machine_key(environment), "frameworks": dict(cached.get("frameworks") or {})}
    failed = False
    from amp_suite.machine.devices import sweep_device_kind

    placements = place_for_checks(names, environments or {}, list(infos), config_path, sweep_device_kind(device))
    for name in names:
        info = infos[name]
        placement = placements[name]
        if placement.environment and placement.problem:
            print(f"{name}: calibration failed: {placement.problem}", file=sys.stderr)
            failed = True
            continue
        if not placement.environment and info.missing_modules():
            print(f"{name}: not installed, skipped", file=stream)
            continue
        print(f"{name}: measured in {describe_placement(placement)}", file=sys.stderr)
        kind_wanted = None if device == "auto" else device
        entry = data["frameworks"].get(name) or {}
        have = [k for k in entry if kind_wanted in (None, k)]
        if have and not force:
            print(_describe(name, have[0], entry[have[0]], cached=True), file=stream)
            continue
        started = time.perf_counter()
        try:
            figures = _run_probe(info, device, budget_s, python=placement.python)
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
            print(f"{name}: calibration failed: {' '.join(str(exc).split())}", file=sys.stderr)
            failed = True
            continue
        if figures.get("kind") not in ("cpu", "gpu"):
            print(f"{name}: calibration failed: the probe's figures name no device kind (cpu or gpu): "
                  f"{figures.get('kind')!r}", file=sys.stderr)
            failed = True
            continue
        if device == "gpu" and figures.get("kind") != "gpu":
            print(f"{name}: calibration failed: --device gpu, but the probe measured "
                  f"{figures.get('kind')} {figures.get('device', '')}; nothing cached", file=sys.stderr)
            failed = True
            continue
        figures["seconds"] = round(time.perf_counter() - started, 1)
        figures["date"] = environment.get("date")
        data["frameworks"].setdefault(name, {})[figures["kind"]] = figures
        print(_describe(name, figures["kind"], figures, cached=False), file=stream)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_atomically(path, json.dumps(data, indent=2, sort_keys=True))
    except OSError as exc:
        raise UsageError(f"cannot write the calibration cache {path}: {exc.strerror or exc}") from None
    print(f"calibration: {path}", file=stream)
    for gpu in environment.get("gpus") or []:
        sheet = datasheet_peaks(gpu.get("name", ""))
        if sheet:
            print(f"datasheet peaks of {gpu['name']} (dense, TFLOP/s): "
                  + ", ".join(f"{k} {v:g}" for k, v in sheet.items()), file=stream)
    return 1 if failed else 0


def _describe(name: str, kind: str, figures: dict[str, Any], *, cached: bool) -> str:
    rows = []
    base = max([v for v in ((figures.get(op) or {}).get("fp32") for op in ("matmul", "conv")) if v] or [0])
    for dtype in DTYPES:
        cells = [(figures.get(op) or {}).get(dtype) for op in ("matmul", "conv")]
        if not any(cells):
            continue
        peak = max(c for c in cells if c)
        ratio = f", {peak / base:.2f}x fp32" if base else ""
        rows.append(f"{dtype} matmul {_tf(cells[0])} conv {_tf(cells[1])}{ratio}")
    when = " (cached; --force measures again)" if cached else f" ({figures.get('seconds', '?')} s)"
    device = str(figures.get("device", ""))
    where = kind if device in ("", kind) else f"{kind} {device}"  # "on cpu", "on gpu NVIDIA H100 80GB HBM3"
    return f"{name} {figures.get('version', '')} on {where}{when}:\n  " + "\n  ".join(rows)


def _tf(value: float | None) -> str:
    return "n/a" if not value else f"{value:.3f} TFLOP/s"
