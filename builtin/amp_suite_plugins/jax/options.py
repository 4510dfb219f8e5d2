"""The JAX plugin's options (``[frameworks.jax]``), how a run reads them, and what the token kinds run as."""

from __future__ import annotations

from typing import Any

from amp_suite.records import (
    DeviceInfo,
    FrameworkOption,
    PrecisionApplied,
    RunSpec,
)
from amp_suite.schema import Field
from amp_suite_plugins.jax.layers import (
    ATTENTION_IMPLEMENTATIONS,
    attention_implementation,
)

OPTIONS = {
    "attention": FrameworkOption(Field(str, choices=ATTENTION_IMPLEMENTATIONS), "fused",
                                 "multi_head_attention as jax.nn.dot_product_attention ('fused') or as matmul, "
                                 "float32 softmax, matmul written out ('reference')"),
}


def _option(run: RunSpec, name: str) -> Any:
    """``run.options[name]``, else the default :data:`OPTIONS` declares."""
    return run.options.get(name, OPTIONS[name].default)


def _token_notes(run: RunSpec, device: DeviceInfo, applied: PrecisionApplied) -> tuple[str, ...]:
    """What the token kinds run as: the attention implementation, and the float32 islands under AMP."""
    compute = applied.compute_dtype
    implementation, reason = attention_implementation(_option(run, "attention"), device.kind, compute)
    if implementation == "fused":
        attention = ("multi_head_attention=fused: jax.nn.dot_product_attention (XLA implementation: q k^T with a "
                     "float32 result, softmax in float32 always, probabilities cast to the input dtype for the "
                     "weighted sum; under fp64 that float32 softmax limits it to float32 round-off)")
    else:
        attention = ("multi_head_attention=reference: einsum q k^T in the compute dtype, logits upcast to float32 "
                     "(float64 under fp64) for the softmax, probabilities cast back for the einsum with v"
                     + (f"; attention=fused was asked, but {reason}" if reason else ""))
    notes: tuple[str, ...] = (attention,)
    if compute in ("float16", "bfloat16"):
        notes += (f"layer_norm, rms_norm=hk.LayerNorm/hk.RMSNorm subclasses under a jmp policy params=float32,"
                  f"compute=float32,output={compute} (forced: a jmp policy on the model would compute them in "
                  f"{compute}); gelu, dense, patch_embed, embeddings and the attention projections in {compute}; "
                  "logits cast to float32 before the loss",)
    return notes
