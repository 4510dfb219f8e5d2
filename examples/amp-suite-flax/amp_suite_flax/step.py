"""The Flax backend's train step: one pure, jitted optimizer step with jmp loss scaling.

The step is a function of (parameters, BatchNorm statistics, optimizer state,
loss scale, batch and masks), jitted once with the first three donated.  The
loss scale crosses the jit boundary as plain arrays ``(scale, counter)``
(``()`` without loss scaling) and becomes a ``jmp.DynamicLossScale`` inside the
traced step only: jmp 0.0.4's ``DynamicLossScale.__post_init__`` runs
``jax.eval_shape`` twice on the host at every unflatten, so a jmp object as the
step's output cost every step 0.5 ms on a CPU and 1.6 ms on an H100.  An
overflowing ``amp_fp16`` step changes no parameter and halves the scale.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amp_suite_flax.data_parallel import mean_over_replicas
from amp_suite_flax.net import Stats


def make_train_step(apply: Callable[..., tuple[Any, Stats]], optimizer: Any, trace_count: list[int],
                    axis: str | None, sync_batch_norm: bool,
                    loss_scale_period: int | None = None, static_scale: bool = False) -> Callable[..., tuple[Any, ...]]:
    """One optimizer step: ``step(params, stats, opt_state, loss_scale, images, labels, masks)``.

    ``loss_scale`` is plain arrays, in and out: ``(scale, counter)`` with
    dynamic loss scaling (``loss_scale_period``: finite steps before the scale
    doubles) or ``static_scale`` (a ``jmp.StaticLossScale``, returned as it
    came), ``()`` without.  The ``jmp.DynamicLossScale`` (or
    ``jmp.NoOpLossScale``) is built from them inside the trace only, so no jmp
    object is ever flattened or unflattened at the jit boundary.  ``masks``
    (dropout layer name -> mask, maybe ``{}``) are the step's inputs, as the
    images: the step multiplies them in, and never retraces for new masks.

    With a mesh ``axis`` the step is one replica's part of a data-parallel step
    (run it under :func:`data_parallel`): its loss is the global batch's mean
    (``lax.pmean`` of the replicas' mean losses), so ``jax.grad`` gives every
    replica the global batch's gradient, and every replica applies the same
    update.  BatchNorm uses the global batch's moments when
    ``sync_batch_norm``, else its own shard's; the new running statistics are
    the replicas' mean (already equal when synchronized).
    """
    import jax
    import jmp
    import optax

    sync_axis = axis if sync_batch_norm else None

    def scaler(arrays: tuple[Any, ...]) -> Any:
        if static_scale:
            return jmp.StaticLossScale(arrays[0])
        if loss_scale_period is None:
            return jmp.NoOpLossScale()
        return jmp.DynamicLossScale(arrays[0], arrays[1], period=loss_scale_period)

    def loss_fn(p: Any, s: Any, images: Any, labels: Any, masks: Any, scale: Any) -> tuple[Any, Any]:
        logits, new_stats = apply(p, s, images, True, sync_axis, masks)
        loss = mean_over_replicas(optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), axis)
        return scale.scale(loss), (loss, new_stats)

    def step(p: Any, s: Any, opt: Any, scale_arrays: tuple[Any, ...], images: Any, labels: Any,
             masks: Any) -> tuple[Any, ...]:
        trace_count[0] += 1  # runs only while tracing
        scale = scaler(scale_arrays)
        grads, (loss, new_s) = jax.grad(loss_fn, has_aux=True)(p, s, images, labels, masks, scale)
        new_s = mean_over_replicas(new_s, axis)
        grads = scale.unscale(grads)
        finite = jmp.all_finite(grads)
        updates, new_opt = optimizer.update(grads, opt, p)
        new_p = optax.apply_updates(p, updates)
        # An overflowing step changes no parameter; its forward pass's running statistics are kept.
        new_p, new_opt = jmp.select_tree(finite, (new_p, new_opt), (p, opt))
        if loss_scale_period is None:
            return new_p, new_s, new_opt, scale_arrays, loss, finite
        adjusted = scale.adjust(finite)
        return new_p, new_s, new_opt, (adjusted.loss_scale, adjusted.counter), loss, finite

    return step
