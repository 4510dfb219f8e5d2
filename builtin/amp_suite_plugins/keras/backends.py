"""What the Keras plugins share across backends: names, dtype policy, optimizer, loss.

Keras 3 runs the same model code on TensorFlow, JAX or PyTorch, picked by
``KERAS_BACKEND`` before ``import keras``.  The suite names each backend as a
framework of its own: ``keras`` (TensorFlow, ``plugin``), ``keras@jax``
(``on_jax``) and ``keras@torch`` (``on_torch``); the worker sets
``KERAS_BACKEND`` from :attr:`FrameworkInfo.env`.  The model is the one of
:mod:`amp_suite_plugins.keras.model` on every backend; what differs, and lives
in each backend's module, is small and named there: the train step and its
compilation, device placement, the TF32 switch and the device-memory figure.
Keras is passed in by the hooks; this module imports no framework.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from amp_suite.errors import UnsupportedError
from amp_suite.plugins.kit import loss_scale_growth_interval
from amp_suite.records import FrameworkOption, PrecisionApplied, RunSpec, Workload
from amp_suite.schema import Field
from amp_suite_plugins.hidden_imports import import_without
from amp_suite_plugins.keras.loss_scaling import loss_scale_optimizer
from amp_suite_plugins.keras.model import POLICIES, undecayed_variables

# Framework name -> the KERAS_BACKEND it runs on.
BACKENDS = {"keras": "tensorflow", "keras@jax": "jax", "keras@torch": "torch"}
# Names the backend a probe process is for (FrameworkInfo.env): KERAS_BACKEND itself may be the user's.
PROBE_BACKEND_ENV = "AMP_SUITE_KERAS_BACKEND"


# The framework option every Keras backend declares: which multi_head_attention runs.
ATTENTION_OPTION = FrameworkOption(
    Field(str, choices=("fused", "reference")), "fused",
    "multi_head_attention: fused = keras.ops.dot_product_attention (each backend's own kernel); "
    "reference = explicit matmul, float32 softmax, matmul")
# What keras.ops.dot_product_attention runs on each backend (keras/src/backend/<backend>/nn.py), for the notes.
FUSED_ATTENTION = {
    "tensorflow": "keras.ops.dot_product_attention -> Keras's einsum/softmax/einsum (TF has no fused kernel); "
                  "logits upcast to float32, softmax in float32, probabilities cast back",
    "jax": "keras.ops.dot_product_attention -> jax.nn.dot_product_attention(implementation='xla'); "
           "logits in at least float32, softmax in float32, probabilities cast back",
    "torch": "keras.ops.dot_product_attention -> torch.nn.functional.scaled_dot_product_attention; "
             "on a CPU its kernels accumulate and take the softmax of float16/bfloat16 inputs in float32",
}


# What the fp8 precision's layers run (amp_suite_plugins.keras.fp8), on every Keras backend.
FP8_NOTE = ("fp8 matmuls=emulated (keras.ops quantize-dequantize with keras.ops.custom_gradient: operands cast to "
            "float8_e4m3fn / float8_e5m2 with their scales and back, float32 matmul, bfloat16 result; autocast off "
            "in the fp8 layers, so weights are cast from their float32 variables; the head and everything else as "
            "under amp_bf16)")


def attention_of(run: RunSpec) -> str:
    """The run's attention implementation (the ``attention`` option)."""
    return str(run.options.get("attention", ATTENTION_OPTION.default))


def attention_notes(keras: Any, run: RunSpec, applied: PrecisionApplied) -> tuple[str, ...]:
    """What multi_head_attention runs, and the float32 islands of the token kinds (docs/layers.md)."""
    attention = attention_of(run)
    notes: tuple[str, ...] = (
        "attention=" + (f"fused ({FUSED_ATTENTION[keras.backend.backend()]})" if attention == "fused" else
                        "reference (explicit q k^T matmul, softmax in float32 (float64 under fp64), matmul)"),)
    if applied.compute_dtype in ("float16", "bfloat16"):
        notes += (f"layer_norm, rms_norm=float32 statistics and normalization (autocast=False, as Keras's own "
                  f"LayerNormalization), output cast to {applied.compute_dtype}",
                  f"projections, attention matmuls, gelu, embeddings={applied.compute_dtype} "
                  "(Keras autocast of float32 variables); logits cast to float32 before the loss")
    return notes


