"""The PyTorch plugin: eager training with ``torch.autocast`` and ``GradScaler``.

torch is imported inside the hooks only, so loading this plugin is cheap and
``amp-suite --help`` never imports it.

Recipe (PyTorch AMP docs, "Automatic Mixed Precision examples"):
autocast wraps the forward pass and the loss only; backward runs outside it;
``amp_fp16`` uses a ``GradScaler`` (CUDA or CPU) that skips a step whose
gradients overflow and halves its scale; ``amp_bf16`` needs no scaler.
Parameters and BatchNorm running statistics stay float32: autocast casts
the inputs of convolutions and matmuls, and ``batch_norm`` runs on the
reduced-precision activations with float32 weights, statistics and
accumulation.  ``fp64``, the float64 reference of the tests, is no AMP mode:
the module is built and loaded as always, then cast with ``.to(float64)``
(exact), so parameters, running statistics and the optimizer state it makes
are float64; images and masks are staged in float64, autocast stays off, and
logits, loss and ``get_variables`` are float64.

Layers: each kind of the vocabulary is one entry of
:data:`amp_suite_plugins.torch.layers.TORCH_KINDS` (its module, its forward,
its canonical variables).  Transformers (``docs/layers.md``): a token
workload's inputs are int64 ids ``(batch, context)`` and its loss the mean
cross-entropy over every token; option ``attention`` picks
``scaled_dot_product_attention`` or the explicit reference; LayerNorm,
RMSNorm and the reference softmax are upcast to float32 under AMP on every
device (CPU autocast would leave them in the compute dtype); ``adamw`` is
``torch.optim.AdamW`` with a decay and a no-decay parameter group; with
``clip_norm`` the gradients are clipped by global norm after
``GradScaler.unscale_``.

Dropout: the host's masks (``Batch.masks``) are staged with their batch as
tensors in the compute dtype (an elementwise mask of an image in the model's
memory format) and multiplied in by the training forward pass,
``net(images, masks)``; evaluation and ``predict`` pass no masks.

Data parallel (``--devices N``): ``DistributedDataParallel`` with one process
per device, started by torchrun (``FrameworkInfo.launcher``); gloo on CPUs,
NCCL on GPUs (PyTorch docs, "Distributed communication package").  Every
process loads the canonical weights (DDP also broadcasts rank 0's at
construction), takes the contiguous slice ``[rank * B/N, (rank + 1) * B/N)``
of each of the host's global batches, and DDP averages the gradients in
backward, so a step's update is the one of the mean loss over the global
batch.  BatchNorm statistics are per replica (DDP's default, with rank 0's
buffers broadcast before each forward) unless ``sync_batch_norm`` asks for
``SyncBatchNorm``, which PyTorch implements on GPUs only.

Optimizer kernels: option ``fused`` (default false) builds the ``torch.optim``
optimizer with ``fused=True``, one kernel for the whole update (on CUDA a
``GradScaler`` then unscales and checks inside that kernel instead of reading
``found_inf`` with a synchronizing ``.item()`` every step).  Without it torch
picks its default: ``foreach`` (multi-tensor) on CUDA, a per-parameter loop on
the CPU.  An optimizer without a fused kernel for the device is refused
(``UnsupportedError``).  The figure ``optimizer_implementation`` says which
ran: ``fused``, ``foreach`` or ``for-loop``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.errors import UnsupportedError
from amp_suite.machine.devices import version_text
from amp_suite.machine.environment import package_version
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
    OptimizerSpec,
    PrecisionApplied,
    RunSpec,
    Workload,
)
from amp_suite.schema import Field
from amp_suite.workloads.fp8_layers import fp8_layer_names
from amp_suite.workloads.layers import dense_after_flatten
from amp_suite.workloads.workload import learning_rate_at, variable_specs
from amp_suite_plugins.torch.fp8 import fp8_note, use_fp8
from amp_suite_plugins.torch.layers import (
    ATTENTION_IMPLEMENTATIONS,
    TORCH_KINDS,
    load_variables,
    named_parameters,
    read_variables,
    spec_net,
)
from amp_suite_plugins.torch.loss_scaling import grad_scaler
from amp_suite_plugins.torch.trace import trace_step  # noqa: F401 - this plugin's trace_step hook (amp-suite numerics)

NAME = "torch"
# The keys of [frameworks.torch] this plugin reads (the loss-scaling keys every plugin reads come on top).
OPTIONS = {
    "channels_last": FrameworkOption(Field(bool), True, "images and convolution weights in the channels_last "
                                     "memory format (NHWC)"),
    "cudnn_benchmark": FrameworkOption(Field(bool), True, "on a GPU, cuDNN times its kernels and keeps the "
                                       "fastest (torch.backends.cudnn.benchmark)"),
    "compile": FrameworkOption(Field(bool), False, "train through torch.compile (inductor), compiled in the "
                               "warm-up steps"),
    "fused": FrameworkOption(Field(bool), False, "the torch.optim optimizer with fused=True: one kernel for the "
                             "whole update"),
    "attention": FrameworkOption(Field(str, choices=ATTENTION_IMPLEMENTATIONS), "fused",
                                 "multi_head_attention through torch.nn.functional.scaled_dot_product_attention "
                                 "(fused) or an explicit matmul, float32 softmax, matmul (reference)"),
}


# What ran for multi_head_attention, by option attention.
ATTENTION_NOTES = {
    "fused": "attention=fused (torch.nn.functional.scaled_dot_product_attention, is_causal for a causal mask)",
    "reference": "attention=reference (q @ kᵀ / √d, an explicit mask, softmax in float32 under AMP, @ v)",
}

# eager; the whole training step through torch.compile; the same replayed as CUDA graphs (GPU only).
MODES = {"cpu": ("eager", "compiled"), "gpu": ("eager", "compiled", "cudagraphs")}
# torch.compile's mode argument for each compiled execution mode.
COMPILE_MODES = {"compiled": None, "cudagraphs": "reduce-overhead"}


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(
        name=NAME,
        display_name="PyTorch",
        modules=("torch",),
        extra="torch",
        precisions=BUILT_IN_PRECISIONS,
        distributions=("torch",),
        launcher="torchrun",
        launcher_program="torch.distributed.run",  # PyTorch's torchrun, run by amp_suite.launchers.torchrun
        options=OPTIONS,
        doctor_probe="amp_suite_plugins.torch.doctor",
        calibration_probe="amp_suite_plugins.torch.calibration",
        sync_counter="amp_suite_plugins.sync_counters:of_torch",
        modes=MODES,
        default_mode="eager",
        layer_kinds=tuple(TORCH_KINDS),
    )


def mode_of(run: RunSpec) -> str:
    """The run's execution mode: ``eager`` unless the sweep asked for another."""
    return run.mode or "eager"


