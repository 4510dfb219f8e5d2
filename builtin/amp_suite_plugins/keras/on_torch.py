"""The ``keras@torch`` plugin: Keras 3 on its PyTorch backend (``KERAS_BACKEND=torch``).

The model is the one every Keras backend builds (:mod:`amp_suite_plugins.keras.model`),
its optimizer the suite's inside Keras's own ``LossScaleOptimizer`` under
``amp_fp16`` (:mod:`amp_suite_plugins.keras.backends`).  What is PyTorch's here:

* **Train step**: as Keras's own PyTorch trainer does it: a training call of the
  model, ``LossScaleOptimizer.scale_loss``, ``backward()`` on the (scaled)
  loss, the gradients read from the variables' ``.grad``, then
  ``optimizer.apply`` under ``torch.no_grad()`` (the loss-scale optimizer
  unscales, skips a non-finite step, halves or grows its scale).  Keras's
  loss-scale optimizer decides on the host whether to skip, so each step
  waits for its gradients' finite check: that is Keras's cost on this backend.
* **Compilation**: ``jit_compile = true`` wraps the whole step in
  ``torch.compile`` (TorchInductor), as Keras's PyTorch trainer does for
  ``jit_compile=True``; the default is ``false`` (eager), Keras's own
  ``"auto"`` on PyTorch.  There is no XLA on this backend.
* **Device**: Keras's device scope (``keras.device``): ``cuda:0`` where PyTorch
  sees a GPU, else the CPU; every variable, batch and step lives there.
* **TF32**: ``torch.backends.cuda.matmul.allow_tf32`` and
  ``torch.backends.cudnn.allow_tf32``, set both ways, as in the PyTorch plugin.
* **Device memory** (GPU): PyTorch's caching allocator,
  ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``.

No data parallel: Keras offers none on PyTorch (``keras.distribution`` is JAX
only); cells on several devices are ``unsupported``.  No module here imports
TensorFlow.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.errors import UnsupportedError
from amp_suite.machine.devices import version_text
from amp_suite.machine.environment import package_version
from amp_suite.numerics.records import StepTrace
from amp_suite.plugins.kit import (
    BUILT_IN_PRECISIONS,
    cpu_device,
    require_device_kind,
    standard_precision,
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
from amp_suite_plugins.keras.loss_scaling import scales_loss
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

NAME = "keras@torch"
OPTIONS = {
    "jit_compile": FrameworkOption(Field(bool), False, "wrap the train step in torch.compile (TorchInductor; Keras's "
                                   "jit_compile=True on PyTorch); false: eager, Keras's own default here"),
    "attention": ATTENTION_OPTION,
}


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="Keras (PyTorch)",
        modules=("keras", "torch"),
        extra="keras-torch",
        precisions=BUILT_IN_PRECISIONS,
        env={"KERAS_BACKEND": "torch", PROBE_BACKEND_ENV: "torch"},
        distributions=("keras", "torch"),
        options=OPTIONS,
        # eager: Keras's own default here (option jit_compile false); compiled: the train step through
        # torch.compile (jit_compile true).  The mode, when the sweep names one, wins over the option.
        modes={"cpu": ("eager", "compiled"), "gpu": ("eager", "compiled")},
        default_mode="eager",
        layer_kinds=LAYER_KINDS,
        doctor_probe="amp_suite_plugins.keras.backend_doctor",
        calibration_probe="amp_suite_plugins.torch.calibration",
        sync_counter="amp_suite_plugins.sync_counters:of_torch",
    )


def _jit(run: RunSpec) -> bool:
    if run.mode:  # --modes eager,compiled
        return run.mode == "compiled"
    return bool(run.options.get("jit_compile", OPTIONS["jit_compile"].default))


@dataclass
class KerasTorchModel:
    model: Any
    optimizer: Any
    train_step: Any
    device_name: str  # "cuda:0" or "cpu", Keras's device scope
    loss_scaled: bool
    named: dict[str, LayerSpec]
    mask_names: tuple[str, ...] = ()
    stored_dtype: str = "float32"


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo:
    import torch

    if run.distributed:
        raise UnsupportedError("keras@torch has no data parallel: Keras offers none on its PyTorch backend "
                               "(keras.distribution is JAX only); run it on one device")
    import_keras("torch")  # before any other hook imports Keras
    if require_device_kind(run, torch.cuda.is_available(), "PyTorch") == "cpu":
        return cpu_device()
    props = torch.cuda.get_device_properties(0)
    return DeviceInfo(
        kind="gpu", platform="rocm" if getattr(torch.version, "hip", None) else "cuda", name=props.name,
        count=torch.cuda.device_count(),
        driver=f"CUDA runtime {torch.version.cuda}" if torch.version.cuda else "",
        compute_capability=f"{props.major}.{props.minor}", memory_total_bytes=int(props.total_memory),
        supports_tf32=props.major >= 8,
    )


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
    import keras
    import torch

    applied = standard_precision(run, device)
    tf32 = run.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    notes = set_policy(keras, run, applied) + attention_notes(keras, run, applied) + (
        f"allow_tf32={tf32}", f"float32_matmul_precision={torch.get_float32_matmul_precision()}",
        f"jit_compile={_jit(run)} ({'torch.compile of the train step' if _jit(run) else 'eager'}; "
        "no XLA on the PyTorch backend)",
    )
    if _jit(run):  # inductor would skip the fp8 recipe's bfloat16 roundings, as it does in the torch plugin
        from amp_suite_plugins.torch.fp8 import COMPILED_ROUNDING_NOTE, keep_roundings_under_compile

        keep_roundings_under_compile(torch, bool(applied.fp8_matmul))
        notes += (COMPILED_ROUNDING_NOTE,) if applied.fp8_matmul else ()
    if device.kind == "gpu":  # torch's own cells turn cuDNN's benchmark on by default: a difference between the two
        notes += (f"cudnn.benchmark={torch.backends.cudnn.benchmark} (Keras leaves torch's default; the torch "
                  "plugin's cells turn it on by default)",)
    return dataclasses.replace(applied, notes=(*applied.notes, *notes))  # the kit's own notes first


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo,
) -> KerasTorchModel:
    import keras
    import torch

    stored = applied.output_dtype
    device_name = "cuda:0" if device.kind == "gpu" else "cpu"
    with keras.device(device_name):
        model = build_keras_model(keras, workload, {**initial_weights, **initial_state}, stored_dtype=stored,
                                  attention=attention_of(run), kept=applied.keep_fp32, fp8=bool(applied.fp8_matmul))
        optimizer = make_training_optimizer(keras, run, workload, applied, model)
        optimizer.build(model.trainable_variables)
    loss_scaled = scales_loss(applied)
    mask_names = tuple(item.layer.name for item in dropouts(workload))
    variables = list(model.trainable_variables)

    def step(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        logits = keras.ops.cast(model(model_inputs(mask_names, images, masks), training=True), stored)
        loss = mean_cross_entropy(keras, labels, logits)
        model.zero_grad()
        (optimizer.scale_loss(loss) if loss_scaled else loss).backward()
        grads = [v.value.grad for v in variables]
        finite = optimizer.check_finite(grads) if loss_scaled else None
        with torch.no_grad():
            optimizer.apply(grads, variables)  # LossScaleOptimizer unscales and skips non-finite steps
        return loss.detach(), finite

    train_step = torch.compile(step) if _jit(run) else step
    return KerasTorchModel(model, optimizer, train_step, device_name, loss_scaled, named_layers(workload),
                           mask_names, stored)


@hookimpl
def stage_batches(run: RunSpec, model: KerasTorchModel, batches: list[Batch]) -> list[tuple[Any, Any, Any]]:
    import torch

    def tensor(array: np.ndarray) -> Any:
        return torch.as_tensor(np.ascontiguousarray(array)).to(model.device_name)

    # labels as the host's int32 (the loss takes them so): staged at the host's size, the bytes the memory figure
    # subtracts
    staged = [(tensor(b.images), tensor(b.labels), {name: tensor(mask) for name, mask in b.masks.items()})
              for b in (batch.astype(model.stored_dtype) for batch in batches)]
    _synchronize(torch, model)  # the copies to a GPU are done before the first timed window starts
    return staged


def _synchronize(torch: Any, model: KerasTorchModel) -> None:
    if model.device_name.startswith("cuda"):
        torch.cuda.synchronize()


@hookimpl
def train_epoch(run: RunSpec, model: KerasTorchModel, staged: list[tuple[Any, Any, Any]],
                epoch: int) -> EpochResult:
    import keras
    import torch

    def fetch(outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
        """One read-back for the window's losses (and one for its finite flags under loss scaling)."""
        if not outcomes:
            return [], []
        losses = [float(v) for v in torch.stack([loss for loss, _ in outcomes]).tolist()]
        if outcomes[0][1] is None:
            return losses, [True] * len(losses)
        return losses, [bool(v) for v in torch.stack([finite for _, finite in outcomes]).tolist()]

    with keras.device(model.device_name):
        result = timed_window(staged, lambda batch: model.train_step(*batch),
                              wait=lambda outcome: _synchronize(torch, model), fetch=fetch)
    if model.loss_scaled:
        result.loss_scale_final = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale))
    return result


