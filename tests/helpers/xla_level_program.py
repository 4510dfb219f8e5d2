"""One small training step compiled by XLA: ``python -m xla_level_program jax|tensorflow OUT.json``.

The step holds what the suite's models hand XLA: a convolution, batch
statistics, a bfloat16 island, a dense layer, a float32 log-softmax
cross-entropy and its gradients.  The process writes the optimized HLO XLA
made of it (the program after every HLO pass, before LLVM) and what the step
computed, so ``tests/test_xla_test_level.py`` can compare two processes that
differ only in ``--xla_backend_optimization_level`` (read from ``XLA_FLAGS``).
XLA's persistent cache is off here: each process compiles.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

SHAPES = {"images": (4, 8, 8, 3), "kernel": (3, 3, 3, 8), "dense": (8, 5)}


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = {name: rng.normal(size=shape).astype(np.float32) for name, shape in SHAPES.items()}
    arrays["labels"] = np.eye(5, dtype=np.float32)[rng.integers(0, 5, size=4)]
    return arrays


def of_jax() -> tuple[str, list[np.ndarray]]:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_compilation_cache", False)

    def loss(kernel, dense, images, labels):
        x = jax.lax.conv_general_dilated(images, kernel, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
        x = jax.nn.relu((x - mean) / jnp.sqrt(var + 1e-3))
        pooled = x.astype(jnp.bfloat16).mean(axis=(1, 2))
        logits = (pooled @ dense.astype(jnp.bfloat16)).astype(jnp.float32)
        return -(labels * jax.nn.log_softmax(logits)).sum(axis=1).mean()

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    args = inputs()
    ordered = (args["kernel"], args["dense"], args["images"], args["labels"])
    hlo = step.lower(*ordered).compile().as_text()
    value, (kernel_grad, dense_grad) = step(*ordered)
    return hlo, [np.asarray(value), np.asarray(kernel_grad), np.asarray(dense_grad)]


def of_tensorflow() -> tuple[str, list[np.ndarray]]:
    import tensorflow as tf

    def step(kernel, dense, images, labels):
        with tf.GradientTape() as tape:
            tape.watch([kernel, dense])
            x = tf.nn.conv2d(images, kernel, 1, "SAME")
            mean, var = tf.nn.moments(x, axes=[0, 1, 2])
            x = tf.nn.relu((x - mean) / tf.sqrt(var + 1e-3))
            pooled = tf.reduce_mean(tf.cast(x, tf.bfloat16), axis=[1, 2])
            logits = tf.cast(tf.matmul(pooled, tf.cast(dense, tf.bfloat16)), tf.float32)
            loss = tf.reduce_mean(-tf.reduce_sum(labels * tf.nn.log_softmax(logits), axis=1))
        return (loss, *tape.gradient(loss, [kernel, dense]))

    compiled = tf.function(step, jit_compile=True)
    args = inputs()
    ordered = [tf.constant(args[name]) for name in ("kernel", "dense", "images", "labels")]
    hlo = compiled.experimental_get_compiler_ir(*ordered)(stage="optimized_hlo")
    return hlo, [t.numpy() for t in compiled(*ordered)]


def main(argv: list[str]) -> int:
    framework, out = argv[0], Path(argv[1])
    hlo, outputs = {"jax": of_jax, "tensorflow": of_tensorflow}[framework]()
    out.write_text(json.dumps({"hlo": hlo, "outputs": [a.astype(np.float64).ravel().tolist() for a in outputs]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
