"""The transformer checks of one Keras backend, run in one process: ``python -m keras_transformer_checks FRAMEWORK OUT``.

One process per backend (TensorFlow's start and compilations are the cost on
2 cores) drives the plugin's own hooks, as a worker does, for every check of
``tests/test_transformers_keras.py`` and writes what it measured to
``OUT`` (JSON); the test asserts on it.  Models are built from small layer
sequences that isolate one token kind each (the probe of the kit builds whole
catalog workloads only), so each kind's float64 forward pass meets the NumPy
reference on its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from amp_suite.plugins.host import PluginHost
from amp_suite.records import Batch, LayerSpec, RunSpec, Workload
from amp_suite.workloads import reference
from amp_suite.workloads.layers import (
    class_token,
    class_token_pool,
    dense,
    gelu,
    layer_norm,
    multi_head_attention,
    patch_embed,
    position_embedding,
    residual,
    rms_norm,
    token_embedding,
    token_mean_pool,
)
from amp_suite.workloads.workload import init_variables, init_weights, param_count, workload_from_config

BATCH = 4
# An 8x8x1 image in 2x2 patches: 16 tokens of 8 features (a class token makes 17).
IMAGE = {"model": "vit", "input_size": 8, "channels": 1, "num_classes": 3, "width": 8, "depth": 1, "heads": 2,
         "mlp": 16, "patch": 4, "batch_size": BATCH}
VIT = {**IMAGE, "optimizer": "adamw", "learning_rate": 1e-2, "weight_decay": 0.1, "schedule": "warmup_cosine",
       "warmup_steps": 1, "clip_norm": 1.0}
GPT = {"model": "gpt", "width": 16, "depth": 2, "heads": 2, "mlp": 32, "vocab_size": 7, "context": 6,
       "batch_size": BATCH, "optimizer": "adamw", "learning_rate": 1e-2, "weight_decay": 0.1,
       "schedule": "warmup_cosine", "warmup_steps": 1, "clip_norm": 1.0}
# The initial loss scale of the few amp_fp16 steps: the tiny models' gradients times the default scale
# overflow float16 (every step would be skipped and halve the scale).
FEW_STEPS_LOSS_SCALE = 2.0 ** 8
PATCHES = (patch_embed("patch", 8, 2),)
HEAD = (dense("head", 3),)
# The clipping check's model and clip norm (small enough to bind: the gradient's norm is ~1).
CLIP_MODEL = (*PATCHES, layer_norm("ln", epsilon=1e-5), token_mean_pool(), *HEAD)
CLIP_NORM = 1e-3


def kind_models() -> dict[str, tuple[bool, tuple[LayerSpec, ...]]]:
    """Name -> (token ids as input?, a tiny model that isolates one token kind)."""
    attn = (layer_norm("ln", epsilon=1e-5),)
    return {
        "patch_embed": (False, (*PATCHES, token_mean_pool(), *HEAD)),
        "class_token": (False, (*PATCHES, class_token("cls"), token_mean_pool(), *HEAD)),
        "position_embedding": (False, (*PATCHES, class_token("cls"), position_embedding("pos"), token_mean_pool(),
                                       *HEAD)),
        "layer_norm": (False, (*PATCHES, layer_norm("ln", epsilon=1e-5), class_token_pool(), *HEAD)),
        "rms_norm": (False, (*PATCHES, rms_norm("rms", epsilon=1e-6), token_mean_pool(), *HEAD)),
        "gelu": (False, (*PATCHES, gelu(), token_mean_pool(), *HEAD)),
        "dense_on_tokens": (False, (*PATCHES, dense("mid", 5), token_mean_pool(), *HEAD)),
        "residual_on_tokens": (False, (*PATCHES, residual((dense("body", 8), gelu())), class_token_pool(), *HEAD)),
        "token_mean_pool": (False, (*PATCHES, token_mean_pool(), *HEAD)),
        "class_token_pool": (False, (*PATCHES, class_token("cls"), class_token_pool(), *HEAD)),
        "multi_head_attention": (False, (*PATCHES, *attn, multi_head_attention("attn", 2), token_mean_pool(),
                                         *HEAD)),
        "multi_head_attention_causal": (False, (*PATCHES, *attn, multi_head_attention("attn", 4, causal=True),
                                                class_token_pool(), *HEAD)),
        "token_embedding": (True, (token_embedding("embed", 7, 8), dense("head", 7))),
    }


class Driver:
    """The plugin's hooks, called as a worker calls them, for one workload and precision at a time."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self.host = PluginHost(framework=framework)
        for name, value in self.host.frameworks()[framework].env.items():
            os.environ.setdefault(name, value)
        self.device: Any = None

    def build(self, workload: Workload, precision: str, options: dict[str, Any] | None = None,
              steps: int = 1, weights: dict[str, np.ndarray] | None = None) -> tuple[RunSpec, Any]:
        optimizer = dataclasses.replace(workload.optimizer, decay_steps=steps)
        workload = dataclasses.replace(workload, optimizer=optimizer)
        run = RunSpec(framework=self.framework, workload=workload.name, precision=precision, steps=steps, epochs=1,
                      warmup=0, batch_size=BATCH, options=options or {})
        if self.device is None:
            self.device = self.host.select_device(run)
        applied = self.host.set_precision(run, self.device)
        initial, state = init_variables(workload, 0)
        model = self.host.build_model(run, workload, weights or initial, state, applied, self.device)
        return run, (model, applied)

    def train(self, run: RunSpec, model: Any, batches: list[Batch]) -> Any:
        return self.host.train_epoch(run, model, self.host.stage_batches(run, model, batches), 0)


