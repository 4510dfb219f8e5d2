"""Keras pieces that give the suite's layers and optimizers one meaning everywhere.

Imported by the Keras plugin inside its hooks only (this module imports
Keras).  Built-in Keras differs from the suite's definitions in three places,
each fixed here with Keras's own extension points (and ``HostDropout`` takes
the host's dropout masks instead of drawing its own):

* ``BatchNormalization`` moves its moving variance towards the *biased* batch
  variance; the suite (like PyTorch) uses the unbiased one, ``n / (n - 1)``.
  Normalization itself, the float32 computation under mixed policies (float64
  under the ``float64`` policy) and the evaluation path are Keras's.
* ``keras.optimizers.SGD`` keeps ``m = momentum * m - lr * g`` and decays
  weights apart from the gradient; the suite adds ``weight_decay * w`` to the
  gradient and keeps ``m = momentum * m + g``, ``w -= lr * m`` (the same for a
  constant rate, different under a schedule).
* ``keras.optimizers.RMSprop`` adds epsilon inside the square root, and
  ``Adam`` adds it to the uncorrected second moment; the suite adds it to the
  (bias-corrected) root, as PyTorch and optax do.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops

from amp_suite.records import OptimizerSpec


class UnbiasedBatchNormalization(keras.layers.BatchNormalization):
    """Keras BatchNormalization whose moving variance tracks the unbiased batch variance.

    Under a ``tf.distribute`` strategy each replica normalizes with its own
    batch's moments and updates its own copy of the moving statistics
    (Keras's default, ``aggregation="none"``; reads outside a replica see
    replica 0's); ``synchronized=True`` uses the moments of every replica's
    batch together (Keras's own all-reduce), and then every copy is the same.
    """

    def call(self, inputs: Any, training: Any = None, mask: Any = None) -> Any:
        # BatchNorm in float32 under every policy but float64's, as Keras's own call means to: its
        # result_type(inputs.dtype, "float32") is float32 for float64 inputs on the JAX and PyTorch backends.
        dtype = "float64" if keras.backend.standardize_dtype(inputs.dtype) == "float64" else "float32"
        x = ops.cast(inputs, dtype)
        gamma = ops.cast(self.gamma, dtype) if self.scale else None
        beta = ops.cast(self.beta, dtype) if self.center else None
        if not (training and self.trainable):  # the moving statistics, as Keras's own evaluation call
            out = ops.batch_normalization(x, mean=ops.cast(self.moving_mean, dtype),
                                          variance=ops.cast(self.moving_variance, dtype), axis=self.axis,
                                          offset=beta, scale=gamma, epsilon=self.epsilon)
            return ops.cast(out, self.compute_dtype)
        mean, variance = self._moments(x, mask)
        count = ops.cast(ops.size(x), x.dtype) / ops.cast(ops.shape(x)[-1], x.dtype)
        if self.synchronized:
            import tensorflow as tf

            context = tf.distribute.get_replica_context()
            if context is not None:
                count = count * float(context.num_replicas_in_sync)
        unbiased = variance * count / (count - 1.0)
        self.moving_mean.assign(self.moving_mean * self.momentum + mean * (1.0 - self.momentum))
        self.moving_variance.assign(self.moving_variance * self.momentum + unbiased * (1.0 - self.momentum))
        out = ops.batch_normalization(x, mean=mean, variance=variance, axis=self.axis, offset=beta,
                                      scale=gamma, epsilon=self.epsilon)
        return ops.cast(out, self.compute_dtype)


class GlobalAveragePooling(keras.layers.GlobalAveragePooling2D):
    """Keras's GlobalAveragePooling2D, whose mean stays float64 on float64 inputs on every backend.

    ``ops.mean`` on the JAX and PyTorch backends computes in
    ``result_type(dtype, "float32")``, float32 for float64 inputs; a float64
    input is averaged as a float64 sum over the spatial size instead.  Other
    dtypes take Keras's own call.
    """

    def call(self, inputs: Any) -> Any:
        if keras.backend.standardize_dtype(inputs.dtype) != "float64" or self.data_format != "channels_last":
            return super().call(inputs)
        return ops.sum(inputs, axis=[1, 2], keepdims=self.keepdims) / float(inputs.shape[1] * inputs.shape[2])


class HostDropout(keras.layers.Layer):
    """Dropout with the host's mask: ``x * keep`` in a training call, ``x`` otherwise.

    ``keep`` is the layer's mask input, already scaled (0 or ``1 / (1 - rate)``),
    ``(n, *activation)`` elementwise or ``(n,)`` per sample (broadcast over the
    rest, EfficientNet's stochastic depth); it is multiplied in the layer's
    compute dtype.  Evaluation, and any call without a mask (``predict`` in
    either mode), drops nothing.
    """

    def __init__(self, per_sample: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.per_sample = per_sample

    def call(self, inputs: Any, keep: Any = None, training: Any = None) -> Any:
        if keep is None or not training:
            return inputs
        keep = ops.cast(keep, inputs.dtype)
        if self.per_sample:
            keep = ops.reshape(keep, (-1,) + (1,) * (len(inputs.shape) - 1))
        return inputs * keep

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "per_sample": self.per_sample}


class _SuiteOptimizer(keras.optimizers.Optimizer):
    """Shared part: the gradient with weight decay added, as ``torch.optim`` does.

    ``clip_norm`` is Keras's own ``global_clipnorm`` (``clip_by_global_norm``
    in the base optimizer's ``apply``, before weight decay and the update).
    Inside a ``LossScaleOptimizer`` that clip sees the unscaled gradients:
    the loss-scale optimizer divides them by its scale, then calls this
    optimizer's ``apply`` (``_stateful_handle_finite_grads`` and
    ``stateless_apply`` in ``keras/src/optimizers/loss_scale_optimizer.py``),
    and refuses a ``global_clipnorm`` of its own.
    """

    def __init__(self, spec: OptimizerSpec, learning_rate: Any, **kwargs: Any) -> None:
        super().__init__(learning_rate=learning_rate, name=f"suite_{spec.name}",
                         global_clipnorm=spec.clip_norm or None, **kwargs)
        self.spec = spec
        # True when the train step hands over gradients already all-reduced over the replicas.
        self.gradients_reduced = False

    def _all_reduce_sum_gradients(self, grads_and_vars: Any) -> Any:
        if self.gradients_reduced:
            return list(grads_and_vars)
        return super()._all_reduce_sum_gradients(grads_and_vars)

    def _decayed(self, gradient: Any, variable: Any) -> Any:
        gradient = ops.cast(gradient, variable.dtype)
        if self.spec.weight_decay:
            gradient = gradient + self.spec.weight_decay * variable
        return gradient


class SuiteSGD(_SuiteOptimizer):
    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum") if self.spec.momentum else []

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        g = self._decayed(gradient, variable)
        if self.spec.momentum:
            m = self.momentums[self._get_variable_index(variable)]
            self.assign(m, m * self.spec.momentum + g)
            g = m
        self.assign_sub(variable, lr * g)


class SuiteRMSprop(_SuiteOptimizer):
    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        super().build(variables)
        self.square_averages = self.add_optimizer_variables(variables, "square_average")

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        g = self._decayed(gradient, variable)
        sq = self.square_averages[self._get_variable_index(variable)]
        self.assign(sq, sq * self.spec.rho + ops.square(g) * (1.0 - self.spec.rho))
        self.assign_sub(variable, lr * g / (ops.sqrt(sq) + self.spec.epsilon))


class SuiteAdam(_SuiteOptimizer):
    def build(self, variables: list[Any]) -> None:
        if self.built:
            return
        super().build(variables)
        self.first_moments = self.add_optimizer_variables(variables, "m")
        self.second_moments = self.add_optimizer_variables(variables, "v")

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        lr = ops.cast(learning_rate, variable.dtype)
        g = self._decayed(gradient, variable)
        index = self._get_variable_index(variable)
        m, v = self.first_moments[index], self.second_moments[index]
        b1, b2 = self.spec.beta1, self.spec.beta2
        t = ops.cast(self.iterations + 1, variable.dtype)
        self.assign(m, m * b1 + g * (1.0 - b1))
        self.assign(v, v * b2 + ops.square(g) * (1.0 - b2))
        m_hat = m / (1.0 - ops.power(b1, t))
        v_hat = v / (1.0 - ops.power(b2, t))
        self.assign_sub(variable, lr * m_hat / (ops.sqrt(v_hat) + self.spec.epsilon))


class SuiteAdamW(SuiteAdam):
    """Adam with decoupled weight decay: ``w <- w - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * w)``.

    The decay is Keras's own (the base optimizer's ``weight_decay``: ``w -= w *
    weight_decay * lr`` before the Adam update, at the same step's rate), and
    so is the mask: ``exclude_from_weight_decay(var_list=...)`` with the
    variables whose ``VariableSpec.decay`` is false.  ``keras.optimizers.AdamW``
    itself is not used because its Adam adds epsilon to the uncorrected root,
    unlike PyTorch, optax and the suite (see the module's docstring).
    """

    def __init__(self, spec: OptimizerSpec, learning_rate: Any, **kwargs: Any) -> None:
        super().__init__(spec, learning_rate, weight_decay=spec.weight_decay or None, **kwargs)

    def _decayed(self, gradient: Any, variable: Any) -> Any:
        return ops.cast(gradient, variable.dtype)  # decoupled: the base optimizer decays the variable itself


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """``learning_rate_at`` of ``warmup_cosine``: ``lr * step / warmup`` while ``step < warmup``, then a cosine
    from ``lr`` to 0 over the remaining ``decay_steps - warmup`` steps (``lr`` throughout when none remain)."""

    def __init__(self, learning_rate: float, warmup_steps: int, decay_steps: int) -> None:
        self.learning_rate, self.warmup_steps, self.decay_steps = learning_rate, warmup_steps, decay_steps

    def __call__(self, step: Any) -> Any:
        dtype = keras.config.floatx()
        step = ops.cast(step, dtype)
        lr = ops.cast(self.learning_rate, dtype)
        rest = self.decay_steps - self.warmup_steps
        if rest > 0:
            t = ops.minimum(step - self.warmup_steps, float(rest)) / float(rest)
            decayed = lr * 0.5 * (1.0 + ops.cos(math.pi * t))
        else:
            decayed = lr
        if self.warmup_steps <= 0:
            return decayed
        return ops.where(step < self.warmup_steps, lr * step / float(self.warmup_steps), decayed)

    def get_config(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
                "decay_steps": self.decay_steps}


OPTIMIZERS = {"sgd": SuiteSGD, "rmsprop": SuiteRMSprop, "adam": SuiteAdam, "adamw": SuiteAdamW}


def make_optimizer(spec: OptimizerSpec, not_decayed: list[Any] | None = None) -> keras.optimizers.Optimizer:
    """The suite's optimizer for ``spec``, with its learning-rate schedule.

    ``not_decayed``: the Keras variables AdamW leaves undecayed (``VariableSpec.decay`` false).
    """
    learning_rate: Any = spec.learning_rate
    if spec.schedule == "cosine" and spec.decay_steps > 0:
        learning_rate = keras.optimizers.schedules.CosineDecay(spec.learning_rate, decay_steps=spec.decay_steps,
                                                               alpha=0.0)
    elif spec.schedule == "warmup_cosine":
        learning_rate = WarmupCosine(spec.learning_rate, spec.warmup_steps, spec.decay_steps)
    optimizer = OPTIMIZERS[spec.name](spec, learning_rate)
    if spec.name == "adamw" and not_decayed:
        optimizer.exclude_from_weight_decay(var_list=not_decayed)
    return optimizer
