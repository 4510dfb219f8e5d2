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

Data parallel (``--devices N``): ``tf.distribute.MirroredStrategy`` over N
GPUs, or over N logical CPU devices made with
``tf.config.set_logical_device_configuration`` before TensorFlow starts, so
the same code path runs on a CPU.  Model and optimizer are built under
``strategy.scope()``; each replica takes the contiguous slice i of every
global batch (``experimental_distribute_values_from_function``), its loss is
``tf.nn.compute_average_loss`` over the *global* batch, and the replicas'
gradients are summed with one ``all_reduce`` before the (loss-scale)
optimizer sees them, so the step is the one of the mean loss over the global
batch and the finite check of ``LossScaleOptimizer`` sees the global
gradient.  The replica's forward and backward pass is the XLA-compiled part;
all-reduce and update run in the strategy's ``tf.function``.  Several nodes:
``MultiWorkerMirroredStrategy`` configured by ``TF_CONFIG``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.errors import UnsupportedError
from amp_suite.machine.environment import package_version
from amp_suite.numerics.records import StepTrace
from amp_suite.plugins.kit import (
    BUILT_IN_PRECISIONS,
    cpu_device,
    loss_scale_growth_interval,
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
    FrameworkOption,
    LayerSpec,
    PrecisionApplied,
    RunSpec,
    Workload,
)
from amp_suite.schema import Field
from amp_suite_plugins.keras.backends import ATTENTION_OPTION, attention_notes, attention_of, import_keras, set_policy
from amp_suite_plugins.keras.loss_scaling import loss_scale_optimizer, scales_loss
from amp_suite_plugins.keras.model import (
    LAYER_KINDS,
    build_keras_model,
    dropouts,
    input_array,
    model_inputs,
    named_layers,
    read_variables,
    undecayed_variables,
)

NAME = "keras"
# The keys of [frameworks.keras] this plugin reads (the loss-scaling keys every plugin reads come on top).
OPTIONS = {
    "jit_compile": FrameworkOption(Field(bool), True, "compile the train step with XLA (jit_compile=True); "
                                   "false: a tf.function graph"),
    "attention": ATTENTION_OPTION,
}


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


@dataclass
class KerasModel:
    model: Any
    optimizer: Any
    train_step: Any
    predict_fn: Any
    device_name: str
    loss_scaled: bool
    named: dict[str, LayerSpec]
    strategy: Any = None  # the tf.distribute strategy of a data-parallel cell, else None
    mask_names: tuple[str, ...] = ()  # the dropout layers, in the order of the model's mask inputs
    stored_dtype: str = "float32"  # variables, inputs, masks, logits and loss: "float64" under fp64


def _jit(run: RunSpec) -> bool:
    if run.mode:  # --modes graph,compiled
        return run.mode == "compiled"
    return bool(run.options.get("jit_compile", OPTIONS["jit_compile"].default))


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
    return dataclasses.replace(applied, notes=notes)


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo,
) -> KerasModel:
    import keras
    import tensorflow as tf

    from amp_suite_plugins.keras.parts import make_optimizer

    if run.distributed:
        return _build_mirrored(run, workload, {**initial_weights, **initial_state}, applied, device)
    device_name = "/GPU:0" if device.kind == "gpu" else "/CPU:0"
    stored = applied.output_dtype
    with tf.device(device_name):
        model = build_keras_model(keras, workload, {**initial_weights, **initial_state}, stored_dtype=stored,
                                  attention=attention_of(run), kept=applied.keep_fp32, fp8=bool(applied.fp8_matmul))
        optimizer = make_optimizer(workload.optimizer, undecayed_variables(model, workload))
        loss_scaled = scales_loss(applied)
        optimizer = loss_scale_optimizer(keras, optimizer, applied, loss_scale_growth_interval(run))
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


def _strategy(tf: Any, run: RunSpec, device: DeviceInfo) -> Any:
    if run.nnodes > 1:  # every node's TF_CONFIG names the cluster and its own task
        import json
        import os

        try:
            config = json.loads(os.environ["TF_CONFIG"])
            workers = len(config["cluster"]["worker"])
        except (KeyError, TypeError, ValueError):
            raise UnsupportedError("Keras on several nodes needs TF_CONFIG (cluster.worker and task) on every "
                                   "node; see docs/distributed.md") from None
        if workers != run.nnodes or config.get("task", {}).get("index") != run.node_rank:
            raise UnsupportedError(f"TF_CONFIG names {workers} workers and task {config.get('task')}, but the run "
                                   f"has nnodes={run.nnodes}, node_rank={run.node_rank}")
        return tf.distribute.MultiWorkerMirroredStrategy()
    kind = "GPU" if device.kind == "gpu" else "CPU"
    return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices(kind)][:run.devices])


