"""The doctor's Keras probe: ``python -m amp_suite_plugins.keras.doctor cpu|auto``.

Uses TensorFlow's and Keras's own APIs (the TF32 switch, mixed-precision
dtype policies, ``LossScaleOptimizer``, ``tf.config.experimental`` memory
statistics) the way the suite's recipe does, never the plugin's internals.
The doctor sets ``KERAS_BACKEND=tensorflow`` before this module imports Keras.
"""

from __future__ import annotations

import sys
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from amp_suite.doctor import probe_kit as kit


def _choose(requested: str) -> str:
    """``/GPU:0`` or ``/CPU:0``; GPUs get memory growth before anything touches them."""
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "cpu" or not gpus:
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        return "/CPU:0"
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    return "/GPU:0"


def _name(dtype: Any) -> str:
    """A dtype's name, from a ``tf.DType`` or Keras's string dtypes."""
    return str(getattr(dtype, "name", dtype))


def device_section(where: str) -> dict[str, Any]:
    build = tf.sysconfig.get_build_info()
    found: dict[str, Any] = {"kind": "gpu" if "GPU" in where else "cpu", "cuda_build": tf.test.is_built_with_cuda(),
                             "cuda_runtime": build.get("cuda_version"), "cudnn": build.get("cudnn_version"),
                             "cuda_build_version": build.get("cuda_version")}
    if found["kind"] == "gpu":
        details = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0])
        capability = details.get("compute_capability") or (0, 0)
        found.update(name=details.get("device_name", "GPU:0"), compute_capability=f"{capability[0]}.{capability[1]}")
        # cuDNN loads lazily: run one convolution, then see which libcudnn files are mapped.
        with tf.device(where):
            float(tf.reduce_sum(tf.nn.conv2d(tf.ones((1, 8, 8, 8)), tf.ones((3, 3, 8, 8)), 1, "SAME")))
        found["cudnn_libraries"] = kit.loaded_libraries("libcudnn")
    # TensorFlow's library-load warnings go to stderr: the doctor reads them there.
    return found


def precision_section(where: str) -> dict[str, Any]:
    """The probes compiled with XLA (``jit_compile=True``), as the suite trains Keras models."""
    k, hw = kit.PROBE_K, kit.CONV_PROBE_HW
    found: dict[str, Any] = {}
    modes = [("fp32", False), ("tf32", True)] if "GPU" in where else [("fp32", False)]
    with tf.device(where):
        a = tf.ones((k, k)) * 1.0001
        b = tf.ones((k, k))
        # NHWC: CONV_PROBE_IN channels of 1.0001 into CONV_PROBE_OUT all-ones 1x1 filters
        image = tf.ones((1, hw, hw, kit.CONV_PROBE_IN)) * 1.0001
        kernel = tf.ones((1, 1, kit.CONV_PROBE_IN, kit.CONV_PROBE_OUT))
        for name, tf32 in modes:
            tf.config.experimental.enable_tensor_float_32_execution(tf32)
            # a fresh function per mode: XLA reads the TF32 switch when it compiles
            matmul = tf.function(lambda x, y: tf.linalg.matmul(x, y), jit_compile=True)
            conv = tf.function(lambda x, w: tf.nn.conv2d(x, w, 1, "VALID"), jit_compile=True)
            # averaged on the host in float64: XLA's float32 sum of a million elements drifts by more
            # than the gap between the two answers
            found[f"matmul_{name}"] = float(np.mean(matmul(a, b).numpy(), dtype=np.float64))
            found[f"conv_{name}"] = float(np.mean(conv(image, kernel).numpy(), dtype=np.float64))
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return found


