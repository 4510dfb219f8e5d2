"""Framework-neutral workloads and their canonical initial variables.

A workload names an architecture from :data:`~amp_suite.workloads.architectures.ARCHITECTURES`
plus data shape, input pipeline and optimizer settings (``benchmarks.toml``
lists them).  The host makes the initial variables once, with numpy, in one
canonical layout (see :mod:`amp_suite.workloads.layers`):

* conv kernels ``(kh, kw, in, out)`` (HWIO), dense kernels ``(in, out)``,
  He-uniform; biases zero;
* BatchNorm ``scale`` one, ``offset`` zero; its state ``mean`` zero, ``var`` one;
* activations are NHWC, so a dense layer after ``flatten`` sees ``(h, w, c)``.

Each framework plugin converts these arrays to its own layout, so the same
run in two frameworks starts from the same weights and state.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from amp_suite.errors import UsageError
from amp_suite.records import OptimizerSpec, TransformerShape, VariableSpec, Workload
from amp_suite.schema import Field, check_table
from amp_suite.workloads import layers
from amp_suite.workloads.architectures import ARCHITECTURES
from amp_suite.workloads.transformers import TRANSFORMERS

OPTIMIZERS = ("sgd", "rmsprop", "adam", "adamw")
# The standard deviation of the "normal" initializer (embeddings, class token, positions), GPT-2's and ViT's.
NORMAL_INIT_STD = 0.02
SCHEDULES = ("constant", "cosine", "warmup_cosine")
# input_normalization: "imagenet" divides (x - ImageNet mean) by ImageNet's std (Keras's EfficientNet input layers).
INPUT_NORMALIZATIONS = ("none", "imagenet")
# Optimizer keys of a workload table and the optimizers they apply to.
OPTIMIZER_KEYS = {
    "learning_rate": OPTIMIZERS, "weight_decay": OPTIMIZERS, "schedule": OPTIMIZERS,
    "warmup_steps": OPTIMIZERS, "clip_norm": OPTIMIZERS,
    "momentum": ("sgd",), "rho": ("rmsprop",), "epsilon": ("rmsprop", "adam", "adamw"),
    "beta1": ("adam", "adamw"), "beta2": ("adam", "adamw"),
}
# Keys of a transformer workload (model "vit" or "gpt"): which it needs, beside the shared ones.
TRANSFORMER_KEYS = {"vit": ("width", "depth", "heads", "mlp", "patch"),
                    "gpt": ("width", "depth", "heads", "mlp", "vocab_size", "context")}
# epsilon: Adam's 1e-8 (PyTorch, optax); RMSprop's 1e-7 (the Keras RMSprop of the
# multi-GPU article), added outside the square root in every framework.
DEFAULT_EPSILON = {"adam": 1e-8, "adamw": 1e-8, "rmsprop": 1e-7, "sgd": 1e-8}
# Keys of a [workloads.NAME] table.  No maximum is set for beta2 = 1 style
# edge cases: the optimizers divide by (1 - beta**t), so 1 itself is refused.
WORKLOAD_FIELDS: dict[str, Field] = {
    "model": Field(str),  # checked against ARCHITECTURES below, by name
    "description": Field(str, empty=True),
    "input_size": Field(int, minimum=1, maximum=8192),
    "channels": Field(int, minimum=1, maximum=1024),
    "num_classes": Field(int, minimum=2, maximum=1_000_000),
    "batch_size": Field(int, minimum=1, maximum=65_536),
    "optimizer": Field(str, choices=OPTIMIZERS),
    "learning_rate": Field(float, above=0),
    "weight_decay": Field(float, minimum=0),
    "momentum": Field(float, minimum=0, maximum=0.999999),
    "rho": Field(float, above=0, maximum=0.999999),
    "beta1": Field(float, minimum=0, maximum=0.999999),
    "beta2": Field(float, minimum=0, maximum=0.999999),
    "epsilon": Field(float, above=0, maximum=1),
    "schedule": Field(str, choices=SCHEDULES),
    "warmup_steps": Field(int, minimum=0, maximum=10_000_000),
    "clip_norm": Field(float, minimum=0),
    "steps": Field(int, minimum=1, maximum=1_000_000),
    "augment": Field(bool),
    "normalize": Field(bool),
    "input_normalization": Field(str, choices=INPUT_NORMALIZATIONS),
    # Time to target: the validation accuracy to reach, and how often to evaluate (0: at each epoch's end).
    "target_accuracy": Field(float, above=0, maximum=1),
    "eval_every": Field(int, minimum=0, maximum=1_000_000),
    # The dataset this workload trains on, whatever the sweep's --dataset default (checked by the dataset code).
    "dataset": Field(str),
    # Transformer sizes (TRANSFORMER_KEYS says which model needs which).
    "width": Field(int, minimum=1, maximum=65_536),
    "depth": Field(int, minimum=1, maximum=1_000),
    "heads": Field(int, minimum=1, maximum=1_024),
    "mlp": Field(int, minimum=1, maximum=262_144),
    "patch": Field(int, minimum=1, maximum=8192),
    "vocab_size": Field(int, minimum=2, maximum=1_000_000),
    "context": Field(int, minimum=1, maximum=1_000_000),
}


def workload_from_config(name: str, table: Any) -> Workload:
    """Build and check a :class:`Workload` from its ``[workloads.NAME]`` table (one-line errors)."""
    values = check_table(table, WORKLOAD_FIELDS, f"[workloads.{name}]")
    optimizer_name = values.get("optimizer", "adam")
    for key, applies in OPTIMIZER_KEYS.items():
        if key in values and optimizer_name not in applies:
            raise UsageError(f"[workloads.{name}]: {key} does not apply to optimizer {optimizer_name!r} "
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
        warmup_steps=values.get("warmup_steps", 0),
        clip_norm=values.get("clip_norm", 0.0),
    )
    if optimizer.warmup_steps and optimizer.schedule != "warmup_cosine":
        raise UsageError(f"[workloads.{name}]: warmup_steps applies to schedule 'warmup_cosine', "
                         f"not {optimizer.schedule!r}")
    model = values.get("model", name)
    known = (*ARCHITECTURES, *TRANSFORMERS)
    if model not in known:
        raise UsageError(f"[workloads.{name}]: unknown model {model!r}; known models: {', '.join(known)}")
    num_classes = values.get("num_classes", 10)
    input_size = values.get("input_size", 28)
    shape = _transformer_shape(name, model, values)
    for key in ("width", "depth", "heads", "mlp", "patch", "vocab_size", "context"):
        if key in values and key not in TRANSFORMER_KEYS.get(model, ()):
            raise UsageError(f"[workloads.{name}]: {key} does not apply to model {model!r} (it applies to "
                             + ", ".join(m for m, keys in TRANSFORMER_KEYS.items() if key in keys) + ")")
    input_normalization = values.get("input_normalization", "none")
    if values.get("normalize", False) and input_normalization != "none":
        raise UsageError(f"[workloads.{name}]: normalize = true and input_normalization = "
                         f"{input_normalization!r} both normalize the input; keep one")
    if input_normalization == "imagenet" and values.get("channels", 1) != 3:
        raise UsageError(f"[workloads.{name}]: input_normalization = 'imagenet' needs channels = 3 (RGB)")
    workload = Workload(
        name=name,
        model=model,
        input_size=input_size,
        channels=values.get("channels", 1),
        num_classes=num_classes,
        batch_size=values.get("batch_size", 128),
        optimizer=optimizer,
        layers=(TRANSFORMERS[model](shape, num_classes, values.get("channels", 1)) if shape is not None
                else ARCHITECTURES[model](num_classes, input_size=input_size)),
        augment=values.get("augment", False),
        normalize=values.get("normalize", False),
        input_normalization=input_normalization,
        description=values.get("description", ""),
        steps=values.get("steps"),
        target_accuracy=values.get("target_accuracy"),
        eval_every=values.get("eval_every", 0),
        dataset=values.get("dataset", ""),
        transformer=shape,
    )
    layers.walk(workload.layers, workload.input_shape, where=f"[workloads.{name}]")  # an input too small fails here
    return workload


def _transformer_shape(name: str, model: str, values: dict[str, Any]) -> TransformerShape | None:
    """The sizes of a transformer model from its table (every key it needs present), None for other models."""
    needed = TRANSFORMER_KEYS.get(model)
    if needed is None:
        return None
    missing = [key for key in needed if key not in values]
    if missing:
        raise UsageError(f"[workloads.{name}]: model {model!r} needs {', '.join(missing)} "
                         f"(its keys: {', '.join(needed)})")
    return TransformerShape(**{key: values[key] for key in needed})


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
            fan_in = spec.fan_in or int(np.prod(spec.shape[:-1]))
            limit = np.sqrt(6.0 / fan_in)
            value = rng.uniform(-limit, limit, size=spec.shape).astype(np.float32)
        elif spec.init == "normal":
            value = (rng.standard_normal(size=spec.shape) * NORMAL_INIT_STD).astype(np.float32)
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
    ``warmup_cosine``: ``lr * step / warmup_steps`` while ``step < warmup_steps``
    (0 at step 0), then the cosine over the remaining ``decay_steps -
    warmup_steps`` steps (``optax.warmup_cosine_decay_schedule`` with an initial
    and final value of 0); a run no longer than its warm-up only warms up.
    """
    lr = optimizer.learning_rate
    if optimizer.schedule == "warmup_cosine":
        warmup = optimizer.warmup_steps
        if step < warmup:
            return lr * step / warmup
        rest = optimizer.decay_steps - warmup
        if rest <= 0:
            return lr
        t = min(step - warmup, rest) / rest
        return lr * 0.5 * (1.0 + math.cos(math.pi * t))
    if optimizer.schedule == "constant" or optimizer.decay_steps <= 0:
        return lr
    t = min(step, optimizer.decay_steps) / optimizer.decay_steps
    return lr * 0.5 * (1.0 + math.cos(math.pi * t))
