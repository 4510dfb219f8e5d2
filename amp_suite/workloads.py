"""Framework-neutral workload definitions and their canonical initial weights.

A workload names an architecture from :data:`ARCHITECTURES` plus data shape and
optimizer settings (``benchmarks.toml`` lists them).  The host turns it into a
sequence of :class:`~amp_suite.records.LayerSpec` and makes the initial weights
once, with numpy, in one canonical layout:

* conv kernels ``(kh, kw, in, out)`` (HWIO), dense kernels ``(in, out)``;
* biases zero;
* activations are NHWC, so the dense layer after ``flatten`` sees features in
  ``(h, w, c)`` order.

Each framework plugin converts these arrays to its own layout, so the same run
in two frameworks starts from the same weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from amp_suite.errors import UsageError
from amp_suite.records import LayerSpec, Workload


def mnist_cnn_layers(num_classes: int) -> tuple[LayerSpec, ...]:
    """The CNN of the dm-haiku/jmp mixed-precision MNIST example.

    conv 3x3x32 (same) -> ReLU -> avg-pool 2 -> conv 3x3x64 (same) -> ReLU ->
    avg-pool 2 -> flatten -> dense 256 -> ReLU -> dense ``num_classes``.
    """
    return (
        LayerSpec("conv2d", "conv1", features=32, kernel_size=3, padding="SAME"),
        LayerSpec("relu"),
        LayerSpec("avg_pool", window=2),
        LayerSpec("conv2d", "conv2", features=64, kernel_size=3, padding="SAME"),
        LayerSpec("relu"),
        LayerSpec("avg_pool", window=2),
        LayerSpec("flatten"),
        LayerSpec("dense", "dense1", features=256),
        LayerSpec("relu"),
        LayerSpec("dense", "logits", features=num_classes),
    )


# Architecture name -> layers for a number of classes.
ARCHITECTURES: dict[str, Callable[[int], tuple[LayerSpec, ...]]] = {
    "mnist_cnn": mnist_cnn_layers,
}
OPTIMIZERS = ("adam",)


def workload_from_config(name: str, table: dict[str, Any]) -> Workload:
    """Build a :class:`Workload` from its ``[workloads.NAME]`` table."""
    model = table.get("model", name)
    if model not in ARCHITECTURES:
        raise UsageError(
            f"workload {name!r}: unknown model {model!r}; known models: {', '.join(ARCHITECTURES)}"
        )
    optimizer = table.get("optimizer", "adam")
    if optimizer not in OPTIMIZERS:
        raise UsageError(
            f"workload {name!r}: unknown optimizer {optimizer!r}; known: {', '.join(OPTIMIZERS)}"
        )
    num_classes = int(table.get("num_classes", 10))
    workload = Workload(
        name=name,
        model=model,
        input_size=int(table.get("input_size", 28)),
        channels=int(table.get("channels", 1)),
        num_classes=num_classes,
        batch_size=int(table.get("batch_size", 128)),
        optimizer=optimizer,
        learning_rate=float(table.get("learning_rate", 1e-3)),
        layers=ARCHITECTURES[model](num_classes),
        description=str(table.get("description", "")),
    )
    for field_name in ("input_size", "channels", "num_classes", "batch_size"):
        if getattr(workload, field_name) < 1:
            raise UsageError(f"workload {name!r}: {field_name} must be >= 1")
    if workload.learning_rate <= 0:
        raise UsageError(f"workload {name!r}: learning_rate must be > 0")
    parameter_shapes(workload)  # fail early on shapes that do not fit
    return workload


def parameter_shapes(workload: Workload) -> dict[str, tuple[int, ...]]:
    """Canonical parameter name -> shape, walking the layers over the input shape."""
    return _walk(workload)[0]


def flatten_input_shape(workload: Workload) -> tuple[int, int, int] | None:
    """(h, w, c) of the activation that reaches ``flatten``; None without one."""
    return _walk(workload)[1]


def _walk(workload: Workload) -> tuple[dict[str, tuple[int, ...]], tuple[int, int, int] | None]:
    h, w, c = workload.input_shape
    flat: int | None = None
    flatten_hwc: tuple[int, int, int] | None = None
    shapes: dict[str, tuple[int, ...]] = {}
    for layer in workload.layers:
        if layer.kind == "conv2d":
            if flat is not None:
                raise UsageError(f"workload {workload.name!r}: conv2d after flatten")
            k = layer.kernel_size
            shapes[f"{layer.name}/w"] = (k, k, c, layer.features)
            shapes[f"{layer.name}/b"] = (layer.features,)
            if layer.padding == "VALID":
                h, w = h - k + 1, w - k + 1
            c = layer.features
        elif layer.kind == "avg_pool":
            h, w = h // layer.window, w // layer.window
        elif layer.kind == "flatten":
            flat = h * w * c
            flatten_hwc = (h, w, c)
        elif layer.kind == "dense":
            fan_in = flat if flat is not None else c
            shapes[f"{layer.name}/w"] = (fan_in, layer.features)
            shapes[f"{layer.name}/b"] = (layer.features,)
            flat = layer.features
        elif layer.kind != "relu":
            raise UsageError(f"workload {workload.name!r}: unknown layer kind {layer.kind!r}")
        if h < 1 or w < 1:
            raise UsageError(
                f"workload {workload.name!r}: input_size {workload.input_size} is too small for its layers"
            )
    return shapes, flatten_hwc


def init_weights(workload: Workload, seed: int) -> dict[str, np.ndarray]:
    """Seeded canonical float32 initial weights (He-uniform kernels, zero biases).

    The same ``(workload, seed)`` gives bit-identical arrays on every machine:
    numpy's PCG64 generator is platform independent.
    """
    rng = np.random.Generator(np.random.PCG64(seed))
    weights: dict[str, np.ndarray] = {}
    for name, shape in parameter_shapes(workload).items():
        if name.endswith("/b"):
            weights[name] = np.zeros(shape, dtype=np.float32)
            continue
        fan_in = int(np.prod(shape[:-1]))
        limit = np.sqrt(6.0 / fan_in)
        weights[name] = rng.uniform(-limit, limit, size=shape).astype(np.float32)
    return weights


def param_count(weights: dict[str, np.ndarray]) -> int:
    return int(sum(a.size for a in weights.values()))
