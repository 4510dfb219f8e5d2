"""The precision names amp-suite measures, and the float64 reference its tests check against.

Names are explicit (TorchBench's lesson): a bare "amp" that means fp16 on a
GPU and bf16 on a CPU cannot be compared or extended.  ``fp64`` is no mode
anyone would train in: it lets a test compare two frameworks' arithmetic
where float32 round-off alone would hide a difference.
"""

from __future__ import annotations

PRECISIONS: dict[str, str] = {
    "fp32": "float32 everywhere; TF32 tensor-core math explicitly off",
    "tf32": "float32 storage, TF32 matmul/conv math (NVIDIA Ampere and newer only)",
    "amp_fp16": "float16 compute, float32 parameters, dynamic loss scaling (option loss_scaling: static, none)",
    "amp_bf16": "bfloat16 compute, float32 parameters, no loss scaling",
    "fp8": "amp_bf16 with the dense and attention projection matmuls (not the head) in FP8: e4m3 operands, e5m2 "
           "gradients, scales from the current per-tensor amax; emulated on CPUs and GPUs below compute "
           "capability 8.9",
    "fp64": "float64 parameters, activations and optimizer state everywhere: an arithmetic reference for "
            "tests, not an AMP mode",
}

# Precisions that exist to check arithmetic, not to be measured: never in a default sweep or
# preset, and a plugin runs them only where its FrameworkInfo.precisions declares them.
REFERENCE_PRECISIONS = ("fp64",)


def stored_dtype(precision: str) -> str:
    """The dtype of parameters, logits and ``get_variables`` arrays: float32 whatever the compute dtype, but float64
    under ``fp64``."""
    return "float64" if precision == "fp64" else "float32"


# How an amp_fp16 cell scales its loss (the framework option ``loss_scaling``), the same in every framework:
# dynamic halves the scale on a step with inf/NaN gradients (the step is skipped) and doubles it after
# ``loss_scale_growth_interval`` finite steps; static keeps ``initial_loss_scale`` fixed and still skips a step
# with inf/NaN gradients; none scales nothing and checks nothing (fp16 gradients may underflow to zero).
LOSS_SCALINGS: dict[str, str] = {
    "dynamic": "halve on inf/NaN gradients (step skipped), double after loss_scale_growth_interval finite steps",
    "static": "initial_loss_scale throughout; a step with inf/NaN gradients is still skipped",
    "none": "no loss scale and no check: float16 gradients may underflow to zero (or overflow)",
}
DEFAULT_LOSS_SCALING = "dynamic"
# Precisions that have a loss scale, and those that compute some layers below float32 (keep_fp32 applies).
LOSS_SCALED_PRECISIONS = ("amp_fp16",)
AMP_PRECISIONS = ("amp_fp16", "amp_bf16")


def declared_choices(precision: str, loss_scaling: str, keep_fp32: tuple[str, ...]) -> str:
    """The choices a run declared away from its precision's default recipe, as the verdict and numerics name them:
    ``loss scaling none`` (or static) where the precision scales the loss, ``keep_fp32 conv1,logits``; "" for none."""
    parts = []
    if precision in LOSS_SCALED_PRECISIONS and loss_scaling and loss_scaling != DEFAULT_LOSS_SCALING:
        parts.append(f"loss scaling {loss_scaling}")
    if keep_fp32:
        parts.append(f"keep_fp32 {','.join(keep_fp32)}")
    return ", ".join(parts)

# The precision every speed-up and accuracy difference is measured against.
BASELINE = "fp32"