def option(run: RunSpec, name: str) -> Any:
    """``run.options[name]``, else the default :data:`OPTIONS` declares."""
    return run.options.get(name, OPTIONS[name].default)


@dataclass
class TorchModel:
    """Everything one run needs, kept inside the worker."""

    module: Any
    optimizer: Any
    scheduler: Any
    scaler: Any
    device: Any
    device_type: str
    autocast_dtype: Any
    memory_format: Any
    flattened: dict[str, tuple[int, int, int]]
    train_forward: Any  # the module, its DistributedDataParallel wrapper, or torch.compile's wrapper
    process: Any = None  # the DistributedSpec of a data-parallel cell, else None
    stored_dtype: Any = None  # parameters, statistics, images, logits and loss: torch.float64 under fp64, else float32
    mode: str = "eager"  # the execution mode (MODES)
    compiled_step: Any = None  # compiled and cudagraphs modes: torch.compile of the whole step (see make_step)
    tokens: bool = False  # inputs are int token ids (batch, context) and labels one per token
    clip_norm: float = 0.0  # > 0: gradients clipped to this global norm (unscaled first under a loss scale)
    static_scale: bool = False  # loss_scaling = "static": the scale never moves, so a skip is read from found_inf


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo:
    import torch

    if require_device_kind(run, torch.cuda.is_available(), "PyTorch") == "cpu":
        return dataclasses.replace(cpu_device(), count=run.devices)
    if run.distributed:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return DeviceInfo(
        kind="gpu",
        platform="rocm" if getattr(torch.version, "hip", None) else "cuda",
        name=props.name,
        count=run.devices if run.distributed else torch.cuda.device_count(),
        driver=f"CUDA runtime {torch.version.cuda}" if torch.version.cuda else "",
        compute_capability=f"{props.major}.{props.minor}",
        memory_total_bytes=int(props.total_memory),
        supports_tf32=props.major >= 8,
    )


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied:
    import torch

    tf32 = run.precision == "tf32"
    applied = standard_precision(run, device, fp8_native_path=True)  # torch._scaled_mm on FP8 tensor cores
    # TF32 is a process-global switch: set it explicitly both ways and record it.
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    notes = [f"allow_tf32={tf32}", f"float32_matmul_precision={torch.get_float32_matmul_precision()}"]
    if device.kind == "gpu":
        torch.backends.cudnn.benchmark = bool(option(run, "cudnn_benchmark"))
        notes.append(f"cudnn.benchmark={torch.backends.cudnn.benchmark}")
    notes.append(f"channels_last={bool(option(run, 'channels_last'))}")
    mode = mode_of(run)
    if mode == "compiled":
        notes.append("mode=compiled: the whole training step (forward, backward, optimizer) through torch.compile "
                     "(inductor), compiled in the warm-up steps")
    elif mode == "cudagraphs":
        notes.append("mode=cudagraphs: the whole training step through torch.compile(mode='reduce-overhead'), "
                     "replayed as CUDA graphs, compiled and recorded in the warm-up steps")
    elif option(run, "compile"):
        notes.append("torch.compile=inductor on the forward pass only (option compile; compiled in the warm-up "
                     "steps); mode compiled compiles the whole step")
    if option(run, "fused"):
        notes.append("optimizer=fused (torch.optim ... fused=True: one kernel per step; the figure "
                     "optimizer_implementation confirms it)")
    else:
        notes.append("optimizer=torch's default implementation (foreach on CUDA, for-loop on the CPU; "
                     "the figure optimizer_implementation says which ran)")
    attention = str(option(run, "attention"))
    notes.append(ATTENTION_NOTES.get(attention, f"attention={attention}"))  # build_model refuses an unknown one
    if applied.compute_dtype == "float64":
        notes.append("dtype=float64 parameters, BatchNorm statistics, optimizer state, images, dropout masks, "
                     "logits and loss (the module built and loaded in float32, then cast; no autocast)")
    elif applied.compute_dtype != "float32":
        notes.append("batch_norm=float32 weights and running statistics, float32 accumulation (autocast)")
        notes.append(f"sigmoid={applied.compute_dtype} (autocast leaves sigmoid, swish and relu6 to their "
                     "reduced-precision input: the squeeze-and-excitation gate computes in the compute dtype); "
                     f"dropout masks multiplied in {applied.compute_dtype}")
        notes.append(f"layer_norm, rms_norm=float32 statistics and normalization, output cast to "
                     f"{applied.compute_dtype} (forced: CPU autocast leaves both to their reduced-precision input, "
                     "CUDA autocast runs layer_norm in float32)")
        notes.append("attention_softmax=" + (
            "inside scaled_dot_product_attention, which autocast runs on compute-dtype q, k, v (its fused "
            "kernels keep scores and softmax in float32; see docs/layers.md)" if option(run, "attention") == "fused" else
            f"float32 (forced: CPU autocast leaves softmax to its input), probabilities cast to "
            f"{applied.compute_dtype} for the weighted sum"))
        notes.append(f"token tables=cast to {applied.compute_dtype} where used (class token, positions, looked-up "
                     "rows); logits cast to float32 before the loss")
    if applied.fp8_matmul:
        notes.append(fp8_note(applied.fp8_matmul))
    if run.distributed:
        notes += _data_parallel_notes(run, device)
    return dataclasses.replace(applied, notes=tuple(notes))


