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
* ``amp_fp16`` scales the loss with ``jmp.DynamicLossScale``: an overflowing
  step changes no parameter and halves the scale;
* the train step is a pure function of (parameters, BatchNorm statistics,
  optimizer state, loss scale), jitted once with those donated: the
  parameters are an ``nnx.State`` (``nnx.split``/``nnx.merge``), the running
  statistics a plain ``{layer: {"mean", "var"}}`` dict that the forward pass
  returns updated, as haiku's state (an NNX ``BatchStat`` cannot be assigned
  under ``jax.grad`` inside ``jit``: flax raises ``TraceContextError``);
  ``EpochResult.extra["traces"]`` counts the step's traces.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.environment import package_version
from amp_suite.layers import walk
from amp_suite.plugin_kit import (
    STANDARD_PRECISIONS,
    cpu_device,
    loss_scale_growth_interval,
    require_device_kind,
    standard_precision,
    timed_window,
)
from amp_suite.records import (
    Batch,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    LayerSpec,
    OptimizerSpec,
    PrecisionApplied,
    RunSpec,
    Workload,
)

NAME = "flax"
# Canonical leaf name -> the nnx attribute holding it, per layer kind.
LEAVES = {"conv2d": {"w": "kernel", "b": "bias"}, "dense": {"w": "kernel", "b": "bias"},
          "batch_norm": {"scale": "scale", "offset": "offset"}}
# BatchNorm statistics: {layer: {"mean": array, "var": array}}, float32.
Stats = dict[str, dict[str, Any]]


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
    )


@dataclass
class FlaxModel:
    """The run's state between steps: NNX graph definition, parameters, statistics, optimizer, loss scale."""

    graphdef: Any
    params: Any
    stats: Stats
    opt_state: Any
    loss_scale: Any
    train_step: Any
    forward: Any
    device: Any
    layers: tuple[LayerSpec, ...]
    compute_dtype: str
    trace_count: list[int] = field(default_factory=lambda: [0])


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo:
    import jax

    if run.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    try:
        gpus = jax.devices("gpu") if run.device != "cpu" else []
    except RuntimeError:
        gpus = []
    if require_device_kind(run, bool(gpus), "Flax") == "cpu":
        return cpu_device()
    dev = gpus[0]
    capability = str(getattr(dev, "compute_capability", "") or "")
    major = int(capability.split(".")[0]) if capability[:1].isdigit() else 0
    stats = dev.memory_stats() or {}
    return DeviceInfo(kind="gpu", platform=dev.platform, name=dev.device_kind, count=len(gpus),
                      driver=getattr(dev.client, "platform_version", ""), compute_capability=capability,
                      memory_total_bytes=stats.get("bytes_limit"), supports_tf32=major >= 8)


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
    import dataclasses

    import jax

    applied = standard_precision(run, device)
    # float32 matmuls may silently use TF32 on Ampere unless asked for full precision.
    matmul = "tensorfloat32" if run.precision == "tf32" else "highest"
    jax.config.update("jax_default_matmul_precision", matmul)
    notes = (f"jax_default_matmul_precision={matmul}",
             f"nnx dtype={applied.compute_dtype}, param_dtype=float32, logits float32")
    if applied.compute_dtype != "float32":
        notes += (f"batch_norm=float32 parameters, statistics and arithmetic, output {applied.compute_dtype}",)
    return dataclasses.replace(applied, notes=notes)


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

        def __call__(self, x: Any, training: bool, stats: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
            """``(y, new_stats)``: the statistics are passed in and returned, never assigned."""
            x = x.astype(jnp.float32)
            if training:
                mean = jnp.mean(x, axis=(0, 1, 2))
                var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
                count = x.size // x.shape[-1]
                stats = {"mean": (1 - self.momentum) * stats["mean"] + self.momentum * mean,
                         "var": (1 - self.momentum) * stats["var"] + self.momentum * var * (count / (count - 1))}
            else:
                mean, var = stats["mean"], stats["var"]
            y = (x - mean) * (self.scale[...] * jax.lax.rsqrt(var + self.epsilon)) + self.offset[...]
            return y.astype(self.compute_dtype), stats

    return BatchNorm


def build_net(workload: Workload, compute_dtype: str, seed: int = 0) -> Any:
    """An ``nnx.Module`` with one attribute per named layer of ``workload.layers`` (random initial values)."""
    import jax.numpy as jnp
    from flax import nnx

    rngs = nnx.Rngs(seed)
    batch_norm = _batch_norm_class()
    net = nnx.Module()
    for item in walk(workload.layers, workload.input_shape):
        spec, channels = item.layer, item.input_shape[-1]
        if spec.kind == "conv2d":
            pad = ((spec.padding, spec.padding),) * 2
            layer = nnx.Conv(channels, spec.features, (spec.kernel_size,) * 2, strides=spec.stride, padding=pad,
                             use_bias=spec.use_bias, dtype=compute_dtype, param_dtype=jnp.float32, rngs=rngs)
        elif spec.kind == "dense":
            layer = nnx.Linear(channels, spec.features, use_bias=spec.use_bias, dtype=compute_dtype,
                               param_dtype=jnp.float32, rngs=rngs)
        elif spec.kind == "batch_norm":
            layer = batch_norm(channels, spec, compute_dtype)
        else:
            continue
        setattr(net, spec.name, layer)
    return net


def run_layers(net: Any, layers: tuple[LayerSpec, ...], x: Any, training: bool, stats: Stats,
               record: Callable[[str, Any], None] | None = None) -> tuple[Any, Stats]:
    """The forward pass of the layer vocabulary over ``net``'s modules (NHWC): ``(output, new_stats)``."""
    import jax
    import jax.numpy as jnp

    stats = dict(stats)
    for spec in layers:
        kind = spec.kind
        if kind in ("conv2d", "dense"):
            x = getattr(net, spec.name)(x)
            if record:
                record(kind, x)
        elif kind == "batch_norm":
            x, stats[spec.name] = getattr(net, spec.name)(x, training, stats[spec.name])
        elif kind == "relu":
            x = jax.nn.relu(x)
        elif kind == "residual":
            body, stats = run_layers(net, spec.body, x, training, stats, record)
            shortcut, stats = run_layers(net, spec.shortcut, x, training, stats, record)
            x = body + shortcut
        elif kind in ("max_pool", "avg_pool"):
            window, strides = (1, spec.window, spec.window, 1), (1, spec.stride, spec.stride, 1)
            if kind == "max_pool":
                x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, "VALID")
            else:
                x = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, strides, "VALID") / (spec.window ** 2)
        elif kind == "global_avg_pool":
            x = jnp.mean(x, axis=(1, 2))
        elif kind == "flatten":
            x = x.reshape(x.shape[0], -1)
        else:
            raise ValueError(f"flax plugin cannot build layer kind {kind!r}")
    return x, stats


