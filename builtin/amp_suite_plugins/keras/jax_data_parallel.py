"""Data-parallel cells of ``keras@jax``: the mesh's axis, and one replica's step made the global batch's."""

from __future__ import annotations

from typing import Any

AXIS = "data"


def _replica_step(jax: Any, step: Any) -> Any:
    """``step`` on one replica's shard, made the global batch's step.

    Inside ``shard_map`` the gradient of the replicated variables comes out of
    autodiff already summed over the mesh (JAX's rule for a replicated input's
    cotangent); ``step`` divides it by N before the loss-scale optimizer's
    finite check and update, which then run as on one device, the same on
    every replica.  Loss and BatchNorm statistics are averaged with ``lax.pmean``.
    """
    def replica(state: Any, images: Any, labels: Any, masks: Any) -> tuple[Any, Any, Any]:
        (trainable, non_trainable, optimizer_values), loss, finite = step(state, images, labels, masks)
        loss, non_trainable = jax.lax.pmean((loss, non_trainable), AXIS)
        return (trainable, non_trainable, optimizer_values), loss, finite

    return replica
