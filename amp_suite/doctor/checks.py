"""What the doctor concludes from the numbers a framework probe returned.

Every function here is pure: it takes the plain values one probe section
produced (see :mod:`amp_suite.doctor.probe_kit` for their shape) and returns a
:class:`CheckResult`.  No framework is imported, so the GPU branches are tested
on any machine by handing them the numbers a GPU would give.  The judges of
the device, driver and cuDNN live in :mod:`amp_suite.doctor.gpu_setup_checks`
and the row itself in :mod:`amp_suite.doctor.check_result`; both are handed
out here too.
"""

from __future__ import annotations

from typing import Any

from amp_suite.doctor.check_result import FAILED, PASSED, SKIPPED, CheckResult, _error
from amp_suite.doctor.gpu_setup_checks import (  # noqa: F401 - re-exported
    DRIVER_FOR_CUDA,
    LOG_PATTERN,
    MAX_NOTES,
    _major,
    cudnn_builds,
    cudnn_problem,
    diagnose,
    driver_branch,
    driver_problem,
    judge_cudnn,
    judge_device,
    leading_number,
    log_notes,
)

# ones(K, K) * 1.0001 @ ones(K, K): every element is K * 1.0001 in float32, but
# K exactly under TF32, whose 10-bit mantissa rounds 1.0001 to 1.0.  The
# convolution probe is the same sum as a 1x1 convolution: all-ones weights,
# CONV_PROBE_IN input channels of 1.0001, so every output element adds
# CONV_PROBE_IN products.  It has CONV_PROBE_OUT output channels on a
# CONV_PROBE_HW x CONV_PROBE_HW image: cuDNN and XLA run a convolution with a
# single output channel on CUDA cores, where the TF32 switch changes nothing,
# so a real (Tensor Core sized) layer shape is what tells TF32 from float32.
PROBE_K = 1024
CONV_PROBE_IN, CONV_PROBE_OUT, CONV_PROBE_HW = PROBE_K, 64, 16
FP32_EXPECTED = PROBE_K * 1.0001
TF32_EXPECTED = float(PROBE_K)
PRECISION_TOLERANCE = 0.05  # half the gap between the two answers
# Sum of per-step times against the wall time of the same steps with one final wait.
TIMING_TOLERANCE = 0.05
# On a CPU, JAX and TensorFlow dispatch the next step while the current one
# runs; waiting after every step gives that overlap up, so per-step times may
# sum to somewhat more than the wall time without any timing fault (measured:
# +5.1 % for JAX on a quiet 2-core EPYC).  Only that direction gets the wider
# bound; a sum below the wall time (steps timed before they finished) keeps
# TIMING_TOLERANCE everywhere, and a GPU keeps it both ways.
CPU_WAIT_COST_TOLERANCE = 0.15
# Above this 1-minute load average per core, a CPU timing miss says more about the machine.
BUSY_LOAD_PER_CORE = 1.5
# A probe allocates this much on the device and reads the allocator's peak.
MEMORY_PROBE_BYTES = 64 * 2**20
# JAX without preallocation holds far less than the 75 % of memory it takes by default.
PREALLOCATED_FRACTION = 0.5
TF32_MIN_CAPABILITY = 8


def expected(op: str) -> tuple[float, float]:
    """(float32, TF32) answers of the ``op`` probe: the sum of K products of 1.0001 and 1."""
    k = CONV_PROBE_IN if op == "conv" else PROBE_K
    return k * 1.0001, float(k)


def judge_fp32(scope: str, op: str, section: dict[str, Any] | None) -> CheckResult:
    """float32 ``op`` (matmul or conv) really is float32: K * 1.0001, not the K TF32 would give."""
    check = f"fp32 {op} is fp32"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    fp32, tf32 = expected(op)
    value = section.get(f"{op}_fp32")
    if value is None:
        return CheckResult(scope, check, FAILED, "no result")
    if abs(value - fp32) <= PRECISION_TOLERANCE:
        return CheckResult(scope, check, PASSED, f"{value:.4f} (float32 gives {fp32:.4f})")
    hint = " — TF32 (or lower) precision is on for fp32" if abs(value - tf32) <= PRECISION_TOLERANCE else ""
    return CheckResult(scope, check, FAILED, f"{value:.4f}, expected {fp32:.4f}{hint}")


