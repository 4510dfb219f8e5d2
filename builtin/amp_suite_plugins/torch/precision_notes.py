"""What ``set_precision`` records of a PyTorch run: one note per switch it set and per layer's dtype.

The notes land in ``PrecisionApplied.notes`` and from there in every result
and the report's "what ran" section, so a reader can tell, without the code,
which TF32, cuDNN, compile, optimizer, attention and per-layer dtype rules the
run had.  ``set_precision`` sets the switches first; these lines read them
back where torch holds them (``torch.get_float32_matmul_precision()``,
``torch.backends.cudnn.benchmark``).
"""

from __future__ import annotations

from typing import Any

from amp_suite.records import DeviceInfo, PrecisionApplied, RunSpec
from amp_suite_plugins.torch.data_parallel import _data_parallel_notes
from amp_suite_plugins.torch.fp8 import COMPILED_ROUNDING_NOTE, fp8_note
from amp_suite_plugins.torch.optimizer import COMPILED_LR_NOTE
from amp_suite_plugins.torch.options import ATTENTION_NOTES, compiles_step, mode_of, option


def precision_notes(torch: Any, run: RunSpec, device: DeviceInfo, applied: PrecisionApplied) -> list[str]:
    """The notes of a run whose switches ``set_precision`` has just set (TF32 first)."""
    tf32 = run.precision == "tf32"
    notes = [f"allow_tf32={tf32}", f"float32_matmul_precision={torch.get_float32_matmul_precision()}"]
    if device.kind == "gpu":
        notes.append(f"cudnn.benchmark={torch.backends.cudnn.benchmark}")
    notes.append(f"channels_last={bool(option(run, 'channels_last'))}")
    mode = mode_of(run)
    if mode == "compiled":
        notes.append("mode=compiled: the whole training step (forward, backward, optimizer) through torch.compile "
                     "(inductor), compiled in the warm-up steps" + COMPILED_LR_NOTE)
    elif mode == "cudagraphs":
        notes.append("mode=cudagraphs: the whole training step through torch.compile(mode='reduce-overhead'), "
                     "replayed as CUDA graphs, compiled and recorded in the warm-up steps" + COMPILED_LR_NOTE)
    elif option(run, "compile"):
        notes.append("torch.compile=inductor on the forward pass only (option compile; compiled in the warm-up "
                     "steps); mode compiled compiles the whole step")
    if option(run, "fused"):
        notes.append("optimizer=fused (torch.optim ... fused=True: one kernel per step; the figure "
                     "optimizer_implementation confirms it)")
    else:
        notes.append("optimizer=torch's default implementation (foreach on CUDA, for-loop on the CPU; "
                     "the figure optimizer_implementation says which ran)")
    attention = str(option(run, "attention"))
    notes.append(ATTENTION_NOTES.get(attention, f"attention={attention}"))  # build_model refuses an unknown one
    if applied.compute_dtype == "float64":
        notes.append("dtype=float64 parameters, BatchNorm statistics, optimizer state, images, dropout masks, "
                     "logits and loss (the module built and loaded in float32, then cast; no autocast)")
    elif applied.compute_dtype != "float32":
        notes.append("batch_norm=float32 weights and running statistics, float32 accumulation (autocast)")
        notes.append(f"sigmoid={applied.compute_dtype} (autocast leaves sigmoid, swish and relu6 to their "
                     "reduced-precision input: the squeeze-and-excitation gate computes in the compute dtype); "
                     f"dropout masks multiplied in {applied.compute_dtype}")
        notes.append(f"layer_norm, rms_norm=float32 statistics and normalization, output cast to "
                     f"{applied.compute_dtype} (forced: CPU autocast leaves both to their reduced-precision input, "
                     "CUDA autocast runs layer_norm in float32)")
        notes.append("attention_softmax=" + (
            "inside scaled_dot_product_attention, which autocast runs on compute-dtype q, k, v (its fused "
            "kernels keep scores and softmax in float32; see docs/layers.md)" if option(run, "attention") == "fused" else
            f"float32 (forced: CPU autocast leaves softmax to its input), probabilities cast to "
            f"{applied.compute_dtype} for the weighted sum"))
        notes.append(f"token tables=cast to {applied.compute_dtype} where used (class token, positions, looked-up "
                     "rows); logits cast to float32 before the loss")
    if applied.fp8_matmul:
        notes.append(fp8_note(applied.fp8_matmul))
        if compiles_step(run):
            notes.append(COMPILED_ROUNDING_NOTE)
    if run.distributed:
        notes += _data_parallel_notes(run, device)
    return notes
