"""The Flax NNX backend: ``nnx.Conv``/``nnx.Linear`` layers, optax optimizers and jmp loss scaling.

Everything amp-suite needs from a framework backend, written from
``docs/writing-a-plugin.md``, ``docs/hooks.md`` and ``docs/workloads.md``:

* JAX and Flax are imported inside the hooks only, after the worker set
  ``XLA_PYTHON_CLIENT_PREALLOCATE`` (``framework_info().env``);
* the model is built from ``workload.layers`` (the layer vocabulary) with the
  canonical variables; mixed precision follows Flax's own convention:
  ``param_dtype=float32`` and ``dtype=<compute dtype>`` on every ``nnx.Conv``
  and ``nnx.Linear``, logits cast to float32, and a BatchNorm of our own whose
  parameters, statistics and arithmetic stay float32 (PyTorch's running
  statistics: momentum 0.1, unbiased variance);
* every kind of the layer vocabulary (``amp_suite.plugin_api.LAYER_KINDS``) is
  translated as the built-in haiku plugin translates it: ``depthwise_conv2d``
  is an ``nnx.Conv`` with ``feature_group_count`` = channels (kernel
  ``(k, k, 1, c)``, the canonical ``(k, k, c, 1)`` reshaped), ``zero_pad`` a
  ``jnp.pad``, ``relu6``/``swish``/``sigmoid`` the ``jax.nn`` functions in the
  compute dtype, ``multiply`` the squeeze-and-excitation product ``x * body(x)``;
* the optimizer is amp-suite's optax translation of ``workload.optimizer``
  (``amp_suite_plugins.jax.optax_optimizer``, shared with the haiku plugin, so
  both keep docs/workloads.md's arithmetic; ``adamw`` gets the mask of the
  variables declared ``decay``);
* the token kinds of docs/layers.md are not built: ``framework_info`` declares
  the kinds it has (``layer_kinds``), so the host and the kit name the others;
* dropout masks come from the host (``Batch.masks``): ``stage_batches`` stages
  them with the batch, the jitted train step takes them as inputs and
  multiplies each ``dropout`` layer's activation by its mask (``(batch,)``
  masks, per-sample stochastic depth, broadcast over the example);
  ``predict`` drops nothing;
* ``amp_fp16`` scales the loss with ``jmp.DynamicLossScale``: an overflowing
  step changes no parameter and halves the scale.  The scale crosses the jit
  boundary as plain arrays ``(scale, counter)`` (``()`` without loss scaling)
  and becomes a ``jmp.DynamicLossScale`` inside the traced step only: jmp
  0.0.4's ``DynamicLossScale.__post_init__`` runs ``jax.eval_shape`` twice on
  the host at every unflatten, so a jmp object as the step's output cost
  every step 0.5 ms on a CPU and 1.6 ms on an H100;
* the train step is a pure function of (parameters, BatchNorm statistics,
  optimizer state, loss scale, batch and masks), jitted once with the first
  three donated: the parameters are an ``nnx.State`` (``nnx.split``/``nnx.merge``), the running
  statistics a plain ``{layer: {"mean", "var"}}`` dict that the forward pass
  returns updated, as haiku's state (an NNX ``BatchStat`` cannot be assigned
  under ``jax.grad`` inside ``jit``: flax raises ``TraceContextError``);
  ``EpochResult.extra["traces"]`` counts the step's traces;
* data parallel (``--devices N``, ``FrameworkInfo.launcher = "process"``):
  one worker drives N devices of one node (on a CPU, ``select_device`` asks
  JAX for N host devices with ``jax_num_cpu_devices`` before JAX starts its
  backend).  The same step runs under ``jax.jit`` of a ``jax.shard_map`` over
  a 1-D ``Mesh`` (axis ``"data"``): parameters, statistics, optimizer state
  and loss scale are replicated, device i holds the contiguous slice i of
  each global batch, and the step differentiates the global batch's mean
  loss (``lax.pmean`` of the replicas' losses), so every device applies the
  update one device would apply for that loss.  BatchNorm normalizes with
  each replica's own moments and keeps the replicas' mean running
  statistics, or with the global batch's moments under
  ``run.sync_batch_norm``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
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
    keeps,
    loss_scale_growth_interval,
    package_version,
    read_cuda_versions,
    require_device_kind,
    standard_precision,
    timed_window,
    walk,
)
from amp_suite_plugins.jax.optax_optimizer import optax_optimizer

NAME = "flax"
# Canonical leaf name -> the nnx attribute holding it, per layer kind.
LEAVES = {"conv2d": {"w": "kernel", "b": "bias"}, "depthwise_conv2d": {"w": "kernel", "b": "bias"},
          "dense": {"w": "kernel", "b": "bias"}, "batch_norm": {"scale": "scale", "offset": "offset"}}
# The layer kinds this backend builds (the whole vocabulary of amp_suite.plugin_api.LAYER_KINDS);
# build_model refuses a model with any other (UnsupportedError), as a backend does for a kind it lacks.
KINDS = ("conv2d", "depthwise_conv2d", "zero_pad", "batch_norm", "relu", "relu6", "swish", "sigmoid", "residual",
         "multiply", "max_pool", "avg_pool", "global_avg_pool", "flatten", "dense", "dropout")
# BatchNorm statistics: {layer: {"mean": array, "var": array}}, float32.
Stats = dict[str, dict[str, Any]]
# The data-parallel mesh's one axis: device i of the mesh holds slice i of every global batch.
AXIS = "data"


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


@dataclass(frozen=True)
class Placement:
    """Where the run's arrays live: on one device, or replicated and sharded over a data-parallel mesh.

    ``state`` is the sharding of parameters, statistics, optimizer state, loss
    scale and prediction inputs (one device, or a copy on every device of the
    mesh); ``batch`` the sharding of a staged training batch (one device, or
    contiguous row slices over the mesh); ``mesh`` is None on one device.
    """

    devices: tuple[Any, ...]
    state: Any
    batch: Any
    mesh: Any = None


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


def data_parallel_notes(run: RunSpec, device: DeviceInfo) -> tuple[str, ...]:
    """What a data-parallel cell's record says: the engine, the batch's layout and BatchNorm's statistics."""
    batch_norm = ("batch_norm_statistics=synchronized (batch moments averaged over the mesh)" if run.sync_batch_norm
                  else "batch_norm_statistics=per replica; running statistics averaged over the replicas")
    return (f"data_parallel=jax.jit(jax.shard_map) over a 1-D Mesh of {run.devices} {device.kind} devices; "
            "gradient of the global batch's mean loss (lax.pmean of the replicas' losses)",
            f"sharding=contiguous slice of {run.shard_size} per device of each global batch; parameters, "
            "statistics and optimizer state replicated",
            batch_norm)


