"""The hardware ceiling: peak matmul and convolution TFLOP/s per framework, device and dtype.

``amp-suite calibrate`` runs one probe process per framework (the framework
is imported only there, as in a worker), which times

* a square matmul ``n x n @ n x n`` (2·n³ FLOPs), and
* a 3x3 convolution, stride 1, "same" padding, 64 -> 64 channels on 28x28
  NHWC images (2·N·28·28·64·64·9 FLOPs),

in fp32, tf32 (GPUs with TF32 only), fp16 and bf16 — the same FLOP convention
as the workloads (two per multiply-add).  Sizes grow until one call takes
about :data:`TARGET_CALL_S` (up to 2048 on a CPU, 8192 on a GPU), so a dtype
without fast kernels is measured small instead of for minutes; then calls are
timed for ``budget`` seconds after two warm-up calls, and the fastest call
gives the figure (a peak: other processes only ever slow a call down).  A dtype's peak is the larger of its matmul and conv
figures.

On a GPU the PyTorch and JAX probes dispatch :data:`GPU_CALLS_PER_SYNC`
calls between two waits (a wait per call would time the launch gap too), and
PyTorch's convolutions run with ``cudnn.benchmark`` on, as the suite's cells
do.  ``--device gpu`` measures a GPU or nothing: a framework that cannot use
the GPU fails its calibration with the reason, and nothing is cached for it.

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
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Precision of a cell -> the dtype whose peak bounds it.
PRECISION_DTYPES = {"fp32": "fp32", "tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16"}
DTYPES = ("fp32", "tf32", "fp16", "bf16")
# Seconds one timed call should take, at least, before repeats start.
TARGET_CALL_S = 0.02
MATMUL_SIZES = {"cpu": (256, 512, 1024, 2048), "gpu": (1024, 2048, 4096, 8192)}
CONV_BATCHES = {"cpu": (1, 4, 16, 64), "gpu": (16, 64, 256, 1024)}
CONV_HW, CONV_CHANNELS, CONV_KERNEL = 28, 64, 3
# Calls dispatched between two waits on a GPU (one call per wait on a CPU).
GPU_CALLS_PER_SYNC = 10
PROBE_TIMEOUT_S = 600
# A probe's entry: as a worker's, the import path is the host's without the current directory.
# Largest calibration cache read (a real one is a few kilobytes).
CACHE_BYTES = 2**20
PROBE_BOOTSTRAP = (
    "import os, sys; sys.path[:] = os.environ.pop('AMP_SUITE_WORKER_PATH').split(os.pathsep); "
    "from amp_suite.calibration import probe_main; sys.exit(probe_main(sys.argv[1:]))"
)

# Dense (no sparsity) peaks in TFLOP/s from NVIDIA's published specifications.
# fp32 is the non-tensor FP32 figure; tf32, fp16 and bf16 are tensor-core
# figures with float32 accumulation.  NVIDIA prints the tensor-core figures
# "with sparsity": the dense peak is half of that.  A dtype a GPU has no
# tensor cores for is absent (no TF32 or BF16 before Ampere).  Sources:
#   H100 SXM5, H100 PCIe, H100 NVL: "NVIDIA H100 Tensor Core GPU" datasheet
#     (SXM: FP32 67, TF32 989*, BF16/FP16 1,979*; PCIe: 51, 756*, 1,513*;
#     NVL: 60, 835*, 1,671*; * = with sparsity).
#   H200 SXM, H200 NVL: "NVIDIA H200 Tensor Core GPU" datasheet (SXM: the H100 SXM
#     figures; NVL: 60, 835*, 1,671*).
#   A100 40GB/80GB, SXM4 and PCIe: "NVIDIA A100 Tensor Core GPU" datasheet (2021):
#     FP32 19.5, TF32 156 (312*), BF16/FP16 312 (624*) for all four.
#   L4: "NVIDIA L4 Tensor Core GPU" datasheet: FP32 30.3, TF32 120*, BF16/FP16 242*.
#   L40S: "NVIDIA L40S GPU" datasheet: FP32 91.6, TF32 366*, BF16/FP16 733*.
#   T4: "NVIDIA T4 Tensor Core GPU" datasheet: FP32 8.1, FP16 (mixed) 65; no TF32/BF16.
#   V100: "NVIDIA Tesla V100 GPU Accelerator" datasheet (2018): SXM2 FP32 15.7,
#     tensor 125; PCIe 14, 112; V100S PCIe 16.4, 130; no TF32/BF16.
#   RTX 4090: "NVIDIA Ada GPU Architecture" whitepaper, appendix table of the
#     GeForce RTX 4090: FP32 82.6, TF32 82.6 (165.2*), FP16/BF16 with FP32
#     accumulate 165.2 (330.4*).
# Matched against the GPU name by substring, longest key first; a MIG slice
# matches nothing (see datasheet_peaks).
_H100_SXM = {"fp32": 67.0, "tf32": 494.5, "fp16": 989.5, "bf16": 989.5}
_NVL = {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5}
_A100 = {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0}
DATASHEET_TFLOPS: dict[str, dict[str, float]] = {
    "H100 80GB HBM3": _H100_SXM,  # what an H100 SXM5 calls itself
    "H100 SXM": _H100_SXM,
    "H100 PCIe": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.5, "bf16": 756.5},
    "H100 NVL": _NVL,
    "H200": _H100_SXM,  # the SXM board: "NVIDIA H200"
    "H200 NVL": _NVL,
    "A100-SXM4-40GB": _A100,
    "A100-SXM4-80GB": _A100,
    "A100-SXM4": _A100,
    "A100-PCIE-40GB": _A100,
    "A100 80GB PCIe": _A100,
    "A100-PCIE": _A100,
    "L4": {"fp32": 30.3, "tf32": 60.0, "fp16": 121.0, "bf16": 121.0},
    "L40S": {"fp32": 91.6, "tf32": 183.0, "fp16": 366.5, "bf16": 366.5},
    "T4": {"fp32": 8.1, "fp16": 65.0},
    "V100-SXM2": {"fp32": 15.7, "fp16": 125.0},
    "V100-PCIE": {"fp32": 14.0, "fp16": 112.0},
    "V100S": {"fp32": 16.4, "fp16": 130.0},
    "RTX 4090": {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2},
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


# --- probes (run in a process of their own, one framework each) ---------------


def _time_calls(call, budget_s: float) -> float:
    """Fastest call of ``call()`` over ``budget_s`` seconds of calls (at least 3), after 2 warm-ups.

    The fastest, not the median: a peak is what the hardware can do, and other
    processes on the machine only ever slow a call down (timeit's reasoning).
    """
    call()
    call()
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 200):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def _grow(sizes, make_call, flops_of, budget_s: float) -> dict[str, Any]:
    """Time the first size whose single (second) call takes :data:`TARGET_CALL_S` (or the largest)."""
    for index, size in enumerate(sizes):
        call = make_call(size)
        call()  # compilation, kernel choice, first allocation
        once = math.inf
        for _ in range(2):
            start = time.perf_counter()
            call()
            once = min(once, time.perf_counter() - start)
        if once >= TARGET_CALL_S or index == len(sizes) - 1:
            seconds = _time_calls(call, budget_s)
            return {"tflops": flops_of(size) / seconds / 1e12, "size": size, "seconds": seconds}
    raise AssertionError("no size")


def _matmul_flops(n: int) -> float:
    return 2.0 * n ** 3


def _conv_flops(batch: int) -> float:
    return 2.0 * batch * CONV_HW * CONV_HW * CONV_CHANNELS * CONV_CHANNELS * CONV_KERNEL * CONV_KERNEL


def _gpu_unusable(framework: str, reason: str) -> RuntimeError:
    return RuntimeError(f"--device gpu: {framework} cannot use a GPU here ({reason}); nothing measured")


def _probe_torch(device: str, budget_s: float) -> dict[str, Any]:
    import warnings

    import torch

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if device == "gpu" and not available:
        reason = "; ".join(str(w.message) for w in said) or (
            "a CPU-only build" if torch.version.cuda is None else "torch.cuda.is_available() is False")
        raise _gpu_unusable("PyTorch", " ".join(reason.split())[:300])
    gpu = available and device != "cpu"
    dev = "cuda" if gpu else "cpu"
    kind = "gpu" if gpu else "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    repeats = GPU_CALLS_PER_SYNC if gpu else 1
    tf32_ok = gpu and torch.cuda.get_device_capability()[0] >= 8
    if gpu:
        torch.backends.cudnn.benchmark = True  # as the suite's GPU cells: cuDNN picks its fastest kernel
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    out: dict[str, Any] = {"device": torch.cuda.get_device_name() if gpu else "cpu", "kind": kind,
                           "version": torch.__version__, "threads": torch.get_num_threads(),
                           "calls_per_sync": repeats, "cudnn_benchmark": bool(gpu)}

    def batched(op):
        """``repeats`` dispatches of ``op``, then one wait."""
        def call():
            for _ in range(repeats):
                op()
            sync()
        return call

    for dtype_name, dtype in dtypes.items():
        if dtype_name == "tf32" and not tf32_ok:
            continue
        torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype_name == "tf32"

        def matmul(n, dtype=dtype):
            a = torch.randn(n, n, device=dev).to(dtype)
            b = torch.randn(n, n, device=dev).to(dtype)
            return batched(lambda: torch.mm(a, b))

        def conv(batch, dtype=dtype, layout=torch.contiguous_format):
            x = torch.randn(batch, CONV_CHANNELS, CONV_HW, CONV_HW, device=dev).to(dtype)
            w = torch.randn(CONV_CHANNELS, CONV_CHANNELS, CONV_KERNEL, CONV_KERNEL, device=dev).to(dtype)
            x, w = x.contiguous(memory_format=layout), w.contiguous(memory_format=layout)
            return batched(lambda: torch.nn.functional.conv2d(x, w, padding=1))

        def conv_channels_last(batch, dtype=dtype):
            return conv(batch, dtype, torch.channels_last)

        # PyTorch picks different kernels per memory format; the peak is the faster one.
        _measure_both(out, dtype_name, kind, matmul, conv, budget_s, repeats)
        _measure_both(out, dtype_name, kind, None, conv_channels_last, budget_s, repeats)
    return out


def _probe_keras(device: str, budget_s: float) -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if device == "gpu" and not gpus:
        reason = "a CPU-only build" if not tf.test.is_built_with_cuda() else "TensorFlow lists no GPU"
        raise _gpu_unusable("TensorFlow", reason)
    use_gpu = bool(gpus) and device != "cpu"
    kind = "gpu" if use_gpu else "cpu"
    name = "/GPU:0" if use_gpu else "/CPU:0"
    details = tf.config.experimental.get_device_details(gpus[0]) if use_gpu else {}
    tf32_ok = use_gpu and (details.get("compute_capability") or (0, 0))[0] >= 8
    dtypes = {"fp32": tf.float32, "tf32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}
    out: dict[str, Any] = {"device": details.get("device_name", "cpu") if use_gpu else "cpu", "kind": kind,
                           "version": tf.__version__}
    for dtype_name, dtype in dtypes.items():
        if dtype_name == "tf32" and not tf32_ok:
            continue
        tf.config.experimental.enable_tensor_float_32_execution(dtype_name == "tf32")

        def matmul(n, dtype=dtype):
            with tf.device(name):
                a = tf.cast(tf.random.normal((n, n)), dtype)
                b = tf.cast(tf.random.normal((n, n)), dtype)
                fn = tf.function(lambda: tf.reduce_sum(tf.cast(tf.linalg.matmul(a, b)[:1, :1], tf.float32)))
            return lambda: fn().numpy()

        def conv(batch, dtype=dtype):
            with tf.device(name):
                x = tf.cast(tf.random.normal((batch, CONV_HW, CONV_HW, CONV_CHANNELS)), dtype)
                w = tf.cast(tf.random.normal((CONV_KERNEL, CONV_KERNEL, CONV_CHANNELS, CONV_CHANNELS)), dtype)
                fn = tf.function(lambda: tf.reduce_sum(tf.cast(
                    tf.nn.conv2d(x, w, strides=1, padding="SAME")[:1, :1, :1, :1], tf.float32)))
            return lambda: fn().numpy()

        _measure_both(out, dtype_name, kind, matmul, conv, budget_s)
    return out


def _probe_jax(device: str, budget_s: float) -> dict[str, Any]:
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    if device == "cpu":
        target = jax.devices("cpu")[0]
    elif device == "gpu":
        try:
            target = jax.devices("gpu")[0]
        except RuntimeError as exc:
            raise _gpu_unusable("JAX", " ".join(str(exc).split())[:300]) from None
    else:
        target = jax.devices()[0]
    kind = "cpu" if target.platform == "cpu" else "gpu"
    repeats = GPU_CALLS_PER_SYNC if kind == "gpu" else 1
    tf32_ok = kind == "gpu" and float(getattr(target, "compute_capability", "0") or 0) >= 8.0
    dtypes = {"fp32": jnp.float32, "tf32": jnp.float32, "fp16": jnp.float16, "bf16": jnp.bfloat16}

    def batched(fn, *args):
        """``repeats`` dispatches of ``fn(*args)``, then a wait for the last (they run in order)."""
        def call():
            result = fn(*args)
            for _ in range(repeats - 1):
                result = fn(*args)
            result.block_until_ready()
        return call

    out: dict[str, Any] = {"device": getattr(target, "device_kind", target.platform), "kind": kind,
                           "version": jax.__version__, "calls_per_sync": repeats}
    for dtype_name, dtype in dtypes.items():
        if dtype_name == "tf32" and not tf32_ok:
            continue
        precision = jax.lax.Precision.DEFAULT if dtype_name == "tf32" else jax.lax.Precision.HIGHEST

        def matmul(n, dtype=dtype, precision=precision):
            key = jax.random.PRNGKey(0)
            a = jax.device_put(jax.random.normal(key, (n, n)).astype(dtype), target)
            b = jax.device_put(jax.random.normal(key, (n, n)).astype(dtype), target)
            fn = jax.jit(lambda a, b: jnp.matmul(a, b, precision=precision))
            return batched(fn, a, b)

        def conv(batch, dtype=dtype, precision=precision):
            key = jax.random.PRNGKey(0)
            x = jax.device_put(jax.random.normal(key, (batch, CONV_HW, CONV_HW, CONV_CHANNELS)).astype(dtype),
                               target)
            w = jax.device_put(jax.random.normal(key, (CONV_KERNEL, CONV_KERNEL, CONV_CHANNELS,
                                                       CONV_CHANNELS)).astype(dtype), target)
            fn = jax.jit(lambda x, w: jax.lax.conv_general_dilated(
                x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=precision))
            return batched(fn, x, w)

        _measure_both(out, dtype_name, kind, matmul, conv, budget_s, repeats)
    return out


def _measure_both(out: dict[str, Any], dtype_name: str, kind: str, matmul, conv, budget_s: float,
                  repeats: int = 1) -> None:
    """Matmul and conv figures of one dtype into ``out`` (a second measurement keeps the faster).

    One timed call of ``make(size)`` runs the operation ``repeats`` times.
    """
    for op, sizes, make, flops in (("matmul", MATMUL_SIZES[kind], matmul, _matmul_flops),
                                   ("conv", CONV_BATCHES[kind], conv, _conv_flops)):
        if make is None:
            continue
        try:
            figure = _grow(sizes, make, lambda size, flops=flops: repeats * flops(size), budget_s)
        except Exception as exc:  # a dtype the framework cannot run here
            out.setdefault("errors", {})[f"{op}/{dtype_name}"] = " ".join(str(exc).split())[:300]
            continue
        if figure["tflops"] > (out.get(op) or {}).get(dtype_name, 0.0):
            out.setdefault(op, {})[dtype_name] = figure["tflops"]
            out.setdefault("sizes", {})[f"{op}/{dtype_name}"] = figure["size"]


PROBES = {"torch": _probe_torch, "keras": _probe_keras, "jax": _probe_jax}


def probe_main(argv: list[str]) -> int:
    """``python -m amp_suite.calibration FRAMEWORK DEVICE BUDGET``: print one JSON line."""
    framework, device, budget = argv[0], argv[1], float(argv[2])
    result = PROBES[framework](device, budget)
    print("AMP_SUITE_CALIBRATION " + json.dumps(result), flush=True)
    return 0


# --- the command -------------------------------------------------------------


def _run_probe(framework: str, device: str, budget_s: float, env: dict[str, str]) -> dict[str, Any]:
    from amp_suite.child_process import exit_description, isolated_command, isolated_env

    child_env = dict(os.environ)
    for key, value in env.items():  # the plugin's defaults, as a worker sets them: the user's value wins
        child_env.setdefault(key, value)
    # isolated path, and the probe dies with this process (as workers do)
    done = subprocess.run(isolated_command("amp_suite.calibration", framework, device, str(budget_s)),
                          capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=isolated_env(child_env))
    for line in done.stdout.splitlines():
        if line.startswith("AMP_SUITE_CALIBRATION "):
            return json.loads(line.split(" ", 1)[1])
    tail = " ".join((done.stderr or "").strip().splitlines()[-1:])
    raise RuntimeError(f"probe {exit_description(done.returncode)}: {tail}")


def calibrate(*, frameworks: tuple[str, ...] | None, device: str, force: bool, host, budget_s: float = 1.0,
              stream=None) -> int:
    """Measure (or show the cached) peaks of every installed framework; exit code."""
    from amp_suite.environment import host_environment
    from amp_suite.errors import UsageError
    from amp_suite.safe_files import write_file_atomically
    from amp_suite.worker import missing_modules

    stream = stream or sys.stdout
    if not (0 < budget_s <= 60):
        raise UsageError(f"--budget must be above 0 and at most 60 seconds, got {budget_s}")
    infos = host.frameworks()
    names = list(frameworks) if frameworks else [n for n in infos if n in PROBES]
    for name in names:
        if name not in PROBES:
            raise UsageError(f"no calibration probe for framework {name!r}; known: {', '.join(PROBES)}")
    environment = host_environment()
    path = cache_path(environment)
    cached = read_cache(environment) or {}
    data: dict[str, Any] = {"machine": {k: environment.get(k) for k in ("cpu_model", "cpu_flags", "cpu_count", "gpus")},
            "key": machine_key(environment), "frameworks": dict(cached.get("frameworks") or {})}
    failed = False
    for name in names:
        info = infos.get(name)
        if info is None or missing_modules(info):
            print(f"{name}: not installed, skipped", file=stream)
            continue
        kind_wanted = None if device == "auto" else device
        entry = data["frameworks"].get(name) or {}
        have = [k for k in entry if kind_wanted in (None, k)]
        if have and not force:
            print(_describe(name, have[0], entry[have[0]], cached=True), file=stream)
            continue
        started = time.perf_counter()
        try:
            figures = _run_probe(name, device, budget_s, dict(info.env))
        except (RuntimeError, OSError, subprocess.SubprocessError, ValueError) as exc:
            print(f"{name}: calibration failed: {' '.join(str(exc).split())}", file=sys.stderr)
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
    return f"{name} {figures.get('version', '')} on {kind} {figures.get('device', '')}{when}:\n  " + "\n  ".join(rows)


def _tf(value: float | None) -> str:
    return "n/a" if not value else f"{value:.3f} TFLOP/s"


if __name__ == "__main__":
    sys.exit(probe_main(sys.argv[1:]))
