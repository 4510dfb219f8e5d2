"""What every calibration probe shares (no framework imported here).

A framework plugin names its probe in ``FrameworkInfo.calibration_probe``;
``amp-suite calibrate`` runs it as ``python -m MODULE DEVICE BUDGET`` in a
fresh process with the plugin's ``env`` set (``DEVICE``: ``auto``, ``cpu`` or
``gpu``; ``BUDGET``: seconds of timed calls per figure).  The module ends
with ``sys.exit(probe_main(probe, sys.argv[1:]))``, where ``probe(device,
budget_s)`` returns its figures and :func:`probe_main` prints them on the
line the host reads.

The figures (a dict): ``kind`` (``cpu``/``gpu``, what was really measured),
``device`` (its name), ``version`` (the framework's), ``matmul`` and ``conv``
(dtype -> TFLOP/s, for ``fp32``, ``tf32`` where the GPU has it, ``fp16`` and
``bf16``), ``sizes`` (``op/dtype`` -> the size timed), ``errors`` (``op/dtype``
-> why a dtype could not run), and anything else worth keeping
(``calls_per_sync``, ``threads``).  ``--device gpu`` on a framework that cannot
use the GPU raises :func:`gpu_unusable`: nothing is measured.

Both operations count two FLOPs per multiply-add, as the workloads do:

* a square matmul ``n x n @ n x n`` (:func:`matmul_flops`), and
* a 3x3 convolution, stride 1, "same" padding, 64 -> 64 channels on 28x28
  NHWC images (:func:`conv_flops`).

:func:`measure_both` grows each operation's size (:data:`MATMUL_SIZES`,
:data:`CONV_BATCHES`) until one call takes :data:`TARGET_CALL_S`, then keeps
the fastest call of ``budget`` seconds of calls.  On a GPU a timed call should
dispatch :data:`GPU_CALLS_PER_SYNC` operations between two waits
(:func:`batched_call` builds one where a result has ``block_until_ready``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

# Seconds one timed call should take, at least, before repeats start.
TARGET_CALL_S = 0.02
MATMUL_SIZES = {"cpu": (256, 512, 1024, 2048), "gpu": (1024, 2048, 4096, 8192)}
CONV_BATCHES = {"cpu": (1, 4, 16, 64), "gpu": (16, 64, 256, 1024)}
CONV_HW, CONV_CHANNELS, CONV_KERNEL = 28, 64, 3
# Calls dispatched between two waits on a GPU (one call per wait on a CPU).
GPU_CALLS_PER_SYNC = 10
# Most timed calls of one figure, however short they are.
MAX_CALLS = 200
# The line of the probe's stdout that holds its figures (as JSON after this prefix).
REPORT_PREFIX = "AMP_SUITE_CALIBRATION "

# One timed call: the operation at one size, ``repeats`` times, then a wait.
Call = Callable[[], Any]
# Builds the call of one size (a matrix side or a batch); None: the probe skips the operation.
MakeCall = Callable[[int], Call]
# A probe: (device asked for, seconds of timed calls per figure) -> its figures.
Probe = Callable[[str, float], dict[str, Any]]


def matmul_flops(n: int) -> float:
    """FLOPs of one ``n x n @ n x n`` matmul."""
    return 2.0 * n ** 3


def conv_flops(batch: int) -> float:
    """FLOPs of one 3x3, 64 -> 64 channel convolution of ``batch`` 28x28 images."""
    return 2.0 * batch * CONV_HW * CONV_HW * CONV_CHANNELS * CONV_CHANNELS * CONV_KERNEL * CONV_KERNEL


def time_calls(call: Call, budget_s: float) -> float:
    """Fastest call of ``call()`` over ``budget_s`` seconds of calls (at least 3), after 2 warm-ups.

    The fastest, not the median: a peak is what the hardware can do, and other
    processes on the machine only ever slow a call down (timeit's reasoning).
    """
    call()
    call()
    times: list[float] = []
    deadline = time.perf_counter() + budget_s
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < MAX_CALLS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def grow(sizes: tuple[int, ...], make_call: MakeCall, flops_of: Callable[[int], float],
         budget_s: float) -> dict[str, Any]:
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
            seconds = time_calls(call, budget_s)
            return {"tflops": flops_of(size) / seconds / 1e12, "size": size, "seconds": seconds}
    raise AssertionError("no size")


def measure_both(out: dict[str, Any], dtype_name: str, kind: str, matmul: MakeCall | None,
                 conv: MakeCall | None, budget_s: float, repeats: int = 1) -> None:
    """Matmul and conv figures of one dtype into ``out`` (a second measurement keeps the faster).

    ``kind`` (``cpu``/``gpu``) picks the sizes; one timed call of
    ``matmul(n)`` or ``conv(batch)`` runs the operation ``repeats`` times.  A
    dtype the framework cannot run here goes into ``out["errors"]``.
    """
    for op, sizes, make, flops in (("matmul", MATMUL_SIZES[kind], matmul, matmul_flops),
                                   ("conv", CONV_BATCHES[kind], conv, conv_flops)):
        if make is None:
            continue

        def call_flops(size: int, flops: Callable[[int], float] = flops) -> float:
            return repeats * flops(size)

        try:
            figure = grow(sizes, make, call_flops, budget_s)
        except Exception as exc:  # a dtype the framework cannot run here
            out.setdefault("errors", {})[f"{op}/{dtype_name}"] = " ".join(str(exc).split())[:300]
            continue
        if figure["tflops"] > (out.get(op) or {}).get(dtype_name, 0.0):
            out.setdefault(op, {})[dtype_name] = figure["tflops"]
            out.setdefault("sizes", {})[f"{op}/{dtype_name}"] = figure["size"]


def host_normal(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> Any:
    """Standard-normal values of ``shape`` in ``dtype`` (a NumPy dtype, bfloat16's from ``ml_dtypes`` included),
    drawn on the host.  A framework's random draw on the device compiles a program for each shape and dtype (on a
    CPU, 5 of a JAX calibration's 14 s and 10 of the Flax example's 19 s), and a timed operation's speed does not
    depend on its values."""
    import numpy as np

    return np.random.default_rng(seed).standard_normal(shape, dtype=np.float32).astype(dtype)


def batched_call(fn: Callable[..., Any], *args: Any, repeats: int) -> Call:
    """One timed call: ``repeats`` dispatches of ``fn(*args)``, then a wait for the last.

    For frameworks that dispatch asynchronously and run in order (JAX): the
    wait is the last result's ``block_until_ready()``, so no framework is
    imported here.
    """
    def call() -> None:
        result = fn(*args)
        for _ in range(repeats - 1):
            result = fn(*args)
        result.block_until_ready()
    return call


def gpu_unusable(framework: str, reason: str) -> RuntimeError:
    """The error a probe raises for ``--device gpu`` when its framework cannot use a GPU."""
    return RuntimeError(f"--device gpu: {framework} cannot use a GPU here ({reason}); nothing measured")


def probe_main(probe: Probe, argv: list[str]) -> int:
    """``python -m MODULE DEVICE BUDGET``: run ``probe`` and print its figures on the :data:`REPORT_PREFIX` line."""
    device, budget = argv[0], float(argv[1])
    figures = probe(device, budget)
    sys.stdout.write("\n" + REPORT_PREFIX + json.dumps(figures) + "\n")
    sys.stdout.flush()
    return 0


def read_report(stdout: str) -> dict[str, Any] | None:
    """The figures a probe printed, or None when it printed none."""
    for line in stdout.splitlines():
        if line.startswith(REPORT_PREFIX):
            found = json.loads(line[len(REPORT_PREFIX):])
            return found if isinstance(found, dict) else None
    return None
