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
workload's inputs are int32 ids ``(batch, context)`` and its loss the mean
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
from typing import TYPE_CHECKING, Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.machine.devices import version_text
from amp_suite.machine.environment import package_version
from amp_suite.plugins.kit import (
    BUILT_IN_PRECISIONS,
    cpu_device,
    loss_scale_growth_interval,
    no_meet,
    require_device_kind,
    standard_precision,
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
from amp_suite.workloads.layers import dense_after_flatten
from amp_suite.workloads.workload import variable_specs
from amp_suite_plugins.torch.compile_counters import _compile_figures
from amp_suite_plugins.torch.data_parallel import (
    _across_ranks,
    _data_parallel,
    _meet,
    _per_rank_memory,
)
from amp_suite_plugins.torch.fp8 import keep_roundings_under_compile, use_fp8
from amp_suite_plugins.torch.inputs import _stage_masks, _to_tensor
from amp_suite_plugins.torch.layers import (
    TORCH_KINDS,
    load_variables,
    named_parameters,
    read_variables,
    spec_net,
)
from amp_suite_plugins.torch.loss_scaling import grad_scaler
from amp_suite_plugins.torch.model import TorchModel
from amp_suite_plugins.torch.optimizer import (
    _make_optimizer,
    create_momentum_buffers,
    optimizer_implementation,
)
from amp_suite_plugins.torch.options import COMPILE_MODES, MODES, OPTIONS, compiles_step, mode_of, option
from amp_suite_plugins.torch.precision_notes import precision_notes
from amp_suite_plugins.torch.step import FoundInf, _autocast, _clip, _fetch, _step_marks, _whole_step, make_step  # noqa: F401 - re-exported (trace.py, tests)
from amp_suite_plugins.torch.trace import trace_step  # noqa: F401 - this plugin's trace_step hook (amp-suite numerics)

NAME = "torch"


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
    if device.kind == "gpu":
        torch.backends.cudnn.benchmark = bool(option(run, "cudnn_benchmark"))
    if compiles_step(run):
        keep_roundings_under_compile(torch, bool(applied.fp8_matmul))
    notes = precision_notes(torch, run, device, applied)
    return dataclasses.replace(applied, notes=(*applied.notes, *notes))  # the kit's own notes first


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
        create_momentum_buffers(torch, optimizer)  # outside the graphs, so no CUDA graph owns optimizer state
        model.compiled_step = torch.compile(_whole_step(torch, model), mode=COMPILE_MODES[mode])
    return model


@hookimpl
def stage_batches(run: RunSpec, model: TorchModel, batches: list[Batch]) -> list[tuple[Any, Any, Any]]:
    import torch

    if model.process is not None:  # this rank's contiguous slice of every global batch (masks too)
        size = run.shard_size
        first = model.process.first_replica * size
        batches = [b.rows(first, first + size) for b in batches]
    # A token workload's labels as the host's int32, like its ids: a window holds thousands of them, staged at the
    # host's size (the bytes the memory figure subtracts) and widened for the loss inside the step.  An image
    # workload's one label per image stays int64, as an idiomatic loop stages it (no widening kernel per step).
    label_dtype = np.int32 if model.tokens else np.int64
    staged = [(_to_tensor(torch, model, b.images), torch.from_numpy(b.labels.astype(label_dtype)).to(model.device),
               _stage_masks(torch, model, b.masks)) for b in batches]
    if model.device_type == "cuda":
        torch.cuda.synchronize()
    return staged


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
        meet=(lambda: _meet(torch, model)) if model.process is not None else no_meet,
    )
    result.loss_scale_final = float(model.scaler.get_scale()) if model.scaler is not None else None
    if model.process is not None:
        _across_ranks(torch, model, result)
    return result


# CUDA graphs take a step's memory when they are recorded, in warm-up, and hand it back to their private pool; a
# replay allocates nothing, so the allocator's peak since warm-up missed it (the H200 of 2026-11-28: ResNet-18's
# cudagraphs cell read 94 MiB, eager 484). That mode's peak adds the pool's blocks no tensor holds: what each replay
# writes into.
CUDAGRAPHS_PEAK_METHOD = ("torch.cuda.max_memory_allocated since warm-up plus the CUDA graphs' private pools' "
                          "unallocated blocks, which each replay writes into without allocating")


def graph_pool_free_bytes(snapshot: list[dict[str, Any]]) -> int:
    """The bytes of ``torch.cuda.memory_snapshot()``'s segments in a private pool (a CUDA graph's; the default
    pool is ``(0, 0)``) that the allocator does not count as allocated."""
    return sum(int(segment.get("total_size", 0)) - int(segment.get("allocated_size", 0)) for segment in snapshot
               if tuple(segment.get("segment_pool_id") or (0, 0)) != (0, 0))


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
        if model.mode == "cudagraphs":
            pools = graph_pool_free_bytes(torch.cuda.memory_snapshot())
            figures["cudagraph_pool_free_bytes"] = pools
            figures["device_peak_memory_bytes"] += pools
            figures["device_peak_memory_method"] = CUDAGRAPHS_PEAK_METHOD
    if model.process is not None:
        figures.update(_per_rank_memory(torch, figures))
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
    except Exception:  # a cuDNN that does not match the build raises here: the doctor names it
        cudnn = None
    if cudnn:
        found["cudnn_version"] = version_text(cudnn, "cudnn")
    return found


if TYPE_CHECKING:  # mypy checks every hook above against the specs' names and types (amp_suite.plugins.framework_plugin)
    import amp_suite_plugins.torch.plugin as _this_module
    from amp_suite.plugins.framework_plugin import FrameworkPlugin, ResetsMemoryPeak

    _checked: FrameworkPlugin[TorchModel, list[tuple[Any, Any, Any]]] = _this_module
    _resets_peak: ResetsMemoryPeak[TorchModel] = _this_module
