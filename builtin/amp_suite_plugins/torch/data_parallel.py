"""Data-parallel PyTorch: the process group and DistributedDataParallel, and the figures gathered over the ranks."""

from __future__ import annotations

from typing import Any

from amp_suite.plugins.kit import (
    take_slowest_window,
)
from amp_suite.records import (
    DeviceInfo,
    EpochResult,
    RunSpec,
)
from amp_suite_plugins.torch.model import (
    TorchModel,
)


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


def _meet(torch: Any, model: TorchModel) -> None:
    """Returns once every rank has reached it: a one-number all-reduce, read back (on a GPU that waits for the
    all-reduce on the rank's stream).  Called right before a window's clock starts."""
    import torch.distributed as dist

    token = torch.zeros(1, device=model.device)
    dist.all_reduce(token)
    token.item()


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
