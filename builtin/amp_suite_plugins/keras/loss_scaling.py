"""The Keras plugins' loss scaling under ``amp_fp16``, on every backend: Keras's ``LossScaleOptimizer``.

``applied.loss_scaling`` (:data:`amp_suite.precision.LOSS_SCALINGS`):

* ``dynamic``: ``LossScaleOptimizer`` as documented, halving its scale on a
  step with inf/NaN gradients (the step is skipped) and doubling it after
  ``loss_scale_growth_interval`` finite steps;
* ``static``: a subclass whose handling of a non-finite step skips it and
  leaves the scale alone, with a growth interval no run reaches (2**31 - 1
  steps): the scale stays ``initial_loss_scale``.  Keras has no static
  loss-scale optimizer; the two methods overridden are where its own halves
  the scale (the stateful one on TensorFlow and PyTorch, the stateless one
  that ``stateless_apply`` calls on JAX);
* ``none``: the suite's optimizer alone, no scale and no check.
"""

from __future__ import annotations

from typing import Any

from amp_suite.records import PrecisionApplied

# The growth interval of the static scale: steps no run takes (the counter is a 32-bit integer).
NEVER = 2 ** 31 - 1


def scales_loss(applied: PrecisionApplied) -> bool:
    """True when the run scales its loss (and skips steps with inf/NaN gradients)."""
    return applied.loss_scaling in ("dynamic", "static")


def loss_scale_optimizer(keras: Any, optimizer: Any, applied: PrecisionApplied, growth_interval: int) -> Any:
    """``optimizer`` inside the loss-scale optimizer ``applied.loss_scaling`` names, or as it is without one."""
    if not scales_loss(applied):
        return optimizer
    if applied.loss_scaling == "static":
        return static_loss_scale_optimizer(keras)(optimizer, initial_scale=applied.initial_loss_scale,
                                                  dynamic_growth_steps=NEVER)
    return keras.optimizers.LossScaleOptimizer(optimizer, initial_scale=applied.initial_loss_scale,
                                               dynamic_growth_steps=growth_interval)


def static_loss_scale_optimizer(keras: Any) -> type:
    """A ``LossScaleOptimizer`` subclass whose scale never moves (made once Keras is imported)."""
    base: Any = keras.optimizers.LossScaleOptimizer

    class StaticLossScaleOptimizer(base):
        """Skips a step with inf/NaN gradients, as its base does, but keeps the scale."""

        def _stateful_handle_non_finite_grads(self) -> None:
            self.step_counter.assign(0)

        def _stateless_handle_non_finite_grads(self, optimizer_variables: Any, trainable_variables: Any) -> Any:
            return trainable_variables, list(optimizer_variables)

    return StaticLossScaleOptimizer
