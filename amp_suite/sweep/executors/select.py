"""Choosing the executor of a sweep and checking what it was given."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_suite.config.executors import ExecutorSettings, PoolSpec
from amp_suite.errors import UsageError
from amp_suite.schema import closest

if TYPE_CHECKING:
    from amp_suite.records import CellResult
    from amp_suite.sweep.runner import Cell, ProgressCallback
    from amp_suite.sweep.store import ResultStore


def check_executor(executor: ExecutorSettings, pools: tuple[str, ...], declared: dict[str, PoolSpec], *,
                   inline: bool) -> None:
    """One-line errors for a sweep the executor cannot run, before any cell runs."""
    for name in pools:
        if name not in declared:
            raise UsageError(f"unknown pool {name!r}; declared: {', '.join(declared) or 'none'} "
                             f"([pools.NAME] in benchmarks.toml){closest(name, list(declared))}")
    if executor.ray_address and executor.kind != "ray":
        raise UsageError(f"--ray-address (or [executor] ray_address) goes with --executor ray; the executor is "
                         f"{executor.kind}")
    if executor.kind == "local":
        if pools:
            raise UsageError("--pools places cells on a cluster's pools: add --executor ray or --executor slurm "
                             "(or kind = \"ray\" in [executor])")
        return
    if inline:
        raise UsageError(f"--inline runs cells in this process, not through --executor {executor.kind}; drop one")
    if executor.kind == "ray" and executor.ray_address:
        from amp_suite.config.settings import check_coordinator

        try:
            check_coordinator(executor.ray_address)
        except UsageError:
            raise UsageError(f"--ray-address must be HOST:PORT (the head node's GCS, e.g. 10.0.0.1:6379), got "
                             f"{executor.ray_address!r}") from None
    if executor.kind == "slurm":
        import shutil

        missing = [tool for tool in ("sbatch", "srun", "sacct") if shutil.which(tool) is None]
        if missing:
            raise UsageError(f"--executor slurm needs Slurm's {', '.join(missing)} on PATH (run amp-suite on a "
                             "machine of the cluster that can submit jobs)")
    module = {"ray": "ray", "slurm": "submitit"}[executor.kind]
    try:
        __import__(module)
    except ImportError:
        raise UsageError(f"--executor {executor.kind} needs {module}: pip install 'amp-suite[cluster]'") from None
    for name in pools:
        pool = declared[name]
        if executor.kind == "ray" and not pool.ray_resource:
            raise UsageError(f"pool {name!r} has no ray_resource: --executor ray cannot find its nodes")
        if executor.kind == "slurm" and not (pool.slurm_partition or pool.slurm_constraint):
            raise UsageError(f"pool {name!r} has neither slurm_partition nor slurm_constraint: --executor slurm "
                             "cannot find its nodes")


def run_cells(executor: ExecutorSettings, cells: list[Cell], store: ResultStore, *, inline: bool,
              kept: Mapping[str, CellResult], env: dict[str, str], progress: ProgressCallback | None,
              pools: dict[str, PoolSpec], environment: dict[str, Any]) -> Iterator[CellResult]:
    """Every cell's result through ``executor``, but for the ``kept`` results of ``--resume`` (by cell key), yielded
    as they are; a cluster's description of each pool goes into ``environment``."""
    if executor.kind == "local":
        from amp_suite.sweep.runner import iter_sweep

        yield from iter_sweep(cells, store, inline=inline, kept=kept, env=env, progress=progress)
        return
    from amp_suite.sweep.executors.remote import run_remote

    scheduler: Any
    if executor.kind == "ray":
        from amp_suite.sweep.executors.ray_scheduler import RayScheduler

        scheduler = RayScheduler(executor.ray_address, executor.cpus_per_cell)
    else:
        from amp_suite.sweep.executors.slurm_scheduler import SlurmScheduler

        scheduler = SlurmScheduler(executor.slurm, Path(store.directory))
    environment["executor"] = {"kind": executor.kind, "ray_address": executor.ray_address} \
        if executor.kind == "ray" else {"kind": executor.kind, "partition": executor.slurm.partition}
    try:
        yield from run_remote(scheduler, cells, store, kept=kept, env=env, progress=progress, pools=pools)
    finally:
        if scheduler.pool_info:
            environment["pools"] = {name: {**info, "price_per_hour": pools[name].price_per_hour}
                                    for name, info in scheduler.pool_info.items()}
