"""The Keras plugin (Keras 3 on TensorFlow): dtype policies and ``LossScaleOptimizer``.

TensorFlow is imported inside the hooks only.  Recipe (Keras mixed-precision
guide): a global dtype policy (``mixed_float16`` or ``mixed_bfloat16``) set
before the model is built; the logits pass a float32 ``Activation`` so the
softmax and loss run in float32; ``mixed_float16`` trains through a dynamic
``LossScaleOptimizer``, which unscales the gradients and skips a step whose
gradients are not finite.  The train step is one ``tf.function``, XLA-compiled
unless ``[frameworks.keras] jit_compile = false``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.environment import package_version
from amp_suite.layers import iter_layers
from amp_suite.plugin_kit import (
    cpu_device,
    loss_scale_growth_interval,
    require_device_kind,
    STANDARD_PRECISIONS,
    standard_precision,
    timed_window,
)
from amp_suite.records import (
    Batch,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    LayerSpec,
    PrecisionApplied,
    RunSpec,
    Workload,
)

NAME = "keras"
POLICIES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "mixed_float16", "amp_bf16": "mixed_bfloat16"}


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="Keras (TF)",
        modules=("tensorflow", "keras"),
        extra="tf",
        precisions=STANDARD_PRECISIONS,
        env={"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"},
        distributions=("tensorflow", "tensorflow-cpu", "keras"),
    )


@dataclass
class KerasModel:
    model: Any
    optimizer: Any
    train_step: Any
    predict_fn: Any
    device_name: str
    loss_scaled: bool
    named: dict[str, LayerSpec]


def _jit(run: RunSpec) -> bool:
    return bool(run.options.get("jit_compile", True))


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if require_device_kind(run, bool(gpus), "TensorFlow") == "cpu":
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        return cpu_device()
    # Before anything touches a GPU: without memory growth TF maps nearly all of it.
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = details.get("compute_capability") or (0, 0)
    return DeviceInfo(
        kind="gpu",
        platform="cuda" if tf.test.is_built_with_cuda() else "rocm",
        name=details.get("device_name", gpus[0].name),
        count=len(gpus),
        driver=f"CUDA {tf.sysconfig.get_build_info().get('cuda_version', '?')} (TF build)",
        compute_capability=f"{capability[0]}.{capability[1]}",
        supports_tf32=capability[0] >= 8,
    )


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
    import keras
    import tensorflow as tf

    applied = standard_precision(run, device)
    tf32 = run.precision == "tf32"
    tf.config.experimental.enable_tensor_float_32_execution(tf32)
    keras.mixed_precision.set_global_policy(POLICIES[run.precision])
    notes = (
        f"dtype_policy={keras.mixed_precision.global_policy().name}",
        f"tensor_float_32_execution={tf.config.experimental.tensor_float_32_execution_enabled()}",
        f"jit_compile={_jit(run)}",
    )
    if applied.compute_dtype != "float32":
        notes += ("batch_norm=float32 (Keras computes BatchNormalization in float32 under mixed policies)",)
    return dataclasses.replace(applied, notes=notes)


def _conv(keras: Any, spec: LayerSpec, x: Any) -> Any:
    """conv2d with symmetric zero padding: 'same' where Keras's own padding is the same thing."""
    padding = "valid"
    if spec.padding and spec.stride == 1 and spec.kernel_size % 2 == 1 and spec.padding == spec.kernel_size // 2:
        padding = "same"
    elif spec.padding:
        x = keras.layers.ZeroPadding2D(spec.padding, name=f"{spec.name}_pad")(x)
    return keras.layers.Conv2D(spec.features, spec.kernel_size, strides=spec.stride, padding=padding,
                               use_bias=spec.use_bias, name=spec.name)(x)


def _apply(keras: Any, specs: tuple[LayerSpec, ...], x: Any) -> Any:
    """Translate the layer vocabulary into Keras functional calls on ``x``."""
    from amp_suite_plugins.keras_parts import UnbiasedBatchNormalization

    layers = keras.layers
    for spec in specs:
        kind = spec.kind
        if kind == "conv2d":
            x = _conv(keras, spec, x)
        elif kind == "batch_norm":
            # PyTorch's momentum 0.1 is Keras's 0.9 (the weight of the old value).
            x = UnbiasedBatchNormalization(momentum=1.0 - spec.momentum, epsilon=spec.epsilon, name=spec.name)(x)
        elif kind == "relu":
            x = layers.ReLU()(x)
        elif kind == "residual":
            body = _apply(keras, spec.body, x)
            x = layers.Add()([body, _apply(keras, spec.shortcut, x)])
        elif kind == "max_pool":
            x = layers.MaxPooling2D(spec.window, strides=spec.stride)(x)
        elif kind == "avg_pool":
            x = layers.AveragePooling2D(spec.window, strides=spec.stride)(x)
        elif kind == "global_avg_pool":
            x = layers.GlobalAveragePooling2D()(x)
        elif kind == "flatten":
            x = layers.Flatten()(x)
        elif kind == "dense":
            x = layers.Dense(spec.features, use_bias=spec.use_bias, name=spec.name)(x)
        else:
            raise ValueError(f"keras plugin cannot build layer kind {kind!r}")
    return x


# canonical leaf -> Keras weight position, per layer kind (Keras orders a layer's weights so)
_LEAVES = {"conv2d": ("w", "b"), "dense": ("w", "b"), "batch_norm": ("scale", "offset", "mean", "var")}


def _named_layers(workload: Workload) -> dict[str, LayerSpec]:
    return {spec.name: spec for spec in iter_layers(workload.layers) if spec.kind in _LEAVES}


