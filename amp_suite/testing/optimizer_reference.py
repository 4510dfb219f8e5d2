"""The suite's optimizers in numpy (float64): what a backend's update must be, given its own gradients.

Each optimizer follows ``docs/workloads.md`` exactly: coupled weight decay
(``g <- g + weight_decay * w``) first, then the optimizer's own arithmetic at
the step's scheduled learning rate (:func:`amp_suite.workloads.workload.learning_rate_at`).
``adamw`` (``docs/layers.md``) decouples the decay and applies it only to the
variables named in ``decayed``; ``clip_norm`` > 0 first scales every gradient
down to that global L2 norm when they exceed it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite.records import OptimizerSpec
from amp_suite.workloads.workload import learning_rate_at

Arrays = dict[str, np.ndarray]


class ReferenceOptimizer:
    """``update(weights, gradients) -> deltas``, one call per optimizer step, state kept between calls."""

    def __init__(self, spec: OptimizerSpec | dict[str, Any], decayed: set[str] | None = None) -> None:
        self.spec = spec if isinstance(spec, OptimizerSpec) else OptimizerSpec(**spec)
        self.decayed = decayed  # adamw: the variables its decoupled decay applies to (None: every one)
        self.step = 0
        self.first: Arrays = {}  # momentum buffer (sgd) or first moment (adam)
        self.second: Arrays = {}  # mean square (rmsprop) or second moment (adam)

    def update(self, weights: Arrays, gradients: Arrays) -> Arrays:
        """The change ``w_new - w`` of every parameter in ``gradients`` at this step."""
        spec, lr = self.spec, learning_rate_at(self.spec, self.step)
        deltas = {}
        gradients = clipped(gradients, spec.clip_norm)
        coupled = 0.0 if spec.name == "adamw" else spec.weight_decay
        for name, raw in gradients.items():
            g = np.asarray(raw, np.float64) + coupled * np.asarray(weights[name], np.float64)
            if spec.name == "sgd":
                m = spec.momentum * self.first.get(name, 0.0) + g
                self.first[name] = m
                deltas[name] = -lr * m
            elif spec.name == "rmsprop":
                v = spec.rho * self.second.get(name, 0.0) + (1 - spec.rho) * g * g
                self.second[name] = v
                deltas[name] = -lr * g / (np.sqrt(v) + spec.epsilon)
            elif spec.name == "adam":
                m = spec.beta1 * self.first.get(name, 0.0) + (1 - spec.beta1) * g
                v = spec.beta2 * self.second.get(name, 0.0) + (1 - spec.beta2) * g * g
                self.first[name], self.second[name] = m, v
                t = self.step + 1
                m_hat, v_hat = m / (1 - spec.beta1 ** t), v / (1 - spec.beta2 ** t)
                deltas[name] = -lr * m_hat / (np.sqrt(v_hat) + spec.epsilon)
            elif spec.name == "adamw":
                m = spec.beta1 * self.first.get(name, 0.0) + (1 - spec.beta1) * g
                v = spec.beta2 * self.second.get(name, 0.0) + (1 - spec.beta2) * g * g
                self.first[name], self.second[name] = m, v
                t = self.step + 1
                m_hat, v_hat = m / (1 - spec.beta1 ** t), v / (1 - spec.beta2 ** t)
                decay = spec.weight_decay if self.decayed is None or name in self.decayed else 0.0
                deltas[name] = -lr * (m_hat / (np.sqrt(v_hat) + spec.epsilon)
                                      + decay * np.asarray(weights[name], np.float64))
            else:
                raise ValueError(f"no reference for optimizer {spec.name!r}")
        self.step += 1
        return deltas


def clipped(gradients: Arrays, clip_norm: float) -> Arrays:
    """``gradients`` scaled down to a global L2 norm of ``clip_norm`` when they exceed it (0: as they are)."""
    as_float = {name: np.asarray(g, np.float64) for name, g in gradients.items()}
    norm = float(np.sqrt(sum(float((g * g).sum()) for g in as_float.values())))
    if clip_norm <= 0 or norm <= clip_norm:
        return as_float
    return {name: g * (clip_norm / norm) for name, g in as_float.items()}


# The hyper-parameters each optimizer reads, in the order a message names them.
HYPER_PARAMETERS = {"sgd": ("learning_rate", "momentum", "weight_decay"),
                    "rmsprop": ("learning_rate", "rho", "epsilon", "weight_decay"),
                    "adam": ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay"),
                    "adamw": ("learning_rate", "beta1", "beta2", "epsilon", "weight_decay")}


def describe(spec: OptimizerSpec) -> str:
    """``adam (learning_rate=0.05, beta1=0.85, ..., schedule=cosine over 2 steps)``: what the updates must follow."""
    values = ", ".join(f"{name}={getattr(spec, name):g}" for name in HYPER_PARAMETERS.get(spec.name, ()))
    schedule = f"schedule={spec.schedule}" + (f" over {spec.decay_steps} steps" if spec.schedule != "constant" else "")
    if spec.warmup_steps:
        schedule += f", warmup_steps={spec.warmup_steps}"
    if spec.clip_norm:
        schedule += f", clip_norm={spec.clip_norm:g}"
    return f"{spec.name} ({values}, {schedule})"
