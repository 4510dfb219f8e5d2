"""The JAX plugin: dm-haiku modules, optax Adam and jmp mixed precision.

JAX is imported inside the hooks only, after ``XLA_PYTHON_CLIENT_PREALLOCATE``
is set (else JAX takes most of a GPU's memory at start).  Recipe (jmp README
and haiku's mixed-precision API): a ``jmp.Policy`` with float32 parameters,
the precision's compute dtype and float32 output, set on the model's module
class with ``hk.mixed_precision.set_policy``; for ``amp_fp16`` a
``jmp.DynamicLossScale``: scale the loss, unscale the gradients, apply the
update only when every gradient is finite and adjust the scale.  The whole
step is jitted once with parameters and optimizer state donated.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.environment import package_version
from amp_suite.plugin_kit import (
    cpu_device,
    loss_scale_growth_interval,
    require_device_kind,
    STANDARD_PRECISIONS,
    standard_precision,
    timed_epoch,
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

NAME = "jax"
MODULE_NAME = "sequential_cnn"


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="JAX (haiku)",
        modules=("jax", "jaxlib", "haiku", "jmp", "optax"),
        extra="jax",
        precisions=STANDARD_PRECISIONS,
        env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"},
        distributions=("jax",),
    )


@dataclass
class JaxModel:
    """The run's state: parameters, optimizer state and loss scale live here between steps."""

    params: Any
    opt_state: Any
    loss_scale: Any
    train_step: Any
    forward: Any
    device: Any
    trace_count: list[int] = field(default_factory=lambda: [0])


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo | None:
    if run.framework != NAME:
        return None
    import jax

    if run.device == "cpu":
        jax.config.update("jax_platforms", "cpu")
    try:
        gpus = jax.devices("gpu") if run.device != "cpu" else []
    except RuntimeError:
        gpus = []
    if require_device_kind(run, bool(gpus), "JAX") == "cpu":
        return cpu_device()
    dev = gpus[0]
    capability = str(getattr(dev, "compute_capability", "") or "")
    major = int(capability.split(".")[0]) if capability[:1].isdigit() else 0
    stats = dev.memory_stats() or {}
    return DeviceInfo(
        kind="gpu",
        platform=dev.platform,
        name=dev.device_kind,
        count=len(gpus),
        driver=getattr(dev.client, "platform_version", ""),
        compute_capability=capability,
        memory_total_bytes=stats.get("bytes_limit"),
        supports_tf32=major >= 8,
    )


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied | None:
    if run.framework != NAME:
        return None
    import jax

    applied = standard_precision(run, device)
    # float32 matmuls may silently use TF32 on Ampere unless asked for full precision.
    matmul = "tensorfloat32" if run.precision == "tf32" else "highest"
    jax.config.update("jax_default_matmul_precision", matmul)
    notes = (f"jax_default_matmul_precision={matmul}", f"jmp_policy=params=float32,compute={applied.compute_dtype},"
             "output=float32")
    return dataclasses.replace(applied, notes=notes)


def _module_class(workload: Workload):
    """A haiku module class for ``workload`` (a fresh class, so a policy set on it stays local)."""
    import haiku as hk
    import jax

    class SequentialCNN(hk.Module):
        def __init__(self) -> None:
            super().__init__(name=MODULE_NAME)

        def __call__(self, x: Any) -> Any:
            for spec in workload.layers:
                if spec.kind == "conv2d":
                    x = hk.Conv2D(spec.features, spec.kernel_size, padding=spec.padding, name=spec.name)(x)
                elif spec.kind == "relu":
                    x = jax.nn.relu(x)
                elif spec.kind == "avg_pool":
                    x = hk.avg_pool(x, window_shape=(1, spec.window, spec.window, 1),
                                    strides=(1, spec.window, spec.window, 1), padding="VALID")
                elif spec.kind == "flatten":
                    x = hk.Flatten()(x)
                elif spec.kind == "dense":
                    x = hk.Linear(spec.features, name=spec.name)(x)
                else:
                    raise ValueError(f"jax plugin cannot build layer kind {spec.kind!r}")
            return x

    return SequentialCNN


