"""The JAX plugin's training step and forward pass, as functions for ``jax.jit`` (``build_model`` jits them).

One step: the loss under the precision's jmp loss scale (none, static or
dynamic), its gradient, on a mesh the mean over the devices, the unscaled
gradient through the optax optimizer, and with a loss scale the update applied
only when every gradient is finite (a skipped step keeps parameters and
optimizer state; its BatchNorm statistics stay, as in PyTorch and Keras).

The loss scale crosses the jit boundary as plain arrays ``(scale, counter)``
and becomes jmp's ``DynamicLossScale`` only inside the trace: jmp 0.0.4 runs
``jax.eval_shape`` twice in the class's ``__post_init__``, at every unflatten of
the step's outputs, which cost 0.5 ms a step on a CPU host and 1.6 ms on an
H100's (JAX amp_fp16 ran at 0.2x fp32 on mnist_cnn).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amp_suite_plugins.jax.data_parallel import AXIS


def train_step_functions(net: Any, optimizer: Any, stored: Any, loss_scaling: str, period: int, sync: bool,
                         mesh: Any, devices: int, trace_count: list[int]) -> tuple[Callable, Callable]:
    """``(step, forward)``: ``step(params, state, opt_state, scale_arrays, images, labels, masks)`` returns
    ``(params, state, opt_state, scale_arrays, loss, finite)`` (wrapped in ``shard_map`` on a mesh);
    ``forward(params, state, images, is_training)`` the logits in the stored dtype.  ``trace_count[0]`` counts
    the step's traces."""
    import jax
    import jax.numpy as jnp
    import jmp
    import optax

    dynamic = loss_scaling == "dynamic"
    scaled = loss_scaling in ("dynamic", "static")  # static: jmp.StaticLossScale, steps still checked

    def scaler(arrays: Any) -> Any:
        if not scaled:
            return jmp.NoOpLossScale()
        return jmp.DynamicLossScale(arrays[0], arrays[1], period=period) if dynamic else jmp.StaticLossScale(arrays[0])

    def loss_fn(p: Any, s: Any, images: Any, labels: Any, masks: Any, scale: Any) -> tuple[Any, Any]:
        logits, new_state = net.apply(p, s, None, images, True, sync, masks)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(stored), labels).mean()
        return scale.scale(loss), (loss, new_state)

    def step(p: Any, s: Any, opt: Any, scale_arrays: Any, images: Any, labels: Any, masks: Any):
        trace_count[0] += 1  # runs only while tracing
        scale = scaler(scale_arrays)
        grads, (loss, new_s) = jax.grad(loss_fn, has_aux=True)(p, s, images, labels, masks, scale)
        if mesh is not None:
            # The gradient of replicated parameters comes out of shard_map's autodiff already summed
            # over the mesh (JAX's varying-manual-axes rule: a replicated input's cotangent is psum'd);
            # divided by N it is the global batch's mean gradient.  Loss and BatchNorm state are averaged.
            grads = jax.tree_util.tree_map(lambda g: g / devices, grads)
            loss, new_s = jax.lax.pmean((loss, new_s), AXIS)
        grads = scale.unscale(grads)
        updates, new_opt = optimizer.update(grads, opt, p)
        new_p = optax.apply_updates(p, updates)
        if not scaled:  # fp32, tf32, bf16, loss_scaling none: every step is applied, as in PyTorch and Keras
            return new_p, new_s, new_opt, scale_arrays, loss, jnp.asarray(True)
        finite = jmp.all_finite(grads)
        # A step whose gradients overflowed changes no parameter (the running
        # statistics of its forward pass are kept, as in PyTorch and Keras).
        new_p, new_opt = jmp.select_tree(finite, (new_p, new_opt), (p, opt))
        if not dynamic:  # static: the scale and its counter stay as they came in
            return new_p, new_s, new_opt, scale_arrays, loss, finite
        adjusted = scale.adjust(finite)
        return new_p, new_s, new_opt, (adjusted.loss_scale, adjusted.counter), loss, finite

    def forward(p: Any, s: Any, images: Any, is_training: bool) -> Any:
        return net.apply(p, s, None, images, is_training)[0].astype(stored)

    if mesh is not None:
        from jax.sharding import PartitionSpec as P

        step = jax.shard_map(step, mesh=mesh, in_specs=(P(), P(), P(), P(), P(AXIS), P(AXIS), P(AXIS)),
                             out_specs=P())
    return step, forward