def _sync_batch_norm(run: RunSpec, device: DeviceInfo) -> bool:
    """SyncBatchNorm only where PyTorch has it (CUDA)."""
    return run.sync_batch_norm and device.kind == "gpu"


def _data_parallel_notes(run: RunSpec, device: DeviceInfo) -> list[str]:
    backend = "nccl" if device.kind == "gpu" else "gloo"
    notes = [f"data_parallel=DistributedDataParallel over {run.devices} processes (torchrun, {backend}), "
             "gradients averaged", f"sharding=contiguous slice of {run.shard_size} per rank of each global batch"]
    if _sync_batch_norm(run, device):
        notes.append("batch_norm_statistics=synchronized (SyncBatchNorm)")
    elif run.sync_batch_norm:
        notes.append("batch_norm_statistics=per replica (sync_batch_norm asked, but SyncBatchNorm runs on "
                     "GPUs only); running statistics of rank 0")
    else:
        notes.append("batch_norm_statistics=per replica; running statistics of rank 0 (DDP broadcast_buffers)")
    return notes


def _make_optimizer(torch: Any, spec: OptimizerSpec, params: Any, *, fused: bool = False,
                    device_type: str = "cpu", tensor_lr: bool = False,
                    decayed: dict[str, Any] | None = None) -> tuple[Any, Any]:
    """``torch.optim`` with the suite's arithmetic (weight decay added to the gradient; AdamW's decoupled).

    ``fused`` asks for the single-kernel implementation; an optimizer or device
    without one raises :class:`UnsupportedError`.  ``tensor_lr`` holds the
    learning rate in a 0-d tensor on the parameters' device (the compiled
    modes): a schedule then fills it in place, where a changing Python float
    would make torch.compile recompile the optimizer step at every step.
    ``adamw`` is ``torch.optim.AdamW`` with two parameter groups: ``decayed``
    (the parameters whose ``VariableSpec.decay`` is set, by name) at the
    workload's weight decay and every other parameter at 0.
    """
    params = list(params)
    groups: list[Any] = params
    kwargs: dict[str, Any]
    if spec.name == "sgd":
        cls, kwargs = torch.optim.SGD, dict(lr=spec.learning_rate, momentum=spec.momentum,
                                            weight_decay=spec.weight_decay)
    elif spec.name == "rmsprop":
        cls, kwargs = torch.optim.RMSprop, dict(lr=spec.learning_rate, alpha=spec.rho, eps=spec.epsilon,
                                                weight_decay=spec.weight_decay, momentum=0.0, centered=False)
    elif spec.name == "adam":
        cls, kwargs = torch.optim.Adam, dict(lr=spec.learning_rate, betas=(spec.beta1, spec.beta2),
                                             eps=spec.epsilon, weight_decay=spec.weight_decay)
    elif spec.name == "adamw":
        cls, kwargs = torch.optim.AdamW, dict(lr=spec.learning_rate, betas=(spec.beta1, spec.beta2),
                                              eps=spec.epsilon, weight_decay=0.0)
        chosen = {id(p) for p in (decayed or {}).values()}
        groups = [group for group in (
            {"params": [p for p in params if id(p) in chosen], "weight_decay": spec.weight_decay},
            {"params": [p for p in params if id(p) not in chosen], "weight_decay": 0.0}) if group["params"]]
    else:
        raise ValueError(f"torch plugin has no optimizer {spec.name!r}")
    if tensor_lr and spec.schedule != "constant":
        kwargs["lr"] = torch.tensor(spec.learning_rate, dtype=torch.float32, device=params[0].device)
        if groups is not params:  # one tensor per group: the schedule fills each in place
            groups = [{**group, "lr": kwargs["lr"].clone()} for group in groups]
    if fused:
        import inspect

        if "fused" not in inspect.signature(cls).parameters:
            raise UnsupportedError(f"option fused: torch {torch.__version__} has no fused {cls.__name__} "
                                   f"(optimizer {spec.name!r}); run without fused")
        try:
            optimizer = cls(groups, fused=True, **kwargs)
        except (RuntimeError, ValueError, TypeError) as exc:  # e.g. no fused kernel for this device
            raise UnsupportedError(f"option fused: torch {torch.__version__} cannot run a fused "
                                   f"{cls.__name__} on {device_type}: {' '.join(str(exc).split())[:300]}") from None
    else:
        optimizer = cls(groups, **kwargs)
    scheduler = None
    if spec.schedule != "constant":
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: learning_rate_at(spec, step) / spec.learning_rate)
    return optimizer, scheduler


