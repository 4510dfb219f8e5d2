"""What the PyTorch plugin keeps of one run inside the worker: :class:`TorchModel`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TorchModel:
    """Everything one run needs, kept inside the worker."""

    module: Any
    optimizer: Any
    scheduler: Any
    scaler: Any
    device: Any
    device_type: str
    autocast_dtype: Any
    memory_format: Any
    flattened: dict[str, tuple[int, int, int]]
    train_forward: Any  # the module, its DistributedDataParallel wrapper, or torch.compile's wrapper
    process: Any = None  # the DistributedSpec of a data-parallel cell, else None
    stored_dtype: Any = None  # parameters, statistics, images, logits and loss: torch.float64 under fp64, else float32
    mode: str = "eager"  # the execution mode (MODES)
    compiled_step: Any = None  # compiled and cudagraphs modes: torch.compile of the whole step (see make_step)
    tokens: bool = False  # inputs are int token ids (batch, context) and labels one per token
    clip_norm: float = 0.0  # > 0: gradients clipped to this global norm (unscaled first under a loss scale)
    static_scale: bool = False  # loss_scaling = "static": the scale never moves, so a skip is read from found_inf
