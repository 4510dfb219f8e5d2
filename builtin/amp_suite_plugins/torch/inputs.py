"""The PyTorch plugin's inputs: the host's images, token ids and dropout masks as device tensors."""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite_plugins.torch.model import (
    TorchModel,
)


def _to_tensor(torch: Any, model: TorchModel, images: np.ndarray) -> Any:
    """The model's input: token ids as the host's int32 (the embeddings take them as they are; staged at the
    host's size, the bytes the memory figure subtracts), else NHWC numpy images as logical NCHW in the model's
    memory format and stored dtype (float64 under fp64)."""
    if model.tokens:
        return torch.from_numpy(np.ascontiguousarray(images, dtype=np.int32)).to(model.device)
    tensor = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).permute(0, 3, 1, 2)
    return tensor.contiguous(memory_format=model.memory_format).to(model.device, model.stored_dtype)


def _stage_masks(torch: Any, model: TorchModel, masks: dict[str, np.ndarray]) -> dict[str, Any]:
    """The host's dropout masks as device tensors in the compute dtype, float64 under fp64 (none: an empty dict).

    A per-sample mask stays ``(n,)`` (the forward pass views it as
    ``(n, 1, 1, 1)``); an elementwise mask of an image activation becomes
    logical NCHW in the model's memory format, like the images.
    """
    dtype = model.autocast_dtype or model.stored_dtype
    out = {}
    for name, mask in masks.items():
        tensor = torch.from_numpy(np.ascontiguousarray(mask))
        if tensor.dim() == 4:
            tensor = tensor.permute(0, 3, 1, 2).contiguous(memory_format=model.memory_format)
        out[name] = tensor.to(model.device, dtype)
    return out
