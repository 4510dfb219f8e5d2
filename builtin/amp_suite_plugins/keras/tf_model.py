"""What the Keras-on-TensorFlow plugin keeps of one run inside the worker: :class:`KerasModel`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amp_suite.records import (
    LayerSpec,
)


@dataclass
class KerasModel:
    model: Any
    optimizer: Any
    train_step: Any
    predict_fn: Any
    device_name: str
    loss_scaled: bool
    named: dict[str, LayerSpec]
    strategy: Any = None  # the tf.distribute strategy of a data-parallel cell, else None
    mask_names: tuple[str, ...] = ()  # the dropout layers, in the order of the model's mask inputs
    stored_dtype: str = "float32"  # variables, inputs, masks, logits and loss: "float64" under fp64
