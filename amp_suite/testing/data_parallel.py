"""Data parallel in the conformance kit: N devices take the step one device takes on the global batch.

A data-parallel step (``ProbeRequest(devices=2)``) applies the update of the
mean loss over the global batch.  With BatchNorm, what "the same step" means
depends on whose moments normalize a replica's shard:

* **per replica** (the default): each replica normalizes its shard with the
  shard's own moments, so the step's gradient is the mean of the gradients one
  device computes on each shard alone (``ProbeRequest(shard=(i, 2))``), its
  loss the mean of their losses, and the running statistics replica 0's or
  the replicas' mean (frameworks differ: PyTorch and Keras keep the first
  replica's, JAX averages them);
* **synchronized** (``sync_batch_norm=True``): the moments are the global
  batch's, so gradient, loss and running statistics are one device's on the
  whole batch.

The gradient is read from one plain-SGD step, ``g = (w0 - w1) / lr``, with a
learning rate so large (:data:`LEARNING_RATE`) that the update dwarfs the
float32 rounding of the weights it is added to.  A failure names the tensor,
the error and, where it can tell, the likely fault (gradients summed instead
of averaged, one replica's gradient only, BatchNorm statistics of the wrong
kind).  Importing this module imports no framework and no pytest.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amp_suite.testing import OPTIMIZERS, WORKLOADS, ProbeResult

# Replicas of the checked step: the smallest data-parallel cell.
DEVICES = 2
# One plain-SGD step, the gradient times this, is all a probe's weights move.
LEARNING_RATE = 1000.0
# Allowed relative L2 error of every gradient tensor, and relative error of the loss.
RTOL = 1e-5
# Running statistics are compared element-wise (tiny variances need an absolute floor).
STATISTICS_RTOL, STATISTICS_ATOL = 1e-4, 1e-6
# Canonical leaf names of BatchNorm's running statistics (the model state, not trained).
BATCH_NORM_STATISTICS = ("mean", "var")
# How a data-parallel backend's PrecisionApplied.notes say whose statistics BatchNorm keeps.
BATCH_NORM_NOTE = "batch_norm_statistics="
PER_REPLICA, SYNCHRONIZED = "per replica", "synchronized"


def one_step_fields(workload: str = "resnet8", batch_size: int = 16) -> dict[str, Any]:
    """ProbeRequest fields of the checked step: one plain-SGD step of ``workload`` (with BatchNorm) on a small batch."""
    sgd = {**OPTIMIZERS["sgd"], "learning_rate": LEARNING_RATE, "momentum": 0.0, "weight_decay": 0.0}
    return {"workload": workload, "table": {**WORKLOADS[workload], **sgd, "batch_size": batch_size}, "steps": 1,
            "batch_size": batch_size}


def data_parallel_launcher(framework: str, plugin_modules: tuple[str, ...] = ()) -> str:
    """``FrameworkInfo.launcher`` of ``framework``: ``"process"``, ``"torchrun"``, or ``""`` without data parallel."""
    from amp_suite.plugins.host import PluginHost

    info = PluginHost(extra_modules=plugin_modules).frameworks().get(framework)
    return "" if info is None else info.launcher


def batch_norm_note(result: ProbeResult) -> str:
    """The ``batch_norm_statistics=...`` note of ``result.applied``, or ``""`` when there is none."""
    return next((note for note in result.applied.get("notes", ()) if note.startswith(BATCH_NORM_NOTE)), "")


def declined_sync_batch_norm(result: ProbeResult) -> str:
    """The note of a probe that asked for synchronized BatchNorm and kept per-replica statistics, else ``""``.

    A backend records there that it has no synchronized BatchNorm on this
    device (PyTorch's SyncBatchNorm runs on GPUs only); the kit then skips the
    synchronized check with that reason.
    """
    note = batch_norm_note(result)
    declined = result.request.sync_batch_norm and note.startswith(BATCH_NORM_NOTE + PER_REPLICA)
    return note if declined else ""


def sgd_gradients(result: ProbeResult) -> dict[str, np.ndarray]:
    """The gradient of a one-step plain-SGD probe, per trainable variable: ``(w0 - w1) / LEARNING_RATE``."""
    before, after = _trainable(result.initial), _trainable(result.variables)
    return {name: (before[name].astype(np.float64) - after[name]) / LEARNING_RATE for name in before}


def running_statistics(result: ProbeResult) -> dict[str, np.ndarray]:
    """BatchNorm's running statistics after the probe's steps, by canonical name."""
    return {name: value for name, value in result.variables.items() if _is_statistic(name)}


def assert_data_parallel_matches(parallel: ProbeResult, single: ProbeResult, shards: list[ProbeResult], *,
                                 rtol: float = RTOL) -> None:
    """A data-parallel step equals the one-device steps it stands for.

    ``parallel`` ran with ``devices=N``; ``single`` is one device on the
    global batch; ``shards[i]`` one device on shard ``i`` of ``N``.  With
    ``sync_batch_norm`` the step must be ``single``'s (gradient, loss and
    running statistics); without, the mean of the shards' (gradient and loss)
    with replica 0's or the replicas' mean running statistics.  The notes must
    say which BatchNorm ran.
    """
    devices = parallel.request.devices
    assert devices > 1, f"the data-parallel probe ran on {devices} device (ProbeRequest(devices=N), N > 1)"
    assert len(shards) == devices, f"{len(shards)} shard probes for a step on {devices} devices"
    if parallel.request.sync_batch_norm:
        _assert_synchronized_step(parallel, single, shards, rtol)
    else:
        _assert_per_replica_step(parallel, single, shards, rtol)


# --- the two kinds of step ------------------------------------------------------


def _assert_per_replica_step(parallel: ProbeResult, single: ProbeResult, shards: list[ProbeResult],
                             rtol: float) -> None:
    """Gradient and loss are the shards' mean; the running statistics replica 0's or the replicas' mean."""
    what = f"a step on {len(shards)} devices with per-replica BatchNorm"
    _assert_batch_norm_note(parallel, PER_REPLICA, what)
    expected = _mean([sgd_gradients(shard) for shard in shards])
    suspects = {"one device's gradient on the global batch: BatchNorm was synchronized although "
                "sync_batch_norm was not asked": sgd_gradients(single),
                **_own_shard_suspects(shards)}
    _assert_gradients(sgd_gradients(parallel), expected, "the mean of the per-shard gradients", suspects,
                      len(shards), rtol, what)
    _assert_loss(parallel.losses[0], float(np.mean([shard.losses[0] for shard in shards])),
                 "the mean of the per-shard losses", rtol, what)
    _assert_per_replica_statistics(parallel, shards, what)


