"""What the JAX plugin keeps of one run between steps: :class:`JaxModel`, and the loss scale it holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class JaxModel:
    """The run's state: parameters, optimizer state and loss scale live here between steps."""

    params: Any
    state: Any
    opt_state: Any
    loss_scale: Any  # (scale, counter) arrays under dynamic loss scaling, () otherwise
    train_step: Any
    forward: Any
    device: Any
    trace_count: list[int] = field(default_factory=lambda: [0])
    net_class: Any = None  # the haiku module class (introspection by tests)
    mesh: Any = None  # the data-parallel Mesh, else None
    process: Any = None  # the DistributedSpec of a data-parallel cell, else None
    batch_shapes: Any = None  # a staged batch's shapes, dtypes and shardings (for the compiled step's memory)
    depthwise: set[str] = field(default_factory=set)  # canonical names of depthwise kernels (layout differs)
    stored_dtype: str = "float32"  # variables, images, masks, logits and loss: "float64" under fp64
    # What amp_suite_plugins.jax.trace builds its traced step from: the haiku transform, the optax optimizer,
    # whether BatchNorm syncs, and the dynamic loss scale's growth period (0: no loss scaling).
    net: Any = None
    optimizer: Any = None
    sync: bool = False
    loss_scale_period: int = 0
    traced: Any = None  # the traced step of amp_suite_plugins.jax.trace, made at its first call


def _scale_value(model: JaxModel) -> float | None:
    if not model.loss_scale:  # no loss scaling: ()
        return None
    value = model.loss_scale[0]
    if hasattr(value, "addressable_data") and model.mesh is not None:
        value = value.addressable_data(0)
    return float(value)
