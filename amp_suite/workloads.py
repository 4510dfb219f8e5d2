"""Framework-neutral workloads and their canonical initial variables.

A workload names an architecture from :data:`~amp_suite.architectures.ARCHITECTURES`
plus data shape, input pipeline and optimizer settings (``benchmarks.toml``
lists them).  The host makes the initial variables once, with numpy, in one
canonical layout (see :mod:`amp_suite.layers`):

* conv kernels ``(kh, kw, in, out)`` (HWIO), dense kernels ``(in, out)``,
  He-uniform; biases zero;
* BatchNorm ``scale`` one, ``offset`` zero; its state ``mean`` zero, ``var`` one;
* activations are NHWC, so a dense layer after ``flatten`` sees ``(h, w, c)``.

Each framework plugin converts these arrays to its own layout, so the same
run in two frameworks starts from the same weights and state.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import numpy as np

from amp_suite import layers
from amp_suite.architectures import ARCHITECTURES
from amp_suite.errors import UsageError
from amp_suite.records import OptimizerSpec, VariableSpec, Workload

OPTIMIZERS = ("sgd", "rmsprop", "adam")
SCHEDULES = ("constant", "cosine")
# Optimizer keys of a workload table and the optimizers they apply to.
OPTIMIZER_KEYS = {
    "learning_rate": OPTIMIZERS, "weight_decay": OPTIMIZERS, "schedule": OPTIMIZERS,
    "momentum": ("sgd",), "rho": ("rmsprop",), "epsilon": ("rmsprop", "adam"),
    "beta1": ("adam",), "beta2": ("adam",),
}
# epsilon: Adam's 1e-8 (PyTorch, optax); RMSprop's 1e-7 (the Keras RMSprop of the
# multi-GPU article), added outside the square root in every framework.
DEFAULT_EPSILON = {"adam": 1e-8, "rmsprop": 1e-7, "sgd": 1e-8}
# key -> (type, check, description of what is allowed)
_INT, _FLOAT, _STR, _BOOL = "an integer", "a number", "a string", "true or false"
WORKLOAD_KEYS: dict[str, tuple[str, Any, str]] = {
    "model": (_STR, lambda v: True, "a name from the architectures"),  # checked below, by name
    "description": (_STR, lambda v: True, "any text"),
    "input_size": (_INT, lambda v: v >= 1, ">= 1"),
    "channels": (_INT, lambda v: v >= 1, ">= 1"),
    "num_classes": (_INT, lambda v: v >= 2, ">= 2"),
    "batch_size": (_INT, lambda v: v >= 1, ">= 1"),
    "optimizer": (_STR, lambda v: v in OPTIMIZERS, "one of " + ", ".join(OPTIMIZERS)),
    "learning_rate": (_FLOAT, lambda v: 0 < v < math.inf, "> 0 and finite"),
    "weight_decay": (_FLOAT, lambda v: 0 <= v < math.inf, ">= 0 and finite"),
    "momentum": (_FLOAT, lambda v: 0 <= v < 1, "in [0, 1)"),
    "rho": (_FLOAT, lambda v: 0 < v < 1, "in (0, 1)"),
    "beta1": (_FLOAT, lambda v: 0 <= v < 1, "in [0, 1)"),
    "beta2": (_FLOAT, lambda v: 0 <= v < 1, "in [0, 1)"),
    "epsilon": (_FLOAT, lambda v: 0 < v < 1, "in (0, 1)"),
    "schedule": (_STR, lambda v: v in SCHEDULES, "one of " + ", ".join(SCHEDULES)),
    "augment": (_BOOL, lambda v: True, "true or false"),
    "normalize": (_BOOL, lambda v: True, "true or false"),
}


def _checked(name: str, key: str, value: Any) -> Any:
    kind, ok, allowed = WORKLOAD_KEYS[key]
    where = f"workload {name!r}: {key}"
    if kind == _BOOL:
        valid_type = isinstance(value, bool)
    elif kind == _INT:
        valid_type = isinstance(value, int) and not isinstance(value, bool)
    elif kind == _FLOAT:
        valid_type = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if valid_type else value
    else:
        valid_type = isinstance(value, str)
    if not valid_type:
        raise UsageError(f"{where} must be {kind}, got {value!r}")
    if not ok(value):
        raise UsageError(f"{where} = {value!r} is not allowed: {allowed}")
    return value


def workload_from_config(name: str, table: Any) -> Workload:
    """Build and check a :class:`Workload` from its ``[workloads.NAME]`` table (one-line errors)."""
    if not isinstance(table, dict):
        raise UsageError(f"workload {name!r} must be a table ([workloads.{name}]), got {table!r}")
    for key in table:
        if key not in WORKLOAD_KEYS:
            close = difflib.get_close_matches(key, WORKLOAD_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; allowed: {', '.join(WORKLOAD_KEYS)}"
            raise UsageError(f"workload {name!r}: unknown key {key!r}{hint}")
    values = {key: _checked(name, key, value) for key, value in table.items()}
    optimizer_name = values.get("optimizer", "adam")
    for key, applies in OPTIMIZER_KEYS.items():
        if key in values and optimizer_name not in applies:
            raise UsageError(f"workload {name!r}: {key} does not apply to optimizer {optimizer_name!r} "
                             f"(it applies to {', '.join(applies)})")
    optimizer = OptimizerSpec(
        name=optimizer_name,
        learning_rate=values.get("learning_rate", 1e-3),
        momentum=values.get("momentum", 0.0),
        weight_decay=values.get("weight_decay", 0.0),
        rho=values.get("rho", 0.9),
        beta1=values.get("beta1", 0.9),
        beta2=values.get("beta2", 0.999),
        epsilon=values.get("epsilon", DEFAULT_EPSILON[optimizer_name]),
        schedule=values.get("schedule", "constant"),
    )
    model = values.get("model", name)
    if model not in ARCHITECTURES:
        raise UsageError(f"workload {name!r}: unknown model {model!r}; known models: {', '.join(ARCHITECTURES)}")
    num_classes = values.get("num_classes", 10)
    workload = Workload(
        name=name,
        model=model,
        input_size=values.get("input_size", 28),
        channels=values.get("channels", 1),
        num_classes=num_classes,
        batch_size=values.get("batch_size", 128),
        optimizer=optimizer,
        layers=ARCHITECTURES[model](num_classes),
        augment=values.get("augment", False),
        normalize=values.get("normalize", False),
        description=values.get("description", ""),
    )
    variable_specs(workload)  # fail early on an input too small for the layers
    return workload


def variable_specs(workload: Workload) -> list[VariableSpec]:
    """Every canonical variable of the workload's model, in definition order."""
    return layers.variables(workload.layers, workload.input_shape)