def _build_mirrored(run: RunSpec, workload: Workload, variables: dict[str, np.ndarray],
                    applied: PrecisionApplied, device: DeviceInfo) -> KerasModel:
    """The model, optimizer and train step under a MirroredStrategy (see the module's docstring)."""
    import keras
    import tensorflow as tf

    from amp_suite_plugins.keras.parts import make_optimizer

    strategy = _strategy(tf, run, device)
    global_batch = run.batch_size
    loss_scaled = scales_loss(applied)
    stored = applied.output_dtype
    with strategy.scope():
        model = build_keras_model(keras, workload, variables, synchronized=run.sync_batch_norm, stored_dtype=stored,
                                  attention=attention_of(run), kept=applied.keep_fp32, fp8=bool(applied.fp8_matmul))
        inner = make_optimizer(workload.optimizer, undecayed_variables(model, workload))
        inner.gradients_reduced = True  # the step all-reduces the gradients itself
        optimizer = loss_scale_optimizer(keras, inner, applied, loss_scale_growth_interval(run))
        optimizer.build(model.trainable_variables)
    variables_ = model.trainable_variables
    mask_names = tuple(item.layer.name for item in dropouts(workload))

    def gradients(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(model_inputs(mask_names, images, masks), training=True), stored)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            if workload.tokens:  # one loss per token: each example's is the mean over its tokens
                per_example = tf.reduce_mean(per_example, axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            target = optimizer.scale_loss(loss) if loss_scaled else loss
        return loss, tape.gradient(target, variables_)

    # A synchronized BatchNorm all-reduces inside the forward pass, which a nested tf.function
    # cannot hold (TensorFlow forbids a synchronization point there): then no nested XLA function.
    compiled = gradients if run.sync_batch_norm else tf.function(gradients, jit_compile=_jit(run),
                                                                 reduce_retracing=True)

    def replica_step(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        loss, grads = compiled(images, labels, masks)
        context = tf.distribute.get_replica_context()
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)  # the global batch's mean gradient
        finite = optimizer.check_finite(grads) if loss_scaled else tf.constant(True)
        optimizer.apply(grads, variables_)
        return context.all_reduce(tf.distribute.ReduceOp.SUM, loss), finite

    def step(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        loss, finite = strategy.run(replica_step, args=(images, labels, masks))
        return strategy.experimental_local_results(loss)[0], strategy.experimental_local_results(finite)[0]

    def forward(images: Any) -> Any:
        return tf.cast(model(model_inputs(mask_names, images, None), training=False), stored)

    train_step = tf.function(step, reduce_retracing=True)
    predict_fn = tf.function(forward, jit_compile=_jit(run), reduce_retracing=True)
    return KerasModel(model, optimizer, train_step, predict_fn, "/CPU:0" if device.kind == "cpu" else "/GPU:0",
                      loss_scaled, named_layers(workload), strategy, mask_names, stored)


def _distribute(tf: Any, run: RunSpec, model: KerasModel, batch: Batch) -> tuple[Any, Any, Any]:
    """A global batch as per-replica values: replica i gets the contiguous slice i (on its device), masks too.

    Images and masks in the model's stored dtype (float64 under fp64), labels as they are.

    ``replica_id_in_sync_group`` counts the replicas of every worker, so on
    several nodes each takes its own slice of the same global batch.
    """
    size = run.shard_size

    def shard(array: np.ndarray) -> Any:
        def value(context: Any) -> Any:
            first = context.replica_id_in_sync_group * size
            return tf.identity(tf.constant(array[first:first + size]))
        return model.strategy.experimental_distribute_values_from_function(value)

    batch = batch.astype(model.stored_dtype)
    return shard(batch.images), shard(batch.labels), {name: shard(mask) for name, mask in batch.masks.items()}


@hookimpl
def stage_batches(run: RunSpec, model: KerasModel, batches: list[Batch]) -> list[tuple[Any, Any, Any]]:
    import tensorflow as tf

    if model.strategy is not None:
        return [_distribute(tf, run, model, b) for b in batches]
    stored = [b.astype(model.stored_dtype) for b in batches]  # float64 under fp64, else float32 as the host made them
    with tf.device(model.device_name):
        staged = [(tf.identity(tf.constant(b.images)), tf.identity(tf.constant(b.labels)),
                   {name: tf.identity(tf.constant(mask)) for name, mask in b.masks.items()})
                  for b in stored]
        # The copies to a GPU are queued, not done: one reduction over every staged tensor, read back,
        # waits for all of them, so no copy is still running when the first timed window starts.
        if staged:
            tf.add_n([tf.reduce_sum(tf.cast(t, tf.float32)) for images, labels, _ in staged
                      for t in (images, labels)]).numpy()
    return staged


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
                          samples=(lambda batch: run.batch_size) if model.strategy is not None else None)
    result.loss_scale_final = _scale(model)
    result.extra["traces"] = int(model.train_step.experimental_get_tracing_count())
    if model.strategy is not None and run.nnodes > 1:  # the slowest worker's window, after the clock stopped
        take_slowest_window(result, lambda seconds: _slowest_window(tf, model.strategy, seconds))
    return result


def _slowest_window(tf: Any, strategy: Any, seconds: float) -> float:
    """The largest of every worker's window time (tf.distribute reduces by SUM or MEAN only: gather, then max)."""
    local = strategy.run(lambda: tf.constant([seconds], tf.float64))
    return float(tf.reduce_max(strategy.gather(local, axis=0)))


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
        # A training-mode call moves the moving statistics: put them back afterwards.
        saved = [v.numpy() for v in model.model.non_trainable_variables]
        try:
            return tf.cast(model.model(model_inputs(model.mask_names, x, None), training=True),
                           model.stored_dtype).numpy()
        finally:
            for variable, value in zip(model.model.non_trainable_variables, saved, strict=True):
                variable.assign(value)


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