def optimizer_implementation(torch: Any, optimizer: Any) -> str:
    """Which of torch's implementations ``optimizer.step()`` runs: ``fused``, ``foreach`` or ``for-loop``."""
    defaults = optimizer.defaults
    if defaults.get("fused"):
        return "fused"
    if defaults.get("foreach") is not None:
        return "foreach" if defaults["foreach"] else "for-loop"
    # None: torch decides at each step, as below (torch.optim.optimizer._default_to_fused_or_foreach)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    try:
        from torch.optim.optimizer import _default_to_fused_or_foreach

        _, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    except Exception:  # a private helper: fall back to its documented rule (all parameters on CUDA)
        foreach = bool(params) and all(p.is_cuda for p in params)
    return "foreach" if foreach else "for-loop"


@hookimpl
def build_model(
    run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
    initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo,
) -> TorchModel:
    import torch

    torch.manual_seed(run.seed)
    dev = torch.device("cuda" if device.kind == "gpu" else "cpu")
    memory_format = torch.channels_last if option(run, "channels_last") else torch.contiguous_format
    channels_last = memory_format == torch.channels_last
    # Dense weights after a flatten keep the canonical HWC row order when the flatten is channels-last.
    flattened = {} if channels_last else {
        name: hwc for name, hwc in dense_after_flatten(workload.layers, workload.input_shape).items()
        if hwc[0] * hwc[1] > 1}
    autocast_dtype = {"float16": torch.float16, "bfloat16": torch.bfloat16}.get(applied.compute_dtype)
    net = spec_net(torch, workload, flatten_channels_last=channels_last, compute_dtype=autocast_dtype,
                   attention=str(option(run, "attention")), kept=applied.keep_fp32)
    load_variables(torch, net, {**initial_weights, **initial_state}, flattened)
    if applied.fp8_matmul:
        use_fp8(torch, net, fp8_layer_names(workload.layers), native=applied.fp8_matmul == "native")
    stored = getattr(torch, applied.param_dtype)  # float64 only under fp64: every float32 value casts exactly
    net = net.to(dev, stored, memory_format=memory_format)
    net.train()
    mode = mode_of(run)
    decay = {spec.name for spec in variable_specs(workload) if spec.decay}
    optimizer, scheduler = _make_optimizer(torch, workload.optimizer, net.parameters(),
                                           fused=bool(option(run, "fused")), device_type=dev.type,
                                           tensor_lr=mode in COMPILE_MODES,
                                           decayed={name: p for name, p in named_parameters(net).items()
                                                    if name in decay})
    scaler = grad_scaler(torch, dev.type, applied, loss_scale_growth_interval(run))
    train_forward, process = net, None
    if run.distributed:
        train_forward, process = _data_parallel(torch, run, net, device)
        dev = next(net.parameters()).device
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    if option(run, "compile") and mode == "eager":
        train_forward = torch.compile(train_forward)
    model = TorchModel(net, optimizer, scheduler, scaler, dev, dev.type, autocast_dtype, memory_format, flattened,
                       train_forward, process, stored, mode, tokens=workload.tokens,
                       clip_norm=workload.optimizer.clip_norm, static_scale=applied.loss_scaling == "static")
    if mode in COMPILE_MODES:
        model.compiled_step = torch.compile(_whole_step(torch, model), mode=COMPILE_MODES[mode])
    return model


