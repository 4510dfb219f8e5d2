"""What every JAX layer translation is handed (module classes, one pass's :class:`Call`), and which attention runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from amp_suite.records import LayerSpec

# The framework option ``attention``: jax.nn.dot_product_attention, or matmul, softmax, matmul written out.
ATTENTION_IMPLEMENTATIONS = ("fused", "reference")


def attention_implementation(asked: str, device_kind: str, compute_dtype: str) -> tuple[str, str]:
    """The attention implementation that runs, and why it is not the one asked for ("" when it is).

    ``jax.nn.dot_product_attention`` asks XLA for a float16 x float16 -> float32
    dot (``DotAlgorithmPreset.F16_F16_F32``) for float16 inputs, which XLA's CPU
    backend refuses when it compiles ("not supported by dot_general on CPU",
    JAX 0.10.2); amp_fp16 on a CPU therefore runs the reference attention.
    """
    if asked == "fused" and device_kind == "cpu" and compute_dtype == "float16":
        return "reference", ("jax.nn.dot_product_attention cannot compile float16 inputs on a CPU (XLA refuses "
                             "its F16_F16_F32 dot), so the reference attention runs")
    return asked, ""


@dataclass(frozen=True)
class ModuleClasses:
    """The haiku module classes of one model, made fresh so the jmp policies set on them stay its own.

    ``net`` is the whole model (the compute-dtype policy); ``batch_norm``,
    ``layer_norm`` and ``rms_norm`` are the float32 islands, and so is
    ``float32_layer``, the module wrapped around each layer option
    ``keep_fp32`` keeps (:mod:`amp_suite.workloads.kept`).
    """

    net: type
    batch_norm: type
    layer_norm: type
    rms_norm: type
    float32_layer: type | None = None

    @property
    def float32_islands(self) -> tuple[type, ...]:
        kept = (self.float32_layer,) if self.float32_layer is not None else ()
        return (self.batch_norm, self.layer_norm, self.rms_norm, *kept)


@dataclass(frozen=True)
class Call:
    """What one forward pass hands every translation besides the layer and its input.

    ``masks`` (dropout layer name -> host mask) only in a training step, else
    ``None`` (no dropout); ``sync``: BatchNorm averages its batch moments over
    the mesh; ``attention``: one of :data:`ATTENTION_IMPLEMENTATIONS`;
    ``fp8``: the layers whose matmuls run the FP8 recipe (precision ``fp8``,
    :mod:`amp_suite_plugins.jax.fp8`).
    """

    is_training: bool
    sync: bool
    masks: dict[str, Any] | None
    classes: ModuleClasses
    attention: str = "fused"
    kept: tuple[str, ...] = ()  # option keep_fp32: layer names and kinds computed in float32
    fp8: frozenset[str] = frozenset()


Translation = Callable[[LayerSpec, Any, Call], Any]
