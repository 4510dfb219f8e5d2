"""The workload's optimizer in optax, with the suite's arithmetic: one translation for every optax backend.

The JAX plugin and the Flax example (examples/amp-suite-flax) both train
with optax; they build the optimizer here, so the two cannot drift apart in
what docs/workloads.md promises: coupled weight decay added to the gradient
before the update, a cosine schedule to zero over ``decay_steps``, RMSprop
with epsilon outside the square root (as Keras and PyTorch have it).  optax
is imported when the optimizer is built, inside the worker.
"""

from __future__ import annotations

from typing import Any

from amp_suite.records import OptimizerSpec


def optax_optimizer(spec: OptimizerSpec, backend: str = "jax") -> Any:
    """The ``optax.GradientTransformation`` of ``spec``; ``ValueError`` naming ``backend`` for an unknown optimizer."""
    import optax

    learning_rate: Any = spec.learning_rate
    if spec.schedule == "cosine" and spec.decay_steps > 0:
        learning_rate = optax.cosine_decay_schedule(spec.learning_rate, decay_steps=spec.decay_steps, alpha=0.0)
    if spec.name == "sgd":
        core = optax.sgd(learning_rate, momentum=spec.momentum or None)
    elif spec.name == "rmsprop":
        core = optax.rmsprop(learning_rate, decay=spec.rho, eps=spec.epsilon, eps_in_sqrt=False)
    elif spec.name == "adam":
        core = optax.adam(learning_rate, b1=spec.beta1, b2=spec.beta2, eps=spec.epsilon)
    else:
        raise ValueError(f"{backend} plugin has no optimizer {spec.name!r}")
    return optax.chain(optax.add_decayed_weights(spec.weight_decay), core) if spec.weight_decay else core
