"""The JAX plugin's memory figures: XLA's analysis of the compiled step, and the bytes one device holds of an array."""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite_plugins.jax.model import JaxModel


def _compiled_step_memory(jax: Any, model: JaxModel) -> dict[str, int]:
    """XLA's memory analysis of the compiled train step, per device: what the step itself needs.

    Unlike the allocator peak (JAX cannot reset it, so it counts from the
    worker's start) this is the step's own footprint: arguments (parameters,
    state, optimizer state, the batch) + outputs - donated buffers reused for
    outputs + temporaries (activations, gradients).  Lowering again traces the
    step once more, after training; ``train_step_traces`` was read before.
    """
    if model.batch_shapes is None:
        return {}
    try:
        stats = model.train_step.lower(model.params, model.state, model.opt_state, model.loss_scale,
                                       *model.batch_shapes).compile().memory_analysis()
    except Exception:  # noqa: BLE001 - an analysis a backend does not give is no failure of the run
        return {}
    if stats is None:
        return {}
    argument, output = int(stats.argument_size_in_bytes), int(stats.output_size_in_bytes)
    alias, temp = int(stats.alias_size_in_bytes), int(stats.temp_size_in_bytes)
    return {"compiled_step_argument_bytes": argument, "compiled_step_output_bytes": output,
            "compiled_step_alias_bytes": alias, "compiled_step_temp_bytes": temp,
            "compiled_step_memory_bytes": argument + output - alias + temp}


def _per_device_bytes(leaf: Any) -> int:
    """Bytes one device holds of an array described by ``leaf`` (a ShapeDtypeStruct, maybe sharded)."""
    shape = tuple(leaf.shape)
    sharding = getattr(leaf, "sharding", None)
    if sharding is not None and hasattr(sharding, "shard_shape"):
        shape = tuple(sharding.shard_shape(shape))
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(leaf.dtype).itemsize
