"""What the doctor concludes from the numbers a framework probe returned.

Every function here is pure: it takes the plain values one probe section
produced (see :mod:`amp_suite.doctor.probe_kit` for their shape) and returns a
:class:`CheckResult`.  No framework is imported, so the GPU branches are tested
on any machine by handing them the numbers a GPU would give.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"

# ones(K, K) * 1.0001 @ ones(K, K): every element is K * 1.0001 in float32, but
# K exactly under TF32, whose 10-bit mantissa rounds 1.0001 to 1.0.  The same
# for a 1x1 convolution over K input channels.
PROBE_K = 1024
FP32_EXPECTED = PROBE_K * 1.0001
TF32_EXPECTED = float(PROBE_K)
PRECISION_TOLERANCE = 0.05  # half the gap between the two answers
# Sum of per-step times against the wall time of the same steps with one final wait.
TIMING_TOLERANCE = 0.05
# Above this 1-minute load average per core, a CPU timing miss says more about the machine.
BUSY_LOAD_PER_CORE = 1.5
# A probe allocates this much on the device and reads the allocator's peak.
MEMORY_PROBE_BYTES = 64 * 2**20
# JAX without preallocation holds far less than the 75 % of memory it takes by default.
PREALLOCATED_FRACTION = 0.5
TF32_MIN_CAPABILITY = 8


@dataclass(frozen=True)
class CheckResult:
    """One row of the doctor's table."""

    scope: str
    check: str
    status: str
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == FAILED


def _error(scope: str, check: str, section: dict[str, Any] | None) -> CheckResult | None:
    if section is None:
        return CheckResult(scope, check, FAILED, "the probe returned nothing for this check")
    if section.get("error"):
        return CheckResult(scope, check, FAILED, f"the probe raised {section['error']}")
    return None


def _major(capability: str) -> int:
    head = str(capability or "").split(".")[0]
    return int(head) if head.isdigit() else 0


def judge_device(scope: str, section: dict[str, Any] | None, *, expect_gpu: bool, machine: str,
                 install_line: str) -> CheckResult:
    """The framework sees the device the user expects: a CUDA GPU on a GPU machine, else the CPU."""
    check = "sees the expected device"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    if section.get("kind") == "gpu":
        facts = [section.get("name") or "a GPU",
                 f"sm {section['compute_capability']}" if section.get("compute_capability") else "",
                 f"driver {section['driver']}" if section.get("driver") else "",
                 f"CUDA {section['cuda_runtime']}" if section.get("cuda_runtime") else "",
                 f"cuDNN {section['cudnn']}" if section.get("cudnn") else ""]
        return CheckResult(scope, check, PASSED, "GPU: " + ", ".join(f for f in facts if f))
    build = "a CUDA build" if section.get("cuda_build") else "a CPU-only build"
    if expect_gpu:
        return CheckResult(scope, check, FAILED,
                           f"{build} that sees no GPU, on a machine with {machine}; fix: {install_line}")
    return CheckResult(scope, check, PASSED, f"CPU ({build}; {machine})")


def judge_fp32(scope: str, op: str, section: dict[str, Any] | None) -> CheckResult:
    """float32 ``op`` (matmul or conv) really is float32: K * 1.0001, not the K TF32 would give."""
    check = f"fp32 {op} is fp32"
    if (bad := _error(scope, check, section)) is not None:
        return bad
    assert section is not None
    value = section.get(f"{op}_fp32")
    if value is None:
        return CheckResult(scope, check, FAILED, "no result")
    if abs(value - FP32_EXPECTED) <= PRECISION_TOLERANCE:
        return CheckResult(scope, check, PASSED, f"{value:.4f} (float32 gives {FP32_EXPECTED:.4f})")
    hint = " — TF32 (or lower) precision is on for fp32" if abs(value - TF32_EXPECTED) <= PRECISION_TOLERANCE else ""
    return CheckResult(scope, check, FAILED, f"{value:.4f}, expected {FP32_EXPECTED:.4f}{hint}")


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
    value = section.get(f"{op}_tf32")
    if value is None:
        return CheckResult(scope, check, FAILED, "no result")
    if abs(value - TF32_EXPECTED) <= PRECISION_TOLERANCE:
        return CheckResult(scope, check, PASSED, f"{value:.4f} (TF32 gives {TF32_EXPECTED:.1f})")
    hint = " — still float32: the TF32 switch has no effect" if abs(value - FP32_EXPECTED) <= PRECISION_TOLERANCE else ""
    return CheckResult(scope, check, FAILED, f"{value:.4f}, expected {TF32_EXPECTED:.1f}{hint}")


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
    if abs(gap) <= tolerance:
        return CheckResult(scope, check, PASSED, text)
    load = section.get("load_per_core")
    if not on_gpu and load is not None and load > BUSY_LOAD_PER_CORE:
        return CheckResult(scope, check, SKIPPED, f"inconclusive on a busy CPU (load {load:.1f} per core): "
                           f"{text}; rerun on an idle machine")
    why = " — steps are timed before the device finished them" if gap < 0 else " — the per-step wait costs time"
    return CheckResult(scope, check, FAILED, f"{text}; allowed ±{tolerance:.0%}{why}")


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
        return CheckResult(scope, check, FAILED, f"XLA_PYTHON_CLIENT_PREALLOCATE is {env!r}, not 'false'")
    if not on_gpu:
        return CheckResult(scope, check, PASSED, "XLA_PYTHON_CLIENT_PREALLOCATE=false before import "
                           "(the GPU pool itself is not checked on the CPU)")
    reserved, limit = section.get("bytes_reserved"), section.get("bytes_limit")
    if reserved is None or not limit:
        return CheckResult(scope, check, PASSED, "XLA_PYTHON_CLIENT_PREALLOCATE=false; the pool size is not reported")
    if reserved > PREALLOCATED_FRACTION * limit:
        return CheckResult(scope, check, FAILED, f"JAX holds {reserved / limit:.0%} of GPU memory: preallocated")
    return CheckResult(scope, check, PASSED, f"JAX holds {reserved / 2**20:.0f} MiB of {limit / 2**20:.0f} MiB")