def placement(run: RunSpec, device: DeviceInfo) -> Placement:
    """One device, or a 1-D mesh over ``run.devices`` devices with replicated state and sharded batches."""
    import jax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

    devices = tuple(jax.devices(device.kind)[:run.devices])
    if not run.distributed:
        one = SingleDeviceSharding(devices[0])
        return Placement(devices, one, one)
    mesh = Mesh(np.array(devices), (AXIS,))
    return Placement(devices, NamedSharding(mesh, PartitionSpec()), NamedSharding(mesh, PartitionSpec(AXIS)), mesh)


def _batch_norm_class() -> type:
    """The suite's BatchNorm as an NNX module (defined lazily: flax is imported inside the hooks)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    class BatchNorm(nnx.Module):
        """Batch statistics in training, running ones in evaluation; float32 throughout.

        ``nnx.BatchNorm`` updates its running variance with the biased batch
        variance and takes momentum the other way round; the suite's running
        statistics track the *unbiased* variance with PyTorch's momentum.
        """

        def __init__(self, channels: int, spec: LayerSpec, compute_dtype: str) -> None:
            self.scale = nnx.Param(jnp.ones((channels,), jnp.float32))
            self.offset = nnx.Param(jnp.zeros((channels,), jnp.float32))
            self.momentum, self.epsilon, self.compute_dtype = spec.momentum, spec.epsilon, compute_dtype

        def __call__(self, x: Any, training: bool, stats: dict[str, Any],
                     sync_axis: str | None = None) -> tuple[Any, dict[str, Any]]:
            """``(y, new_stats)``: the statistics are passed in and returned, never assigned.

            Inside the data-parallel step, ``sync_axis`` (the mesh axis) makes the
            batch moments those of the global batch: every replica's shard has the
            same size, so the mean of the replicas' means is the global mean, and the
            mean of their squared deviations from it the global (biased) variance.
            """
            x = x.astype(jnp.float32)
            if training:
                mean = _mean_over_replicas(jnp.mean(x, axis=(0, 1, 2)), sync_axis)
                var = _mean_over_replicas(jnp.mean(jnp.square(x - mean), axis=(0, 1, 2)), sync_axis)
                count = x.size // x.shape[-1] * (jax.lax.axis_size(sync_axis) if sync_axis else 1)
                stats = {"mean": (1 - self.momentum) * stats["mean"] + self.momentum * mean,
                         "var": (1 - self.momentum) * stats["var"] + self.momentum * var * (count / (count - 1))}
            else:
                mean, var = stats["mean"], stats["var"]
            y = (x - mean) * (self.scale[...] * jax.lax.rsqrt(var + self.epsilon)) + self.offset[...]
            return y.astype(self.compute_dtype), stats

    return BatchNorm


def _mean_over_replicas(value: Any, axis: str | None) -> Any:
    """``value`` averaged over the mesh axis ``axis`` (inside ``shard_map``), or ``value`` itself."""
    import jax

    return value if axis is None else jax.lax.pmean(value, axis)


def build_net(workload: Workload, compute_dtype: str, seed: int = 0, kept: tuple[str, ...] = ()) -> Any:
    """An ``nnx.Module`` with one attribute per named layer of ``workload.layers`` (random initial values).

    ``kept`` (option ``keep_fp32``, ``applied.keep_fp32``) names the layers and
    kinds that compute in float32: their modules get ``dtype=float32`` and
    :func:`run_layers` casts their input up and their output back.
    """
    import jax.numpy as jnp
    from flax import nnx

    rngs = nnx.Rngs(seed)
    batch_norm = _batch_norm_class()
    net: Any = nnx.Module()
    net.kept = tuple(kept)
    for item in walk(workload.layers, workload.input_shape):
        spec, channels = item.layer, item.input_shape[-1]
        dtype = "float32" if keeps(spec, kept) else compute_dtype
        if spec.kind in ("conv2d", "depthwise_conv2d"):
            pad = ((spec.padding, spec.padding),) * 2  # symmetric: spec.padding zero pixels on every side
            # depthwise: one filter per channel, kernel (k, k, 1, c) (the canonical one is (k, k, c, 1))
            features, groups = (spec.features, 1) if spec.kind == "conv2d" else (channels, channels)
            layer: Any = nnx.Conv(channels, features, (spec.kernel_size,) * 2, strides=spec.stride, padding=pad,
                             feature_group_count=groups, use_bias=spec.use_bias, dtype=dtype,
                             param_dtype=jnp.float32, rngs=rngs)
        elif spec.kind == "dense":
            layer = nnx.Linear(channels, spec.features, use_bias=spec.use_bias, dtype=dtype,
                               param_dtype=jnp.float32, rngs=rngs)
        elif spec.kind == "batch_norm":
            layer = batch_norm(channels, spec, compute_dtype)
        else:
            continue
        setattr(net, spec.name, layer)
    return net


def run_layers(net: Any, layers: tuple[LayerSpec, ...], x: Any, training: bool, stats: Stats,
               record: Callable[[str, Any], None] | None = None,
               sync_axis: str | None = None, masks: dict[str, Any] | None = None) -> tuple[Any, Stats]:
    """The forward pass of the layer vocabulary over ``net``'s modules (NHWC): ``(output, new_stats)``.

    ``x`` is in the compute dtype and every layer keeps it there (BatchNorm
    computes in float32 and hands back the compute dtype).  ``sync_axis`` (a
    mesh axis, inside ``shard_map`` only) synchronizes BatchNorm's batch
    moments over it.  ``masks`` (dropout layer name -> the host's scaled
    mask) is given by the train step only: without it ``dropout`` is the
    identity (evaluation, ``predict``).  ``record(kind, output)`` sees the
    output of every conv2d, depthwise_conv2d, dense and sigmoid layer.
    """
    import jax
    import jax.numpy as jnp

    def run(body: tuple[LayerSpec, ...], x: Any, stats: Stats) -> tuple[Any, Stats]:
        return run_layers(net, body, x, training, stats, record, sync_axis, masks)

    stats = dict(stats)
    kept = getattr(net, "kept", ())
    for spec in layers:
        kind = spec.kind
        narrow = x.dtype if keeps(spec, kept) else None  # keep_fp32: in float32, the output cast back below
        if narrow is not None:
            x = x.astype(jnp.float32)
        if kind in ("conv2d", "depthwise_conv2d", "dense"):
            x = getattr(net, spec.name)(x)
        elif kind == "batch_norm":
            x, stats[spec.name] = getattr(net, spec.name)(x, training, stats[spec.name], sync_axis)
        elif kind == "relu":
            x = jax.nn.relu(x)
        elif kind == "relu6":
            x = jax.nn.relu6(x)
        elif kind == "swish":
            x = jax.nn.swish(x)
        elif kind == "sigmoid":
            x = jax.nn.sigmoid(x)
        elif kind == "residual":
            body, stats = run(spec.body, x, stats)
            shortcut, stats = run(spec.shortcut, x, stats)
            x = body + shortcut
        elif kind == "multiply":  # squeeze-and-excitation: body(x) is (n, 1, 1, c), broadcast over h and w
            gate, stats = run(spec.body, x, stats)
            x = x * gate
        elif kind == "dropout":
            if masks is not None:  # training steps only; the mask is (n, *activation) or (n,) per sample
                keep = masks[spec.name].astype(x.dtype)
                x = x * (keep.reshape((-1,) + (1,) * (x.ndim - 1)) if keep.ndim == 1 else keep)
        elif kind == "zero_pad":
            top, bottom, left, right = spec.pads
            x = jnp.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
        elif kind in ("max_pool", "avg_pool"):
            window, strides = (1, spec.window, spec.window, 1), (1, spec.stride, spec.stride, 1)
            if kind == "max_pool":
                x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, "VALID")
            else:
                x = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, strides, "VALID") / (spec.window ** 2)
        elif kind == "global_avg_pool":
            x = jnp.mean(x, axis=(1, 2), keepdims=spec.keepdims)
        elif kind == "flatten":
            x = x.reshape(x.shape[0], -1)
        else:
            raise ValueError(f"flax plugin cannot build layer kind {kind!r}")
        if record and kind in ("conv2d", "depthwise_conv2d", "dense", "sigmoid"):
            record(kind, x)
        if narrow is not None:
            x = x.astype(narrow)
    return x, stats


def check_kinds(layers: tuple[LayerSpec, ...]) -> None:
    """A one-line :class:`UnsupportedError` naming the first layer of a kind this backend does not build."""
    from amp_suite.plugin_api import iter_layers

    for spec in iter_layers(layers):
        if spec.kind not in KINDS:
            where = f" (layer {spec.name!r})" if spec.name else ""
            raise UnsupportedError(f"the flax backend does not build layer kind {spec.kind!r}{where}; "
                                   f"it builds {', '.join(KINDS)}")


def _owners(layers: tuple[LayerSpec, ...]) -> dict[str, str]:
    """Layer name -> kind, for every named layer."""
    from amp_suite.plugin_api import iter_layers

    return {spec.name: spec.kind for spec in iter_layers(layers) if spec.name}


def _to_flax_layout(kind: str, value: np.ndarray) -> np.ndarray:
    """A canonical depthwise kernel (k, k, c, 1) as nnx.Conv's grouped kernel (k, k, 1, c) (same memory order)."""
    return value.reshape(*value.shape[:2], 1, value.shape[2]) if kind == "depthwise_conv2d" and value.ndim == 4 \
        else value


