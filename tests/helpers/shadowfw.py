"""A NumPy "framework" that traces steps for ``amp-suite numerics``, with an error planted on request.

It builds a chain of small dense layers named after the workload's named
layers (``conv1``, ``conv2``, ``dense1``, ``logits`` for ``mnist_cnn``), with
ReLU between them, from weights seeded by the run's seed, so every precision
starts alike.  ``fp64`` computes in float64, ``fp32`` in float32, ``amp_bf16``
and ``amp_fp16`` round every layer's inputs, weights, output and gradients
to bfloat16 or float16 (:mod:`amp_suite.numerics.formats`), ``amp_fp16``
with a loss scale of 2**12.

``SHADOWFW_PLANT=LAYER`` multiplies LAYER's output by 1.05 in every
precision that is no shadow (not fp32, not fp64): the error the comparison
must find (a comma-separated list plants several).  The framework options
``loss_scaling`` (``none`` drops the scale; ``static`` uses
``initial_loss_scale``) and ``keep_fp32`` (layer names: those layers
compute in float32 and carry no planted error) are honoured, as a real
plugin honours them.  ``SHADOWFW_LOSS_FACTOR=F`` multiplies the loss (and so
every gradient) by F in every precision: a model whose gradients are small
enough to underflow float16 without a loss scale.  ``SHADOWFW_FAIL=PRECISION`` makes that precision raise,
``SHADOWFW_CRASH=PRECISION`` makes its process exit at once (code 3).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.numerics.formats import BFLOAT16, FLOAT16, round_to
from amp_suite.numerics.records import StepTrace, TensorTrace
from amp_suite.records import DeviceInfo, FrameworkInfo, PrecisionApplied, RunSpec
from amp_suite.workloads.layers import walk

NAME = "shadowfw"
WIDTH = 8
LOSS_SCALE = 2.0**12
DTYPES = {"fp32": "float32", "fp64": "float64", "amp_bf16": "bfloat16", "amp_fp16": "float16"}


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(name=NAME, display_name="Shadow fake (numpy)", modules=("numpy",), extra="test",
                         precisions={"cpu": tuple(DTYPES)}, distributions=("numpy",))


@dataclass
class ChainModel:
    names: list[str]
    weights: list[np.ndarray]
    biases: list[np.ndarray]
    dtype: str
    kept: frozenset[str] = frozenset()
    loss_scale: float | None = None
    lr: float = 0.05


def _round(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float64":
        return np.asarray(values, np.float64)
    if dtype == "float32":
        return np.asarray(values, np.float32).astype(np.float64)
    return round_to(values, BFLOAT16 if dtype == "bfloat16" else FLOAT16)


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo | None:
    return DeviceInfo(kind="cpu", platform="cpu", name="fake cpu") if run.framework == NAME else None


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied | None:
    if run.framework != NAME:
        return None
    if os.environ.get("SHADOWFW_FAIL") == run.precision:
        raise RuntimeError(f"shadowfw was told to fail {run.precision}")
    scale = _loss_scale(run)
    return PrecisionApplied(run.precision, DTYPES[run.precision], "float64" if run.precision == "fp64" else "float32",
                            loss_scaling=str(run.options.get("loss_scaling", "dynamic")) if scale else "none",
                            initial_loss_scale=scale,
                            keep_fp32=_kept(run) if run.precision.startswith("amp_") else ())


def _loss_scale(run: RunSpec) -> float | None:
    """The run's (fixed) loss scale: amp_fp16 only, none under ``loss_scaling = "none"``."""
    if run.precision != "amp_fp16" or run.options.get("loss_scaling") == "none":
        return None
    if run.options.get("loss_scaling") == "static":
        return float(run.options.get("initial_loss_scale", LOSS_SCALE))
    return LOSS_SCALE


def _kept(run: RunSpec) -> tuple[str, ...]:
    return tuple(str(name) for name in run.options.get("keep_fp32", ()))


@hookimpl
def build_model(run, workload, initial_weights, applied, device) -> ChainModel | None:
    if run.framework != NAME:
        return None
    if os.environ.get("SHADOWFW_CRASH") == run.precision:
        os._exit(3)
    names = [item.layer.name for item in walk(workload.layers, workload.input_shape) if item.layer.name]
    rng = np.random.default_rng(run.seed)
    inputs = int(np.prod(workload.input_shape))
    widths = [inputs] + [WIDTH] * (len(names) - 1) + [workload.num_classes]
    weights = [rng.normal(0, 1 / np.sqrt(a), (a, b)) for a, b in zip(widths, widths[1:], strict=False)]
    biases = [rng.normal(0, 0.1, b) for b in widths[1:]]
    amp = run.precision.startswith("amp_")
    return ChainModel(names, weights, biases, DTYPES[run.precision], frozenset(_kept(run)) if amp else frozenset(),
                      _loss_scale(run))


@hookimpl
def stage_batches(run, model, batches) -> list | None:
    if run.framework != NAME:
        return None
    return [(b.images.reshape(b.size, -1).astype(np.float64), b.labels) for b in batches]


@hookimpl
def trace_step(run: RunSpec, model: ChainModel, staged: list[Any]) -> StepTrace | None:
    if run.framework != NAME:
        return None
    (x, y), = staged
    planted = set(os.environ.get("SHADOWFW_PLANT", "").split(",")) if run.precision not in ("fp32", "fp64") \
        else set()
    dtypes = ["float32" if name in model.kept else model.dtype for name in model.names]
    factor = float(os.environ.get("SHADOWFW_LOSS_FACTOR", "1"))
    inputs, outputs = [], []
    h = _round(x, dtypes[0])
    for index, name in enumerate(model.names):
        dtype = dtypes[index]
        h = _round(h, dtype)
        inputs.append(h)
        z = _round(h @ _round(model.weights[index], dtype) + model.biases[index], dtype)
        if name in planted and name not in model.kept:
            z = _round(z * 1.05, dtype)
        outputs.append(z)
        h = np.maximum(z, 0.0) if index < len(model.names) - 1 else z
    shifted = h - h.max(axis=1, keepdims=True)
    probs = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    loss = factor * float(-np.log(probs[np.arange(y.size), y]).mean())
    scale = model.loss_scale
    grad = factor * (probs - np.eye(probs.shape[1])[y]) / y.size * (scale or 1.0)
    gradients: dict[str, TensorTrace] = {}
    for index in reversed(range(len(model.names))):
        if index < len(model.names) - 1:
            grad = grad * (outputs[index] > 0)
        dtype = dtypes[index]
        grad = _round(grad, dtype)
        name = model.names[index]
        gradients[f"{name}/w"] = TensorTrace(_round(inputs[index].T @ grad, dtype) / (scale or 1.0), dtype)
        gradients[f"{name}/b"] = TensorTrace(_round(grad.sum(axis=0), dtype) / (scale or 1.0), dtype)
        grad = grad @ model.weights[index].T
    for index, name in enumerate(model.names):
        model.weights[index] = model.weights[index] - model.lr * gradients[f"{name}/w"].values
        model.biases[index] = model.biases[index] - model.lr * gradients[f"{name}/b"].values
    activations = {name: TensorTrace(out, dtype) for name, out, dtype in zip(model.names, outputs, dtypes, strict=True)}
    return StepTrace(loss=loss, activations=activations, gradients=gradients, loss_scale=scale)
