"""The Flax NNX backend: ``nnx.Conv``/``nnx.Linear`` layers, optax optimizers and jmp loss scaling.

Everything amp-suite needs from a framework backend, written from
``docs/writing-a-plugin.md``, ``docs/hooks.md`` and ``docs/workloads.md``.
This module holds the hooks; each job they share out has a module of its own:

* ``net.py``: the model, built from ``workload.layers`` (the layer vocabulary)
  as NNX modules in Flax's mixed-precision convention, and its forward pass;
* ``canonical.py``: the canonical variables in and out of the NNX state, and
  AdamW's mask of the variables declared ``decay``;
* ``step.py``: the jitted train step, with ``amp_fp16``'s dynamic loss scale
  (``jmp.DynamicLossScale``) built inside the trace only;
* ``data_parallel.py``: where the arrays live, and the step over a 1-D JAX
  ``Mesh`` under ``--devices N``.

What the hooks themselves keep to:

* JAX and Flax are imported inside the hooks only, after the worker set
  ``XLA_PYTHON_CLIENT_PREALLOCATE`` (``framework_info().env``);
* logits are cast to float32; the optimizer is amp-suite's optax translation
  of ``workload.optimizer`` (``amp_suite_plugins.jax.optax_optimizer``, shared
  with the haiku plugin, so both keep docs/workloads.md's arithmetic);
* the token kinds of docs/layers.md are not built: ``framework_info`` declares
  the kinds it has (``layer_kinds``), so the host and the kit name the others;
* dropout masks come from the host (``Batch.masks``): ``stage_batches`` stages
  them with the batch, the jitted train step takes them as inputs, and
  ``predict`` drops nothing;
* the model is built traced (``nnx.eval_shape``), every value then set from
  the canonical ones, and ``EpochResult.extra["traces"]`` counts the step's
  traces;
* data parallel (``--devices N``, ``FrameworkInfo.launcher = "process"``):
  one worker drives N devices of one node (on a CPU, ``select_device`` asks
  JAX for N host devices with ``jax_num_cpu_devices`` before JAX starts its
  backend); BatchNorm normalizes with each replica's own moments and keeps the
  replicas' mean running statistics, or with the global batch's moments under
  ``run.sync_batch_norm``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_suite.plugin_api import (
    STANDARD_PRECISIONS,
    Batch,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    LayerSpec,
    PrecisionApplied,
    RunSpec,
    UnsupportedError,
    Workload,
    cpu_device,
    hookimpl,
    loss_scale_growth_interval,
    package_version,
    read_cuda_versions,
    require_device_kind,
    standard_precision,
    timed_window,
)
from amp_suite_flax.canonical import canonical_variables, decay_mask, load_canonical
from amp_suite_flax.data_parallel import AXIS, Placement, data_parallel, data_parallel_notes, placement
from amp_suite_flax.net import KINDS, Stats, build_net, check_kinds, run_layers
from amp_suite_flax.step import make_train_step
from amp_suite_plugins.jax.optax_optimizer import optax_optimizer

NAME = "flax"


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="Flax (NNX)",
        modules=("jax", "flax", "jmp", "optax"),
        extra="",  # not an amp-suite extra: this package brings its own dependencies
        precisions=STANDARD_PRECISIONS,
        env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        distributions=("flax", "jax"),
        install_command="pip install 'flax==0.12.8' 'jmp>=0.0.4' 'optax>=0.2'",
        launcher="process",  # one worker process drives every device of the cell (a JAX Mesh)
        # run as `python -m MODULE` by `amp-suite doctor` and `amp-suite calibrate`, one process each
        doctor_probe="amp_suite_flax.doctor",
        calibration_probe="amp_suite_flax.calibration",
        sync_counter="amp_suite_plugins.sync_counters:of_jax",
        layer_kinds=KINDS,  # not the token kinds: the host makes a transformer's cells unsupported, naming them
    )


@dataclass
class FlaxModel:
    """The run's state between steps: NNX graph definition, parameters, statistics, optimizer, loss scale.

    ``loss_scale`` is ``(scale, counter)`` (float32 and int32 arrays) under
    dynamic loss scaling, ``()`` otherwise: never a jmp object (see the module's docstring).
    """

    graphdef: Any
    params: Any
    stats: Stats
    opt_state: Any
    loss_scale: tuple[Any, ...]
    train_step: Any
    forward: Any
    placement: Placement
    layers: tuple[LayerSpec, ...]
    compute_dtype: str
    trace_count: list[int] = field(default_factory=lambda: [0])


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo:
    import jax

    if run.nnodes > 1:
        raise UnsupportedError("the Flax example runs data parallel on one node only (it does not call "
                               "jax.distributed.initialize): run it without --nnodes")
    if run.distributed:  # a CPU is one JAX device unless JAX is asked for more before its backend starts
        jax.config.update("jax_num_cpu_devices", run.devices)
    if run.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    try:
        gpus = jax.devices("gpu") if run.device != "cpu" else []
    except RuntimeError:
        gpus = []
    kind = require_device_kind(run, bool(gpus), "Flax")
    seen = len(gpus) if kind == "gpu" else len(jax.devices("cpu"))
    if seen < run.devices:
        raise UnsupportedError(f"{run.devices} devices asked for, JAX sees {seen} {kind.upper()} devices")
    if kind == "cpu":
        return dataclasses.replace(cpu_device(), count=run.devices)
    dev = gpus[0]
    capability = str(getattr(dev, "compute_capability", "") or "")
    major = int(capability.split(".")[0]) if capability[:1].isdigit() else 0
    stats = dev.memory_stats() or {}
    return DeviceInfo(kind="gpu", platform=dev.platform, name=dev.device_kind,
                      count=run.devices if run.distributed else len(gpus),
                      driver=getattr(dev.client, "platform_version", ""), compute_capability=capability,
                      memory_total_bytes=stats.get("bytes_limit"), supports_tf32=major >= 8)


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
    import jax

    applied = standard_precision(run, device)
    # float32 matmuls may silently use TF32 on Ampere unless asked for full precision.
    matmul = "tensorfloat32" if run.precision == "tf32" else "highest"
    jax.config.update("jax_default_matmul_precision", matmul)
    notes: tuple[str, ...] = (f"jax_default_matmul_precision={matmul}",
                              f"nnx dtype={applied.compute_dtype}, param_dtype=float32, logits float32")
    if applied.compute_dtype != "float32":
        notes += (f"batch_norm=float32 parameters, statistics and arithmetic, output {applied.compute_dtype}",
                  f"sigmoid={applied.compute_dtype} (jax.nn activations, the squeeze-and-excitation gate included, "
                  f"compute in the compute dtype); dropout masks multiplied in {applied.compute_dtype}")
    if run.distributed:
        notes += data_parallel_notes(run, device)
    return dataclasses.replace(applied, notes=(*applied.notes, *notes))  # the kit's own notes first


@hookimpl
def build_model(run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
                initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo) -> FlaxModel:
    check_kinds(workload.layers)
    import jax
    import jax.numpy as jnp
    from flax import nnx

    where = placement(run, device)
    compute = applied.compute_dtype
    layers = workload.layers
    # Traced, not run: every value is replaced by the canonical one, and nnx's initializers run eagerly would
    # compile one small XLA program each (2 to 3 s for a small CNN, in every process that builds one).
    net = nnx.eval_shape(lambda: build_net(workload, compute, run.seed, applied.keep_fp32))
    stats = load_canonical(net, layers, initial_weights, initial_state)
    graphdef, params = nnx.split(net, nnx.Param)
    params, stats = jax.device_put((params, stats), where.state)
    optimizer = optax_optimizer(workload.optimizer, backend="flax", decayed=decay_mask(workload))
    dynamic = applied.loss_scaling == "dynamic"
    static = applied.loss_scaling == "static"  # the same arrays, never adjusted
    # The loss scale crosses the jit boundary as plain arrays, (scale, counter) or (): make_train_step
    # builds the jmp object inside the trace (a jmp.DynamicLossScale output costs two host-side
    # jax.eval_shape calls at every step's unflatten).
    loss_scale = ((jnp.asarray(applied.initial_loss_scale, jnp.float32), jnp.zeros((), jnp.int32))
                  if dynamic or static else ())
    # Committed where the step's outputs will be from the start: else the second call retraces.
    # optax's init as one compiled program: run eagerly, each of its zeros compiles a program of its own.
    opt_state, loss_scale = jax.device_put((jax.jit(optimizer.init)(params), loss_scale), where.state)
    trace_count = [0]

    def apply(p: Any, s: Stats, images: Any, training: bool, sync_axis: str | None = None,
              masks: dict[str, Any] | None = None) -> tuple[Any, Stats]:
        logits, new_stats = run_layers(nnx.merge(graphdef, p), layers, images.astype(compute), training, s,
                                       sync_axis=sync_axis, masks=masks)
        return logits.astype(jnp.float32), new_stats

    step = make_train_step(apply, optimizer, trace_count, AXIS if where.mesh is not None else None,
                           run.sync_batch_norm, loss_scale_growth_interval(run) if dynamic else None,
                           static_scale=static)
    if where.mesh is not None:
        step = data_parallel(step, where.mesh)

    def forward(p: Any, s: Any, images: Any, training: bool) -> Any:
        return apply(p, s, images, training)[0]

    return FlaxModel(graphdef, params, stats, opt_state, loss_scale, jax.jit(step, donate_argnums=(0, 1, 2)),
                     jax.jit(forward, static_argnums=3), where, layers, compute, trace_count)


@hookimpl
def stage_batches(run: RunSpec, model: FlaxModel, batches: list[Batch]) -> list[tuple[Any, Any, Any]]:
    """Each batch as the step's pytree ``(images, labels, masks)`` (masks: dropout name -> mask, maybe ``{}``)."""
    import jax

    # On a mesh, device_put splits each global batch: device i gets the contiguous rows of replica i
    # (of the masks too, whose first axis is the batch's).
    staged = [jax.device_put((b.images, b.labels, dict(b.masks)), model.placement.batch) for b in batches]
    jax.block_until_ready(staged)
    return staged


@hookimpl
def train_epoch(run: RunSpec, model: FlaxModel, staged: list[tuple[Any, Any, Any]], epoch: int) -> EpochResult:
    import jax
    import jax.numpy as jnp

    def step(batch: tuple[Any, Any, Any]) -> tuple[Any, Any]:
        model.params, model.stats, model.opt_state, model.loss_scale, loss, finite = model.train_step(
            model.params, model.stats, model.opt_state, model.loss_scale, *batch)
        return loss, finite  # device values: nothing waits inside the window

    def fetch(outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
        losses, finite = jax.device_get((jnp.stack([l for l, _ in outcomes]), jnp.stack([f for _, f in outcomes])))
        return [float(v) for v in losses], [bool(v) for v in finite]

    # A staged batch on a mesh is the global batch (its shape is global), so samples count the global batch.
    result = timed_window(staged, step, wait=lambda outcome: jax.block_until_ready((model.params, outcome)),
                          fetch=fetch, guard=lambda: jax.transfer_guard_device_to_host("disallow"))
    # (scale, counter) under dynamic loss scaling, () otherwise; read after the window's clock stopped.
    result.loss_scale_final = float(model.loss_scale[0]) if model.loss_scale else None
    result.extra["traces"] = model.trace_count[0]  # becomes the run's "traces" figure
    return result


@hookimpl
def predict(run: RunSpec, model: FlaxModel, images: np.ndarray, training: bool) -> np.ndarray:
    import jax

    # On a mesh every device predicts the whole batch from its copy of the state: any batch size works.
    x = jax.device_put(np.asarray(images, dtype=np.float32), model.placement.state)
    # forward returns the logits only: the statistics a training-mode pass computes are dropped.
    return np.asarray(model.forward(model.params, model.stats, x, bool(training)), dtype=np.float32)


@hookimpl
def get_variables(run: RunSpec, model: FlaxModel) -> dict[str, np.ndarray]:
    return canonical_variables(model.layers, model.params, model.stats)


@hookimpl
def measure(run: RunSpec, model: FlaxModel, device: DeviceInfo) -> dict[str, Any]:
    import jax

    figures: dict[str, Any] = {
        "param_count": int(sum(leaf.size for leaf in jax.tree_util.tree_leaves(model.params))),
        "framework_version": ", ".join(f"{dist} {package_version(dist) or '?'}"
                                       for dist in ("flax", "jax", "jmp", "optax")),
    }
    if device.kind == "gpu":  # the largest peak of the cell's devices
        peaks = [(d.memory_stats() or {}).get("peak_bytes_in_use") for d in model.placement.devices]
        known = [int(peak) for peak in peaks if peak is not None]
        if len(known) == len(peaks):
            figures["device_peak_memory_bytes"] = max(known)
    return figures


@hookimpl
def runtime_versions(run: RunSpec) -> dict[str, str]:
    """The CUDA runtime and cuDNN versions JAX's CUDA plugin loaded (none on a CPU-only JAX)."""
    found = cuda_versions()
    return {f"{key}_version": found[key] for key in ("cuda_runtime", "cudnn") if key in found}


def cuda_versions() -> dict[str, str]:
    """``cuda_runtime``, ``cudnn`` and ``cudnn_compiled`` as JAX's CUDA plugin reports them; imports JAX.

    JAX publishes these in no public API, so this reads its private
    ``jax._src.lib.cuda_versions`` (None without a CUDA plugin), guarded: a
    JAX that moved it gives no versions rather than a failed cell.
    """
    try:
        from jax._src.lib import cuda_versions as versions
    except Exception:
        return {}
    return read_cuda_versions(versions)


if TYPE_CHECKING:  # mypy checks every hook above against amp-suite's specs (amp_suite.plugin_api.FrameworkPlugin)
    import amp_suite_flax.plugin as _this_module
    from amp_suite.plugin_api import FrameworkPlugin

    _checked: FrameworkPlugin[FlaxModel, list[tuple[Any, Any, Any]]] = _this_module