def _from_flax_layout(kind: str, value: np.ndarray) -> np.ndarray:
    return value.reshape(*value.shape[:2], value.shape[3], 1) if kind == "depthwise_conv2d" and value.ndim == 4 \
        else value


def _canonical_name(kinds: dict[str, str], path: str) -> str:
    """``layer/attribute[/value]`` of an nnx parameter as its canonical name ``layer/leaf`` (``conv1/bias``:
    ``conv1/b``)."""
    layer, attribute = path.removesuffix("/value").split("/")[:2]
    return f"{layer}/{next(leaf for leaf, name in LEAVES[kinds[layer]].items() if name == attribute)}"


def load_canonical(net: Any, layers: tuple[LayerSpec, ...], weights: dict[str, np.ndarray],
                   state: dict[str, np.ndarray]) -> Stats:
    """Give ``net``'s parameters the canonical values.

    ``net`` may be abstract (:func:`flax.nnx.eval_shape` of :func:`build_net`):
    every parameter must then get a value here, or this raises ``ValueError``.
    The layouts are the same (HWIO, (in, out), NHWC) but a depthwise kernel's:
    canonical ``(k, k, c, 1)``, nnx's ``(k, k, 1, c)`` (:func:`_to_flax_layout`).

    Returns the BatchNorm statistics of ``state`` as ``{layer: {"mean", "var"}}``.
    """
    import jax
    import jax.numpy as jnp
    from flax import nnx

    kinds = _owners(layers)
    for key, value in weights.items():
        layer, _, leaf = key.rpartition("/")
        variable = getattr(getattr(net, layer), LEAVES[kinds[layer]][leaf])
        value = _to_flax_layout(kinds[layer], value)
        if tuple(variable.shape) != value.shape:
            raise ValueError(f"{key}: canonical shape {value.shape} != flax {tuple(variable.shape)}")
        variable.set_value(jnp.asarray(value, jnp.float32))
    # A parameter the canonical weights do not name would keep its traced placeholder, and fail far from here.
    unset = [_canonical_name(kinds, jax.tree_util.keystr(path, simple=True, separator="/"))
             for path, leaf in jax.tree_util.tree_leaves_with_path(nnx.state(net, nnx.Param))
             if not isinstance(leaf, jax.Array)]
    if unset:
        raise ValueError(f"no canonical value for {', '.join(sorted(unset))}")
    stats: Stats = {}
    for key, value in state.items():
        layer, _, leaf = key.rpartition("/")
        stats.setdefault(layer, {})[leaf] = jnp.asarray(value, jnp.float32)
    return stats