def judge_tf32(scope: str, op: str, section: dict[str, Any] | None, *, on_gpu: bool,
               capability: str) -> CheckResult:
    """tf32 ``op`` really rounds its inputs to TF32 (K, not K * 1.0001), on GPUs that have TF32."""
    check = f"tf32 {op} is TF32"
    if not on_gpu:
        return CheckResult(scope, check, SKIPPED, "TF32 exists only on NVIDIA GPUs (sm 8.0+); this runs on the CPU")
    if _major(capability) < TF32_MIN_CAPABILITY:
        return CheckResult(scope, check, SKIPPED, f"sm {capability or '?'} has no TF32 (needs 8.0+)")
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    fp32, tf32 = expected(op)
    value = section.get(f"{op}_tf32")
    if value is None:
        return CheckResult(scope, check, FAILED, "no result")
    if abs(value - tf32) <= PRECISION_TOLERANCE:
        return CheckResult(scope, check, PASSED, f"{value:.4f} (TF32 gives {tf32:.1f})")
    hint = " — still float32: the TF32 switch has no effect" if abs(value - fp32) <= PRECISION_TOLERANCE else ""
    return CheckResult(scope, check, FAILED, f"{value:.4f}, expected {tf32:.1f}{hint}")


def judge_amp(scope: str, precision: str, compute_dtype: str, section: dict[str, Any] | None) -> CheckResult:
    """Inside the train step: conv and matmul in ``compute_dtype``, parameters, logits and gradients float32."""
    check = f"{precision} computes in {compute_dtype}"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    wrong = []
    for place in ("conv", "matmul"):
        if section.get(place) != compute_dtype:
            wrong.append(f"{place} ran in {section.get(place)}")
    for place in ("params", "grads"):
        others = sorted(set(section.get(place) or ["nothing"]) - {"float32"})
        if others:
            wrong.append(f"{place} are {', '.join(others)}")
    if section.get("logits") != "float32":
        wrong.append(f"logits are {section.get('logits')}")
    if wrong:
        return CheckResult(scope, check, FAILED, "; ".join(wrong))
    return CheckResult(scope, check, PASSED,
                       f"conv and matmul {compute_dtype}; parameters, gradients and logits float32")


# The fp8 check: the native matmul's products within this of the emulated recipe's (bfloat16 outputs, and the FP8
# GEMM's own accumulation order).
FP8_TOLERANCE = 0.02


def judge_fp8(scope: str, section: dict[str, Any] | None) -> CheckResult:
    """On a GPU with FP8 tensor cores, the fp8 precision's matmuls reach an FP8 matmul (``torch._scaled_mm``: one
    forward, two backward) and agree with the emulated recipe; skipped below compute capability 8.9."""
    check = "fp8 reaches an FP8 matmul"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    capability = section.get("compute_capability") or "?"
    if not section.get("native"):
        return CheckResult(scope, check, SKIPPED, f"sm {capability} has no FP8 matmul (needs 8.9+): fp8 cells run "
                                                  "emulated, and the report gives them no speed-up")
    calls, difference = section.get("scaled_mm_calls") or 0, section.get("relative_difference")
    if calls < 3:
        return CheckResult(scope, check, FAILED, f"{calls} torch._scaled_mm call(s) in a forward and backward pass, "
                                                 "expected 3: the fp8 layers do not reach the FP8 tensor cores")
    if difference is None or not difference <= FP8_TOLERANCE:
        return CheckResult(scope, check, FAILED, f"the FP8 matmul differs from the emulated recipe by {difference} "
                                                 f"(relative; allowed {FP8_TOLERANCE:g})")
    return CheckResult(scope, check, PASSED, f"sm {capability}: {calls} torch._scaled_mm calls, within "
                                             f"{difference:.1e} of the emulated recipe")


def judge_loss_scale(scope: str, section: dict[str, Any] | None) -> CheckResult:
    """The fp16 dynamic loss scale skips an overflowing step (halving) and grows after finite ones."""
    check = "fp16 loss scale skips and grows"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    wrong = []
    initial, after = section.get("initial"), section.get("after_overflow")
    if initial is None or after != initial / 2:
        wrong.append(f"overflow took the scale from {initial} to {after}, not halved")
    if not section.get("overflow_params_unchanged"):
        wrong.append("the overflowing step changed the parameters")
    start, grown = section.get("growth_initial"), section.get("after_finite_steps")
    if start is None or grown != start * 2:
        wrong.append(f"{section.get('finite_steps')} finite steps (interval {section.get('growth_interval')}) "
                     f"took the scale from {start} to {grown}, not doubled")
    if not section.get("finite_params_changed"):
        wrong.append("finite steps left the parameters unchanged")
    if wrong:
        return CheckResult(scope, check, FAILED, "; ".join(wrong))
    return CheckResult(scope, check, PASSED, f"overflow: skipped, {initial:g} -> {after:g}; "
                       f"{section.get('finite_steps')} finite steps: {start:g} -> {grown:g}")