def _data_parallel(torch: Any, run: RunSpec, net: Any, device: DeviceInfo) -> tuple[Any, Any]:
    """Join the cell's process group and wrap ``net`` in DistributedDataParallel."""
    import datetime

    import torch.distributed as dist

    from amp_suite.launchers import this_process

    process = this_process(run)
    if not dist.is_initialized():  # torchrun's environment (env://) says where the others are
        dist.init_process_group("nccl" if device.kind == "gpu" else "gloo",
                                timeout=datetime.timedelta(seconds=max(60.0, run.timeout_s)))
    if _sync_batch_norm(run, device):
        # The converted modules keep the same names and variables (weight, bias, running_*).
        net.named = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net.named)
    device_ids = [torch.cuda.current_device()] if device.kind == "gpu" else None
    return torch.nn.parallel.DistributedDataParallel(net, device_ids=device_ids), process


def _to_tensor(torch: Any, model: TorchModel, images: np.ndarray) -> Any:
    """The model's input: token ids as int64, else NHWC numpy images as logical NCHW in the model's memory
    format and stored dtype (float64 under fp64)."""
    if model.tokens:
        return torch.from_numpy(np.ascontiguousarray(images, dtype=np.int64)).to(model.device)
    tensor = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).permute(0, 3, 1, 2)
    return tensor.contiguous(memory_format=model.memory_format).to(model.device, model.stored_dtype)


def _stage_masks(torch: Any, model: TorchModel, masks: dict[str, np.ndarray]) -> dict[str, Any]:
    """The host's dropout masks as device tensors in the compute dtype, float64 under fp64 (none: an empty dict).

    A per-sample mask stays ``(n,)`` (the forward pass views it as
    ``(n, 1, 1, 1)``); an elementwise mask of an image activation becomes
    logical NCHW in the model's memory format, like the images.
    """
    dtype = model.autocast_dtype or model.stored_dtype
    out = {}
    for name, mask in masks.items():
        tensor = torch.from_numpy(np.ascontiguousarray(mask))
        if tensor.dim() == 4:
            tensor = tensor.permute(0, 3, 1, 2).contiguous(memory_format=model.memory_format)
        out[name] = tensor.to(model.device, dtype)
    return out


@hookimpl
def stage_batches(run: RunSpec, model: TorchModel, batches: list[Batch]) -> list[tuple[Any, Any, Any]]:
    import torch

    if model.process is not None:  # this rank's contiguous slice of every global batch (masks too)
        size = run.shard_size
        first = model.process.first_replica * size
        batches = [b.rows(first, first + size) for b in batches]
    staged = [(_to_tensor(torch, model, b.images), torch.from_numpy(b.labels.astype(np.int64)).to(model.device),
               _stage_masks(torch, model, b.masks)) for b in batches]
    if model.device_type == "cuda":
        torch.cuda.synchronize()
    return staged


def _autocast(torch: Any, model: TorchModel) -> Any:
    """The run's autocast region (disabled for fp32 and tf32)."""
    return torch.autocast(model.device_type, dtype=model.autocast_dtype or torch.float32,
                          enabled=model.autocast_dtype is not None)


def _forward_loss(torch: Any, model: TorchModel, images: Any, labels: Any, masks: dict[str, Any]) -> Any:
    """The mean cross-entropy over every label (one per example, or one per token), from float32 logits."""
    with _autocast(torch, model):
        logits = model.train_forward(images, masks)
        return torch.nn.functional.cross_entropy(logits.to(model.stored_dtype).flatten(0, -2), labels.flatten())