def _build_keras_model(keras: Any, workload: Workload, variables: dict[str, np.ndarray]) -> Any:
    inputs = keras.Input(shape=workload.input_shape)
    # Logits leave the mixed-precision region in float32.
    outputs = keras.layers.Activation("linear", dtype="float32", name="logits_float32")(
        _apply(keras, workload.layers, inputs))
    model = keras.Model(inputs, outputs, name=workload.name)
    # Canonical layouts are Keras's own: HWIO kernels, (in, out) dense, NHWC flatten.
    for name, spec in _named_layers(workload).items():
        leaves = [leaf for leaf in _LEAVES[spec.kind] if f"{name}/{leaf}" in variables]
        model.get_layer(name).set_weights([variables[f"{name}/{leaf}"] for leaf in leaves])
    return model


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo,
) -> KerasModel:
    import keras
    import tensorflow as tf

    from amp_suite_plugins.keras_parts import make_optimizer

    device_name = "/GPU:0" if device.kind == "gpu" else "/CPU:0"
    with tf.device(device_name):
        model = _build_keras_model(keras, workload, {**initial_weights, **initial_state})
        optimizer = make_optimizer(workload.optimizer)
        loss_scaled = applied.loss_scaling == "dynamic"
        if loss_scaled:
            optimizer = keras.optimizers.LossScaleOptimizer(
                optimizer, initial_scale=applied.initial_loss_scale,
                dynamic_growth_steps=loss_scale_growth_interval(run),
            )
        optimizer.build(model.trainable_variables)
    variables = model.trainable_variables

    def step(images: Any, labels: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            target = optimizer.scale_loss(loss) if loss_scaled else loss
        grads = tape.gradient(target, variables)
        # Only a scaled loss can skip a step; elsewhere the check would be wasted work.
        finite = optimizer.check_finite(grads) if loss_scaled else tf.constant(True)
        optimizer.apply(grads, variables)  # LossScaleOptimizer unscales and skips non-finite steps
        return loss, finite

    def forward(images: Any) -> Any:
        return tf.cast(model(images, training=False), tf.float32)

    train_step = tf.function(step, jit_compile=_jit(run), reduce_retracing=True)
    predict_fn = tf.function(forward, jit_compile=_jit(run), reduce_retracing=True)
    if device.kind == "gpu":
        tf.config.experimental.reset_memory_stats("GPU:0")
    return KerasModel(model, optimizer, train_step, predict_fn, device_name, loss_scaled,
                      _named_layers(workload))


@hookimpl
def stage_batches(run: RunSpec, model: KerasModel, batches: list[Batch]) -> list[tuple[Any, Any]]:
    import tensorflow as tf

    with tf.device(model.device_name):
        return [(tf.identity(tf.constant(b.images)), tf.identity(tf.constant(b.labels))) for b in batches]


def _scale(model: KerasModel) -> float | None:
    return float(model.optimizer.dynamic_scale.numpy()) if model.loss_scaled else None


@hookimpl
def train_epoch(run: RunSpec, model: KerasModel, staged: list[tuple[Any, Any]], epoch: int) -> EpochResult:
    import tensorflow as tf

    def fetch(outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
        if not outcomes:
            return [], []
        losses = tf.stack([loss for loss, _ in outcomes]).numpy()
        finite = tf.stack([flag for _, flag in outcomes]).numpy()
        return [float(v) for v in losses], [bool(v) for v in finite]

    # The step returns its loss and finite flag as tensors; reading the last
    # loss waits for every step dispatched before it.
    result = timed_window(staged, lambda batch: model.train_step(*batch),
                          wait=lambda outcome: outcome[0].numpy(), fetch=fetch)
    result.loss_scale_final = _scale(model)
    result.extra["traces"] = int(model.train_step.experimental_get_tracing_count())
    return result


@hookimpl
def reset_memory_peak(run: RunSpec, device: DeviceInfo) -> None:
    import tensorflow as tf

    if device.kind == "gpu":
        tf.config.experimental.reset_memory_stats("GPU:0")


@hookimpl
def predict(run: RunSpec, model: KerasModel, images: np.ndarray, training: bool) -> np.ndarray:
    import tensorflow as tf

    with tf.device(model.device_name):
        x = tf.constant(np.asarray(images, dtype=np.float32))
        if not training:
            return model.predict_fn(x).numpy()
        # A training-mode call moves the moving statistics: put them back afterwards.
        saved = [v.numpy() for v in model.model.non_trainable_variables]
        try:
            return tf.cast(model.model(x, training=True), tf.float32).numpy()
        finally:
            for variable, value in zip(model.model.non_trainable_variables, saved):
                variable.assign(value)


@hookimpl
def get_variables(run: RunSpec, model: KerasModel) -> dict[str, np.ndarray]:
    out = {}
    for name, spec in model.named.items():
        values = model.model.get_layer(name).get_weights()
        for leaf, value in zip(_LEAVES[spec.kind], values):
            out[f"{name}/{leaf}"] = np.asarray(value, dtype=np.float32)
    return out


@hookimpl
def measure(run: RunSpec, model: KerasModel, device: DeviceInfo) -> dict[str, Any]:
    import tensorflow as tf

    figures: dict[str, Any] = {
        "param_count": int(sum(int(np.prod(v.shape)) for v in model.model.trainable_variables)),
        "framework_version": f"tensorflow {tf.__version__}, keras {package_version('keras') or '?'}",
        "train_step_traces": int(model.train_step.experimental_get_tracing_count()),
        "compilation": "XLA (jit_compile)" if _jit(run) else "tf.function graph",
    }
    if device.kind == "gpu":
        figures["device_peak_memory_bytes"] = int(tf.config.experimental.get_memory_info("GPU:0")["peak"])
    return figures
