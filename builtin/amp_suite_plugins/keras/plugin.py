"""The Keras plugin (Keras 3 on TensorFlow): dtype policies and ``LossScaleOptimizer``.

TensorFlow is imported inside the hooks only.  Recipe (Keras mixed-precision
guide): a global dtype policy (``mixed_float16`` or ``mixed_bfloat16``) set
before the model is built; the logits pass a float32 ``Activation`` so the
softmax and loss run in float32; ``mixed_float16`` trains through a dynamic
``LossScaleOptimizer``, which unscales the gradients and skips a step whose
gradients are not finite.  The train step is one ``tf.function``, XLA-compiled
unless ``[frameworks.keras] jit_compile = false``.  ``fp64``, the float64
reference of the tests, sets the ``float64`` policy and ``floatx`` (so every
layer's variables, the BatchNorm statistics, the optimizer's slots and its
learning rate are float64), float64 model inputs for images and masks, and
float64 logits and loss.

Dropout: a model with ``dropout`` layers takes ``[images, *masks]``, one
optional input per dropout layer (``parts.HostDropout``); the train
step's ``tf.function`` takes the staged masks as a dict input (traced once),
and evaluation and ``predict`` pass ``None`` (no dropout).

Data parallel (``--devices N``): see :mod:`amp_suite_plugins.keras.mirrored`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.errors import UnsupportedError
from amp_suite.machine.environment import package_version
from amp_suite.numerics.records import StepTrace
from amp_suite.plugins.kit import (
    BUILT_IN_PRECISIONS,
    cpu_device,
    no_meet,
    require_device_kind,
    standard_precision,
    take_slowest_window,
    timed_window,
)
from amp_suite.records import (
    Batch,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    PrecisionApplied,
    RunSpec,
    Workload,
)
from amp_suite_plugins.keras.backends import (
    attention_notes,
    attention_of,
    import_keras,
    make_training_optimizer,
    set_policy,
)
from amp_suite_plugins.keras.loss_scaling import scales_loss
from amp_suite_plugins.keras.mirrored import _build_mirrored, _distribute, _meet, _slowest_window
from amp_suite_plugins.keras.model import (
    LAYER_KINDS,
    build_keras_model,
    dropouts,
    input_array,
    model_inputs,
    named_layers,
    read_variables,
    statistics_kept,
)
from amp_suite_plugins.keras.tf_model import KerasModel
from amp_suite_plugins.keras.tf_options import OPTIONS, _jit

NAME = "keras"


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="Keras (TF)",
        modules=("tensorflow", "keras"),
        extra="tf",
        precisions=BUILT_IN_PRECISIONS,
        env={"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"},
        distributions=("tensorflow", "tensorflow-cpu", "keras"),
        launcher="process",  # one worker per node drives every device of the node
        options=OPTIONS,
        layer_kinds=LAYER_KINDS,
        doctor_probe="amp_suite_plugins.keras.doctor",
        calibration_probe="amp_suite_plugins.keras.calibration",
        sync_counter="amp_suite_plugins.sync_counters:of_keras",
        # graph: tf.function without XLA (jit_compile=False); compiled: jit_compile=True.  The mode, when the sweep
        # names one, wins over the jit_compile option.
        modes={"cpu": ("graph", "compiled"), "gpu": ("graph", "compiled")},
        default_mode="compiled",
    )


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo:
    import_keras("tensorflow")  # first: a KERAS_BACKEND exported for another backend does not win here
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if require_device_kind(run, bool(gpus), "TensorFlow") == "cpu":
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        if run.distributed:
            # Before TensorFlow initializes its devices: the CPU as N logical devices.
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(run.local_devices)])
        return dataclasses.replace(cpu_device(), count=run.devices)
    if run.distributed and len(gpus) < run.local_devices:
        raise UnsupportedError(f"{run.local_devices} devices asked for, TensorFlow sees {len(gpus)} GPUs")
    # Before anything touches a GPU: without memory growth TF maps nearly all of it.
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    details = tf.config.experimental.get_device_details(gpus[0])
    capability = details.get("compute_capability") or (0, 0)
    return DeviceInfo(
        kind="gpu",
        platform="cuda" if tf.test.is_built_with_cuda() else "rocm",
        name=details.get("device_name", gpus[0].name),
        count=run.devices if run.distributed else len(gpus),
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
    notes = set_policy(keras, run, applied) + attention_notes(keras, run, applied) + (
        f"tensor_float_32_execution={tf.config.experimental.tensor_float_32_execution_enabled()}",
        f"jit_compile={_jit(run)} ({'XLA' if _jit(run) else 'a tf.function graph, no XLA'})",
    )
    if run.distributed:
        engine = "MultiWorkerMirroredStrategy (TF_CONFIG)" if run.nnodes > 1 else "MirroredStrategy"
        notes += (f"data_parallel={engine} over {run.devices} {device.kind} devices"
                  + (" (logical CPU devices)" if device.kind == "cpu" else "")
                  + "; gradients summed with all_reduce of losses averaged over the global batch",
                  f"sharding=contiguous slice of {run.shard_size} per replica of each global batch",
                  f"xla=replica forward and backward (jit_compile={_jit(run) and not run.sync_batch_norm}); "
                  "all-reduce and update in tf.function",
                  "batch_norm_statistics=synchronized (BatchNormalization(synchronized=True))" if run.sync_batch_norm
                  else "batch_norm_statistics=per replica; moving statistics of replica 0 (each replica updates "
                  "its own copy, Keras's default)")
    return dataclasses.replace(applied, notes=(*applied.notes, *notes))  # the kit's own notes first


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo,
) -> KerasModel:
    import keras
    import tensorflow as tf

    if run.distributed:
        return _build_mirrored(run, workload, {**initial_weights, **initial_state}, applied, device)
    device_name = "/GPU:0" if device.kind == "gpu" else "/CPU:0"
    stored = applied.output_dtype
    with tf.device(device_name):
        model = build_keras_model(keras, workload, {**initial_weights, **initial_state}, stored_dtype=stored,
                                  attention=attention_of(run), kept=applied.keep_fp32, fp8=bool(applied.fp8_matmul))
        loss_scaled = scales_loss(applied)
        optimizer = make_training_optimizer(keras, run, workload, applied, model)
        optimizer.build(model.trainable_variables)
    variables = model.trainable_variables
    mask_names = tuple(item.layer.name for item in dropouts(workload))

    def step(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(model_inputs(mask_names, images, masks), training=True), stored)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            target = optimizer.scale_loss(loss) if loss_scaled else loss
        grads = tape.gradient(target, variables)
        # Only a scaled loss can skip a step; elsewhere the check would be wasted work.
        finite = optimizer.check_finite(grads) if loss_scaled else tf.constant(True)
        optimizer.apply(grads, variables)  # LossScaleOptimizer unscales and skips non-finite steps
        return loss, finite

    def forward(images: Any) -> Any:
        return tf.cast(model(model_inputs(mask_names, images, None), training=False), stored)

    train_step = tf.function(step, jit_compile=_jit(run), reduce_retracing=True)
    predict_fn = tf.function(forward, jit_compile=_jit(run), reduce_retracing=True)
    if device.kind == "gpu":
        tf.config.experimental.reset_memory_stats("GPU:0")
    return KerasModel(model, optimizer, train_step, predict_fn, device_name, loss_scaled,
                      named_layers(workload), mask_names=mask_names, stored_dtype=stored)


@hookimpl
def stage_batches(run: RunSpec, model: KerasModel, batches: list[Batch]) -> list[tuple[Any, Any, Any]]:
    import tensorflow as tf

    if model.strategy is not None:
        staged = [_distribute(tf, run, model, b) for b in batches]
        _wait_for_copies(tf, [tensor for images, labels, _ in staged for value in (images, labels)
                              for tensor in model.strategy.experimental_local_results(value)])
        return staged
    stored = [b.astype(model.stored_dtype) for b in batches]  # float64 under fp64, else float32 as the host made them
    with tf.device(model.device_name):
        staged = [(tf.identity(tf.constant(b.images)), tf.identity(tf.constant(b.labels)),
                   {name: tf.identity(tf.constant(mask)) for name, mask in b.masks.items()})
                  for b in stored]
    _wait_for_copies(tf, [t for images, labels, _ in staged for t in (images, labels)])
    return staged


def _wait_for_copies(tf: Any, tensors: list[Any]) -> None:
    """The copies to a GPU are queued, not done: one reduction over each device's staged tensors, read back, waits
    for all of them, so no copy is still running when the first timed window starts."""
    by_device: dict[str, list[Any]] = {}
    for tensor in tensors:
        by_device.setdefault(tensor.device, []).append(tensor)
    for device, on_device in by_device.items():
        with tf.device(device):
            tf.add_n([tf.reduce_sum(tf.cast(t, tf.float32)) for t in on_device]).numpy()


def _scale(model: KerasModel) -> float | None:
    return float(model.optimizer.dynamic_scale.numpy()) if model.loss_scaled else None


@hookimpl
def train_epoch(run: RunSpec, model: KerasModel, staged: list[tuple[Any, Any, Any]], epoch: int) -> EpochResult:
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
                          wait=lambda outcome: outcome[0].numpy(), fetch=fetch,
                          samples=(lambda batch: run.batch_size) if model.strategy is not None else None,
                          meet=(lambda: _meet(tf, model.strategy)) if model.strategy is not None and run.nnodes > 1
                          else no_meet)
    result.loss_scale_final = _scale(model)
    result.extra["traces"] = int(model.train_step.experimental_get_tracing_count())
    if model.strategy is not None and run.nnodes > 1:  # the slowest worker's window, after the clock stopped
        take_slowest_window(result, lambda seconds: _slowest_window(tf, model.strategy, seconds))
    return result


@hookimpl
def reset_memory_peak(run: RunSpec, model: KerasModel, device: DeviceInfo) -> None:
    import tensorflow as tf

    if device.kind == "gpu":
        for index in range(run.local_devices if run.distributed else 1):
            tf.config.experimental.reset_memory_stats(f"GPU:{index}")


@hookimpl
def predict(run: RunSpec, model: KerasModel, images: np.ndarray, training: bool) -> np.ndarray:
    import tensorflow as tf

    with tf.device(model.device_name):
        x = tf.constant(input_array(images, model.stored_dtype))
        if not training:
            return model.predict_fn(x).numpy()
        with statistics_kept(model.model):  # a training-mode call moves the moving statistics
            return tf.cast(model.model(model_inputs(model.mask_names, x, None), training=True),
                           model.stored_dtype).numpy()


@hookimpl
def get_variables(run: RunSpec, model: KerasModel) -> dict[str, np.ndarray]:
    return read_variables(model.model, model.named, model.stored_dtype)


@hookimpl
def trace_step(run: RunSpec, model: KerasModel, staged: list[tuple[Any, Any, Any]]) -> StepTrace:
    """One training step traced layer by layer, for amp-suite numerics (amp_suite_plugins.keras.trace)."""
    from amp_suite_plugins.keras.trace import trace_on_tensorflow

    return trace_on_tensorflow(model, staged)


@hookimpl
def measure(run: RunSpec, model: KerasModel, device: DeviceInfo) -> dict[str, Any]:
    import tensorflow as tf

    figures: dict[str, Any] = {
        "param_count": int(sum(int(np.prod(v.shape)) for v in model.model.trainable_variables)),
        "framework_version": f"tensorflow {tf.__version__}, keras {package_version('keras') or '?'}",
        "train_step_traces": int(model.train_step.experimental_get_tracing_count()),
        "compilation": "XLA (jit_compile)" if _jit(run) else "tf.function graph",
        "mode": "compiled" if _jit(run) else "graph",
        "keras_backend": "tensorflow",
    }
    if device.kind == "gpu":
        gpus = [f"GPU:{i}" for i in range(run.local_devices)] if model.strategy is not None else ["GPU:0"]
        peaks = [int(tf.config.experimental.get_memory_info(gpu)["peak"]) for gpu in gpus]
        figures["device_peak_memory_bytes"] = max(peaks)
        if model.strategy is not None:
            figures["device_peak_memory_bytes_per_device"] = peaks
    return figures


@hookimpl
def runtime_versions(run: RunSpec) -> dict[str, str]:
    """The CUDA and cuDNN versions TensorFlow was built with (its GPU build loads those)."""
    import tensorflow as tf

    try:
        build = tf.sysconfig.get_build_info()
    except Exception:  # an unusual build without the record: no versions
        return {}
    found = {"cuda_runtime_version": build.get("cuda_version"), "cudnn_version": build.get("cudnn_version")}
    return {key: str(value) for key, value in found.items() if value not in (None, "", "None", 0)}


if TYPE_CHECKING:  # mypy checks every hook above against the specs' names and types (amp_suite.plugins.framework_plugin)
    import amp_suite_plugins.keras.plugin as _this_module
    from amp_suite.plugins.framework_plugin import FrameworkPlugin, ResetsMemoryPeak

    _checked: FrameworkPlugin[KerasModel, list[tuple[Any, Any, Any]]] = _this_module
    _resets_peak: ResetsMemoryPeak[KerasModel] = _this_module