@hookimpl
def reset_memory_peak(run: RunSpec, model: KerasTorchModel, device: DeviceInfo) -> None:
    import torch

    if model.device_name.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


@hookimpl
def predict(run: RunSpec, model: KerasTorchModel, images: np.ndarray, training: bool) -> np.ndarray:
    import keras
    import torch

    with keras.device(model.device_name), torch.no_grad():
        x = torch.as_tensor(input_array(images, model.stored_dtype)).to(model.device_name)
        if not training:
            logits = model.model(model_inputs(model.mask_names, x, None), training=False)
            return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(logits, model.stored_dtype)))
        with statistics_kept(model.model):  # a training-mode call moves the moving statistics
            logits = model.model(model_inputs(model.mask_names, x, None), training=True)
            return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(logits, model.stored_dtype)))


@hookimpl
def get_variables(run: RunSpec, model: KerasTorchModel) -> dict[str, np.ndarray]:
    return read_variables(model.model, model.named, model.stored_dtype)


@hookimpl
def trace_step(run: RunSpec, model: KerasTorchModel, staged: list[tuple[Any, Any, Any]]) -> StepTrace:
    """One training step traced layer by layer, for amp-suite numerics (amp_suite_plugins.keras.trace)."""
    from amp_suite_plugins.keras.trace import trace_on_torch

    return trace_on_torch(model, staged)


