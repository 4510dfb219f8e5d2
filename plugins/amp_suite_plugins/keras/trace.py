"""Keras's ``trace_step`` (Keras 3 on TensorFlow): a model whose outputs are the logits and every named layer's.

The functional model of :func:`amp_suite_plugins.keras.model.build_keras_model`
names each Keras layer after its neutral layer, so a second
``keras.Model`` over the same inputs, with the output of each named layer
added to its outputs, shares every layer and variable with the model being
trained (a ``patch_embed``'s neutral output is its token reshape,
``NAME_tokens``).  The traced step is the plugin's step, run eagerly:
``GradientTape`` over the scaled loss, the gradients divided by
``LossScaleOptimizer``'s scale for the trace, then ``optimizer.apply`` as in
training.  A gradient's ``dtype`` is its layer's output dtype: the dtype
policy casts variables to the compute dtype, so their gradients are
computed in it.  Data-parallel models are not traced.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.errors import UnsupportedError
from amp_suite.numerics.records import StepTrace, TensorTrace
from amp_suite.records import RunSpec
from amp_suite_plugins.keras.model import keras_variables, model_inputs

# Outputs that ``tracing_model`` puts before the layers': the logits.
LOGITS = 0


def neutral_output(keras_model: Any, name: str) -> Any:
    """The symbolic output of the neutral layer ``name``: its token reshape for a patch embedding, else its own."""
    names = {layer.name for layer in keras_model.layers}
    return keras_model.get_layer(f"{name}_tokens" if f"{name}_tokens" in names else name).output


def layer_order(keras_model: Any, named: Any, mask_names: tuple[str, ...]) -> list[str]:
    """The neutral names of the layers with variables (``named``) and the dropout layers (``mask_names``), in the
    order the functional model runs its layers."""
    wanted = set(named) | set(mask_names)
    return [layer.name for layer in keras_model.layers if layer.name in wanted]


def tracing_model(keras: Any, keras_model: Any, names: list[str]) -> Any:
    """A model over ``keras_model``'s inputs giving ``[logits, *each named layer's output]``, sharing its layers."""
    return keras.Model(keras_model.inputs, [keras_model.output, *(neutral_output(keras_model, n) for n in names)])


def canonical(value: Any) -> np.ndarray:
    return np.array(np.asarray(value), dtype=np.float64)


@hookimpl
def trace_step(run: RunSpec, model: Any, staged: list[tuple[Any, Any, Any]]) -> StepTrace:
    """One traced training step of the plugin on TensorFlow (see the module's docstring)."""
    import keras
    import tensorflow as tf

    if model.strategy is not None:
        raise UnsupportedError("the keras plugin traces one-device models only")
    if len(staged) != 1:
        raise ValueError(f"trace_step traces one batch at a time, got {len(staged)}")
    images, labels, masks = staged[0]
    names = layer_order(model.model, model.named, model.mask_names)
    tracer = tracing_model(keras, model.model, names)
    variables = {name: v for name, v in keras_variables(model.model, model.named).items() if v.trainable}
    scale = float(model.optimizer.dynamic_scale.numpy()) if model.loss_scaled else None
    with tf.device(model.device_name):
        with tf.GradientTape() as tape:
            outputs = tracer(model_inputs(model.mask_names, images, masks), training=True)
            logits = tf.cast(outputs[LOGITS], model.stored_dtype)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            target = model.optimizer.scale_loss(loss) if model.loss_scaled else loss
        grads = tape.gradient(target, list(variables.values()))
        model.optimizer.apply(grads, list(variables.values()))
    dtypes = {name: output.dtype.name for name, output in zip(names, outputs[1:], strict=True)}
    activations = {name: TensorTrace(canonical(output), dtypes[name])
                   for name, output in zip(names, outputs[1:], strict=True)}
    gradients = {key: TensorTrace(canonical(grad) / (scale or 1.0), dtypes.get(key.rsplit("/", 1)[0], grad.dtype.name))
                 for key, grad in zip(variables, grads, strict=True)}
    return StepTrace(loss=float(loss.numpy()), activations=activations, gradients=gradients, loss_scale=scale)