def amp_section(where: str, policy: str) -> dict[str, Any]:
    keras.mixed_precision.set_global_policy(policy)
    try:
        with tf.device(where):
            conv = keras.layers.Conv2D(8, 3)
            dense = keras.layers.Dense(10)
            to_float32 = keras.layers.Activation("linear", dtype="float32")
            x = tf.random.uniform((4, 8, 8, 3))
            y = tf.constant([0, 1, 2, 3])
            conv.build(x.shape)
            dense.build((None, 6 * 6 * 8))
            variables = conv.trainable_variables + dense.trainable_variables
            seen: dict[str, Any] = {}

            @tf.function
            def step(images: Any, labels: Any) -> Any:
                with tf.GradientTape() as tape:
                    hidden = conv(images)
                    seen["conv"] = _name(hidden.dtype)  # dtypes are static: read while tracing
                    hidden = tf.reshape(tf.nn.relu(hidden), (tf.shape(images)[0], -1))
                    out = dense(hidden)
                    seen["matmul"] = _name(out.dtype)
                    logits = to_float32(out)
                    seen["logits"] = _name(logits.dtype)
                    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
                grads = tape.gradient(loss, variables)
                seen["grads"] = sorted({_name(g.dtype) for g in grads})
                return loss

            step(x, y)
            seen["params"] = sorted({_name(v.dtype) for v in variables})
            return seen
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _scaled_steps(where: str, initial: float, steps: int) -> tuple[float, bool]:
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with tf.device(where):
            dense = keras.layers.Dense(4)
            dense.build((None, 16))
            variables = dense.trainable_variables
            before = [v.numpy().copy() for v in variables]
            optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=initial,
                                                            dynamic_growth_steps=kit.GROWTH_INTERVAL)
            optimizer.build(variables)
            x = tf.random.uniform((8, 16), seed=0)
            for _ in range(steps):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(tf.cast(dense(x), tf.float32)))
                    scaled = optimizer.scale_loss(loss)
                optimizer.apply(tape.gradient(scaled, variables), variables)
            changed = any(not (b == v.numpy()).all() for b, v in zip(before, variables, strict=True))
            return float(optimizer.dynamic_scale.numpy()), changed
    finally:
        keras.mixed_precision.set_global_policy("float32")


def loss_scale_section(where: str) -> dict[str, Any]:
    return kit.loss_scale_section(lambda initial, steps: _scaled_steps(where, initial, steps))


def timing_section(where: str) -> dict[str, Any]:
    batches, width, hidden = kit.timing_shape("GPU" in where)
    tf.config.experimental.enable_tensor_float_32_execution(False)  # a float32 step, as fp32 cells run it

    def build(batch: int) -> kit.StepKit:
        with tf.device(where):
            layers = [keras.layers.Dense(width, activation="relu") for _ in range(hidden)] + [keras.layers.Dense(10)]
            for layer in layers:
                layer.build((None, width))
            variables = [v for layer in layers for v in layer.trainable_variables]
            optimizer = keras.optimizers.SGD(0.01)
            optimizer.build(variables)
            x = tf.random.uniform((batch, width), seed=0)
            y = tf.random.uniform((batch,), maxval=10, dtype=tf.int32, seed=0)

        @tf.function
        def train(images: Any, labels: Any) -> Any:
            with tf.GradientTape() as tape:
                logits = images
                for layer in layers:
                    logits = layer(logits)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
            optimizer.apply(tape.gradient(loss, variables), variables)
            return loss

        last_loss: list[Any] = [None]

        def step() -> None:
            last_loss[0] = train(x, y)

        def wait() -> None:
            float(last_loss[0].numpy())  # copies to the host once the step is done

        return step, wait, None

    found = kit.time_sized(build, batches, method="host clock after loss.numpy()")
    return {**found, "width": width, "hidden_layers": hidden}


def memory_section(where: str) -> dict[str, Any]:
    if "GPU" not in where:
        return {"api": None}
    tf.config.experimental.reset_memory_stats("GPU:0")
    with tf.device(where):
        block = tf.zeros((kit.MEMORY_PROBE_BYTES // 4,), tf.float32)
        float(tf.reduce_sum(block))
    peak = int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    return {"api": "tf.config.experimental.get_memory_info", "peak_bytes": peak,
            "allocated_bytes": kit.MEMORY_PROBE_BYTES}


def main(argv: list[str]) -> None:
    where = _choose(argv[0] if argv else "auto")
    kit.run_sections([
        ("device", lambda: device_section(where)),
        ("precision", lambda: precision_section(where)),
        ("amp_fp16", lambda: amp_section(where, "mixed_float16")),
        ("amp_bf16", lambda: amp_section(where, "mixed_bfloat16")),
        ("loss_scale", lambda: loss_scale_section(where)),
        ("timing", lambda: timing_section(where)),
        ("memory", lambda: memory_section(where)),
    ])


if __name__ == "__main__":
    main(sys.argv[1:])