def _owners(layers: tuple[LayerSpec, ...]) -> dict[str, str]:
    """Layer name -> kind, for every named layer."""
    from amp_suite.layers import iter_layers

    return {spec.name: spec.kind for spec in iter_layers(layers) if spec.name}


def load_canonical(net: Any, layers: tuple[LayerSpec, ...], weights: dict[str, np.ndarray],
                   state: dict[str, np.ndarray]) -> Stats:
    """Overwrite ``net``'s initial parameters by the canonical ones (same layouts: HWIO, (in, out), NHWC).

    Returns the BatchNorm statistics of ``state`` as ``{layer: {"mean", "var"}}``.
    """
    import jax.numpy as jnp

    kinds = _owners(layers)
    for key, value in weights.items():
        layer, _, leaf = key.rpartition("/")
        variable = getattr(getattr(net, layer), LEAVES[kinds[layer]][leaf])
        if tuple(variable.shape) != value.shape:
            raise ValueError(f"{key}: canonical shape {value.shape} != flax {tuple(variable.shape)}")
        variable[...] = jnp.asarray(value, jnp.float32)
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
        out[f"{layer}/{leaf}"] = np.array(variable[...], dtype=np.float32)
    for layer, leaves in stats.items():
        for leaf, value in leaves.items():
            out[f"{layer}/{leaf}"] = np.array(value, dtype=np.float32)
    return out


def make_optimizer(spec: OptimizerSpec) -> Any:
    """optax with the suite's arithmetic (docs/workloads.md): coupled weight decay added to the gradient first."""
    import optax

    learning_rate: Any = spec.learning_rate
    if spec.schedule == "cosine" and spec.decay_steps > 0:
        learning_rate = optax.cosine_decay_schedule(spec.learning_rate, decay_steps=spec.decay_steps, alpha=0.0)
    if spec.name == "sgd":
        core = optax.sgd(learning_rate, momentum=spec.momentum or None)
    elif spec.name == "rmsprop":
        core = optax.rmsprop(learning_rate, decay=spec.rho, eps=spec.epsilon, eps_in_sqrt=False)
    elif spec.name == "adam":
        core = optax.adam(learning_rate, b1=spec.beta1, b2=spec.beta2, eps=spec.epsilon)
    else:
        raise ValueError(f"flax plugin has no optimizer {spec.name!r}")
    return optax.chain(optax.add_decayed_weights(spec.weight_decay), core) if spec.weight_decay else core