def batches(workload: Workload, count: int, seed: int = 0) -> list[Batch]:
    """``count`` random batches: token ids, or images of normal pixels."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        if workload.tokens:
            assert workload.transformer is not None
            vocab, context = workload.transformer.vocab_size, workload.transformer.context
            images = rng.integers(0, vocab, size=(BATCH, context)).astype(np.int32)
            labels = rng.integers(0, vocab, size=(BATCH, context)).astype(np.int32)
        else:
            images = rng.normal(size=(BATCH, *workload.input_shape)).astype(np.float32)
            labels = rng.integers(0, workload.num_classes, size=(BATCH,)).astype(np.int32)
        out.append(Batch(images, labels))
    return out


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(float(np.abs(b).max()), 1e-300))


def kind_forwards(driver: Driver) -> dict[str, Any]:
    """Per isolated kind and attention implementation: the fp64 forward's error against the NumPy reference."""
    out: dict[str, Any] = {}
    image = workload_from_config("kinds", IMAGE)
    words = workload_from_config("kinds", {**GPT, "vocab_size": 7, "context": 6})
    for name, (ids, layers) in kind_models().items():
        workload = dataclasses.replace(words if ids else image, layers=layers)
        implementations = ("fused", "reference") if name.startswith("multi_head_attention") else ("fused",)
        for attention in implementations:
            run, (model, _) = driver.build(workload, "fp64", {"attention": attention})
            inputs = batches(workload, 1, seed=1)[0].images
            logits = driver.host.predict(run, model, inputs, training=False)
            expected = reference.forward(layers, inputs, driver.host.get_variables(run, model))
            out[f"{name}:{attention}"] = {"error": relative_error(logits, expected), "dtype": str(logits.dtype),
                                          "shape": list(logits.shape)}
    return out


def whole_models(driver: Driver) -> dict[str, Any]:
    """ViT and GPT: parameter counts, fp64 forward per attention implementation, and AMP training."""
    out: dict[str, Any] = {}
    for name, table in (("vit", VIT), ("gpt", GPT)):
        workload = workload_from_config(name, table)
        inputs = batches(workload, 1, seed=2)[0].images
        logits = {}
        for attention in ("fused", "reference"):
            run, (model, applied) = driver.build(workload, "fp64", {"attention": attention})
            logits[attention] = driver.host.predict(run, model, inputs, training=False)
            expected = reference.forward(workload.layers, inputs, driver.host.get_variables(run, model))
            out[f"{name}:fp64:{attention}"] = {
                "error": relative_error(logits[attention], expected), "dtype": str(logits[attention].dtype),
                "shape": list(logits[attention].shape), "notes": list(applied.notes)}
        out[f"{name}:fused_vs_reference"] = relative_error(logits["fused"], np.asarray(logits["reference"]))
        out[f"{name}:param_count"] = {
            "neutral": param_count(init_weights(workload, 0)),
            "keras": int(driver.host.measure(run, model, driver.device)["param_count"])}
        for precision in ("amp_bf16", "amp_fp16"):
            run, (model, applied) = driver.build(workload, precision, {"initial_loss_scale": FEW_STEPS_LOSS_SCALE},
                                                 steps=3)
            result = driver.train(run, model, batches(workload, 3, seed=3))
            out[f"{name}:{precision}"] = {"losses": [float(v) for v in result.step_losses],
                                          "skipped": int(result.skipped_steps or 0),
                                          "notes": list(applied.notes),
                                          "layer_norm": layer_norm_dtypes(model, inputs, applied.compute_dtype)}
    return out


def layer_norm_dtypes(model: Any, inputs: np.ndarray, compute_dtype: str) -> dict[str, Any]:
    """The first LayerNorm of the model: its variables' and output's dtypes, and how far its output is from
    the float64 LayerNorm of its own (reduced-precision) input, in units of the compute dtype's epsilon."""
    import keras

    net = model.model
    from amp_suite_plugins.keras.token_layers import TokenLayerNormalization

    layer = next(layer for layer in net.layers if isinstance(layer, TokenLayerNormalization))
    probe = keras.Model(net.inputs, [layer.input, layer.output])
    x, y = (keras.ops.convert_to_numpy(keras.ops.cast(t, "float32")) for t in probe(inputs))
    dtype_out = keras.backend.standardize_dtype(probe(inputs)[1].dtype)
    gamma, beta = (np.asarray(v, np.float64) for v in layer.get_weights())
    expected = reference.layer_norm(np.asarray(x, np.float64), gamma, beta, layer.epsilon)
    epsilon = float(np.finfo(np.float16).eps) if compute_dtype == "float16" else 2.0 ** -7
    return {"output": dtype_out, "variables": sorted({keras.backend.standardize_dtype(v.dtype)
                                                      for v in layer.weights}),
            "autocast": bool(layer.autocast), "compute_dtype": layer.compute_dtype,
            "error_in_eps": float(np.abs(y - expected).max() / np.abs(expected).max() / epsilon)}


