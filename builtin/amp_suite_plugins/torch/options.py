"""The PyTorch plugin's options (the keys of ``[frameworks.torch]``), its execution modes, and how a run reads them."""

from __future__ import annotations

from typing import Any

from amp_suite.records import (
    FrameworkOption,
    RunSpec,
)
from amp_suite.schema import Field
from amp_suite_plugins.torch.layers import (
    ATTENTION_IMPLEMENTATIONS,
)

# The keys of [frameworks.torch] this plugin reads (the loss-scaling keys every plugin reads come on top).
OPTIONS = {
    "channels_last": FrameworkOption(Field(bool), True, "images and convolution weights in the channels_last "
                                     "memory format (NHWC)"),
    "cudnn_benchmark": FrameworkOption(Field(bool), True, "on a GPU, cuDNN times its kernels and keeps the "
                                       "fastest (torch.backends.cudnn.benchmark)"),
    "compile": FrameworkOption(Field(bool), False, "train through torch.compile (inductor), compiled in the "
                               "warm-up steps"),
    "fused": FrameworkOption(Field(bool), False, "the torch.optim optimizer with fused=True: one kernel for the "
                             "whole update"),
    "attention": FrameworkOption(Field(str, choices=ATTENTION_IMPLEMENTATIONS), "fused",
                                 "multi_head_attention through torch.nn.functional.scaled_dot_product_attention "
                                 "(fused) or an explicit matmul, float32 softmax, matmul (reference)"),
}


# What ran for multi_head_attention, by option attention.
ATTENTION_NOTES = {
    "fused": "attention=fused (torch.nn.functional.scaled_dot_product_attention, is_causal for a causal mask)",
    "reference": "attention=reference (q @ kᵀ / √d, an explicit mask, softmax in float32 under AMP, @ v)",
}


# eager; the whole training step through torch.compile; the same replayed as CUDA graphs (GPU only).
MODES = {"cpu": ("eager", "compiled"), "gpu": ("eager", "compiled", "cudagraphs")}


# torch.compile's mode argument for each compiled execution mode.
COMPILE_MODES = {"compiled": None, "cudagraphs": "reduce-overhead"}


def mode_of(run: RunSpec) -> str:
    """The run's execution mode: ``eager`` unless the sweep asked for another."""
    return run.mode or "eager"


def compiles_step(run: RunSpec) -> bool:
    """Whether inductor compiles this cell's training step: a compiled execution mode, or option ``compile``."""
    return mode_of(run) in COMPILE_MODES or bool(option(run, "compile"))


def option(run: RunSpec, name: str) -> Any:
    """``run.options[name]``, else the default :data:`OPTIONS` declares."""
    return run.options.get(name, OPTIONS[name].default)