def canonical_variables(layers: tuple[LayerSpec, ...], params: Any, stats: Stats) -> dict[str, np.ndarray]:
    """The inverse of :func:`load_canonical`: canonical names, float32 numpy copies."""
    from flax import nnx

    kinds = _owners(layers)
    out = {}
    for path, variable in nnx.to_flat_state(params):
        layer, attr = str(path[0]), str(path[-1])
        leaf = next(k for k, v in LEAVES[kinds[layer]].items() if v == attr)
        out[f"{layer}/{leaf}"] = _from_flax_layout(kinds[layer], np.array(variable[...], dtype=np.float32))
    for layer, leaves in stats.items():
        for leaf, value in leaves.items():
            out[f"{layer}/{leaf}"] = np.array(value, dtype=np.float32)
    return out


def decay_mask(workload: Workload) -> Callable[[Any], Any]:
    """``params -> tree of bools``: AdamW's decoupled decay applies to the variables declared ``decay`` only."""
    import jax

    from amp_suite.plugin_api import variable_specs

    decayed = {spec.name for spec in variable_specs(workload) if spec.decay}
    kinds = _owners(workload.layers)

    def mask(params: Any) -> Any:
        return jax.tree_util.tree_map_with_path(
            lambda path, _: _canonical_name(kinds, jax.tree_util.keystr(path, simple=True, separator="/"))
            in decayed, params)

    return mask


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


