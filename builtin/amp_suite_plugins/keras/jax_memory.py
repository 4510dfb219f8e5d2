"""The ``keras@jax`` plugin's memory figure: XLA's analysis of the compiled train step."""

from __future__ import annotations

from amp_suite_plugins.keras.jax_model import KerasJaxModel


def _compiled_step_memory(model: KerasJaxModel) -> dict[str, int]:
    """XLA's memory analysis of the compiled train step: arguments + outputs - donated + temporaries."""
    if model.batch_shapes is None or not hasattr(model.train_step, "lower"):
        return {}
    try:
        stats = model.train_step.lower(model.state, *model.batch_shapes).compile().memory_analysis()
    except Exception:  # noqa: BLE001 - an analysis a backend does not give is no failure of the run
        return {}
    if stats is None:
        return {}
    argument, output = int(stats.argument_size_in_bytes), int(stats.output_size_in_bytes)
    alias, temp = int(stats.alias_size_in_bytes), int(stats.temp_size_in_bytes)
    return {"compiled_step_memory_bytes": argument + output - alias + temp}
