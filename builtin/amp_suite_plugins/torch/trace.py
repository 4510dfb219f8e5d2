"""PyTorch's ``trace_step``: one eager training step that records every named layer's output and every gradient.

The model of :func:`amp_suite_plugins.torch.layers.spec_net` runs its layers
through ``net.run``; for the traced step that method is replaced on the
instance by one that also keeps the output of each layer with a name (the
neutral name), so residual bodies and squeeze-and-excitation gates are
traced too, with no change to the module.  The step is the plugin's eager
step (autocast forward and loss, ``GradScaler`` under ``amp_fp16``, clipping,
the optimizer and the schedule), run on the module itself: a compiled mode
or a data-parallel wrapper is not used for tracing.

Gradients are read from ``.grad`` after backward, divided by the loss scale
(float64, exact: the scale is a power of two) and put in the canonical
layouts.  Their ``dtype`` is the dtype of their layer's output: autocast's
backward of a layer computes in it, and the float32 ``.grad`` only holds the
result.  A layer ``keep_fp32`` keeps is recorded as it computed, in float32
(its output before the cast back to the compute dtype), so its activation
and its gradients read float32 as in JAX and Keras.  torch is imported inside
the hook only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.numerics.fp8_scales import Fp8Recorder
from amp_suite.numerics.records import StepTrace, TensorTrace
from amp_suite.records import RunSpec
from amp_suite_plugins.torch.float32_layers import FLOAT32_OUTPUTS
from amp_suite_plugins.torch.layers import TORCH_KINDS, _tensor


def canonical_activation(torch: Any, tensor: Any) -> np.ndarray:
    """A layer's output as float64 NumPy in the canonical layout (an NCHW image activation becomes NHWC)."""
    value = tensor.detach()
    if value.dim() == 4:
        value = value.permute(0, 2, 3, 1)
    return value.to(torch.float64).cpu().numpy().copy()


@contextmanager
def recording(torch: Any, net: Any, outputs: dict[str, Any]) -> Iterator[None]:
    """While inside, ``net``'s forward keeps each named layer's output in ``outputs`` (name -> tensor); each layer
    still runs through the model's own ``run``, so a layer ``keep_fp32`` keeps computes in float32 here too."""

    layer_by_layer = type(net).run.__get__(net)  # the model's own run (keep_fp32 included), one layer at a time
    kept_outputs: dict[str, Any] = {}

    def run(specs: Any, x: Any, masks: Any) -> Any:
        for spec in specs:
            x = layer_by_layer((spec,), x, masks)
            if spec.name:
                # a kept layer's output as it computed it, in float32 (as JAX and Keras record it), not the copy
                # cast back to the compute dtype for the layers after it
                outputs[spec.name] = kept_outputs.pop(spec.name, None)
                if outputs[spec.name] is None:
                    outputs[spec.name] = x.detach()
        return x

    net.__dict__["run"] = run  # an instance attribute: found before the class's method
    net.__dict__[FLOAT32_OUTPUTS] = kept_outputs
    try:
        yield
    finally:
        del net.__dict__["run"]
        del net.__dict__[FLOAT32_OUTPUTS]


def canonical_gradients(torch: Any, net: Any, flattened: dict[str, tuple[int, int, int]], divide_by: float,
                        dtypes: dict[str, str]) -> dict[str, TensorTrace]:
    """Every trainable variable's ``.grad`` (zeros where it has none) over ``divide_by``, canonical layout."""
    out: dict[str, TensorTrace] = {}
    for layer, module in net.named.items():
        for leaf, place in TORCH_KINDS[net.kinds[layer]].leaves.items():
            tensor = _tensor(module, place.attribute)
            if tensor is None or not tensor.requires_grad:
                continue
            grad = tensor.grad if tensor.grad is not None else torch.zeros_like(tensor)
            value = grad.detach().to(torch.float64).cpu().numpy() / divide_by
            out[f"{layer}/{leaf}"] = TensorTrace(np.array(place.from_torch(value, flattened.get(layer))),
                                                 dtypes.get(layer, str(grad.dtype).removeprefix("torch.")))
    return out


@hookimpl
def trace_step(run: RunSpec, model: Any, staged: list[tuple[Any, Any, Any]]) -> StepTrace:
    import torch

    from amp_suite_plugins.torch.fp8 import recording as fp8_recording
    from amp_suite_plugins.torch.plugin import _autocast, _clip
    from amp_suite_plugins.torch.step import mean_cross_entropy

    if len(staged) != 1:
        raise ValueError(f"trace_step traces one batch at a time, got {len(staged)}")
    images, labels, masks = staged[0]
    net = model.module
    net.train()
    model.optimizer.zero_grad(set_to_none=True)
    outputs: dict[str, Any] = {}
    fp8 = Fp8Recorder()  # the FP8 layers' scales and amax (fp8 precision), StepTrace.extra
    with fp8_recording(fp8), recording(torch, net, outputs), _autocast(torch, model):
        logits = net(images, masks)
        loss = mean_cross_entropy(torch, model, logits, labels)
    dtypes = {name: str(value.dtype).removeprefix("torch.") for name, value in outputs.items()}
    scale: float | None = None
    if model.scaler is None:
        with fp8_recording(fp8):
            loss.backward()
        gradients = canonical_gradients(torch, net, model.flattened, 1.0, dtypes)
        _clip(torch, model)
        model.optimizer.step()
    else:
        scale = float(model.scaler.get_scale())
        with fp8_recording(fp8):
            model.scaler.scale(loss).backward()
        gradients = canonical_gradients(torch, net, model.flattened, scale, dtypes)
        if model.clip_norm > 0:
            model.scaler.unscale_(model.optimizer)
            _clip(torch, model)
        model.scaler.step(model.optimizer)
        model.scaler.update()
    if model.scheduler is not None:
        model.scheduler.step()
    activations = {name: TensorTrace(canonical_activation(torch, value), dtypes[name])
                   for name, value in outputs.items()}
    return StepTrace(loss=float(loss.detach().double().item()), activations=activations, gradients=gradients,
                     loss_scale=scale, extra=fp8.figures)