def _clip(torch: Any, model: TorchModel) -> None:
    """Clip the (unscaled) gradients to the workload's global norm, where it sets one."""
    if model.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.module.parameters(), model.clip_norm)


def _whole_step(torch: Any, model: TorchModel):
    """The training step the compiled modes hand to torch.compile: forward, loss, backward, loss scaling and
    the optimizer's update (the schedule's step stays outside: it only fills the tensor learning rate)."""

    def whole_step(images: Any, labels: Any, masks: dict[str, Any]) -> tuple[Any, Any]:
        model.optimizer.zero_grad(set_to_none=True)
        loss = _forward_loss(torch, model, images, labels, masks)
        if model.scaler is None:
            loss.backward()
            _clip(torch, model)
            model.optimizer.step()
            return loss.detach(), None
        model.scaler.scale(loss).backward()
        if model.clip_norm > 0:  # clipping sees the true gradients: unscaled first
            model.scaler.unscale_(model.optimizer)
            _clip(torch, model)
        # The scale as a device tensor, without a host sync: GradScaler's public get_scale() calls .item(), and
        # torch has no public asynchronous accessor (2.13).  Traced here, the copy and comparison join the graph.
        before = model.scaler._get_scale_async().clone()
        model.scaler.step(model.optimizer)
        if model.static_scale:  # a fixed scale does not drop on a skipped step: ask GradScaler's inf/NaN count
            applied = _found_inf(torch, model.scaler, model.optimizer) == 0
            model.scaler.update()
            return loss.detach(), applied
        model.scaler.update()
        return loss.detach(), model.scaler._get_scale_async() >= before

    return whole_step


@dataclass(frozen=True)
class FoundInf:
    """A loss-scaled eager step's applied flag, still on the device: the step was applied when ``count`` is 0.

    ``count`` is the 0-d tensor in which ``GradScaler`` counted the step's
    inf/NaN gradients (``scaler.step`` skips the update when it is not 0, and
    ``scaler.update`` then halves the scale).  GradScaler makes a new one each
    step, so keeping it costs no kernel and no host sync; :func:`_fetch`
    compares the window's counts with 0 after the clock stopped.
    """

    count: Any


def _found_inf(torch: Any, scaler: Any, optimizer: Any) -> Any:
    """The inf/NaN count of the step ``scaler.step(optimizer)`` just took; call it before ``scaler.update()``.

    torch has no public asynchronous accessor (2.13): GradScaler's private
    per-optimizer record is read here and nowhere else.  Several devices' counts
    (never in this plugin: one device per process) are summed into a new tensor.
    """
    counts = list(scaler._found_inf_per_device(optimizer).values())
    return counts[0] if len(counts) == 1 else torch.stack(counts).sum()


def make_step(torch: Any, model: TorchModel):
    """One optimizer step on a staged batch; returns (loss, applied) without waiting for the device.

    ``applied`` is ``True`` without loss scaling.  Under loss scaling it stays
    on the device: in eager mode a :class:`FoundInf` (GradScaler's own inf/NaN
    count of the step: no kernel added to the step), in the compiled modes a
    bool tensor computed inside the graph (the scale did not drop, read through
    ``GradScaler``'s asynchronous scale tensor instead of the synchronizing
    ``get_scale()``).  Either way the step adds no host sync and no kernel to
    what an idiomatic loop launches (``tests/test_torch_step_ops.py`` counts
    it).  The compiled modes run
    :func:`_whole_step` through torch.compile; under CUDA graphs each step
    opens a new replay (``cudagraph_mark_step_begin``) and its outputs are
    copied out before the next replay overwrites them.
    """
    if model.compiled_step is not None:
        graphs = model.mode == "cudagraphs"

        def compiled(batch: tuple[Any, Any, Any]) -> tuple[Any, Any]:
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            loss, applied = model.compiled_step(*batch)
            if graphs:
                loss = loss.clone()
                applied = applied.clone() if applied is not None else None
            if model.scheduler is not None:
                model.scheduler.step()
            return loss, True if applied is None else applied

        return compiled

    def step(batch: tuple[Any, Any, Any]) -> tuple[Any, Any]:
        images, labels, masks = batch
        model.optimizer.zero_grad(set_to_none=True)
        loss = _forward_loss(torch, model, images, labels, masks)
        if model.scaler is None:
            loss.backward()
            _clip(torch, model)
            model.optimizer.step()
            applied: Any = True
        else:
            model.scaler.scale(loss).backward()
            if model.clip_norm > 0:  # clipping sees the true gradients: unscaled first (step does not unscale again)
                model.scaler.unscale_(model.optimizer)
                _clip(torch, model)
            model.scaler.step(model.optimizer)  # skipped when gradients hold inf/NaN
            # Whether it was skipped, as GradScaler counted it: no .item() (a wait at every step, which would
            # break the window's one wait) and no kernel (a copy and a comparison of the scale were two).
            applied = FoundInf(_found_inf(torch, model.scaler, model.optimizer))
            model.scaler.update()  # ... and then the scale is halved
        if model.scheduler is not None:
            model.scheduler.step()
        return loss.detach(), applied

    return step


