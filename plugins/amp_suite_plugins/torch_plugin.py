"""The PyTorch plugin: eager training with ``torch.autocast`` and ``GradScaler``.

torch is imported inside the hooks only, so loading this plugin is cheap and
``amp-suite --help`` never imports it.

Recipe (PyTorch AMP docs, "Automatic Mixed Precision examples"):
autocast wraps the forward pass and the loss only; backward runs outside it;
``amp_fp16`` uses a ``GradScaler`` (CUDA or CPU) that skips a step whose
gradients overflow and halves its scale; ``amp_bf16`` needs no scaler.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.environment import package_version
from amp_suite.plugin_kit import (
    cpu_device,
    loss_scale_growth_interval,
    hwc_rows_to_chw,
    require_device_kind,
    STANDARD_PRECISIONS,
    standard_precision,
    timed_epoch,
    wall_clock_step,
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
from amp_suite.workloads import flatten_input_shape

NAME = "torch"


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="PyTorch",
        modules=("torch",),
        extra="torch",
        precisions=STANDARD_PRECISIONS,
        distributions=("torch",),
    )


@dataclass
class TorchModel:
    """Everything one run needs, kept inside the worker."""

    module: Any
    optimizer: Any
    scaler: Any
    device: Any
    device_type: str
    autocast_dtype: Any
    memory_format: Any


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo | None:
    if run.framework != NAME:
        return None
    import torch

    if require_device_kind(run, torch.cuda.is_available(), "PyTorch") == "cpu":
        return cpu_device()
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return DeviceInfo(
        kind="gpu",
        platform="rocm" if getattr(torch.version, "hip", None) else "cuda",
        name=props.name,
        count=torch.cuda.device_count(),
        driver=f"CUDA runtime {torch.version.cuda}" if torch.version.cuda else "",
        compute_capability=f"{props.major}.{props.minor}",
        memory_total_bytes=int(props.total_memory),
        supports_tf32=props.major >= 8,
    )


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied | None:
    if run.framework != NAME:
        return None
    import torch

    tf32 = run.precision == "tf32"
    applied = standard_precision(run, device)
    # TF32 is a process-global switch: set it explicitly both ways and record it.
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    notes = [f"allow_tf32={tf32}", f"float32_matmul_precision={torch.get_float32_matmul_precision()}"]
    if device.kind == "gpu":
        torch.backends.cudnn.benchmark = bool(run.options.get("cudnn_benchmark", True))
        notes.append(f"cudnn.benchmark={torch.backends.cudnn.benchmark}")
    notes.append(f"channels_last={bool(run.options.get('channels_last', True))}")
    return dataclasses.replace(applied, notes=tuple(notes))


def _build_module(torch: Any, workload: Workload, weights: dict[str, np.ndarray]) -> Any:
    nn = torch.nn
    layers = []
    channels = workload.channels
    flat_hwc = flatten_input_shape(workload)
    after_flatten = False
    features = None
    for spec in workload.layers:
        if spec.kind == "conv2d":
            conv = nn.Conv2d(channels, spec.features, spec.kernel_size, padding=spec.padding.lower())
            # canonical HWIO -> torch OIHW
            conv.weight.data.copy_(torch.from_numpy(weights[f"{spec.name}/w"].transpose(3, 2, 0, 1).copy()))
            conv.bias.data.copy_(torch.from_numpy(weights[f"{spec.name}/b"]))
            layers.append(conv)
            channels = spec.features
        elif spec.kind == "relu":
            layers.append(nn.ReLU())
        elif spec.kind == "avg_pool":
            layers.append(nn.AvgPool2d(spec.window))
        elif spec.kind == "flatten":
            layers.append(nn.Flatten())
            after_flatten = True
            features = None
        elif spec.kind == "dense":
            kernel = weights[f"{spec.name}/w"]
            if after_flatten and features is None and flat_hwc is not None:
                # torch flattens NCHW as (c, h, w); the canonical rows are (h, w, c)
                kernel = hwc_rows_to_chw(kernel, flat_hwc)
            linear = nn.Linear(kernel.shape[0], kernel.shape[1])
            linear.weight.data.copy_(torch.from_numpy(np.ascontiguousarray(kernel.T)))
            linear.bias.data.copy_(torch.from_numpy(weights[f"{spec.name}/b"]))
            layers.append(linear)
            features = kernel.shape[1]
        else:
            raise ValueError(f"torch plugin cannot build layer kind {spec.kind!r}")
    return nn.Sequential(*layers)


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    applied: PrecisionApplied, device: DeviceInfo,
) -> TorchModel | None:
    if run.framework != NAME:
        return None
    import torch

    torch.manual_seed(run.seed)
    dev = torch.device("cuda" if device.kind == "gpu" else "cpu")
    memory_format = torch.channels_last if run.options.get("channels_last", True) else torch.contiguous_format
    module = _build_module(torch, workload, initial_weights).to(dev, memory_format=memory_format)
    module.train()
    optimizer = torch.optim.Adam(module.parameters(), lr=workload.learning_rate, betas=(0.9, 0.999), eps=1e-8)
    autocast_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(applied.compute_dtype)
    scaler = None
    if applied.loss_scaling == "dynamic":
        scaler = torch.amp.GradScaler(dev.type, init_scale=applied.initial_loss_scale,
                                      growth_factor=2.0, backoff_factor=0.5,
                                      growth_interval=loss_scale_growth_interval(run))
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    return TorchModel(module, optimizer, scaler, dev, dev.type, autocast_dtype, memory_format)


def _to_tensor(torch: Any, model: TorchModel, images: np.ndarray) -> Any:
    # NHWC numpy -> logical NCHW tensor in the model's memory format
    tensor = torch.from_numpy(images).permute(0, 3, 1, 2)
    return tensor.contiguous(memory_format=model.memory_format).to(model.device)


@hookimpl
def stage_batches(run: RunSpec, model: TorchModel, batches: list[Batch]) -> list[tuple[Any, Any]] | None:
    if run.framework != NAME:
        return None
    import torch

    staged = [(_to_tensor(torch, model, b.images), torch.from_numpy(b.labels.astype(np.int64)).to(model.device))
              for b in batches]
    if model.device_type == "cuda":
        torch.cuda.synchronize()
    return staged


def _autocast(torch: Any, model: TorchModel) -> Any:
    """The run's autocast region (disabled for fp32 and tf32)."""
    return torch.autocast(model.device_type, dtype=model.autocast_dtype or torch.float32,
                          enabled=model.autocast_dtype is not None)


