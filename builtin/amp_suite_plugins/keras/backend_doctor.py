"""The doctor's probe of Keras on JAX or PyTorch: ``python -m amp_suite_plugins.keras.backend_doctor cpu|auto``.

The framework's ``FrameworkInfo.env`` names the backend (``jax`` or ``torch``)
in ``AMP_SUITE_KERAS_BACKEND``; this module sets ``KERAS_BACKEND`` to it before
importing Keras.  TensorFlow is never imported.  The sections are the TensorFlow probe's (:mod:`amp_suite_plugins.keras.doctor`),
measured with Keras's own APIs the way the suite's recipe uses them: dtype
policies on Keras layers, ``LossScaleOptimizer`` skipping an overflowing step
and growing its scale, the float32 and TF32 switches of the backend, a timed
Keras MLP step, and the backend's allocator.  What the backend itself answers
(its device, TF32 switch, gradients, waiting for the device, memory) is one
small class per backend, :class:`JaxParts` and :class:`TorchParts`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from amp_suite_plugins.keras.backends import PROBE_BACKEND_ENV, import_keras

# The backend this probe is for (the framework's env); KERAS_BACKEND alone may be a value the user exported.
BACKEND = os.environ.get(PROBE_BACKEND_ENV) or os.environ.get("KERAS_BACKEND", "jax")
if len(sys.argv) > 1 and sys.argv[1] == "cpu" and BACKEND == "jax":
    import jax  # before any JAX backend starts

    jax.config.update("jax_platforms", "cpu")

keras = import_keras(BACKEND)
import numpy as np  # noqa: E402

from amp_suite.doctor import probe_kit as kit  # noqa: E402


class JaxParts:
    """Keras on JAX: the first GPU JAX sees (else its CPU), TF32 through the default matmul precision."""

    def __init__(self, requested: str) -> None:
        import jax

        self.jax = jax
        self.gpu_errors: list[str] = []
        self.device = jax.devices("cpu")[0]
        if requested != "cpu":
            try:
                self.device = jax.devices("gpu")[0]
            except RuntimeError as exc:
                self.gpu_errors.append(str(exc))
        self.on_gpu = self.device.platform in ("gpu", "cuda")
        jax.config.update("jax_default_device", self.device)

    def device_section(self) -> dict[str, Any]:
        import importlib.util

        plugins = [n for n in ("jax_cuda13_plugin", "jax_cuda12_plugin") if importlib.util.find_spec(n) is not None]
        found: dict[str, Any] = {"kind": "gpu" if self.on_gpu else "cpu", "cuda_build": bool(plugins)}
        if plugins:
            found["cuda_build_version"] = plugins[0].removeprefix("jax_cuda").removesuffix("_plugin")
        if self.gpu_errors:
            found["gpu_error"] = " | ".join(" ".join(e.split()) for e in self.gpu_errors)[:1000]
        if self.on_gpu:
            from amp_suite_plugins.keras.on_jax import cuda_versions

            versions = cuda_versions()
            found.update(cuda_runtime=versions.get("cuda_runtime_version"), cudnn=versions.get("cudnn_version"),
                         name=self.device.device_kind,
                         compute_capability=str(getattr(self.device, "compute_capability", "")),
                         driver=str(getattr(self.device.client, "platform_version", "")))
            float(keras.ops.sum(keras.ops.conv(keras.ops.ones((1, 8, 8, 8)), keras.ops.ones((3, 3, 8, 8)))))
            found["cudnn_libraries"] = kit.loaded_libraries("libcudnn")
        return found

    def set_tf32(self, on: bool) -> None:
        self.jax.config.update("jax_default_matmul_precision", "tensorfloat32" if on else "highest")

    def gradients(self, loss: Callable[[], Any], variables: list[Any]) -> list[Any]:
        """The gradient of ``loss()`` for ``variables``: ``jax.grad`` with the values mapped statelessly."""
        return list(self.jax.grad(_of_values(loss, variables))([v.value for v in variables]))

    def apply(self, optimizer: Any, grads: list[Any], variables: list[Any]) -> None:
        """``optimizer.stateless_apply``, written back: on JAX, Keras's stateful ``LossScaleOptimizer.apply``
        assigns inside ``lax.cond`` branches (a leaked tracer); its own JAX trainer uses the stateless form."""
        _assign(variables, optimizer, *optimizer.stateless_apply([v.value for v in optimizer.variables], grads,
                                                                 [v.value for v in variables]))

    def training_step(self, loss: Callable[[], Any], variables: list[Any], optimizer: Any) -> Callable[[], None]:
        """One step of ``optimizer`` on ``loss()``, compiled as keras@jax compiles its train step (``jax.jit`` of
        :meth:`gradients` and :meth:`apply`'s stateless update), its results written back to the variables."""
        grad = self.jax.grad(_of_values(loss, variables))
        compiled = self.jax.jit(lambda values, optimizer_values: optimizer.stateless_apply(
            optimizer_values, grad(values), values))

        def step() -> None:
            _assign(variables, optimizer,
                    *compiled([v.value for v in variables], [v.value for v in optimizer.variables]))

        return step

    def wait(self, value: Any) -> None:
        self.jax.block_until_ready(value)

    def memory_section(self) -> dict[str, Any]:
        if not self.on_gpu:
            return {"api": None}
        block = keras.ops.zeros((kit.MEMORY_PROBE_BYTES // 4,), "float32")
        self.jax.block_until_ready(block)
        stats = self.device.memory_stats() or {}
        return {"api": "Device.memory_stats()['peak_bytes_in_use']", "peak_bytes": stats.get("peak_bytes_in_use"),
                "allocated_bytes": kit.MEMORY_PROBE_BYTES}

    def preallocation_section(self) -> dict[str, Any]:
        stats = (self.device.memory_stats() or {}) if self.on_gpu else {}
        return {"preallocate_env": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
                "bytes_reserved": stats.get("pool_bytes", stats.get("bytes_reserved")),
                "bytes_limit": stats.get("bytes_limit")}


class TorchParts:
    """Keras on PyTorch: ``cuda:0`` where PyTorch sees a GPU (else the CPU), its TF32 switches, its allocator."""

    def __init__(self, requested: str) -> None:
        import torch

        self.torch = torch
        self.on_gpu = requested != "cpu" and torch.cuda.is_available()
        self.name = "cuda:0" if self.on_gpu else "cpu"

    def device_section(self) -> dict[str, Any]:
        torch = self.torch
        found: dict[str, Any] = {"kind": "gpu" if self.on_gpu else "cpu", "cuda_build": torch.version.cuda is not None,
                                 "cuda_runtime": torch.version.cuda, "cuda_build_version": torch.version.cuda}
        if self.on_gpu:
            props = torch.cuda.get_device_properties(0)
            found.update(name=props.name, compute_capability=f"{props.major}.{props.minor}",
                         cudnn=str(torch.backends.cudnn.version()))
            float(keras.ops.sum(keras.ops.conv(keras.ops.ones((1, 8, 8, 8)), keras.ops.ones((3, 3, 8, 8)))))
            found["cudnn_libraries"] = kit.loaded_libraries("libcudnn")
        return found

    def set_tf32(self, on: bool) -> None:
        self.torch.backends.cuda.matmul.allow_tf32 = on
        self.torch.backends.cudnn.allow_tf32 = on
        self.torch.set_float32_matmul_precision("high" if on else "highest")

    def gradients(self, loss: Callable[[], Any], variables: list[Any]) -> list[Any]:
        """The gradient of ``loss()`` for ``variables``: ``backward()`` and each variable's ``.grad``."""
        for variable in variables:
            variable.value.grad = None
        loss().backward()
        return [variable.value.grad for variable in variables]

    def apply(self, optimizer: Any, grads: list[Any], variables: list[Any]) -> None:
        with self.torch.no_grad():
            optimizer.apply(grads, variables)

    def training_step(self, loss: Callable[[], Any], variables: list[Any], optimizer: Any) -> Callable[[], None]:
        """One step of ``optimizer`` on ``loss()``, eager, as keras@torch trains by default."""
        def step() -> None:
            self.apply(optimizer, self.gradients(loss, variables), variables)

        return step

    def wait(self, value: Any) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize()

    def memory_section(self) -> dict[str, Any]:
        if not self.on_gpu:
            return {"api": None}
        torch = self.torch
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        block = keras.ops.zeros((kit.MEMORY_PROBE_BYTES // 4,), "float32")
        float(keras.ops.sum(block))
        return {"api": "torch.cuda.max_memory_allocated", "peak_bytes": int(torch.cuda.max_memory_allocated()),
                "allocated_bytes": kit.MEMORY_PROBE_BYTES}


Parts = JaxParts | TorchParts


def _of_values(loss: Callable[[], Any], variables: list[Any]) -> Callable[[list[Any]], Any]:
    """``loss`` as a function of the values of ``variables`` (Keras's ``StatelessScope``), for ``jax.grad``."""
    def of(values: list[Any]) -> Any:
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
            return loss()

    return of


def _assign(variables: list[Any], optimizer: Any, values: list[Any], optimizer_values: list[Any]) -> None:
    """An optimizer's stateless update written back into ``variables`` and its own variables."""
    for variable, value in [*zip(variables, values, strict=True),
                            *zip(optimizer.variables, optimizer_values, strict=True)]:
        variable.assign(value)


def _dtype(value: Any) -> str:
    return keras.backend.standardize_dtype(value.dtype)


def precision_section(parts: Parts) -> dict[str, Any]:
    """Matmul and 1x1 convolution of 1.0001 by ones, in float32 and (on a GPU) under the backend's TF32 switch."""
    k, hw = kit.PROBE_K, kit.CONV_PROBE_HW
    ops = keras.ops
    a, b = ops.ones((k, k)) * 1.0001, ops.ones((k, k))
    image = ops.ones((1, hw, hw, kit.CONV_PROBE_IN)) * 1.0001  # NHWC, as Keras computes
    kernel = ops.ones((1, 1, kit.CONV_PROBE_IN, kit.CONV_PROBE_OUT))
    found: dict[str, Any] = {}
    for name, tf32 in [("fp32", False), ("tf32", True)] if parts.on_gpu else [("fp32", False)]:
        parts.set_tf32(tf32)
        # averaged on the host in float64, so no float32 reduction blurs the two answers
        found[f"matmul_{name}"] = float(np.mean(ops.convert_to_numpy(ops.matmul(a, b)), dtype=np.float64))
        found[f"conv_{name}"] = float(np.mean(ops.convert_to_numpy(ops.conv(image, kernel)), dtype=np.float64))
    parts.set_tf32(False)
    return found


def amp_section(parts: Parts, policy: str) -> dict[str, Any]:
    """The dtypes a Conv2D and a Dense compute in under ``policy``, of the float32 logits, parameters, gradients."""
    from amp_suite_plugins.keras.backends import mean_cross_entropy

    keras.mixed_precision.set_global_policy(policy)
    try:
        conv, dense = keras.layers.Conv2D(8, 3), keras.layers.Dense(10)
        to_float32 = keras.layers.Activation("linear", dtype="float32")
        x = keras.random.uniform((4, 8, 8, 3), seed=0)
        y = keras.ops.convert_to_tensor(np.arange(4))
        conv.build(x.shape)
        dense.build((None, 6 * 6 * 8))
        variables = conv.trainable_variables + dense.trainable_variables
        seen: dict[str, Any] = {}

        def loss() -> Any:
            hidden = conv(x)
            seen["conv"] = _dtype(hidden)
            out = dense(keras.ops.reshape(keras.ops.relu(hidden), (4, -1)))
            seen["matmul"] = _dtype(out)
            logits = to_float32(out)
            seen["logits"] = _dtype(logits)
            return mean_cross_entropy(keras, y, logits)

        seen["grads"] = sorted({_dtype(g) for g in parts.gradients(loss, variables)})
        seen["params"] = sorted({keras.backend.standardize_dtype(v.dtype) for v in variables})
        return seen
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _scaled_steps(parts: Parts, initial: float, steps: int) -> tuple[float, bool]:
    """``steps`` mixed_float16 steps through Keras's ``LossScaleOptimizer`` from ``initial``: scale after, changed?"""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        dense = keras.layers.Dense(4)
        dense.build((None, 16))
        variables = dense.trainable_variables
        before = [keras.ops.convert_to_numpy(v.value).copy() for v in variables]
        optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1), initial_scale=initial,
                                                        dynamic_growth_steps=kit.GROWTH_INTERVAL)
        optimizer.build(variables)
        x = keras.random.uniform((8, 16), seed=0)
        for _ in range(steps):
            grads = parts.gradients(lambda: optimizer.scale_loss(
                keras.ops.mean(keras.ops.square(keras.ops.cast(dense(x), "float32")))), variables)
            parts.apply(optimizer, grads, variables)
        changed = any(not (b == keras.ops.convert_to_numpy(v.value)).all()
                      for b, v in zip(before, variables, strict=True))
        return float(keras.ops.convert_to_numpy(optimizer.dynamic_scale.value)), changed
    finally:
        keras.mixed_precision.set_global_policy("float32")


def timing_section(parts: Parts) -> dict[str, Any]:
    """A float32 Keras MLP trained step by step, timed against the wall clock of the same steps."""
    from amp_suite_plugins.keras.backends import mean_cross_entropy

    batches, width, hidden = kit.timing_shape(parts.on_gpu)
    parts.set_tf32(False)  # a float32 step, as fp32 cells run it

    def build(batch: int) -> kit.StepKit:
        layers = [keras.layers.Dense(width, activation="relu") for _ in range(hidden)] + [keras.layers.Dense(10)]
        for layer in layers:
            layer.build((None, width))
        variables = [v for layer in layers for v in layer.trainable_variables]
        optimizer = keras.optimizers.SGD(0.01)
        optimizer.build(variables)
        x = keras.random.uniform((batch, width), seed=0)
        y = keras.random.randint((batch,), 0, 10, seed=0)

        def loss() -> Any:
            logits = x
            for layer in layers:
                logits = layer(logits)
            return mean_cross_entropy(keras, y, logits)

        def wait() -> None:
            parts.wait(variables[-1].value)

        return parts.training_step(loss, variables, optimizer), wait, None

    found = kit.time_sized(build, batches, method=f"host clock after {keras.backend.backend()}'s wait for the device")
    return {**found, "width": width, "hidden_layers": hidden}


def main(argv: list[str]) -> None:
    requested = argv[0] if argv else "auto"
    parts: Parts = JaxParts(requested) if keras.backend.backend() == "jax" else TorchParts(requested)
    scope = keras.device(parts.name) if isinstance(parts, TorchParts) else keras.device(
        f"{'gpu' if parts.on_gpu else 'cpu'}:0")
    with scope:
        sections: list[tuple[str, Callable[[], dict[str, Any]]]] = [("device", parts.device_section)]
        if isinstance(parts, JaxParts):
            sections.append(("preallocation", parts.preallocation_section))
        sections += [
            ("precision", lambda: precision_section(parts)),
            ("amp_fp16", lambda: amp_section(parts, "mixed_float16")),
            ("amp_bf16", lambda: amp_section(parts, "mixed_bfloat16")),
            ("loss_scale", lambda: kit.loss_scale_section(lambda initial, steps: _scaled_steps(parts, initial,
                                                                                                steps))),
            ("timing", lambda: timing_section(parts)),
            ("memory", parts.memory_section),
        ]
        kit.run_sections(sections)


if __name__ == "__main__":
    main(sys.argv[1:])
