"""The FP8 training recipe, declared once, and its NumPy reference at the level of one dense layer.

The recipe (``fp8``, the same in every framework):

* forward operands (the activation entering a matmul and the weight) in
  ``float8_e4m3fn``; the gradient flowing back into a matmul in ``float8_e5m2``;
* per-tensor scaling from the **current** amax: ``scale = max_finite / amax``
  of the tensor being cast (no history), so its largest value lands on the
  format's largest finite one; a tensor of zeros keeps scale 1; the cast
  saturates (``±max_finite``), then rounds to nearest, ties to even;
* the product ``(a_q / scale_a) @ (b_q / scale_b)`` accumulates in float32 or
  wider and its result is rounded to the surrounding compute dtype (bfloat16,
  as under ``amp_bf16``); the bias is added in that dtype;
* applied to the ``dense`` layers and the attention q/k/v and output
  projections, the head excepted (the model's last dense layer:
  :mod:`amp_suite.workloads.fp8_layers`); convolutions (``patch_embed``),
  normalizations, the softmax, the embeddings and the head stay as under
  ``amp_bf16``; master weights and optimizer state stay float32.  The weight
  operand is cast to e4m3 from the float32 master weight (not from a
  bfloat16 copy), the activation operand from what reaches the layer
  (bfloat16, as under ``amp_bf16``).  The bias is added outside the FP8
  matmul: its gradient is the bfloat16 output gradient's sum, as under
  ``amp_bf16``.

This is the tensorwise recipe of torchao's float8 training and of NVIDIA
Transformer Engine's current scaling, written out so that a framework
without such a facility can do the same with a quantize-dequantize around
its own matmul.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_suite.numerics.formats import BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2, FloatFormat, round_to, saturate


@dataclass(frozen=True)
class Fp8Recipe:
    """What the ``fp8`` precision does (see the module's text); one instance, :data:`RECIPE`."""

    forward_format: FloatFormat = FLOAT8_E4M3
    gradient_format: FloatFormat = FLOAT8_E5M2
    scaling: str = "current amax, per tensor"
    output_format: FloatFormat = BFLOAT16
    applies_to: tuple[str, ...] = ("dense layers but the head", "multi_head_attention q/k/v and output projections")

    def describe(self) -> str:
        return (f"fp8: {self.forward_format.name} forward operands, {self.gradient_format.name} gradients, "
                f"scaling from the {self.scaling}, outputs in {self.output_format.name}; applied to "
                + ", ".join(self.applies_to))


RECIPE = Fp8Recipe()


def tensor_scale(values: np.ndarray, fmt: FloatFormat) -> float:
    """``fmt.max_finite / amax`` of ``values`` (1 for a tensor of zeros or one without a finite value)."""
    finite = np.abs(np.asarray(values, dtype=np.float64))
    finite = finite[np.isfinite(finite)]
    amax = float(finite.max()) if finite.size else 0.0
    return fmt.max_finite / amax if amax > 0 else 1.0


def quantize(values: np.ndarray, fmt: FloatFormat) -> tuple[np.ndarray, float]:
    """``(saturate(values * scale) in fmt, scale)``: the FP8 values (held in float64) and the scale used."""
    scale = tensor_scale(values, fmt)
    return saturate(np.asarray(values, dtype=np.float64) * scale, fmt), scale


def fake_quantize(values: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """``values`` through the FP8 cast and back: what an emulated FP8 matmul multiplies."""
    quantized, scale = quantize(values, fmt)
    return quantized / scale


def dense_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, recipe: Fp8Recipe = RECIPE) -> np.ndarray:
    """``x @ w + b`` under the recipe: e4m3 operands with current per-tensor scales, the result in bfloat16."""
    product = round_to(fake_quantize(x, recipe.forward_format) @ fake_quantize(w, recipe.forward_format),
                       recipe.output_format)
    return product if b is None else round_to(product + round_to(b, recipe.output_format), recipe.output_format)


def dense_backward(x: np.ndarray, w: np.ndarray, grad_out: np.ndarray,
                   recipe: Fp8Recipe = RECIPE) -> tuple[np.ndarray, np.ndarray]:
    """``(grad_x, grad_w)`` of :func:`dense_forward` under the recipe.

    The incoming gradient is cast to e5m2 with its own current scale; the
    forward operands are the same e4m3 casts the forward pass used; both
    products are rounded to the output format (bfloat16).
    """
    g = fake_quantize(grad_out, recipe.gradient_format)
    x_q = fake_quantize(x, recipe.forward_format)
    w_q = fake_quantize(w, recipe.forward_format)
    grad_x = round_to(g @ w_q.T, recipe.output_format)
    grad_w = round_to(x_q.reshape(-1, x_q.shape[-1]).T @ g.reshape(-1, g.shape[-1]), recipe.output_format)
    return grad_x, grad_w
