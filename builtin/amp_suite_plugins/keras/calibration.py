"""Keras's (TensorFlow's) calibration probe: ``python -m amp_suite_plugins.keras.calibration DEVICE BUDGET``.

Peak matmul and convolution TFLOP/s per dtype (the protocol and the timing:
:mod:`amp_suite.calibration.kit`), each operation a ``tf.function`` whose
result is fetched to the host, so a timed call covers finished device work.
GPUs get memory growth before anything touches them.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from amp_suite.calibration import kit


def probe(device: str, budget_s: float) -> dict[str, Any]:
    """The figures of ``device`` (``auto``, ``cpu`` or ``gpu``), ``budget_s`` seconds of calls per figure."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if device == "gpu" and not gpus:
        reason = "a CPU-only build" if not tf.test.is_built_with_cuda() else "TensorFlow lists no GPU"
        raise kit.gpu_unusable("TensorFlow", reason)
    use_gpu = bool(gpus) and device != "cpu"
    kind = "gpu" if use_gpu else "cpu"
    name = "/GPU:0" if use_gpu else "/CPU:0"
    details = tf.config.experimental.get_device_details(gpus[0]) if use_gpu else {}
    tf32_ok = use_gpu and (details.get("compute_capability") or (0, 0))[0] >= 8
    dtypes = {"fp32": tf.float32, "tf32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}
    out: dict[str, Any] = {"device": details.get("device_name", "cpu") if use_gpu else "cpu", "kind": kind,
                           "version": tf.__version__}
    for dtype_name, dtype in dtypes.items():
        if dtype_name == "tf32" and not tf32_ok:
            continue
        tf.config.experimental.enable_tensor_float_32_execution(dtype_name == "tf32")

        def matmul(n: int, dtype: Any = dtype) -> kit.Call:
            with tf.device(name):
                a = tf.cast(tf.random.normal((n, n)), dtype)
                b = tf.cast(tf.random.normal((n, n)), dtype)
                fn = tf.function(lambda: tf.reduce_sum(tf.cast(tf.linalg.matmul(a, b)[:1, :1], tf.float32)))
            return lambda: fn().numpy()

        def conv(batch: int, dtype: Any = dtype) -> kit.Call:
            with tf.device(name):
                x = tf.cast(tf.random.normal((batch, kit.CONV_HW, kit.CONV_HW, kit.CONV_CHANNELS)), dtype)
                w = tf.cast(tf.random.normal((kit.CONV_KERNEL, kit.CONV_KERNEL, kit.CONV_CHANNELS,
                                              kit.CONV_CHANNELS)), dtype)
                fn = tf.function(lambda: tf.reduce_sum(tf.cast(
                    tf.nn.conv2d(x, w, strides=1, padding="SAME")[:1, :1, :1, :1], tf.float32)))
            return lambda: fn().numpy()

        kit.measure_both(out, dtype_name, kind, matmul, conv, budget_s)
    return out


if __name__ == "__main__":
    sys.exit(kit.probe_main(probe, sys.argv[1:]))