def _load_canonical(params: Any, weights: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """Replace haiku's initial values by the canonical ones (same layouts: HWIO, (in, out), NHWC)."""
    loaded = {}
    for module_path, leaves in params.items():
        layer = module_path.split("/")[-1]
        loaded[module_path] = {}
        for leaf, value in leaves.items():
            canonical = weights[f"{layer}/{leaf}"]
            if canonical.shape != value.shape:
                raise ValueError(f"{layer}/{leaf}: canonical shape {canonical.shape} != haiku {value.shape}")
            loaded[module_path][leaf] = canonical
    return loaded


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    applied: PrecisionApplied, device: DeviceInfo,
) -> JaxModel | None:
    if run.framework != NAME:
        return None
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import jmp
    import optax

    dev = jax.devices("gpu")[0] if device.kind == "gpu" else jax.devices("cpu")[0]
    module_class = _module_class(workload)
    policy = jmp.Policy(param_dtype=jnp.float32, compute_dtype=jnp.dtype(applied.compute_dtype),
                        output_dtype=jnp.float32)
    hk.mixed_precision.set_policy(module_class, policy)
    net = hk.without_apply_rng(hk.transform(lambda x: module_class()(x)))
    example = jnp.zeros((1, *workload.input_shape), jnp.float32)
    params = _load_canonical(net.init(jax.random.PRNGKey(run.seed), example), initial_weights)
    params = jax.device_put(params, dev)
    optimizer = optax.adam(workload.learning_rate, b1=0.9, b2=0.999, eps=1e-8)
    opt_state = optimizer.init(params)
    if applied.loss_scaling == "dynamic":
        loss_scale = jmp.DynamicLossScale(jnp.asarray(applied.initial_loss_scale, jnp.float32),
                                          period=loss_scale_growth_interval(run))
    else:
        loss_scale = jmp.NoOpLossScale()
    trace_count = [0]

    def loss_fn(p: Any, images: Any, labels: Any, scale: Any) -> tuple[Any, Any]:
        logits = net.apply(p, images).astype(jnp.float32)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
        return scale.scale(loss), loss

    def step(p: Any, state: Any, scale: Any, images: Any, labels: Any):
        trace_count[0] += 1  # runs only while tracing
        grads, loss = jax.grad(loss_fn, has_aux=True)(p, images, labels, scale)
        grads = scale.unscale(grads)
        finite = jmp.all_finite(grads)
        new_scale = scale.adjust(finite)
        updates, new_state = optimizer.update(grads, state, p)
        new_p = optax.apply_updates(p, updates)
        # A step whose gradients overflowed changes nothing but the loss scale.
        new_p, new_state = jmp.select_tree(finite, (new_p, new_state), (p, state))
        return new_p, new_state, new_scale, loss, finite

    train_step = jax.jit(step, donate_argnums=(0, 1))
    forward = jax.jit(lambda p, images: net.apply(p, images).astype(jnp.float32))
    return JaxModel(params, opt_state, loss_scale, train_step, forward, dev, trace_count)


@hookimpl
def stage_batches(run: RunSpec, model: JaxModel, batches: list[Batch]) -> list[tuple[Any, Any]] | None:
    if run.framework != NAME:
        return None
    import jax

    staged = [(jax.device_put(b.images, model.device), jax.device_put(b.labels, model.device)) for b in batches]
    jax.block_until_ready(staged)
    return staged


def _scale_value(model: JaxModel) -> float | None:
    value = getattr(model.loss_scale, "loss_scale", None)
    return None if value is None or not hasattr(value, "shape") else float(value)


@hookimpl
def train_epoch(run: RunSpec, model: JaxModel, staged: list[tuple[Any, Any]], epoch: int) -> EpochResult | None:
    if run.framework != NAME:
        return None
    import jax

    def step(batch: tuple[Any, Any]) -> tuple[float, bool]:
        model.params, model.opt_state, model.loss_scale, loss, finite = model.train_step(
            model.params, model.opt_state, model.loss_scale, *batch)
        jax.block_until_ready((model.params, loss))
        return float(loss), bool(finite)

    result = timed_epoch(staged, step)
    result.loss_scale_final = _scale_value(model)
    result.extra["traces"] = model.trace_count[0]
    return result


@hookimpl
def predict(run: RunSpec, model: JaxModel, images: np.ndarray) -> np.ndarray | None:
    if run.framework != NAME:
        return None
    import jax

    x = jax.device_put(np.asarray(images, dtype=np.float32), model.device)
    return np.asarray(model.forward(model.params, x), dtype=np.float32)


@hookimpl
def measure(run: RunSpec, model: JaxModel, device: DeviceInfo) -> dict[str, Any] | None:
    if run.framework != NAME:
        return None
    import jax

    figures: dict[str, Any] = {
        "param_count": int(sum(leaf.size for leaf in jax.tree_util.tree_leaves(model.params))),
        "framework_version": f"jax {jax.__version__}, dm-haiku {package_version('dm-haiku') or '?'}, "
                             f"jmp {package_version('jmp') or '?'}",
        "train_step_traces": model.trace_count[0],
    }
    if device.kind == "gpu":
        stats = model.device.memory_stats() or {}
        if "peak_bytes_in_use" in stats:
            figures["device_peak_memory_bytes"] = int(stats["peak_bytes_in_use"])
    return figures
