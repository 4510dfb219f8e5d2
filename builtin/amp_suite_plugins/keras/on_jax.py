"""The ``keras@jax`` plugin: Keras 3 on its JAX backend (``KERAS_BACKEND=jax``).

The model is the one every Keras backend builds (:mod:`amp_suite_plugins.keras.model`),
its optimizer the suite's inside Keras's own ``LossScaleOptimizer`` under
``amp_fp16`` (:mod:`amp_suite_plugins.keras.backends`).  What is JAX's here:

* **Train step**: Keras's stateless API, as Keras's own JAX trainer does it:
  ``model.stateless_call`` inside ``jax.value_and_grad``, the loss scaled by
  ``LossScaleOptimizer.scale_loss`` reading the step's scale, and
  ``optimizer.stateless_apply`` (the loss-scale optimizer unscales, skips a
  non-finite step, halves or grows its scale).  The variables' values travel
  through the step as arrays and are written back to the Keras variables after
  each epoch.
* **Compilation**: ``jit_compile = true`` (the default) is ``jax.jit`` of the
  whole step, i.e. XLA, as on TensorFlow; ``false`` runs the step op by op.
* **Device**: JAX's default device, the first GPU where JAX sees one (``--device
  cpu`` pins JAX to its CPU platform before it starts).
* **TF32**: ``jax_default_matmul_precision`` (``tensorfloat32`` under tf32,
  ``highest`` otherwise), as in the JAX plugin; fp64 turns on ``jax_enable_x64``.
* **Device memory** (GPU): XLA's memory analysis of the compiled step, less its
  batch, and the allocator's peak since the process started (JAX cannot reset it).

* **Data parallel** (``--devices N``, one machine): the same stateless step
  under ``jax.jit`` of a ``jax.shard_map`` over a 1-D mesh, as the JAX plugin
  does it: variables replicated, device i takes the contiguous slice i of each
  global batch, the gradient of the global batch's mean loss (shard_map's
  autodiff sums the replicas' gradients; divided by N), loss and BatchNorm
  statistics averaged with ``lax.pmean``.  BatchNorm normalizes each shard
  with its own moments (per replica); ``--sync-batch-norm`` is declined and
  said so, since Keras's synchronized BatchNormalization is TensorFlow's only.
  ``keras.distribution.DataParallel`` is not used: under it XLA partitions
  the step as one program over the global batch, which makes BatchNorm's
  moments the global batch's, a different step from the suite's per-replica one.

No module here imports TensorFlow.
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
    read_cuda_versions,
    standard_precision,
    timed_window,
)
from amp_suite.records import (
    Batch,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    FrameworkOption,
    PrecisionApplied,
    RunSpec,
    Workload,
)
from amp_suite.schema import Field
from amp_suite_plugins.jax.devices import jax_device_info, split_host_devices
from amp_suite_plugins.keras.backends import (
    ATTENTION_OPTION,
    PROBE_BACKEND_ENV,
    attention_notes,
    attention_of,
    import_keras,
    make_training_optimizer,
    mean_cross_entropy,
    set_policy,
)
from amp_suite_plugins.keras.jax_data_parallel import AXIS, _replica_step
from amp_suite_plugins.keras.jax_memory import _compiled_step_memory
from amp_suite_plugins.keras.jax_model import KerasJaxModel, _local, _write_back
from amp_suite_plugins.keras.loss_scaling import scales_loss
from amp_suite_plugins.keras.model import (
    LAYER_KINDS,
    build_keras_model,
    dropouts,
    input_array,
    model_inputs,
    named_layers,
    read_variables,
)

NAME = "keras@jax"
OPTIONS = {
    "jit_compile": FrameworkOption(Field(bool), True, "compile the train step with XLA (jax.jit); false: op by op"),
    "attention": ATTENTION_OPTION,
}


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="Keras (JAX)",
        modules=("keras", "jax", "jaxlib"),
        extra="keras-jax",
        precisions=BUILT_IN_PRECISIONS,
        env={"KERAS_BACKEND": "jax", PROBE_BACKEND_ENV: "jax", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        distributions=("keras", "jax"),
        launcher="process",  # one worker drives every device of the machine
        options=OPTIONS,
        # compiled: the train step through jax.jit (option jit_compile true, the default); eager: op by op, no
        # XLA program (jit_compile false).  The mode, when the sweep names one, wins over the option.
        modes={"cpu": ("eager", "compiled"), "gpu": ("eager", "compiled")},
        default_mode="compiled",
        layer_kinds=LAYER_KINDS,
        doctor_probe="amp_suite_plugins.keras.backend_doctor",
        calibration_probe="amp_suite_plugins.jax.calibration",
        sync_counter="amp_suite_plugins.sync_counters:of_jax",
    )


def _jit(run: RunSpec) -> bool:
    if run.mode:  # --modes eager,compiled
        return run.mode == "compiled"
    return bool(run.options.get("jit_compile", OPTIONS["jit_compile"].default))


def _attention(run: RunSpec, device: DeviceInfo, applied: PrecisionApplied) -> str:
    """The attention that runs: the option's, except fused float16 on a CPU, which JAX cannot run.

    ``jax.nn.dot_product_attention`` asks XLA for float16 inputs with float32
    accumulation (``preferred_element_type``), which XLA's CPU ``dot_general``
    refuses ("precision F16_F16_F32 is not supported"); there the reference
    implementation runs, and the notes say so.
    """
    attention = attention_of(run)
    if attention == "fused" and device.kind == "cpu" and applied.compute_dtype == "float16":
        return "reference"
    return attention


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo:
    if run.distributed:
        if run.nnodes > 1:
            raise UnsupportedError("keras@jax runs data parallel on the devices of one machine only (nnodes=1)")
        split_host_devices(run)
    import jax

    if run.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    import_keras("jax")  # after the platform is chosen, before any other hook imports Keras
    return jax_device_info(jax, run)


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
    import jax

    applied = standard_precision(run, device)
    # Before Keras makes any array: x64 for fp64, and the float32 matmul precision (TF32 or full).
    matmul = "tensorfloat32" if run.precision == "tf32" else "highest"
    jax.config.update("jax_enable_x64", applied.param_dtype == "float64")
    jax.config.update("jax_default_matmul_precision", matmul)
    import keras

    fallback: tuple[str, ...] = ()
    if _attention(run, device, applied) != attention_of(run):
        fallback = ("attention_fallback=reference: jax.nn.dot_product_attention cannot run float16 on a CPU "
                    "(XLA's CPU dot_general has no float16 x float16 -> float32)",)
    notes = set_policy(keras, run, applied) + attention_notes(keras, run, applied) + fallback + (
        f"jax_default_matmul_precision={matmul}",
        f"jit_compile={_jit(run)} ({'XLA through jax.jit' if _jit(run) else 'op by op, no XLA program'})",
    )
    if run.distributed:
        notes += (f"data_parallel=jax.jit(shard_map) of Keras's stateless step over a 1-D Mesh of {run.devices} "
                  f"{device.kind} devices; gradients summed by shard_map autodiff and divided by N, loss and "
                  "BatchNorm statistics averaged with lax.pmean",
                  f"sharding=contiguous slice of {run.shard_size} per replica of each global batch",
                  "batch_norm_statistics=per replica; moving statistics the replicas' mean"
                  + (" (sync_batch_norm declined: Keras's synchronized BatchNormalization is TensorFlow's only)"
                     if run.sync_batch_norm else ""))
    return dataclasses.replace(applied, notes=(*applied.notes, *notes))  # the kit's own notes first


def _device(jax: Any, device: DeviceInfo) -> Any:
    return jax.devices("gpu")[0] if device.kind == "gpu" else jax.devices("cpu")[0]


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo,
) -> KerasJaxModel:
    import jax
    import keras

    stored = applied.output_dtype
    target = _device(jax, device)
    with jax.default_device(target):
        model = build_keras_model(keras, workload, {**initial_weights, **initial_state}, stored_dtype=stored,
                                  attention=_attention(run, device, applied), kept=applied.keep_fp32,
                                  fp8=bool(applied.fp8_matmul))
        optimizer = make_training_optimizer(keras, run, workload, applied, model)
        optimizer.build(model.trainable_variables)
    loss_scaled = scales_loss(applied)
    scale_index = ([id(v) for v in optimizer.variables].index(id(optimizer.dynamic_scale))
                   if loss_scaled else -1)
    mask_names = tuple(item.layer.name for item in dropouts(workload))
    traces = [0]
    replicas = run.devices if run.distributed else 1

    def loss_and_state(trainable: Any, non_trainable: Any, scale: Any, images: Any, labels: Any,
                       masks: Any) -> tuple[Any, tuple[Any, Any]]:
        logits, non_trainable = model.stateless_call(trainable, non_trainable,
                                                     model_inputs(mask_names, images, masks), training=True)
        loss = mean_cross_entropy(keras, labels, keras.ops.cast(logits, stored))
        # LossScaleOptimizer.scale_loss, with this step's scale (the stateless form of its variable)
        scaled = loss * keras.ops.cast(scale, loss.dtype) if loss_scaled else loss
        return scaled, (loss, non_trainable)

    gradient = jax.value_and_grad(loss_and_state, has_aux=True)

    def step(state: Any, images: Any, labels: Any, masks: Any) -> tuple[Any, Any, Any]:
        traces[0] += 1  # runs at each trace under jax.jit
        trainable, non_trainable, optimizer_values = state
        scale = optimizer_values[scale_index] if loss_scaled else None
        (_, (loss, non_trainable)), grads = gradient(trainable, non_trainable, scale, images, labels, masks)
        if replicas > 1:  # inside shard_map: the replicas' summed gradient (see _replica_step), made their mean
            grads = [g / replicas for g in grads]
        finite = optimizer.check_finite(grads) if loss_scaled else jax.numpy.bool_(True)
        trainable, optimizer_values = optimizer.stateless_apply(optimizer_values, grads, trainable)
        return (trainable, non_trainable, optimizer_values), loss, finite

    # Copies (the step donates its state's buffers on a GPU, and the Keras variables keep their own), committed to
    # the device: the step's outputs are, and jax.jit keys its compiles by whether an argument is committed, so
    # uncommitted copies made the second step compile the whole step again (3 steps of a tiny ViT: two compiles of
    # 2.4 and 2.9 s).  device_put copies without compiling a program per shape, as jax.numpy.copy did.
    state = jax.device_put(([v.value for v in model.trainable_variables],
                            [v.value for v in model.non_trainable_variables],
                            [v.value for v in optimizer.variables]), target, may_alias=False)
    mesh = None
    if run.distributed:
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P

        mesh = Mesh(np.array(jax.devices(device.kind)[:run.devices]), (AXIS,))
        state = jax.device_put(state, NamedSharding(mesh, P()))  # replicated on every device
        step = jax.shard_map(_replica_step(jax, step), mesh=mesh,
                             in_specs=(P(), P(AXIS), P(AXIS), P(AXIS)), out_specs=P())
    train_step = jax.jit(step, donate_argnums=(0,)) if _jit(run) or mesh is not None else step

    def forward(trainable: Any, non_trainable: Any, inputs: Any, training: bool) -> Any:
        # Stateless: a training-mode call's moved statistics are dropped, not written back.
        logits, _ = model.stateless_call(trainable, non_trainable, inputs, training=training)
        return logits

    # Compiled like the step: op by op, every operation of a new shape compiled a program of its own (resnet8: 60).
    predict_step = jax.jit(forward, static_argnames=("training",)) if _jit(run) else forward
    return KerasJaxModel(model, optimizer, train_step, state, target, loss_scaled, named_layers(workload),
                         mask_names, stored, scale_index, traces=traces, mesh=mesh, predict_step=predict_step)


@hookimpl
def stage_batches(run: RunSpec, model: KerasJaxModel, batches: list[Batch]) -> list[tuple[Any, Any, Any]]:
    import jax

    target: Any = model.device
    if model.mesh is not None:  # device i holds the contiguous slice i of every array (masks too)
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        target = NamedSharding(model.mesh, P(AXIS))
    staged = [jax.device_put((b.images, b.labels, dict(b.masks)), target)
              for b in (batch.astype(model.stored_dtype) for batch in batches)]
    if staged and model.batch_shapes is None:
        model.batch_shapes = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), staged[0])
    # device_put returns before its copies are done: they finish here, outside the window's clock, as in the
    # JAX plugin (a GPU's copies would otherwise run into the first steps of the window)
    return jax.block_until_ready(staged)


@hookimpl
def train_epoch(run: RunSpec, model: KerasJaxModel, staged: list[tuple[Any, Any, Any]], epoch: int) -> EpochResult:
    import jax

    def one(batch: tuple[Any, Any, Any]) -> tuple[Any, Any]:
        model.state, loss, finite = model.train_step(model.state, *batch)
        return loss, finite

    def fetch(outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
        losses, finite = jax.device_get(outcomes and tuple(zip(*outcomes, strict=True)))
        return [float(v) for v in losses], [bool(v) for v in finite]

    # the wait holds the last step's updated state too (eager: the loss is ready before the optimizer's updates)
    result = timed_window(staged, one, wait=lambda outcome: jax.block_until_ready((outcome[0], model.state)),
                          fetch=lambda outcomes: fetch(outcomes) if outcomes else ([], []))
    _write_back(jax, model)
    if model.loss_scaled:
        result.loss_scale_final = float(np.asarray(_local(model, model.state[2][model.scale_index])))
    result.extra["traces"] = model.traces[0]
    return result


@hookimpl
def reset_memory_peak(run: RunSpec, model: KerasJaxModel, device: DeviceInfo) -> None:
    """JAX cannot reset its allocator's peak: the GPU figure is XLA's analysis of the step (see measure)."""


@hookimpl
def predict(run: RunSpec, model: KerasJaxModel, images: np.ndarray, training: bool) -> np.ndarray:
    import jax
    import keras

    x = jax.device_put(input_array(images, model.stored_dtype), model.device)
    trainable, non_trainable, _ = _local(model, model.state)
    logits = model.predict_step(trainable, non_trainable, model_inputs(model.mask_names, x, None), training=training)
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(logits, model.stored_dtype)))


@hookimpl
def get_variables(run: RunSpec, model: KerasJaxModel) -> dict[str, np.ndarray]:
    return read_variables(model.model, model.named, model.stored_dtype)


@hookimpl
def trace_step(run: RunSpec, model: KerasJaxModel, staged: list[tuple[Any, Any, Any]]) -> StepTrace:
    """One training step traced layer by layer, for amp-suite numerics (amp_suite_plugins.keras.trace)."""
    from amp_suite_plugins.keras.trace import trace_on_jax

    return trace_on_jax(model, staged, compiled=_jit(run))


@hookimpl
def measure(run: RunSpec, model: KerasJaxModel, device: DeviceInfo) -> dict[str, Any]:
    import jax
    import keras

    figures: dict[str, Any] = {
        "param_count": int(sum(int(np.prod(v.shape)) for v in model.model.trainable_variables)),
        "framework_version": f"keras {package_version('keras') or keras.__version__}, jax {jax.__version__}",
        "keras_backend": keras.backend.backend(),
        "train_step_traces": model.traces[0],
        "compilation": "XLA (jax.jit)" if _jit(run) else "none (op by op)",
        "mode": "compiled" if _jit(run) else "eager",  # the mode the jit_compile option chose, when no --modes
    }
    if device.kind == "gpu":
        peak = int((model.device.memory_stats() or {}).get("peak_bytes_in_use", -1))
        if peak >= 0:
            figures["device_peak_memory_since_start_bytes"] = peak
        step = _compiled_step_memory(model)
        if step and model.batch_shapes is not None:
            batch = sum(int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize
                        for leaf in jax.tree_util.tree_leaves(model.batch_shapes))
            if model.mesh is not None:  # each device holds its slice of the batch
                batch //= model.mesh.devices.size
            figures["device_peak_memory_bytes"] = max(step["compiled_step_memory_bytes"] - batch, 0)
            figures["device_peak_memory_excludes_inputs"] = True
            figures["device_peak_memory_method"] = "XLA memory analysis of the compiled train step, less its batch"
    return figures


@hookimpl
def runtime_versions(run: RunSpec) -> dict[str, str]:
    """The CUDA runtime and cuDNN versions of JAX's CUDA plugin (none without one)."""
    return cuda_versions()


def cuda_versions() -> dict[str, str]:
    """``cuda_runtime_version`` and ``cudnn_version`` of JAX's CUDA plugin, from JAX's private record."""
    try:
        from jax._src.lib import cuda_versions as versions
    except Exception:  # a JAX that moved its private module: no versions
        return {}
    found = read_cuda_versions(versions)
    names = {"cuda_runtime": "cuda_runtime_version", "cudnn": "cudnn_version"}
    return {names[key]: value for key, value in found.items() if key in names}


if TYPE_CHECKING:  # mypy checks every hook above against the specs' names and types
    import amp_suite_plugins.keras.on_jax as _this_module
    from amp_suite.plugins.framework_plugin import FrameworkPlugin

    _checked: FrameworkPlugin[KerasJaxModel, list[tuple[Any, Any, Any]]] = _this_module