def judge_timing(scope: str, section: dict[str, Any] | None, *, on_gpu: bool = False,
                 tolerance: float = TIMING_TOLERANCE) -> CheckResult:
    """Per-step times cover finished device work: their sum is the wall time of the same steps.

    The sum may fall short of the wall time by ``tolerance``; on a CPU it may
    exceed it by :data:`CPU_WAIT_COST_TOLERANCE` (the dispatch overlap a
    per-step wait gives up), on a GPU by ``tolerance``.

    On a CPU whose load exceeds :data:`BUSY_LOAD_PER_CORE` a miss is
    inconclusive (skipped): other processes, not the timing, decide it there.
    """
    check = "step time covers device work"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    total, wall = section.get("per_step_sum_s"), section.get("wall_s")
    if not total or not wall:
        return CheckResult(scope, check, FAILED, f"no timings (sum {total}, wall {wall})")
    gap = float(section.get("ratio") or total / wall) - 1.0
    text = (f"{section.get('steps')} steps: per-step sum {total * 1000:.1f} ms vs wall {wall * 1000:.1f} ms "
            f"({gap:+.1%}, {section.get('method', '?')})")
    allowed = tolerance if on_gpu or gap < 0 else max(tolerance, CPU_WAIT_COST_TOLERANCE)
    if abs(gap) <= allowed:
        return CheckResult(scope, check, PASSED, text)
    load = section.get("load_per_core")
    if not on_gpu and load is not None and load > BUSY_LOAD_PER_CORE:
        return CheckResult(scope, check, SKIPPED, f"inconclusive on a busy CPU (load {load:.1f} per core): "
                           f"{text}; rerun on an idle machine")
    why = " — steps are timed before the device finished them" if gap < 0 else " — the per-step wait costs time"
    return CheckResult(scope, check, FAILED, f"{text}; allowed {'+' if gap > 0 else '-'}{allowed:.0%}{why}")


def judge_memory(scope: str, section: dict[str, Any] | None, *, on_gpu: bool) -> CheckResult:
    """The framework's peak-memory API answers and counts a known allocation."""
    check = "peak-memory API answers"
    if not on_gpu:
        return CheckResult(scope, check, SKIPPED, "no device allocator on the CPU (the suite records peak RSS)")
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    peak, allocated = section.get("peak_bytes"), section.get("allocated_bytes") or MEMORY_PROBE_BYTES
    if peak is None:
        return CheckResult(scope, check, FAILED, f"{section.get('api', 'the API')} gave no peak")
    if peak < allocated:
        return CheckResult(scope, check, FAILED,
                           f"{section.get('api')} peak {peak / 2**20:.0f} MiB < the {allocated / 2**20:.0f} MiB allocated")
    return CheckResult(scope, check, PASSED, f"{section.get('api')}: peak {peak / 2**20:.0f} MiB "
                       f"after allocating {allocated / 2**20:.0f} MiB")


def judge_preallocation(scope: str, section: dict[str, Any] | None, *, on_gpu: bool) -> CheckResult:
    """JAX does not preallocate GPU memory: the variable is set before import and the pool stays small."""
    check = "GPU preallocation off"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    env = section.get("preallocate_env")
    if str(env).lower() != "false":
        return CheckResult(scope, check, FAILED, f"XLA_PYTHON_CLIENT_PREALLOCATE is {env!r}, not 'false' (a value "
                           "set in your environment wins over the plugin's default, in the sweep as here)")
    if not on_gpu:
        return CheckResult(scope, check, PASSED, "XLA_PYTHON_CLIENT_PREALLOCATE=false before import "
                           "(the GPU pool itself is not checked on the CPU)")
    reserved, limit = section.get("bytes_reserved"), section.get("bytes_limit")
    if reserved is None or not limit:
        return CheckResult(scope, check, PASSED, "XLA_PYTHON_CLIENT_PREALLOCATE=false; the pool size is not reported")
    if reserved > PREALLOCATED_FRACTION * limit:
        return CheckResult(scope, check, FAILED, f"JAX holds {reserved / limit:.0%} of GPU memory: preallocated")
    return CheckResult(scope, check, PASSED, f"JAX holds {reserved / 2**20:.0f} MiB of {limit / 2**20:.0f} MiB")


NVML_INSTALL = "pip install nvidia-ml-py in this environment"


def judge_nvml(scope: str, section: dict[str, Any] | None, *, on_gpu: bool) -> CheckResult:
    """The environment that runs this framework's cells reads GPU telemetry (energy, clocks, utilization)."""
    check = "NVML telemetry"
    if not on_gpu:
        return CheckResult(scope, check, SKIPPED, "no GPU: cells read RAPL or nothing")
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    if not section.get("package"):
        return CheckResult(scope, check, FAILED, f"nvidia-ml-py is not installed in {section.get('python')}: its "
                           f"GPU cells would record no energy, clocks or utilization ({NVML_INSTALL})")
    if not section.get("opened"):
        return CheckResult(scope, check, FAILED, f"nvidia-ml-py {section['package']} could not open NVML: "
                           f"{section.get('reason')}")
    power = section.get("power_w")
    energy = "energy counter" if section.get("energy_counter") else "no energy counter (energy not recorded)"
    reading = f"{power:.0f} W {section.get('power_reading')}" if isinstance(power, (int, float)) else "no power"
    return CheckResult(scope, check, PASSED, f"nvidia-ml-py {section['package']}: {energy}, {reading}")