def _forward_loss(torch: Any, model: TorchModel, images: Any, labels: Any) -> Any:
    with _autocast(torch, model):
        logits = model.module(images)
        return torch.nn.functional.cross_entropy(logits.float(), labels)


def make_step(torch: Any, model: TorchModel):
    """One optimizer step on a staged batch; returns (loss, applied)."""

    def step(batch: tuple[Any, Any]) -> tuple[float, bool]:
        images, labels = batch
        model.optimizer.zero_grad(set_to_none=True)
        loss = _forward_loss(torch, model, images, labels)
        if model.scaler is None:
            loss.backward()
            model.optimizer.step()
            return float(loss.item()), True  # .item() waits for the step's work
        scale_before = model.scaler.get_scale()
        model.scaler.scale(loss).backward()
        model.scaler.step(model.optimizer)  # skipped when gradients hold inf/NaN
        model.scaler.update()  # ... and then the scale is halved
        return float(loss.item()), model.scaler.get_scale() >= scale_before

    return step


@hookimpl
def train_epoch(run: RunSpec, model: TorchModel, staged: list[tuple[Any, Any]], epoch: int) -> EpochResult | None:
    if run.framework != NAME:
        return None
    import torch

    if model.device_type == "cuda":
        torch.cuda.synchronize()
    result = timed_epoch(staged, make_step(torch, model),
                         timer=_cuda_event_timer(torch) if model.device_type == "cuda" else wall_clock_step)
    result.loss_scale_final = float(model.scaler.get_scale()) if model.scaler is not None else None
    return result


def _cuda_event_timer(torch: Any):
    """Time a step with CUDA events, read after the stream finished the step."""

    def timer(step: Any, batch: Any) -> tuple[float, tuple[float, bool]]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        outcome = step(batch)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0, outcome

    return timer


@hookimpl
def predict(run: RunSpec, model: TorchModel, images: np.ndarray) -> np.ndarray | None:
    if run.framework != NAME:
        return None
    import torch

    model.module.eval()
    try:
        with torch.no_grad(), _autocast(torch, model):
            logits = model.module(_to_tensor(torch, model, np.ascontiguousarray(images, dtype=np.float32)))
        return logits.float().cpu().numpy()
    finally:
        model.module.train()


@hookimpl
def measure(run: RunSpec, model: TorchModel, device: DeviceInfo) -> dict[str, Any] | None:
    if run.framework != NAME:
        return None
    import torch

    figures: dict[str, Any] = {
        "param_count": int(sum(p.numel() for p in model.module.parameters())),
        "framework_version": package_version("torch") or torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
    }
    if model.device_type == "cuda":
        torch.cuda.synchronize()
        figures["device_peak_memory_bytes"] = int(torch.cuda.max_memory_allocated())
        figures["device_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    return figures
