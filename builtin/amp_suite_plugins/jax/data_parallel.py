"""Data-parallel cells in JAX: joining the other nodes, and values replicated or sharded over the cell's mesh.

Data parallel (``--devices N``): ``jax.sharding`` with a 1-D ``Mesh`` over N
devices (axis ``"data"``; on a CPU, N host devices made with
``--xla_force_host_platform_device_count`` before JAX starts).  Parameters,
state, optimizer state and loss scale are replicated
(``NamedSharding(mesh, P())``), each global batch is sharded
(``NamedSharding(mesh, P("data"))``: device i holds the contiguous slice i),
and the same step runs under one ``jax.jit`` of a ``jax.shard_map``: each
device computes the gradient of its shard's mean loss, ``lax.pmean`` averages
gradients and loss over the mesh, and every device applies the identical
update.  BatchNorm statistics are per replica (the running statistics are the
replicas' mean) unless ``sync_batch_norm`` makes BatchNorm average its batch
moments over the mesh.  Several nodes: ``jax.distributed.initialize`` at the
coordinator, one process per node driving that node's devices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite.records import (
    Batch,
    RunSpec,
)
from amp_suite_plugins.jax.model import JaxModel


def _join_nodes(jax: Any, run: RunSpec) -> None:
    """One process per node meets the others at the coordinator (gloo collectives on CPUs)."""
    if jax.distributed.is_initialized():  # a second cell of the same process (the conformance kit's server)
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=run.coordinator, num_processes=run.nnodes,
                               process_id=run.node_rank, initialization_timeout=int(max(60, run.timeout_s)))


AXIS = "data"


def _replicate(jax: Any, mesh: Any, tree: Any) -> Any:
    """``tree`` (host values, the same in every process) replicated on every device of ``mesh``."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(mesh, P())
    return jax.tree_util.tree_map(
        lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree)


def _local(jax: Any, tree: Any) -> Any:
    """One device's copy of a replicated tree (the tree itself off a mesh)."""
    return jax.tree_util.tree_map(lambda x: x.addressable_data(0), tree)


def _shard_batch(jax: Any, run: RunSpec, model: JaxModel, batch: Batch) -> tuple[Any, Any, Any]:
    """A global batch sharded over the mesh (masks along axis 0 too); this process supplies its devices' rows."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    sharding = NamedSharding(model.mesh, P(AXIS))
    first = model.process.first_replica * run.shard_size
    rows = slice(first, first + model.process.local_devices * run.shard_size)
    return jax.tree_util.tree_map(lambda array: jax.make_array_from_process_local_data(
        sharding, array[rows], array.shape), (batch.images, batch.labels, dict(batch.masks)))


def _meet() -> None:
    """Returns once every process of the cell has reached it (before a window's clock starts)."""
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices("amp_suite window")