@hookimpl
def build_model(run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
                initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo) -> FlaxModel:
    import jax
    import jax.numpy as jnp
    import jmp
    import optax
    from flax import nnx

    dev = jax.devices("gpu")[0] if device.kind == "gpu" else jax.devices("cpu")[0]
    compute = applied.compute_dtype
    layers = workload.layers
    net = build_net(workload, compute, run.seed)
    stats = load_canonical(net, layers, initial_weights, initial_state)
    graphdef, params = nnx.split(net, nnx.Param)
    params, stats = jax.device_put((params, stats), dev)
    optimizer = make_optimizer(workload.optimizer)
    if applied.loss_scaling == "dynamic":
        loss_scale = jmp.DynamicLossScale(jnp.asarray(applied.initial_loss_scale, jnp.float32),
                                          period=loss_scale_growth_interval(run))
    else:
        loss_scale = jmp.NoOpLossScale()
    # Committed to the device from the start, as the step's outputs will be: else the second call retraces.
    opt_state, loss_scale = jax.device_put((optimizer.init(params), loss_scale), dev)
    trace_count = [0]

    def apply(p: Any, s: Stats, images: Any, training: bool) -> tuple[Any, Stats]:
        logits, new_stats = run_layers(nnx.merge(graphdef, p), layers, images.astype(compute), training, s)
        return logits.astype(jnp.float32), new_stats

    def loss_fn(p: Any, s: Any, images: Any, labels: Any, scale: Any) -> tuple[Any, Any]:
        logits, new_stats = apply(p, s, images, True)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return scale.scale(loss), (loss, new_stats)

    def step(p: Any, s: Any, opt: Any, scale: Any, images: Any, labels: Any) -> tuple[Any, ...]:
        trace_count[0] += 1  # runs only while tracing
        grads, (loss, new_s) = jax.grad(loss_fn, has_aux=True)(p, s, images, labels, scale)
        grads = scale.unscale(grads)
        finite = jmp.all_finite(grads)
        new_scale = scale.adjust(finite)
        updates, new_opt = optimizer.update(grads, opt, p)
        new_p = optax.apply_updates(p, updates)
        # An overflowing step changes no parameter; its forward pass's running statistics are kept.
        new_p, new_opt = jmp.select_tree(finite, (new_p, new_opt), (p, opt))
        return new_p, new_s, new_opt, new_scale, loss, finite

    def forward(p: Any, s: Any, images: Any, training: bool) -> Any:
        return apply(p, s, images, training)[0]

    return FlaxModel(graphdef, params, stats, opt_state, loss_scale, jax.jit(step, donate_argnums=(0, 1, 2)),
                     jax.jit(forward, static_argnums=3), dev, layers, compute, trace_count)


@hookimpl
def stage_batches(run: RunSpec, model: FlaxModel, batches: list[Batch]) -> list[tuple[Any, Any]]:
    import jax

    staged = [(jax.device_put(b.images, model.device), jax.device_put(b.labels, model.device)) for b in batches]
    jax.block_until_ready(staged)
    return staged


@hookimpl
def train_epoch(run: RunSpec, model: FlaxModel, staged: list[tuple[Any, Any]], epoch: int) -> EpochResult:
    import jax

    import jax.numpy as jnp

    def step(batch: tuple[Any, Any]) -> tuple[Any, Any]:
        model.params, model.stats, model.opt_state, model.loss_scale, loss, finite = model.train_step(
            model.params, model.stats, model.opt_state, model.loss_scale, *batch)
        return loss, finite  # device values: nothing waits inside the window

    def fetch(outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
        losses, finite = jax.device_get((jnp.stack([l for l, _ in outcomes]), jnp.stack([f for _, f in outcomes])))
        return [float(v) for v in losses], [bool(v) for v in finite]

    result = timed_window(staged, step, wait=lambda outcome: jax.block_until_ready((model.params, outcome)),
                          fetch=fetch, guard=lambda: jax.transfer_guard_device_to_host("disallow"))
    scale = getattr(model.loss_scale, "loss_scale", None)
    result.loss_scale_final = None if scale is None or not hasattr(scale, "shape") else float(scale)
    result.extra["traces"] = model.trace_count[0]  # becomes the run's "traces" figure
    return result


@hookimpl
def predict(run: RunSpec, model: FlaxModel, images: np.ndarray, training: bool) -> np.ndarray:
    import jax

    x = jax.device_put(np.asarray(images, dtype=np.float32), model.device)
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
    if device.kind == "gpu":
        stats = model.device.memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            figures["device_peak_memory_bytes"] = int(stats["peak_bytes_in_use"])
    return figures
