"""Launchers: how the processes of one cell are started, and who each process is.

A cell on one device runs in one worker process (:mod:`.single`).  A
data-parallel cell runs through its framework's own engine, and the engine
decides how many processes that takes; the framework plugin names it in
:attr:`~amp_suite.records.FrameworkInfo.launcher`, and the host records it in
:attr:`~amp_suite.records.RunSpec.launcher`:

* ``"process"`` — one worker process per node drives every device of the node
  (Keras ``MirroredStrategy``, a JAX ``Mesh``); several nodes meet through
  ``jax.distributed.initialize`` or ``TF_CONFIG``.
* ``"torchrun"`` — PyTorch's launcher (``python -m torch.distributed.run``)
  starts one worker per device (:mod:`.torchrun`).

The runner asks :func:`launcher_for` for the cell's :class:`Launcher` and
never tests which one it got: the launcher gives the command, says whether its
processes can inherit the runner's pipes, and explains its own exit codes.

Nothing here imports a framework.  Inside a worker, :func:`this_process`
says which process of the cell it is, as a :class:`DistributedSpec`.  :mod:`.child_process` starts a
plugin's doctor or calibration probe the same way: a fresh interpreter with
the worker's import path, ending with the host.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

from amp_suite.records import RunSpec

LAUNCHERS = ("process", "torchrun")


class Launcher(Protocol):
    """How the runner starts the processes of one cell, and what their exit means."""

    @property
    def name(self) -> str:
        """The launcher's name, as :attr:`RunSpec.launcher` holds it."""
        ...

    @property
    def inherits_pipes(self) -> bool:
        """True: the cell's processes inherit the runner's result and progress pipes; false: the node's
        result comes back in a file the runner names, and no progress inside the cell."""
        ...

    def command(self, run: RunSpec, result: str, worker: str) -> list[str]:
        """The command line; ``result`` is the result pipe's descriptor, or the result file's path; ``worker``
        the worker's module (the runner names it: :mod:`amp_suite.cell.worker` sits above the launchers)."""
        ...

    def failed_with_result(self, code: int, seen: str) -> str:
        """The error of a cell that exited with ``code`` > 0 after a failed result saying ``seen``."""
        ...

    def failed_without_result(self, code: int | None) -> str:
        """The error of a cell that exited with ``code`` and gave no result."""
        ...


def launcher_for(run: RunSpec) -> Launcher:
    """The launcher that starts ``run``'s processes."""
    if run.launcher == "torchrun":
        from amp_suite.launchers.torchrun import TORCHRUN

        return TORCHRUN
    from amp_suite.launchers.single import SINGLE_PROCESS

    return SINGLE_PROCESS


@dataclass(frozen=True)
class DistributedSpec:
    """One process of a cell: which replicas it drives and whom it meets.

    ``devices`` is the cell's replica count on every node together;
    ``process_id`` this process's index among the cell's ``num_processes``;
    ``local_devices`` the devices this process drives; ``first_replica`` the
    index of its first replica (its shard of each global batch starts at
    ``first_replica * shard_size``).  ``writes_result`` is true for the one
    process per node that hands the node's result to its runner.
    """

    launcher: str
    devices: int
    nnodes: int
    node_rank: int
    coordinator: str
    process_id: int
    num_processes: int
    local_devices: int
    first_replica: int
    writes_result: bool
    sync_batch_norm: bool = False

    def __post_init__(self) -> None:
        if self.launcher not in LAUNCHERS:
            raise ValueError(f"unknown launcher {self.launcher!r}; known: {', '.join(LAUNCHERS)}")
        if self.devices < 1 or self.nnodes < 1 or self.local_devices < 1:
            raise ValueError("devices, nnodes and local_devices must be at least 1")
        if self.devices % self.nnodes:
            raise ValueError(f"{self.devices} devices do not split evenly over {self.nnodes} nodes")
        if not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"process_id {self.process_id} outside 0..{self.num_processes - 1}")
        if self.local_devices * self.num_processes != self.devices:
            raise ValueError(f"{self.num_processes} processes of {self.local_devices} devices are not "
                             f"{self.devices} devices")
        if self.nnodes > 1 and not self.coordinator:
            raise ValueError("a cell on several nodes needs a coordinator HOST:PORT")

    @property
    def chief(self) -> bool:
        """The cell's first process (node 0, rank 0): its result is the cell's."""
        return self.process_id == 0


def this_process(run: RunSpec, environ: Any = None) -> DistributedSpec:
    """The :class:`DistributedSpec` of the calling process for ``run``.

    torchrun tells each worker who it is in ``RANK``, ``LOCAL_RANK`` and
    ``WORLD_SIZE``; a ``process`` worker is the only one on its node.
    """
    env = os.environ if environ is None else environ
    if run.launcher == "torchrun" and run.devices > 1:
        rank, local_rank = int(env.get("RANK", "0")), int(env.get("LOCAL_RANK", "0"))
        world = int(env.get("WORLD_SIZE", str(run.devices)))
        return DistributedSpec("torchrun", run.devices, run.nnodes, run.node_rank, run.coordinator, rank, world,
                               1, rank, local_rank == 0, run.sync_batch_norm)
    local = run.devices // run.nnodes
    return DistributedSpec("process", run.devices, run.nnodes, run.node_rank, run.coordinator, run.node_rank,
                           run.nnodes, local, run.node_rank * local, True, run.sync_batch_norm)


def visible_devices(device: str) -> int:
    """How many devices ``--devices all`` means, without importing a framework.

    GPUs: those ``nvidia-smi`` lists (narrowed by ``CUDA_VISIBLE_DEVICES``).
    On a CPU a framework sees one device; amp-suite splits it into one
    device per core this process may run on, so ``all`` is the core count.
    """
    if device != "cpu":
        from amp_suite.machine.environment import gpu_info

        gpus = len(gpu_info())
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            gpus = min(gpus, len([v for v in visible.split(",") if v.strip()]))
        if gpus:
            return gpus
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