# Libraries Keras 3.15 and TensorFlow 2.21 import at start-up only because they are installed, for features a
# worker never uses (TensorFlow Lite's JAX converter, Keras's image-gallery plot and pandas data adapters): in the
# `all` environment they cost a Keras-on-TensorFlow process 1.5-2 s of CPU and 132 MiB of resident memory (661 MiB
# against 529 MiB after importing both; Keras on PyTorch imports JAX as well).  Hidden while Keras is first
# imported, then importable again.
UNUSED_AT_IMPORT = {"tensorflow": ("jax", "matplotlib", "pandas"), "torch": ("jax", "matplotlib", "pandas"),
                    "jax": ("matplotlib", "pandas")}


def import_keras(backend: str) -> Any:
    """Keras on ``backend``: ``KERAS_BACKEND`` set to it before the first import (a value the user exported for
    another backend does not win here), and refused when Keras already runs on another one in this process.
    The first import leaves out the libraries it would load unused (:data:`UNUSED_AT_IMPORT`)."""
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = backend
    keras = import_without("keras", UNUSED_AT_IMPORT.get(backend, ()))
    if keras.backend.backend() != backend:
        raise UnsupportedError(f"Keras already runs on {keras.backend.backend()!r} in this process, not on "
                               f"{backend!r} (KERAS_BACKEND is read once, when Keras is first imported)")
    return keras


def set_policy(keras: Any, run: RunSpec, applied: PrecisionApplied) -> tuple[str, ...]:
    """The global dtype policy and floatx of ``run``'s precision (process globals, set both ways); notes."""
    keras.config.set_floatx(applied.param_dtype)
    keras.mixed_precision.set_global_policy(POLICIES[run.precision])
    notes: tuple[str, ...] = (f"keras_backend={keras.backend.backend()}",
                              f"dtype_policy={keras.mixed_precision.global_policy().name}")
    if applied.compute_dtype == "float64":
        notes += (f"floatx={keras.config.floatx()}; variables (BatchNorm statistics and optimizer state included), "
                  "inputs, dropout masks, logits and loss in float64",)
    elif applied.compute_dtype != "float32":
        notes += ("batch_norm=float32 (Keras computes BatchNormalization in float32 under mixed policies)",
                  f"sigmoid={applied.compute_dtype} (Activation layers, the squeeze-and-excitation gate included, "
                  f"compute in the policy's compute dtype); dropout masks multiplied in {applied.compute_dtype}")
    if applied.fp8_matmul:
        notes += (FP8_NOTE,)
    return notes


def make_training_optimizer(keras: Any, run: RunSpec, workload: Workload, applied: PrecisionApplied,
                            model: Any, *, gradients_reduced: bool = False) -> Any:
    """The suite's optimizer for ``model``, inside Keras's ``LossScaleOptimizer`` (or its static subclass) when
    amp_fp16 scales its loss, which unscales the gradients before the inner optimizer clips them.

    ``gradients_reduced``: the step all-reduces the gradients itself (TensorFlow's data parallel), so the
    inner optimizer must not reduce them again."""
    from amp_suite_plugins.keras.parts import make_optimizer

    optimizer = make_optimizer(workload.optimizer, undecayed_variables(model, workload))
    if gradients_reduced:
        optimizer.gradients_reduced = True
    return loss_scale_optimizer(keras, optimizer, applied, loss_scale_growth_interval(run))


def mean_cross_entropy(keras: Any, labels: Any, logits: Any) -> Any:
    """The mean softmax cross-entropy of integer ``labels`` (keras.ops: the same on every backend)."""
    ops = keras.ops
    return ops.mean(ops.sparse_categorical_crossentropy(labels, logits, from_logits=True))
