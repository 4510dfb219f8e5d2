"""JAX's ``trace_step``: the plugin's training step, jitted with every named layer's output returned beside it.

The model runs its layers through :data:`amp_suite_plugins.jax.layers.TRANSLATIONS`,
looked up at each call; while the traced step is traced, each entry is
wrapped so a layer with a name also hands its output to a dict that the
step returns (with ``stop_gradient``: recording changes no derivative).  The
step is otherwise the plugin's (same haiku transform, optax optimizer, jmp
loss scale and its adjustment), so the parameters, optimizer state and loss
scale move on as in training.  Gradients are returned unscaled
(``scale.unscale``, as the plugin's step does before the update); their
``dtype`` is their layer's output dtype: jmp casts parameters to the compute
dtype, so the backward pass computes each gradient in it.  A data-parallel
(mesh) model is not traced.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.errors import UnsupportedError
from amp_suite.numerics.fp8_scales import Fp8Recorder
from amp_suite.numerics.records import StepTrace, TensorTrace
from amp_suite.records import RunSpec
from amp_suite_plugins.jax import layers as jax_layers


@contextmanager
def recording(jax: Any, outputs: dict[str, Any]) -> Iterator[None]:
    """While inside, every translation of a named layer also stores its output in ``outputs``."""
    original = dict(jax_layers.TRANSLATIONS)

    def recorded(translate: Any) -> Any:
        def run(spec: Any, x: Any, call: Any) -> Any:
            y = translate(spec, x, call)
            if spec.name:
                outputs[spec.name] = jax.lax.stop_gradient(y)
            return y

        return run

    jax_layers.TRANSLATIONS.update({kind: recorded(translate) for kind, translate in original.items()})
    try:
        yield
    finally:
        jax_layers.TRANSLATIONS.update(original)


@dataclass
class TracedStep:
    """The jitted traced step of one model, and the names of the layers whose outputs it returns, in the
    order of the forward pass (filled while it is traced)."""

    step: Any
    names: list[str] = field(default_factory=list)


def traced_step(model: Any) -> TracedStep:
    """The plugin's step (``amp_suite_plugins.jax.plugin.build_model``) that also returns the named layers'
    outputs, in forward order, and the unscaled gradients; jitted once per model."""
    import jax
    import jmp
    import optax

    stored = np.dtype(model.stored_dtype)
    made = TracedStep(step=None)

    def scaler(arrays: Any) -> Any:
        return jmp.DynamicLossScale(arrays[0], arrays[1], period=model.loss_scale_period) if arrays \
            else jmp.NoOpLossScale()

    def step(p: Any, s: Any, opt: Any, scale_arrays: Any, images: Any, labels: Any, masks: Any) -> Any:
        scale = scaler(scale_arrays)

        def loss_fn(params: Any) -> Any:
            outputs: dict[str, Any] = {}
            with recording(jax, outputs):
                logits, new_state = model.net.apply(params, s, None, images, True, model.sync, masks)
            made.names[:] = list(outputs)
            loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(stored), labels).mean()
            return scale.scale(loss), (loss, new_state, [outputs[name] for name in made.names])

        grads, (loss, new_s, recorded) = jax.grad(loss_fn, has_aux=True)(p)
        grads = scale.unscale(grads)
        updates, new_opt = model.optimizer.update(grads, opt, p)
        new_p = optax.apply_updates(p, updates)
        if not scale_arrays:
            return new_p, new_s, new_opt, scale_arrays, loss, grads, recorded
        finite = jmp.all_finite(grads)
        new_p, new_opt = jmp.select_tree(finite, (new_p, new_opt), (p, opt))
        adjusted = scale.adjust(finite)
        return new_p, new_s, new_opt, (adjusted.loss_scale, adjusted.counter), loss, grads, recorded

    made.step = jax.jit(step)
    return made


@hookimpl
def trace_step(run: RunSpec, model: Any, staged: list[tuple[Any, Any, Any]]) -> StepTrace:
    import jax

    from amp_suite_plugins.jax.fp8 import recording as fp8_recording
    from amp_suite_plugins.jax.plugin import _canonical_key, _from_haiku_layout

    if model.mesh is not None or model.net is None:
        raise UnsupportedError("the jax plugin traces one-device models only")
    if len(staged) != 1:
        raise ValueError(f"trace_step traces one batch at a time, got {len(staged)}")
    images, labels, masks = staged[0]
    scale_used = float(np.asarray(model.loss_scale[0])) if model.loss_scale else None
    if getattr(model, "traced", None) is None:
        model.traced = traced_step(model)
    traced: TracedStep = model.traced
    fp8 = Fp8Recorder()  # the FP8 layers' scales and amax (fp8 precision), StepTrace.extra
    with fp8_recording(fp8):
        (model.params, model.state, model.opt_state, model.loss_scale, loss, grads, values) = traced.step(
            model.params, model.state, model.opt_state, model.loss_scale, images, labels, masks)
        jax.effects_barrier()  # every debug callback of the step has run
    recorded = dict(zip(traced.names, jax.device_get(values), strict=True))
    dtypes = {name: str(value.dtype) for name, value in recorded.items()}
    gradients: dict[str, TensorTrace] = {}
    for module_path, leaves in jax.device_get(grads).items():
        for leaf, value in leaves.items():
            key = _canonical_key(module_path, leaf)
            layer = key.rsplit("/", 1)[0]
            gradients[key] = TensorTrace(_from_haiku_layout(key, np.array(value, dtype=np.float64), model.depthwise),
                                         dtypes.get(layer, str(value.dtype)))
    activations = {name: TensorTrace(np.array(value, dtype=np.float64), dtypes[name])
                   for name, value in recorded.items()}
    return StepTrace(loss=float(np.asarray(loss)), activations=activations, gradients=gradients,
                     loss_scale=scale_used, extra=fp8.figures)
