"""The Flax backend's data parallel: where a run's arrays live, and its step over a 1-D JAX ``Mesh``.

One worker drives the run's devices of one node (``FrameworkInfo.launcher =
"process"``).  Parameters, statistics, optimizer state and loss scale are
replicated on every device of the mesh; device i holds the contiguous slice i
of each global batch (:class:`Placement`).  :func:`data_parallel` runs the
train step under ``jax.shard_map`` over that mesh, and the step differentiates
the global batch's mean loss (:func:`mean_over_replicas` of the replicas'
losses), so every device applies the update one device would apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_suite.plugin_api import DeviceInfo, RunSpec

# The data-parallel mesh's one axis: device i of the mesh holds slice i of every global batch.
AXIS = "data"


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


def data_parallel_notes(run: RunSpec, device: DeviceInfo) -> tuple[str, ...]:
    """What a data-parallel cell's record says: the engine, the batch's layout and BatchNorm's statistics."""
    batch_norm = ("batch_norm_statistics=synchronized (batch moments averaged over the mesh)" if run.sync_batch_norm
                  else "batch_norm_statistics=per replica; running statistics averaged over the replicas")
    return (f"data_parallel=jax.jit(jax.shard_map) over a 1-D Mesh of {run.devices} {device.kind} devices; "
            "gradient of the global batch's mean loss (lax.pmean of the replicas' losses)",
            f"sharding=contiguous slice of {run.shard_size} per device of each global batch; parameters, "
            "statistics and optimizer state replicated",
            batch_norm)


def data_parallel(step: Callable[..., tuple[Any, ...]], mesh: Any) -> Callable[..., tuple[Any, ...]]:
    """``step`` over ``mesh``: state (loss-scale arrays included) replicated in and out; images, labels and
    dropout masks sharded by rows."""
    import jax
    from jax.sharding import PartitionSpec

    replicated, rows = PartitionSpec(), PartitionSpec(AXIS)
    return jax.shard_map(step, mesh=mesh, in_specs=(replicated,) * 4 + (rows,) * 3, out_specs=replicated)


def mean_over_replicas(value: Any, axis: str | None) -> Any:
    """``value`` averaged over the mesh axis ``axis`` (inside ``shard_map``), or ``value`` itself."""
    import jax

    return value if axis is None else jax.lax.pmean(value, axis)
