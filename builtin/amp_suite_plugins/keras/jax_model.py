"""What ``keras@jax`` keeps of a run (:class:`KerasJaxModel`), and how its state returns to the Keras variables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from amp_suite.records import (
    LayerSpec,
)


@dataclass
class KerasJaxModel:
    """The Keras model and the values of its variables between steps (``state``: trainable, non-trainable,
    optimizer)."""

    model: Any
    optimizer: Any
    train_step: Any
    state: Any
    device: Any
    loss_scaled: bool
    named: dict[str, LayerSpec]
    mask_names: tuple[str, ...] = ()
    stored_dtype: str = "float32"
    scale_index: int = -1  # the loss scale's place among the optimizer's variables (-1: no loss scaling)
    batch_shapes: Any = None  # the first staged batch's shapes, for XLA's memory analysis
    traces: list[int] = field(default_factory=lambda: [0])
    mesh: Any = None  # the data-parallel Mesh of a cell on several devices, else None
    predict_step: Any = None  # (trainable, non_trainable, inputs, training=) -> logits, compiled where the step is
    traced_step: Any = None  # trace.trace_on_jax's step (compiled where the train step is), made on first use


def _write_back(jax: Any, model: KerasJaxModel) -> None:
    """Copies of the state's values into the Keras variables (for get_variables); the next step donates the
    state's own buffers.  The copies finish before it returns: queued, they would hold up the next phase's first
    step (which donates their sources) inside its clock."""
    trainable, non_trainable, optimizer_values = _local(model, model.state)
    copies = []
    for variables, values in ((model.model.trainable_variables, trainable),
                              (model.model.non_trainable_variables, non_trainable),
                              (model.optimizer.variables, optimizer_values)):
        for variable, value in zip(variables, values, strict=True):
            copy = jax.device_put(value, may_alias=False)  # a copy, with no program compiled per shape
            variable.assign(copy)
            copies.append(copy)
    jax.block_until_ready(copies)


def _local(model: KerasJaxModel, tree: Any) -> Any:
    """One device's copy of a replicated tree (the tree itself on one device)."""
    if model.mesh is None:
        return tree
    import jax

    return jax.tree_util.tree_map(lambda x: x.addressable_data(0), tree)