def _fetch(torch: Any, outcomes: list[tuple[Any, Any]]) -> tuple[list[float], list[bool]]:
    """One device-to-host copy for the window's losses, one for its applied flags."""
    if not outcomes:
        return [], []
    losses = torch.stack([loss for loss, _ in outcomes]).double().cpu().tolist()  # fp64's losses keep their digits
    flags = [applied for _, applied in outcomes]
    tensors = [flag for flag in flags if not isinstance(flag, bool)]
    if tensors:
        if all(isinstance(flag, FoundInf) for flag in tensors):
            on_device = torch.stack([flag.count for flag in tensors]) == 0
        else:
            on_device = torch.stack([flag.count == 0 if isinstance(flag, FoundInf) else flag for flag in tensors])
        values = iter(on_device.cpu().tolist())
        flags = [flag if isinstance(flag, bool) else bool(next(values)) for flag in flags]
    return losses, flags


def _step_marks(torch: Any, steps: int) -> tuple[Any, list[Any]]:
    """(the current CUDA stream, ``steps + 1`` timing events): step ``i`` runs from mark ``i`` to mark ``i + 1``.

    One event per boundary, not a start and an end per step: nothing is
    enqueued between two steps, so one step's end and the next one's start are
    the same point of the stream.  torch creates a CUDA event at its first
    record, so each is recorded once here, before the window's clock starts;
    inside the window a step then costs one ``cudaEventRecord`` and no event
    creation.
    """
    stream = torch.cuda.current_stream()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    for mark in marks:
        mark.record(stream)
    return stream, marks


@hookimpl
def train_epoch(run: RunSpec, model: TorchModel, staged: list[tuple[Any, Any, Any]], epoch: int) -> EpochResult:
    import torch

    model.module.train()
    step = make_step(torch, model)
    step_times: Callable[[], list[float]] | None = None
    if model.device_type == "cuda":
        stream, marks = _step_marks(torch, len(staged))
        torch.cuda.synchronize()
        plain_step, taken = step, 0

        def step(batch: tuple[Any, Any, Any]) -> tuple[Any, Any]:  # noqa: F811 - the same step, between two marks
            nonlocal taken
            if taken == 0:
                marks[0].record(stream)
            outcome = plain_step(batch)
            taken += 1
            marks[taken].record(stream)
            return outcome

        def marked_times() -> list[float]:
            return [start.elapsed_time(end) / 1000.0
                    for start, end in zip(marks[:taken], marks[1:taken + 1], strict=True)]

        step_times = marked_times

    result = timed_window(
        staged, step,
        wait=(lambda outcome: torch.cuda.synchronize()) if model.device_type == "cuda" else (lambda outcome: None),
        fetch=lambda outcomes: _fetch(torch, outcomes),
        step_times=step_times,
    )
    result.loss_scale_final = float(model.scaler.get_scale()) if model.scaler is not None else None
    if model.process is not None:
        _across_ranks(torch, model, result)
    return result


def _across_ranks(torch: Any, model: TorchModel, result: EpochResult) -> None:
    """The window as the cell saw it: the slowest rank's time, global samples, the global batch's mean loss.

    One all-reduce of a few numbers after the window's clock stopped.
    """
    import torch.distributed as dist

    world = dist.get_world_size()
    losses = torch.tensor(result.step_losses, dtype=torch.float64, device=model.device)
    dist.all_reduce(losses, op=dist.ReduceOp.SUM)

    def slowest(seconds: float) -> float:
        clock = torch.tensor([seconds], dtype=torch.float64, device=model.device)
        dist.all_reduce(clock, op=dist.ReduceOp.MAX)
        return float(clock.item())

    take_slowest_window(result, slowest)
    result.step_losses = [v / world for v in losses.cpu().tolist()]
    result.samples *= world
    result.step_times_s = []  # per-rank device events do not describe the cell


@hookimpl
def reset_memory_peak(run: RunSpec, model: TorchModel, device: DeviceInfo) -> None:
    import torch

    if model.device_type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


