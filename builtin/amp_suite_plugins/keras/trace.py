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

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from amp_suite.errors import UnsupportedError
from amp_suite.numerics.fp8_scales import Fp8Recorder
from amp_suite.numerics.records import StepTrace, TensorTrace
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


def canonical(keras: Any, value: Any) -> np.ndarray:
    """A backend tensor as float64 NumPy (through float32: exact for float16 and bfloat16)."""
    return np.array(keras.ops.convert_to_numpy(keras.ops.cast(value, "float32")), dtype=np.float64)


def loss_scale_of(keras: Any, model: Any) -> float | None:
    """The loss scale the next step's backward pass uses (``LossScaleOptimizer.dynamic_scale``); None without."""
    return float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale)) if model.loss_scaled else None


def assemble(keras: Any, model: Any, names: list[str], outputs: list[Any], variables: dict[str, Any],
             grads: list[Any], loss: Any, scale: float | None, fp8: Fp8Recorder | None = None) -> StepTrace:
    """The :class:`StepTrace` of a step's layer outputs (in ``names`` order) and gradients (scaled: divided here),
    with the FP8 layers' figures ``fp8`` recorded (``StepTrace.extra``)."""
    dtypes = {name: keras.backend.standardize_dtype(output.dtype) for name, output in zip(names, outputs, strict=True)}
    activations = {name: TensorTrace(canonical(keras, output), dtypes[name])
                   for name, output in zip(names, outputs, strict=True)}
    gradients = {key: TensorTrace(canonical(keras, grad) / (scale or 1.0),
                                  dtypes.get(key.rsplit("/", 1)[0], keras.backend.standardize_dtype(grad.dtype)))
                 for key, grad in zip(variables, grads, strict=True)}
    return StepTrace(loss=float(keras.ops.convert_to_numpy(loss)), activations=activations, gradients=gradients,
                     loss_scale=scale, extra=fp8.figures if fp8 is not None else {})


@contextmanager
def fp8_recording(recorder: Fp8Recorder) -> Iterator[None]:
    """While inside, the FP8 layers (precision ``fp8``) hand ``recorder`` their casts' scales and amax; on JAX,
    every debug callback has run at the end."""
    from amp_suite_plugins.keras.fp8 import recording

    with recording(recorder):
        yield
        if "jax" in sys.modules:
            import jax

            jax.effects_barrier()


def _one_batch(staged: list[tuple[Any, Any, Any]]) -> tuple[Any, Any, Any]:
    if len(staged) != 1:
        raise ValueError(f"trace_step traces one batch at a time, got {len(staged)}")
    return staged[0]


def _trainable(model: Any) -> dict[str, Any]:
    """Every trainable Keras variable under its canonical name (``layer/leaf``)."""
    return {name: v for name, v in keras_variables(model.model, model.named).items() if v.trainable}


def trace_on_tensorflow(model: Any, staged: list[tuple[Any, Any, Any]]) -> StepTrace:
    """One traced training step of the ``keras`` plugin (TensorFlow): ``GradientTape``, then ``optimizer.apply``."""
    import keras
    import tensorflow as tf

    if model.strategy is not None:
        raise UnsupportedError("the keras plugin traces one-device models only")
    images, labels, masks = _one_batch(staged)
    names = layer_order(model.model, model.named, model.mask_names)
    tracer = tracing_model(keras, model.model, names)
    variables = _trainable(model)
    scale = loss_scale_of(keras, model)
    fp8 = Fp8Recorder()
    with tf.device(model.device_name), fp8_recording(fp8):
        with tf.GradientTape() as tape:
            outputs = tracer(model_inputs(model.mask_names, images, masks), training=True)
            logits = tf.cast(outputs[LOGITS], model.stored_dtype)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            target = model.optimizer.scale_loss(loss) if model.loss_scaled else loss
        grads = tape.gradient(target, list(variables.values()))
        model.optimizer.apply(grads, list(variables.values()))
    return assemble(keras, model, names, list(outputs[1:]), variables, grads, loss, scale, fp8)