def parameter_shapes(workload: Workload) -> dict[str, tuple[int, ...]]:
    """Canonical trainable parameter name -> shape."""
    return {v.name: v.shape for v in variable_specs(workload) if v.trainable}


def flatten_input_shape(workload: Workload) -> tuple[int, int, int] | None:
    """(h, w, c) of the activation that reaches ``flatten``; None without one."""
    return layers.flatten_input(workload.layers, workload.input_shape)


def init_variables(workload: Workload, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Seeded canonical float32 ``(parameters, state)``.

    The same ``(workload, seed)`` gives bit-identical arrays on every machine:
    numpy's PCG64 generator is platform independent.  Kernels are drawn in
    definition order, so adding state to an architecture never moves them.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    params: dict[str, np.ndarray] = {}
    state: dict[str, np.ndarray] = {}
    for spec in variable_specs(workload):
        if spec.init == "he_uniform":
            fan_in = int(np.prod(spec.shape[:-1]))
            limit = np.sqrt(6.0 / fan_in)
            value = rng.uniform(-limit, limit, size=spec.shape).astype(np.float32)
        elif spec.init == "ones":
            value = np.ones(spec.shape, dtype=np.float32)
        else:
            value = np.zeros(spec.shape, dtype=np.float32)
        (params if spec.trainable else state)[spec.name] = value
    return params, state


def init_weights(workload: Workload, seed: int) -> dict[str, np.ndarray]:
    """The trainable half of :func:`init_variables`."""
    return init_variables(workload, seed)[0]


def param_count(weights: dict[str, np.ndarray]) -> int:
    return int(sum(a.size for a in weights.values()))


def forward_flops_per_image(workload: Workload) -> int:
    """FLOPs of one image's forward pass (conv and dense multiply-adds, 2 FLOPs each)."""
    return layers.forward_flops(workload.layers, workload.input_shape)


def train_flops_per_image(workload: Workload) -> int:
    """Training FLOPs per image: the forward pass and a backward pass of twice its cost."""
    return 3 * forward_flops_per_image(workload)


def learning_rate_at(optimizer: OptimizerSpec, step: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based), the same in every framework.

    ``cosine``: ``lr * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps))``,
    the formula of ``optax.cosine_decay_schedule`` and Keras's ``CosineDecay``.
    """
    if optimizer.schedule == "constant" or optimizer.decay_steps <= 0:
        return optimizer.learning_rate
    t = min(step, optimizer.decay_steps) / optimizer.decay_steps
    return optimizer.learning_rate * 0.5 * (1.0 + math.cos(math.pi * t))