def _assert_synchronized_step(parallel: ProbeResult, single: ProbeResult, shards: list[ProbeResult],
                              rtol: float) -> None:
    """Gradient, loss and running statistics are one device's on the global batch."""
    what = f"a step on {len(shards)} devices with synchronized BatchNorm"
    _assert_batch_norm_note(parallel, SYNCHRONIZED, what)
    suspects = {"the mean of the per-shard gradients: BatchNorm normalized each replica with its own "
                "shard's moments although sync_batch_norm was asked": _mean([sgd_gradients(s) for s in shards]),
                **_own_shard_suspects(shards)}
    _assert_gradients(sgd_gradients(parallel), sgd_gradients(single), "one device's gradient on the global batch",
                      suspects, len(shards), rtol, what)
    _assert_loss(parallel.losses[0], single.losses[0], "one device's loss on the global batch", rtol, what)
    _assert_synchronized_statistics(parallel, single, shards, what)


# --- the checks -----------------------------------------------------------------


def _assert_batch_norm_note(result: ProbeResult, expected: str, what: str) -> None:
    """``applied.notes`` say that BatchNorm's statistics were ``expected``."""
    note = batch_norm_note(result)
    assert note, (f"{what}: applied.notes must say whose statistics BatchNorm uses "
                  f"('{BATCH_NORM_NOTE}{expected} ...'); they are {list(result.applied.get('notes', ()))}")
    assert note.startswith(BATCH_NORM_NOTE + expected), \
        f"{what}: applied.notes say {note!r}, expected '{BATCH_NORM_NOTE}{expected} ...'"


def _assert_gradients(ours: dict[str, np.ndarray], expected: dict[str, np.ndarray], expected_name: str,
                      suspects: dict[str, dict[str, np.ndarray]], devices: int, rtol: float, what: str) -> None:
    """Every gradient tensor within ``rtol`` (relative L2) of ``expected``; else say how it is off."""
    assert set(ours) == set(expected), \
        f"{what}: trainable variables differ from one device's: {sorted(set(ours) ^ set(expected))}"
    errors = _relative_errors(ours, expected)
    worst = sorted(errors.items(), key=lambda item: -item[1])
    if worst[0][1] <= rtol:
        return
    name, error = worst[0]
    message = (f"{what}: the gradient of {name} differs from {expected_name} by {error:.2e} (relative L2, "
               f"allowed {rtol:g}); worst tensors {[(n, float(f'{e:.2e}')) for n, e in worst[:3]]}")
    raise AssertionError(message + _diagnosis(ours, expected, suspects, devices, rtol))


def _diagnosis(ours: dict[str, np.ndarray], expected: dict[str, np.ndarray],
               suspects: dict[str, dict[str, np.ndarray]], devices: int, rtol: float) -> str:
    """What a wrong gradient most likely is: another step's gradient, or the right one scaled by N or 1/N."""
    for label, gradient in suspects.items():
        if max(_relative_errors(ours, gradient).values()) <= rtol:
            return f"; it is {label}"
    scale = _best_scale(ours, expected)
    if abs(scale - devices) <= 1e-3 * devices:
        return f"; it is {scale:.4f} times the expected gradient: summed over the {devices} replicas, not averaged"
    if abs(scale - 1 / devices) <= 1e-3 / devices:
        return f"; it is {scale:.4f} times the expected gradient: divided by {devices} once too often"
    return f"; the best fit of it is {scale:.4f} times the expected gradient"


