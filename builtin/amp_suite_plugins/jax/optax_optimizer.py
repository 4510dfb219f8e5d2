"""The workload's optimizer in optax, with the suite's arithmetic: one translation for every optax backend.

The JAX plugin and the Flax example (examples/amp-suite-flax) both train
with optax; they build the optimizer here, so the two cannot drift apart in
what docs/workloads.md and docs/layers.md promise: coupled weight decay added
to the gradient before the update (sgd, rmsprop, adam), decoupled weight
decay on the variables declared ``decay`` (adamw), a cosine schedule to zero
over ``decay_steps`` or a linear warm-up then the cosine (``warmup_cosine``,
exactly :func:`amp_suite.workloads.workload.learning_rate_at`), RMSprop with
epsilon outside the square root (as Keras and PyTorch have it), and clipping
by global norm before everything else.  The backend unscales the gradients
before ``update`` (jmp's ``unscale``), so the clip sees the true gradients
under a loss scale.  optax is imported when the optimizer is built, inside
the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from amp_suite.records import OptimizerSpec

# params -> a tree of the same structure holding True where AdamW decays the variable (optax's ``mask``).
DecayMask = Callable[[Any], Any]


def learning_rate_schedule(spec: OptimizerSpec) -> Any:
    """The learning rate of ``spec`` as optax takes it: a float, or a schedule ``count -> rate``."""
    import optax

    lr = spec.learning_rate
    warmup, total = spec.warmup_steps, spec.decay_steps
    if spec.schedule == "warmup_cosine" and warmup > 0:
        if total > warmup:
            return optax.warmup_cosine_decay_schedule(0.0, lr, warmup_steps=warmup, decay_steps=total, end_value=0.0)
        # a run no longer than its warm-up only warms up, then holds the peak rate
        return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), optax.constant_schedule(lr)], [warmup])
    if spec.schedule in ("cosine", "warmup_cosine") and total > 0:
        return optax.cosine_decay_schedule(lr, decay_steps=total, alpha=0.0)
    return lr


def optax_optimizer(spec: OptimizerSpec, backend: str = "jax", decayed: DecayMask | None = None) -> Any:
    """The ``optax.GradientTransformation`` of ``spec``; ``ValueError`` naming ``backend`` for an unknown optimizer.

    ``decayed`` (needed by ``adamw``) says which parameters AdamW's decoupled
    weight decay applies to: those whose ``VariableSpec.decay`` is set.
    """
    import optax

    learning_rate = learning_rate_schedule(spec)
    coupled_decay = spec.weight_decay
    if spec.name == "sgd":
        core = optax.sgd(learning_rate, momentum=spec.momentum or None)
    elif spec.name == "rmsprop":
        core = optax.rmsprop(learning_rate, decay=spec.rho, eps=spec.epsilon, eps_in_sqrt=False)
    elif spec.name == "adam":
        core = optax.adam(learning_rate, b1=spec.beta1, b2=spec.beta2, eps=spec.epsilon)
    elif spec.name == "adamw":
        if decayed is None:
            raise ValueError(f"{backend} plugin: adamw needs the mask of the variables it decays")
        core = optax.adamw(learning_rate, b1=spec.beta1, b2=spec.beta2, eps=spec.epsilon,
                           weight_decay=spec.weight_decay, mask=decayed)
        coupled_decay = 0.0
    else:
        raise ValueError(f"{backend} plugin has no optimizer {spec.name!r}")
    steps = [optax.clip_by_global_norm(spec.clip_norm)] if spec.clip_norm > 0 else []
    if coupled_decay:
        steps.append(optax.add_decayed_weights(coupled_decay))
    return optax.chain(*steps, core) if steps else core