def clipping_under_loss_scale(driver: Driver) -> dict[str, Any]:
    """One amp_fp16 SGD step with clip_norm, at initial loss scales 1 and 2**15, and one without clipping.

    Plain SGD makes the update ``-lr * clipped gradient``: its global norm is
    ``lr * clip_norm`` when the clip binds on the unscaled gradients, and
    ``lr * clip_norm / scale`` if it bound on the scaled ones.  The model is
    patches, LayerNorm, mean pool and a head (``CLIP_MODEL``): a ViT's class
    token at init is nearly zero, its LayerNorm multiplies the gradient by
    ~50, and 2**15 times that overflows float16 (the step would be skipped).
    """
    image = workload_from_config("clip", {**IMAGE, "optimizer": "sgd", "learning_rate": 0.5})
    out: dict[str, Any] = {"learning_rate": 0.5, "clip_norm": CLIP_NORM}
    for label, clip, scale in (("scale_1", CLIP_NORM, 1.0), ("scale_32768", CLIP_NORM, 2.0 ** 15),
                               ("unclipped", 0.0, 2.0 ** 15)):
        optimizer = dataclasses.replace(image.optimizer, clip_norm=clip)
        workload = dataclasses.replace(image, layers=CLIP_MODEL, optimizer=optimizer)
        run, (model, _) = driver.build(workload, "amp_fp16", {"initial_loss_scale": scale})
        before = driver.host.get_variables(run, model)
        result = driver.train(run, model, batches(workload, 1, seed=4))
        after = driver.host.get_variables(run, model)
        deltas = {k: np.asarray(after[k], np.float64) - before[k] for k in before}
        out[label] = {"deltas": {k: v.ravel().tolist() for k, v in deltas.items()},
                      "norm": float(np.sqrt(sum(float((d ** 2).sum()) for d in deltas.values()))),
                      "skipped": int(result.skipped_steps or 0), "loss_scale_final": result.loss_scale_final}
    return out


def adamw_decay(driver: Driver) -> dict[str, Any]:
    """One fp64 AdamW step with weight decay 0.5 and one with none, from the same variables and batch.

    The Adam part of both steps is the same (same gradients), so their
    difference is the decoupled decay alone: ``-lr * weight_decay * w`` on the
    variables declared ``decay``, exactly 0 on the others.
    """
    out: dict[str, Any] = {}
    # A rate and decay exact in float32 (Keras keeps the learning rate in a float32 variable).
    table = {**VIT, "schedule": "constant", "warmup_steps": 0, "clip_norm": 0.0, "learning_rate": 2.0 ** -7}
    moved = {}
    for label, decay in (("decay", 0.5), ("none", 0.0)):
        workload = workload_from_config("adamw", {**table, "weight_decay": decay})
        run, (model, _) = driver.build(workload, "fp64", steps=1)
        before = driver.host.get_variables(run, model)
        driver.train(run, model, batches(workload, 1, seed=5))
        moved[label] = {k: np.asarray(v, np.float64) for k, v in driver.host.get_variables(run, model).items()}
        out["before"] = {k: np.asarray(v).ravel().tolist() for k, v in before.items()}
    out["difference"] = {k: (moved["decay"][k] - moved["none"][k]).ravel().tolist() for k in moved["none"]}
    return out


def warmup_cosine(driver: Driver) -> list[float]:
    """The learning rate the built optimizer's schedule gives at steps 0 .. 5 (warm-up 2 over 5 steps)."""
    import keras

    workload = workload_from_config("schedule", {**VIT, "warmup_steps": 2})
    run, (model, _) = driver.build(workload, "fp32", steps=5)
    optimizer = model.optimizer
    schedule = optimizer._learning_rate  # the LearningRateSchedule object
    return [float(keras.ops.convert_to_numpy(schedule(step))) for step in range(6)]


CHECKS = {"kinds": kind_forwards, "models": whole_models, "clip": clipping_under_loss_scale,
          "adamw": adamw_decay, "schedule": warmup_cosine}


def main(argv: list[str]) -> int:
    framework, out = argv[0], Path(argv[1])
    driver = Driver(framework)
    found = {name: check(driver) for name, check in CHECKS.items()}
    found["layer_kinds"] = list(driver.host.frameworks()[framework].layer_kinds)
    out.write_text(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