def trace_on_torch(model: Any, staged: list[tuple[Any, Any, Any]]) -> StepTrace:
    """One traced training step of ``keras@torch``: ``backward()`` on the (scaled) loss, then ``optimizer.apply``."""
    import keras
    import torch

    from amp_suite_plugins.keras.backends import mean_cross_entropy

    images, labels, masks = _one_batch(staged)
    names = layer_order(model.model, model.named, model.mask_names)
    tracer = tracing_model(keras, model.model, names)
    variables = _trainable(model)
    scale = loss_scale_of(keras, model)
    everything = list(model.model.trainable_variables)
    fp8 = Fp8Recorder()
    with fp8_recording(fp8):
        outputs = tracer(model_inputs(model.mask_names, images, masks), training=True)
        loss = mean_cross_entropy(keras, labels, keras.ops.cast(outputs[LOGITS], model.stored_dtype))
        model.model.zero_grad()
        (model.optimizer.scale_loss(loss) if model.loss_scaled else loss).backward()
    grads = [v.value.grad for v in variables.values()]
    with torch.no_grad():
        model.optimizer.apply([v.value.grad for v in everything], everything)
    return assemble(keras, model, names, [o.detach() for o in outputs[1:]], variables, grads, loss.detach(), scale,
                    fp8)


def trace_on_jax(model: Any, staged: list[tuple[Any, Any, Any]], compiled: bool = True) -> StepTrace:
    """One traced training step of ``keras@jax``: ``stateless_call`` under ``jax.value_and_grad``, then
    ``optimizer.stateless_apply`` on the model's state, as its step does: compiled as one program where the step
    is (``compiled``; op by op, each of its few hundred operations compiled a program of its own: a tiny ViT's
    traced fp8 step took 22 s, not 8), else op by op like the step."""
    import keras

    if model.mesh is not None:
        raise UnsupportedError("keras@jax traces one-device models only")
    images, labels, masks = _one_batch(staged)
    names = layer_order(model.model, model.named, model.mask_names)
    if model.traced_step is None:  # names are the model's own: one traced step serves every call
        model.traced_step = _traced_step(model, names, compiled)
    trainable, non_trainable, optimizer_values = model.state
    scale = float(np.asarray(optimizer_values[model.scale_index])) if model.loss_scaled else None
    fp8 = Fp8Recorder()
    with fp8_recording(fp8):  # before the first call: its FP8 casts are compiled with their debug callbacks
        loss, outputs, grads, new_trainable, new_fixed, optimizer_values = model.traced_step(
            list(trainable), list(non_trainable), list(optimizer_values),
            model_inputs(model.mask_names, images, masks), labels)
    model.state = (new_trainable, new_fixed, optimizer_values)
    variables = _trainable(model)
    positions = {id(v): i for i, v in enumerate(model.model.trainable_variables)}
    by_name = [grads[positions[id(v)]] for v in variables.values()]
    return assemble(keras, model, names, list(outputs), variables, by_name, loss, scale, fp8)


def _traced_step(model: Any, names: list[str], compiled: bool) -> Any:
    """The traced step of ``model`` whose outputs are ``names``, compiled or not: (trainable, non-trainable and
    optimizer values, inputs, labels) -> (loss, the layers' outputs, gradients, the three new lists of values)."""
    import jax
    import keras

    from amp_suite_plugins.keras.backends import mean_cross_entropy

    tracer = tracing_model(keras, model.model, names)
    positions = {id(v): i for i, v in enumerate(model.model.trainable_variables)}
    fixed = {id(v): i for i, v in enumerate(model.model.non_trainable_variables)}
    mine = [positions[id(v)] for v in tracer.trainable_variables]
    mine_fixed = [fixed[id(v)] for v in tracer.non_trainable_variables]

    def step(trainable: list[Any], non_trainable: list[Any], optimizer_values: list[Any], inputs: Any,
             labels: Any) -> tuple[Any, ...]:
        def loss_fn(values: list[Any]) -> Any:
            outputs, updated = tracer.stateless_call([values[i] for i in mine], [non_trainable[i] for i in mine_fixed],
                                                     inputs, training=True)
            loss = mean_cross_entropy(keras, labels, keras.ops.cast(outputs[LOGITS], model.stored_dtype))
            scaled = (loss * keras.ops.cast(optimizer_values[model.scale_index], loss.dtype) if model.loss_scaled
                      else loss)
            return scaled, (loss, updated, outputs[1:])

        (_, (loss, updated, outputs)), grads = jax.value_and_grad(loss_fn, has_aux=True)(trainable)
        new_fixed = list(non_trainable)
        for value, index in zip(updated, mine_fixed, strict=True):
            new_fixed[index] = value
        new_trainable, new_optimizer_values = model.optimizer.stateless_apply(optimizer_values, grads, trainable)
        return loss, list(outputs), grads, new_trainable, new_fixed, new_optimizer_values

    return jax.jit(step) if compiled else step