@hookimpl
def predict(run: RunSpec, model: TorchModel, images: np.ndarray, training: bool) -> np.ndarray:
    import torch

    net = model.module
    saved = {name: buffer.clone() for name, buffer in net.named_buffers()}
    net.train(training)
    try:
        with torch.no_grad(), _autocast(torch, model):
            logits = net(_to_tensor(torch, model, images))
        return logits.to(model.stored_dtype).cpu().numpy()
    finally:
        if training:  # a training-mode forward moved the running statistics: put them back
            with torch.no_grad():
                for name, buffer in net.named_buffers():
                    buffer.copy_(saved[name])
        net.train()


@hookimpl
def get_variables(run: RunSpec, model: TorchModel) -> dict[str, np.ndarray]:
    return read_variables(model.module, model.stored_dtype, model.flattened)


@hookimpl
def measure(run: RunSpec, model: TorchModel, device: DeviceInfo) -> dict[str, Any]:
    import torch

    figures: dict[str, Any] = {
        "param_count": int(sum(p.numel() for p in model.module.parameters() if p.requires_grad)),
        "framework_version": f"torch {package_version('torch') or torch.__version__}",
        "torch_num_threads": torch.get_num_threads(),
        # from the option, not the object: a data-parallel cell's DDP wrapper is not the module either
        "compilation": {"compiled": "torch.compile (inductor): the whole step",
                        "cudagraphs": "torch.compile (inductor, reduce-overhead: CUDA graphs): the whole step",
                        }.get(model.mode, "torch.compile (inductor): the forward pass" if option(run, "compile")
                              else "eager"),
        "optimizer_implementation": optimizer_implementation(torch, model.optimizer),
    }
    if model.compiled_step is not None or option(run, "compile"):
        figures.update(_compile_figures(torch))
    if model.device_type == "cuda":
        torch.cuda.synchronize()
        figures["device_peak_memory_bytes"] = int(torch.cuda.max_memory_allocated())
        figures["device_peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    if model.process is not None:
        figures.update(_per_rank_memory(torch, figures))
    return figures


def _compile_figures(torch: Any) -> dict[str, Any]:
    """What torch.compile made of the run: graphs compiled, graph breaks and recompilations (dynamo's counters)."""
    try:
        from torch._dynamo.utils import counters  # private, read-only: no public accessor in torch 2.13
    except ImportError:
        return {}
    found: dict[str, Any] = dict(counters)
    breaks: dict[str, int] = dict(found.get("graph_break", {}))
    reasons = sorted({(str(reason).splitlines() or [""])[0][:120] for reason in breaks})
    return {
        "compiled_graphs": int(dict(found.get("stats", {})).get("unique_graphs", 0)),
        "graph_breaks": int(sum(breaks.values())),
        "graph_break_reasons": "; ".join(reasons)[:600],
        "recompiles": int(sum(dict(found.get("recompiles", {})).values())),
        # cudagraphs mode: graphs inductor ran without CUDA graphs (a mutated input, a CPU tensor ...)
        "cudagraph_skips": int(dict(found.get("inductor", {})).get("cudagraph_skips", 0)),
    }


@hookimpl
def runtime_versions(run: RunSpec) -> dict[str, str]:
    """The CUDA runtime torch was built with and, on a GPU, the cuDNN it loaded."""
    import torch

    found: dict[str, str] = {}
    if torch.version.cuda:
        found["cuda_runtime_version"] = str(torch.version.cuda)
    try:
        cudnn = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    except Exception:  # a cuDNN that does not match the build raises here: the doctor names it
        cudnn = None
    if cudnn:
        found["cudnn_version"] = version_text(cudnn, "cudnn")
    return found


def _per_rank_memory(torch: Any, figures: dict[str, Any]) -> dict[str, Any]:
    """Every rank's peaks, gathered over the process group: per rank, and the largest."""
    import torch.distributed as dist

    from amp_suite.plugins.host_memory import peak_rss_bytes

    mine = {"rss": peak_rss_bytes(), "device": figures.get("device_peak_memory_bytes")}
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    out: dict[str, Any] = {"peak_rss_bytes_per_rank": [int(r["rss"]) for r in everyone],
                           "peak_rss_bytes_max_rank": max(int(r["rss"]) for r in everyone)}
    if mine["device"] is not None:
        out["device_peak_memory_bytes_per_rank"] = [int(r["device"]) for r in everyone]
        out["device_peak_memory_bytes"] = max(int(r["device"]) for r in everyone)
    return out


if TYPE_CHECKING:  # mypy checks every hook above against the specs' names and types (amp_suite.plugins.framework_plugin)
    import amp_suite_plugins.torch.plugin as _this_module
    from amp_suite.plugins.framework_plugin import FrameworkPlugin, ResetsMemoryPeak

    _checked: FrameworkPlugin[TorchModel, list[tuple[Any, Any, Any]]] = _this_module
    _resets_peak: ResetsMemoryPeak[TorchModel] = _this_module
