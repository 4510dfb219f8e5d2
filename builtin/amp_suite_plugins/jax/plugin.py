"""The JAX plugin: dm-haiku modules, optax optimizers and jmp mixed precision.

JAX is imported inside the hooks only, after ``XLA_PYTHON_CLIENT_PREALLOCATE``
is set (else JAX takes most of a GPU's memory at start).  Recipe (jmp README
and haiku's mixed-precision API): a ``jmp.Policy`` with float32 parameters,
the precision's compute dtype and float32 output, set on the model's module
class with ``hk.mixed_precision.set_policy``, and a full-precision policy on
the BatchNorm class (float32 parameters and computation, output in the
compute dtype), as haiku's ImageNet example does; for ``amp_fp16`` a
``jmp.DynamicLossScale``: scale the loss, unscale the gradients, apply the
update only when every gradient is finite and adjust the scale.  BatchNorm
state travels through the step beside the parameters (``hk.transform_with_state``).
The whole step is jitted once with parameters, state and optimizer state donated.

``fp64``, the float64 reference of the tests: ``set_precision`` turns
``jax_enable_x64`` on (and every other precision turns it off), before
``build_model`` makes the run's first array; both jmp policies are float64
throughout, the BatchNorm state is made in float64, canonical values are cast
to the dtype haiku made each variable in, and images, masks, logits and loss
are float64 (optax keeps its moments in the parameters' dtype).

Layers: :mod:`amp_suite_plugins.jax.layers` holds one translation per layer
kind (a table; ``framework_info().layer_kinds`` are its keys), the token
kinds of ``docs/layers.md`` included.  LayerNorm and RMSNorm are float32
islands like BatchNorm (their own jmp policy); ``multi_head_attention`` is
``jax.nn.dot_product_attention`` or, with ``[frameworks.jax] attention =
"reference"``, matmul, float32 softmax, matmul.  A token workload's inputs are
int32 ids (no policy casts them), its logits ``(batch, context, vocab)`` and
its loss the mean cross-entropy over every token.  The optimizer is
:func:`amp_suite_plugins.jax.optax_optimizer.optax_optimizer`: AdamW gets the
mask of the variables declared ``decay``, and the gradients reach its clip
already unscaled.

A staged batch is the pytree ``(images, labels, masks)``: the host's dropout
masks enter the jitted step beside the images (sharded like them on a mesh)
and the model multiplies them in; evaluation and ``predict`` pass none.
Data parallel (``--devices N``): see :mod:`amp_suite_plugins.jax.data_parallel`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.machine.environment import package_version
from amp_suite.plugins.kit import (
    BUILT_IN_PRECISIONS,
    loss_scale_growth_interval,
    no_meet,
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
from amp_suite.workloads.fp8_layers import fp8_layer_names
from amp_suite.workloads.layers import iter_layers
from amp_suite_plugins.jax.cuda_versions import cuda_versions
from amp_suite_plugins.jax.data_parallel import AXIS, _join_nodes, _local, _meet, _replicate, _shard_batch
from amp_suite_plugins.jax.devices import jax_device_info, split_host_devices
from amp_suite_plugins.jax.fp8 import fp8_note
from amp_suite_plugins.jax.haiku_import import import_haiku
from amp_suite_plugins.jax.layers import (
    LAYER_KINDS,
    attention_implementation,
    module_classes,
    translation,
)
from amp_suite_plugins.jax.memory import _compiled_step_memory, _per_device_bytes
from amp_suite_plugins.jax.model import JaxModel, _scale_value
from amp_suite_plugins.jax.optax_optimizer import optax_optimizer
from amp_suite_plugins.jax.options import OPTIONS, _option, _token_notes
from amp_suite_plugins.jax.trace import trace_step  # noqa: F401 - this plugin's trace_step hook (amp-suite numerics)
from amp_suite_plugins.jax.train_step import train_step_functions
from amp_suite_plugins.jax.variables import (
    _canonical_key,
    _decay_mask,
    _depthwise_kernels,
    _from_haiku_layout,
    _load_canonical,
)

NAME = "jax"


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="JAX (haiku)",
        modules=("jax", "jaxlib", "haiku", "jmp", "optax"),
        extra="jax",
        precisions=BUILT_IN_PRECISIONS,
        env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        distributions=("jax",),
        launcher="process",  # one worker per node drives every device of the node
        doctor_probe="amp_suite_plugins.jax.doctor",
        calibration_probe="amp_suite_plugins.jax.calibration",
        sync_counter="amp_suite_plugins.sync_counters:of_jax",
        modes={"cpu": ("compiled",), "gpu": ("compiled",)},  # one jitted step: jax.jit is its only mode
        default_mode="compiled",
        options=OPTIONS,
        layer_kinds=LAYER_KINDS,
    )


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo:
    if run.distributed:
        split_host_devices(run)
    import jax

    if run.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    if run.nnodes > 1:
        _join_nodes(jax, run)
    return jax_device_info(jax, run)


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
    import jax

    # fp8 is emulated on every device: XLA did not rewrite the pattern into an FP8 GEMM on an H100 (fp8.py)
    applied = standard_precision(run, device)
    # float32 matmuls may silently use TF32 on Ampere unless asked for full precision.
    matmul = "tensorfloat32" if run.precision == "tf32" else "highest"
    jax.config.update("jax_default_matmul_precision", matmul)
    # 64-bit arrays exist only with x64 on: a process-global switch, set both ways before build_model makes
    # any array of the run (arrays made under the other setting keep their dtype; jit caches key on it).
    float64 = applied.param_dtype == "float64"
    jax.config.update("jax_enable_x64", float64)
    stored = applied.param_dtype
    notes: tuple[str, ...] = (f"jax_default_matmul_precision={matmul}", f"jax_enable_x64={float64}",
                              f"jmp_policy=params={stored},compute={applied.compute_dtype},output={stored}")
    if float64:
        notes += ("batch_norm=jmp policy params=float64,compute=float64,output=float64; running statistics, "
                  "optimizer state, images, dropout masks, logits and loss in float64",)
    elif applied.compute_dtype != "float32":
        notes += (f"batch_norm=jmp policy params=float32,compute=float32,output={applied.compute_dtype}",
                  f"sigmoid={applied.compute_dtype} (jax.nn activations, the squeeze-and-excitation gate included, "
                  "compute in the model's jmp compute dtype); dropout masks multiplied in "
                  f"{applied.compute_dtype}")
    notes += _token_notes(run, device, applied)
    if applied.fp8_matmul:
        notes += (fp8_note(),
                  "fp8 layers=jmp policy params=float32,compute=float32,output=bfloat16 around the FP8 matmul")
    if run.distributed:
        notes += (f"data_parallel=jax.jit(shard_map) over a 1-D Mesh of {run.devices} {device.kind} devices"
                  + (f" in {run.nnodes} processes (jax.distributed)" if run.nnodes > 1 else "")
                  + "; gradients summed by shard_map autodiff and divided by N, loss averaged with lax.pmean",
                  f"sharding=NamedSharding P('data'): contiguous slice of {run.shard_size} per device; "
                  "parameters and state replicated",
                  "batch_norm_statistics=synchronized (batch moments averaged over the mesh)" if run.sync_batch_norm
                  else "batch_norm_statistics=per replica; running statistics averaged over the replicas")
    return dataclasses.replace(applied, notes=(*applied.notes, *notes))  # the kit's own notes first


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo,
) -> JaxModel:
    import jax
    import jax.numpy as jnp
    import jmp

    hk = import_haiku()
    dev = jax.devices("gpu")[0] if device.kind == "gpu" else jax.devices("cpu")[0]
    mesh = process = None
    if run.distributed:
        from jax.sharding import Mesh

        from amp_suite.launchers import this_process

        process = this_process(run)
        mesh = Mesh(np.array(jax.devices(device.kind)[:run.devices]), (AXIS,))
        dev = jax.local_devices()[0]
    stored = jnp.dtype(applied.param_dtype)  # float32; float64 under fp64 (set_precision turned x64 on)
    for spec in iter_layers(workload.layers):  # a kind the table lacks is refused before anything is traced
        translation(spec.kind, spec.name)
    classes = module_classes(workload.layers, AXIS if run.sync_batch_norm and mesh is not None else None,
                             run.devices, stored.name, kept=applied.keep_fp32,
                             fp8=fp8_layer_names(workload.layers) if applied.fp8_matmul else ())
    net_class = classes.net
    compute = jnp.dtype(applied.compute_dtype)
    hk.mixed_precision.set_policy(net_class, jmp.Policy(param_dtype=stored, compute_dtype=compute,
                                                        output_dtype=stored))
    for island in classes.float32_islands:  # batch_norm, layer_norm, rms_norm: statistics in float32
        hk.mixed_precision.set_policy(island, jmp.Policy(param_dtype=stored, compute_dtype=stored,
                                                         output_dtype=compute))
    attention = attention_implementation(_option(run, "attention"), device.kind, applied.compute_dtype)[0]
    net = hk.transform_with_state(
        lambda x, is_training, sync=False, masks=None: net_class()(x, is_training, sync, masks, attention))
    sync = bool(mesh is not None and run.sync_batch_norm)  # only the train step runs inside shard_map
    example = jax.ShapeDtypeStruct((1, *workload.input_shape), jnp.int32 if workload.tokens else stored)
    # evaluation mode: the same variables, and no batch statistics of a one-example batch (n - 1 = 0 at 1x1).
    # Only the tree's names, shapes and dtypes are kept (every value becomes the canonical one), so init is traced,
    # not run: run eagerly it compiled every initializer op by op (an fp64 EfficientNet-B0: 450 XLA programs).
    params, state = jax.eval_shape(lambda key, x: net.init(key, x, False), jax.random.PRNGKey(run.seed), example)
    depthwise = _depthwise_kernels(workload)
    params = _load_canonical(params, initial_weights, depthwise)
    state = _load_canonical(state, initial_state, depthwise)
    put = (lambda tree: _replicate(jax, mesh, tree)) if mesh is not None else (lambda tree: jax.device_put(tree, dev))
    params, state = put(params), put(state)
    optimizer = optax_optimizer(workload.optimizer, decayed=_decay_mask(workload))
    dynamic = applied.loss_scaling == "dynamic"
    scaled = applied.loss_scaling in ("dynamic", "static")  # static: jmp.StaticLossScale, steps still checked
    period = loss_scale_growth_interval(run)
    # the loss scale crosses the jit boundary as plain arrays (scale, counter): see train_step.py
    loss_scale = ((jnp.asarray(applied.initial_loss_scale, jnp.float32), jnp.zeros((), jnp.int32))
                  if scaled else ())
    # Everything the step takes is committed to the device from the start, as its
    # outputs will be: otherwise the second call compiles the step again.
    # optax's init compiled: its zeros, one per parameter, would otherwise compile one by one
    init_optimizer = jax.jit(optimizer.init)
    if mesh is None:
        opt_state, loss_scale = jax.device_put((init_optimizer(params), loss_scale), dev)
    else:
        opt_state, loss_scale = put(jax.device_get((init_optimizer(params), loss_scale)))
    trace_count = [0]
    step, forward = train_step_functions(net, optimizer, stored, applied.loss_scaling, period, sync, mesh,
                                         run.devices, trace_count)
    train_step = jax.jit(step, donate_argnums=(0, 1, 2))
    return JaxModel(params, state, opt_state, loss_scale, train_step,
                    jax.jit(forward, static_argnums=3), dev, trace_count, net_class, mesh, process,
                    depthwise=depthwise, stored_dtype=stored.name, net=net, optimizer=optimizer, sync=sync,
                    loss_scale_period=period if dynamic else 0)


@hookimpl
def stage_batches(run: RunSpec, model: JaxModel, batches: list[Batch]) -> list[tuple[Any, Any, Any]]:
    """Each batch as the step's pytree ``(images, labels, masks)`` on the device (masks: maybe ``{}``).

    Images and masks are float32, as the host made them, or float64 under fp64.
    """
    import jax

    batches = [b.astype(model.stored_dtype) for b in batches]
    if model.mesh is not None:
        staged = [_shard_batch(jax, run, model, b) for b in batches]
    else:
        staged = [jax.device_put((b.images, b.labels, dict(b.masks)), model.device) for b in batches]
    jax.block_until_ready(staged)
    if staged and model.batch_shapes is None:
        model.batch_shapes = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), staged[0])
    return staged


@hookimpl
def train_epoch(run: RunSpec, model: JaxModel, staged: list[tuple[Any, Any, Any]], epoch: int) -> EpochResult:
    import jax
    import jax.numpy as jnp

    def step(batch: tuple[Any, Any, Any]) -> tuple[Any, Any]:
        model.params, model.state, model.opt_state, model.loss_scale, loss, finite = model.train_step(
            model.params, model.state, model.opt_state, model.loss_scale, *batch)
        return loss, finite

    def fetch(outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
        if not outcomes:
            return [], []
        if model.mesh is not None:  # replicated values: one device's copy is the value
            outcomes = _local(jax, outcomes)
        losses, finite = jax.device_get((jnp.stack([l for l, _ in outcomes]), jnp.stack([f for _, f in outcomes])))
        return [float(v) for v in losses], [bool(v) for v in finite]

    # The transfer guard makes any device-to-host copy inside the window an error.
    result = timed_window(staged, step, wait=lambda outcome: jax.block_until_ready((model.params, outcome)),
                          fetch=fetch, guard=lambda: jax.transfer_guard_device_to_host("disallow"),
                          meet=_meet if model.process is not None and model.process.num_processes > 1 else no_meet)
    result.loss_scale_final = _scale_value(model)
    result.extra["traces"] = model.trace_count[0]
    if model.process is not None and model.process.num_processes > 1:
        from jax.experimental import multihost_utils

        take_slowest_window(result, lambda seconds: float(np.max(multihost_utils.process_allgather(
            np.asarray([seconds])))))
    return result


@hookimpl
def predict(run: RunSpec, model: JaxModel, images: np.ndarray, training: bool) -> np.ndarray:
    import jax

    inputs = np.asarray(images)  # token ids stay int32; images take the stored dtype
    x = jax.device_put(inputs.astype(np.int32) if np.issubdtype(inputs.dtype, np.integer)
                       else inputs.astype(model.stored_dtype), model.device)
    params, state = (model.params, model.state) if model.mesh is None else _local(jax, (model.params, model.state))
    # apply returns new state beside the logits; dropping it leaves the model untouched.
    return np.asarray(model.forward(params, state, x, bool(training)), dtype=model.stored_dtype)


@hookimpl
def get_variables(run: RunSpec, model: JaxModel) -> dict[str, np.ndarray]:
    import jax

    out = {}
    trees = (model.params, model.state) if model.mesh is None else _local(jax, (model.params, model.state))
    for tree in trees:
        for module_path, leaves in tree.items():
            for leaf, value in leaves.items():
                # a copy: a CPU array may share its buffer, which the next (donating) step reuses
                key = _canonical_key(module_path, leaf)
                out[key] = _from_haiku_layout(key, np.array(value, dtype=model.stored_dtype, copy=True),
                                              model.depthwise)
    return out


@hookimpl
def measure(run: RunSpec, model: JaxModel, device: DeviceInfo) -> dict[str, Any]:
    import jax

    figures: dict[str, Any] = {
        "param_count": int(sum(leaf.size for leaf in jax.tree_util.tree_leaves(model.params))),
        "framework_version": f"jax {jax.__version__}, dm-haiku {package_version('dm-haiku') or '?'}, "
                             f"jmp {package_version('jmp') or '?'}",
        "train_step_traces": model.trace_count[0],
        "compilation": "XLA (jax.jit)",
    }
    figures.update(_compiled_step_memory(jax, model))
    if device.kind == "gpu":
        devices = [model.device] if model.mesh is None else [d for d in model.mesh.devices.flat
                                                              if d.process_index == jax.process_index()]
        peaks = [int((d.memory_stats() or {}).get("peak_bytes_in_use", -1)) for d in devices]
        if peaks and min(peaks) >= 0:
            # JAX cannot reset this peak: it counts from the process's start (compilation and
            # autotuning scratch included), so it is kept under its own name only.
            figures["device_peak_memory_since_start_bytes"] = max(peaks)
        step_bytes = figures.get("compiled_step_memory_bytes")
        if step_bytes is not None and model.batch_shapes is not None:
            # The same meaning as PyTorch's and Keras's post-warm-up allocator peak without the
            # staged inputs: what one training step holds at its peak (parameters, state,
            # optimizer state, gradients, activations), from XLA's analysis of the compiled step,
            # less the batch it takes as arguments.  Per device.
            batch = sum(_per_device_bytes(leaf) for leaf in jax.tree_util.tree_leaves(model.batch_shapes))
            figures["device_peak_memory_bytes"] = max(int(step_bytes) - batch, 0)
            figures["device_peak_memory_excludes_inputs"] = True
            figures["device_peak_memory_method"] = "XLA memory analysis of the compiled train step, less its batch"
    return figures


@hookimpl
def runtime_versions(run: RunSpec) -> dict[str, str]:
    """The CUDA runtime and cuDNN versions of JAX's CUDA plugin (none without one)."""
    found = cuda_versions()
    names = {"cuda_runtime": "cuda_runtime_version", "cudnn": "cudnn_version"}
    return {names[key]: value for key, value in found.items() if key in names}


if TYPE_CHECKING:  # mypy checks every hook above against the specs' names and types (amp_suite.plugins.framework_plugin)
    import amp_suite_plugins.jax.plugin as _this_module
    from amp_suite.plugins.framework_plugin import FrameworkPlugin

    _checked: FrameworkPlugin[JaxModel, list[tuple[Any, Any, Any]]] = _this_module