def _assert_loss(ours: float, expected: float, expected_name: str, rtol: float, what: str) -> None:
    """The step's reported loss is ``expected`` (the global batch's mean) within ``rtol``."""
    error = abs(ours - expected) / abs(expected)
    assert error <= rtol, (f"{what}: the reported loss {ours!r} differs from {expected_name} {expected!r} by "
                           f"{error:.2e} (relative, allowed {rtol:g})")


def _assert_per_replica_statistics(parallel: ProbeResult, shards: list[ProbeResult], what: str) -> None:
    """The running statistics are replica 0's or the replicas' mean (the frameworks' two conventions)."""
    ours = running_statistics(parallel)
    conventions = {"replica 0's": running_statistics(shards[0]),
                   "the replicas' mean": _mean([running_statistics(shard) for shard in shards])}
    assert ours, f"{what}: no BatchNorm running statistics ({'/'.join(BATCH_NORM_STATISTICS)}) among the variables"
    distances = {label: _statistics_mismatch(ours, theirs) for label, theirs in conventions.items()}
    if any(mismatch is None for mismatch in distances.values()):
        return
    described = "; ".join(f"from {label}: {mismatch}" for label, mismatch in distances.items())
    raise AssertionError(f"{what}: the running statistics are neither replica 0's nor the replicas' mean "
                         f"({described})")


def _assert_synchronized_statistics(parallel: ProbeResult, single: ProbeResult, shards: list[ProbeResult],
                                    what: str) -> None:
    """The running statistics are one device's on the global batch (the global batch's moments)."""
    ours = running_statistics(parallel)
    assert ours, f"{what}: no BatchNorm running statistics ({'/'.join(BATCH_NORM_STATISTICS)}) among the variables"
    mismatch = _statistics_mismatch(ours, running_statistics(single))
    if mismatch is None:
        return
    per_replica = _mean([running_statistics(shard) for shard in shards])
    hint = ("; they are the replicas' mean of per-shard statistics: the moments were not synchronized"
            if _statistics_mismatch(ours, per_replica) is None else "")
    raise AssertionError(f"{what}: the running statistics differ from one device's on the global batch: "
                         f"{mismatch}{hint}")


# --- arithmetic -------------------------------------------------------------------


def _is_statistic(name: str) -> bool:
    return name.rsplit("/", 1)[-1] in BATCH_NORM_STATISTICS


def _trainable(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: value for name, value in variables.items() if not _is_statistic(name)}


def _mean(trees: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The element-wise mean of dicts of arrays with the same keys."""
    return {name: np.mean([np.asarray(tree[name], np.float64) for tree in trees], axis=0) for name in trees[0]}


def _relative_errors(ours: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> dict[str, float]:
    """``|ours - expected| / |expected|`` (L2) per tensor."""
    return {name: float(np.linalg.norm(np.asarray(ours[name], np.float64) - value)
                        / max(float(np.linalg.norm(value)), 1e-30)) for name, value in expected.items()}


def _best_scale(ours: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> float:
    """The factor ``s`` minimizing ``|ours - s * expected|`` over all tensors together."""
    dot = sum(float(np.vdot(np.asarray(ours[n], np.float64), expected[n])) for n in expected)
    norm = sum(float(np.vdot(expected[n], expected[n])) for n in expected)
    return dot / max(norm, 1e-300)


def _own_shard_suspects(shards: list[ProbeResult]) -> dict[str, dict[str, np.ndarray]]:
    """Each replica's own gradient: what a step that never all-reduces its gradients applies."""
    return {f"replica {i}'s own gradient: the gradients were not averaged over the replicas": sgd_gradients(shard)
            for i, shard in enumerate(shards)}


def _statistics_mismatch(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> str | None:
    """None when every statistic is within tolerance of ``theirs``, else the worst one and by how much."""
    if set(ours) != set(theirs):
        return f"the statistics' names differ: {sorted(set(ours) ^ set(theirs))}"
    excess = {name: float(np.max(np.abs(ours[name] - theirs[name])
                                 - (STATISTICS_ATOL + STATISTICS_RTOL * np.abs(theirs[name])))) for name in theirs}
    name = max(excess, key=excess.__getitem__)
    if excess[name] <= 0:
        return None
    difference = float(np.max(np.abs(np.asarray(ours[name], np.float64) - theirs[name])))
    return (f"{name} differs by up to {difference:.3g} (allowed {STATISTICS_ATOL:g} + {STATISTICS_RTOL:g} "
            f"relative)")
