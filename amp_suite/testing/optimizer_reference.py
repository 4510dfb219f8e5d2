"""The suite's optimizers in numpy (float64): what a backend's update must be, given its own gradients.

Each optimizer follows ``docs/workloads.md`` exactly: coupled weight decay
(``g <- g + weight_decay * w``) first, then the optimizer's own arithmetic at
the step's scheduled learning rate (:func:`amp_suite.workloads.workload.learning_rate_at`).
``adamw`` (``docs/layers.md``) decouples the decay instead: Adam's update plus
``lr * weight_decay * w`` for the variables declared ``decay`` only.  With
``clip_norm`` > 0 the gradients are first scaled down to that global L2 norm
when they exceed it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite.records import OptimizerSpec
from amp_suite.workloads.workload import learning_rate_at

Arrays = dict[str, np.ndarray]


class ReferenceOptimizer:
    """``update(weights, gradients) -> deltas``, one call per optimizer step, state kept between calls."""

    def __init__(self, spec: OptimizerSpec | dict[str, Any], decayed: frozenset[str] | set[str] = frozenset()
                 ) -> None:
        self.spec = spec if isinstance(spec, OptimizerSpec) else OptimizerSpec(**spec)
        self.decayed = frozenset(decayed)  # adamw: the variables whose VariableSpec.decay is set
        self.step = 0
        self.first: Arrays = {}  # momentum buffer (sgd) or first moment (adam)
        self.second: Arrays = {}  # mean square (rmsprop) or second moment (adam)

    def update(self, weights: Arrays, gradients: Arrays) -> Arrays:
        """The change ``w_new - w`` of every parameter in ``gradients`` at this step."""
        spec, lr = self.spec, learning_rate_at(self.spec, self.step)
        deltas = {}
        coupled = 0.0 if spec.name == "adamw" else spec.weight_decay
        for name, raw in clipped(gradients, spec.clip_norm).items():
            g = raw + coupled * np.asarray(weights[name], np.float64)
            if spec.name == "sgd":
                m = spec.momentum * self.first.get(name, 0.0) + g
                self.first[name] = m
                deltas[name] = -lr * m
            elif spec.name == "rmsprop":
                v = spec.rho * self.second.get(name, 0.0) + (1 - spec.rho) * g * g
                self.second[name] = v
                deltas[name] = -lr * g / (np.sqrt(v) + spec.epsilon)
            elif spec.name in ("adam", "adamw"):
                m = spec.beta1 * self.first.get(name, 0.0) + (1 - spec.beta1) * g
                v = spec.beta2 * self.second.get(name, 0.0) + (1 - spec.beta2) * g * g
                self.first[name], self.second[name] = m, v
                t = self.step + 1
                m_hat, v_hat = m / (1 - spec.beta1 ** t), v / (1 - spec.beta2 ** t)
                deltas[name] = -lr * m_hat / (np.sqrt(v_hat) + spec.epsilon)
                if spec.name == "adamw" and name in self.decayed:
                    deltas[name] = deltas[name] - lr * spec.weight_decay * np.asarray(weights[name], np.float64)
            else:
                raise ValueError(f"no reference for optimizer {spec.name!r}")
        self.step += 1
        return deltas


def clipped(gradients: Arrays, clip_norm: float) -> Arrays:
    """``gradients`` (as float64) scaled down to the global L2 norm ``clip_norm`` where they exceed it (0: as is)."""
    out = {name: np.asarray(g, np.float64) for name, g in gradients.items()}
    norm = float(np.sqrt(sum(float((g * g).sum()) for g in out.values())))
    if clip_norm <= 0 or norm <= clip_norm:
        return out
    return {name: g * (clip_norm / norm) for name, g in out.items()}


# The hyper-parameters each optimizer reads, in the order a message names them.
HYPER_PARAMETERS = {"sgd": ("learning_rate", "momentum", "weight_decay"),
                    "rmsprop": ("learning_rate", "rho", "epsilon", "weight_decay"),
                    "adam": ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay"),
                    "adamw": ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay")}


def describe(spec: OptimizerSpec) -> str:
    """``adam (learning_rate=0.05, beta1=0.85, ..., schedule=cosine over 2 steps)``: what the updates must follow."""
    values = ", ".join(f"{name}={getattr(spec, name):g}" for name in HYPER_PARAMETERS.get(spec.name, ()))
    schedule = f"schedule={spec.schedule}" + (f" over {spec.decay_steps} steps" if spec.schedule != "constant" else "")
    if spec.schedule == "warmup_cosine":
        schedule += f" after {spec.warmup_steps} warm-up steps"
    clip = f", clip_norm={spec.clip_norm:g}" if spec.clip_norm > 0 else ""
    return f"{spec.name} ({values}, {schedule}{clip})"
