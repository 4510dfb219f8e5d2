"""Fidelity benchmark of the ViT on Keras: is the suite's keras cell as fast as a hand-written Keras loop?

For one precision it runs, each in a fresh process and interleaved over
``--rounds`` rounds:

* **idiomatic**: the ViT of ``mnist_vit_tiny`` as a Keras user writes it
  (``python benchmarks/overhead_vit_keras.py --idiomatic PRECISION STEPS WARMUP DATA``): ``Conv2D`` patches,
  a small class-token-and-position layer, pre-norm blocks of
  ``LayerNormalization``, an attention layer of two ``Dense`` and
  ``keras.ops.dot_product_attention``, ``Dense(activation="gelu")``, the
  float32 logits ``Activation``; ``keras.optimizers.AdamW`` with
  ``global_clipnorm``, ``exclude_from_weight_decay`` and ``CosineDecay`` with
  its warm-up; ``compile(jit_compile=True)`` and ``train_on_batch``;
* **suite**: the ``mnist_vit_tiny`` cell of framework ``keras`` through the
  suite's runner and worker, steady-state throughput from its windows.

Both see the suite's own batches (the same images in the same order).  It
prints each round's throughputs and the ratio of the medians (target >= 0.95).

    python benchmarks/overhead_vit_keras.py [--precision fp32] [--steps 24] [--warmup 6] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fidelity_rounds
import numpy as np
from fidelity_rounds import TARGET, WORKLOAD


def suite_run(precision: str, steps: int, warmup: int) -> tuple[Any, Any]:
    """The suite's run of the ViT cell, and its workload (from the packaged catalog)."""
    return fidelity_rounds.suite_run("keras", precision, steps, warmup, window_steps=steps - warmup)


def write_batches(precision: str, steps: int, warmup: int, path: Path) -> Path:
    """The first epoch's batches of the suite's run, for the idiomatic loop."""
    from amp_suite.datasets import run_pipeline

    run, workload = suite_run(precision, steps, warmup)
    batches = run_pipeline(run, workload).epoch(0)
    np.savez(path, images=np.stack([b.images for b in batches]), labels=np.stack([b.labels for b in batches]))
    return path


def keras_vit_loop(precision: str, steps: int, warmup: int, data: str) -> float:
    """The idiomatic Keras ViT (mnist_vit_tiny's sizes), trained with ``train_on_batch``; images per second."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    from keras import layers, ops

    policies = {"fp32": "float32", "amp_bf16": "mixed_bfloat16", "amp_fp16": "mixed_float16"}
    keras.mixed_precision.set_global_policy(policies[precision])
    width, depth, heads, mlp, patch = 64, 4, 4, 128, 4

    class ClassTokenAndPosition(layers.Layer):
        def build(self, input_shape: Any) -> None:
            init = keras.initializers.RandomNormal(stddev=0.02)
            self.token = self.add_weight(shape=(1, 1, width), initializer=init, name="token")
            self.position = self.add_weight(shape=(input_shape[1] + 1, width), initializer=init, name="position")

        def call(self, x: Any) -> Any:
            token = ops.broadcast_to(self.token, (ops.shape(x)[0], 1, width))
            return ops.concatenate([token, x], axis=1) + self.position

    class SelfAttention(layers.Layer):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.qkv, self.out = layers.Dense(3 * width), layers.Dense(width)

        def call(self, x: Any) -> Any:
            tokens = x.shape[1]
            q, k, v = ops.split(ops.reshape(self.qkv(x), (-1, tokens, 3, heads, width // heads)), 3, axis=2)
            y = ops.dot_product_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0])
            return self.out(ops.reshape(y, (-1, tokens, width)))

    inputs = keras.Input((28, 28, 1))
    x = layers.Conv2D(width, patch, strides=patch)(inputs)
    x = ClassTokenAndPosition()(layers.Reshape((-1, width))(x))
    for _ in range(depth):
        x = x + SelfAttention()(layers.LayerNormalization(epsilon=1e-5)(x))
        h = layers.Dense(mlp, activation="gelu")(layers.LayerNormalization(epsilon=1e-5)(x))
        x = x + layers.Dense(width)(h)
    x = layers.LayerNormalization(epsilon=1e-5)(x)
    logits = layers.Activation("linear", dtype="float32")(layers.Dense(10)(x[:, 0]))
    model = keras.Model(inputs, logits)
    schedule = keras.optimizers.schedules.CosineDecay(0.0, decay_steps=steps, warmup_target=1e-3,
                                                      warmup_steps=min(20, steps // 2))
    optimizer = keras.optimizers.AdamW(schedule, weight_decay=0.05, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta", "token", "position"])
    if precision == "amp_fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    arrays = np.load(data)
    images, labels = arrays["images"], arrays["labels"]
    for index in range(steps):
        if index == warmup:
            start = time.perf_counter()
        loss = model.train_on_batch(images[index % len(images)], labels[index % len(labels)])
    float(loss)
    return (steps - warmup) * images.shape[1] / (time.perf_counter() - start)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--idiomatic":
        precision, steps, warmup, data = sys.argv[2:6]
        print(json.dumps({"throughput": keras_vit_loop(precision, int(steps), int(warmup), data)}))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="fp32", choices=("fp32", "amp_bf16", "amp_fp16"))
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--warmup", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not 1 <= args.warmup < args.steps:
        raise SystemExit(f"--warmup must be at least 1 and below --steps ({args.steps}), got {args.warmup}")
    with tempfile.TemporaryDirectory() as tmp:
        data = write_batches(args.precision, args.steps, args.warmup, Path(tmp) / "batches.npz")
        measured = fidelity_rounds.interleaved_rounds(
            args.rounds, lambda: fidelity_rounds.suite(*suite_run(args.precision, args.steps, args.warmup)),
            lambda: fidelity_rounds.idiomatic(__file__, args.precision, args.steps, args.warmup, data),
            f"keras {args.precision}")
    print(f"suite {', '.join(f'{v:.1f}' for v in measured.suite)} img/s; idiomatic "
          f"{', '.join(f'{v:.1f}' for v in measured.idiomatic)} img/s; per round {measured.per_round}")
    print(f"{WORKLOAD} keras {args.precision}: suite/idiomatic = {measured.ratio:.3f} (target >= {TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