def make_train_step(apply: Callable[..., tuple[Any, Stats]], optimizer: Any, trace_count: list[int],
                    axis: str | None, sync_batch_norm: bool,
                    loss_scale_period: int | None = None, static_scale: bool = False) -> Callable[..., tuple[Any, ...]]:
    """One optimizer step: ``step(params, stats, opt_state, loss_scale, images, labels, masks)``.

    ``loss_scale`` is plain arrays, in and out: ``(scale, counter)`` with
    dynamic loss scaling (``loss_scale_period``: finite steps before the scale
    doubles) or ``static_scale`` (a ``jmp.StaticLossScale``, returned as it
    came), ``()`` without.  The ``jmp.DynamicLossScale`` (or
    ``jmp.NoOpLossScale``) is built from them inside the trace only, so no jmp
    object is ever flattened or unflattened at the jit boundary.  ``masks``
    (dropout layer name -> mask, maybe ``{}``) are the step's inputs, as the
    images: the step multiplies them in, and never retraces for new masks.

    With a mesh ``axis`` the step is one replica's part of a data-parallel step
    (run it under :func:`data_parallel`): its loss is the global batch's mean
    (``lax.pmean`` of the replicas' mean losses), so ``jax.grad`` gives every
    replica the global batch's gradient, and every replica applies the same
    update.  BatchNorm uses the global batch's moments when
    ``sync_batch_norm``, else its own shard's; the new running statistics are
    the replicas' mean (already equal when synchronized).
    """
    import jax
    import jmp
    import optax

    sync_axis = axis if sync_batch_norm else None

    def scaler(arrays: tuple[Any, ...]) -> Any:
        if static_scale:
            return jmp.StaticLossScale(arrays[0])
        if loss_scale_period is None:
            return jmp.NoOpLossScale()
        return jmp.DynamicLossScale(arrays[0], arrays[1], period=loss_scale_period)

    def loss_fn(p: Any, s: Any, images: Any, labels: Any, masks: Any, scale: Any) -> tuple[Any, Any]:
        logits, new_stats = apply(p, s, images, True, sync_axis, masks)
        loss = _mean_over_replicas(optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), axis)
        return scale.scale(loss), (loss, new_stats)

    def step(p: Any, s: Any, opt: Any, scale_arrays: tuple[Any, ...], images: Any, labels: Any,
             masks: Any) -> tuple[Any, ...]:
        trace_count[0] += 1  # runs only while tracing
        scale = scaler(scale_arrays)
        grads, (loss, new_s) = jax.grad(loss_fn, has_aux=True)(p, s, images, labels, masks, scale)
        new_s = _mean_over_replicas(new_s, axis)
        grads = scale.unscale(grads)
        finite = jmp.all_finite(grads)
        updates, new_opt = optimizer.update(grads, opt, p)
        new_p = optax.apply_updates(p, updates)
        # An overflowing step changes no parameter; its forward pass's running statistics are kept.
        new_p, new_opt = jmp.select_tree(finite, (new_p, new_opt), (p, opt))
        if loss_scale_period is None:
            return new_p, new_s, new_opt, scale_arrays, loss, finite
        adjusted = scale.adjust(finite)
        return new_p, new_s, new_opt, (adjusted.loss_scale, adjusted.counter), loss, finite

    return step


def data_parallel(step: Callable[..., tuple[Any, ...]], mesh: Any) -> Callable[..., tuple[Any, ...]]:
    """``step`` over ``mesh``: state (loss-scale arrays included) replicated in and out; images, labels and
    dropout masks sharded by rows."""
    import jax
    from jax.sharding import PartitionSpec

    replicated, rows = PartitionSpec(), PartitionSpec(AXIS)
    return jax.shard_map(step, mesh=mesh, in_specs=(replicated,) * 4 + (rows,) * 3, out_specs=replicated)


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