@hookimpl
def measure(run: RunSpec, model: KerasTorchModel, device: DeviceInfo) -> dict[str, Any]:
    import keras
    import torch

    figures: dict[str, Any] = {
        "param_count": int(sum(int(np.prod(v.shape)) for v in model.model.trainable_variables)),
        "framework_version": f"keras {package_version('keras') or keras.__version__}, torch "
                             f"{package_version('torch') or torch.__version__}",
        "keras_backend": keras.backend.backend(),
        "compilation": "torch.compile (inductor)" if _jit(run) else "eager",
        "mode": "compiled" if _jit(run) else "eager",  # the mode the jit_compile option chose, when no --modes
        "torch_num_threads": torch.get_num_threads(),
    }
    if model.device_name.startswith("cuda"):
        torch.cuda.synchronize()
        figures["device_peak_memory_bytes"] = int(torch.cuda.max_memory_allocated())
        figures["device_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    return figures


@hookimpl
def runtime_versions(run: RunSpec) -> dict[str, str]:
    """The CUDA runtime torch was built with and, on a GPU, the cuDNN it loaded."""
    import torch

    found: dict[str, str] = {}
    if torch.version.cuda:
        found["cuda_runtime_version"] = str(torch.version.cuda)
    try:
        cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    except Exception:  # a cuDNN that does not match the build raises here
        cudnn = None
    if cudnn:
        found["cudnn_version"] = version_text(cudnn, "cudnn")
    return found


if TYPE_CHECKING:  # mypy checks every hook above against the specs' names and types
    import amp_suite_plugins.keras.on_torch as _this_module
    from amp_suite.plugins.framework_plugin import FrameworkPlugin, ResetsMemoryPeak

    _checked: FrameworkPlugin[KerasTorchModel, list[tuple[Any, Any, Any]]] = _this_module
    _resets_peak: ResetsMemoryPeak[KerasTorchModel] = _this_module
