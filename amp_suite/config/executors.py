"""``[executor]``, ``[executor.slurm]`` and ``[pools.NAME]`` tables: where a sweep's cells are scheduled.

A pool is one kind of device on the cluster (``t4``, ``a100``, ``h100``):
Ray nodes that advertise the custom resource ``ray_resource``, or the Slurm
partition ``slurm_partition`` (narrowed by ``slurm_constraint``).
``price_per_hour`` prices one of its machines for the report's cost columns.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from amp_suite.errors import UsageError
from amp_suite.schema import Field, check_name, check_table, shown

POOL_FIELDS: dict[str, Field] = {
    "ray_resource": Field(str),
    "slurm_partition": Field(str),
    "slurm_constraint": Field(str),
    "price_per_hour": Field(float, minimum=0, maximum=1e6),
    "description": Field(str),
}
EXECUTOR_FIELDS: dict[str, Field] = {
    "kind": Field(str, choices=("local", "ray", "slurm")),
    "ray_address": Field(str),
    "cpus_per_cell": Field(float, above=0, maximum=4096),
}
SLURM_FIELDS: dict[str, Field] = {
    "partition": Field(str),
    "account": Field(str),
    "time_limit_min": Field(int, minimum=1, maximum=60 * 24 * 365),
    "cpus_per_task": Field(int, minimum=1, maximum=4096),
    "mem_gb": Field(float, above=0, maximum=1e5),
    "folder": Field(str),
    "qos": Field(str),
}


@dataclass(frozen=True)
class PoolSpec:
    """One ``[pools.NAME]`` table."""

    name: str
    ray_resource: str = ""
    slurm_partition: str = ""
    slurm_constraint: str = ""
    price_per_hour: float | None = None
    description: str = ""


@dataclass(frozen=True)
class SlurmSettings:
    """``[executor.slurm]``: what every job of the sweep asks Slurm for (a pool's partition wins)."""

    partition: str = ""
    account: str = ""
    time_limit_min: int | None = None  # None: the cell's timeout plus a margin
    cpus_per_task: int | None = None
    mem_gb: float | None = None
    folder: str = ""  # submitit's job folder; default OUT/slurm-jobs (on the shared filesystem)
    qos: str = ""


@dataclass(frozen=True)
class ExecutorSettings:
    """``[executor]``: which executor runs the cells, and its own settings."""

    kind: str = "local"
    ray_address: str = ""  # empty: a local Ray instance started for the sweep
    cpus_per_cell: float = 1.0
    slurm: SlurmSettings = field(default_factory=SlurmSettings)

    def with_flags(self, kind: str | None, ray_address: str | None) -> ExecutorSettings:
        """These settings with ``--executor`` and ``--ray-address`` applied."""
        if kind is not None and kind not in ("local", "ray", "slurm"):
            raise UsageError(f"unknown executor {shown(kind)}; allowed: local, ray, slurm")
        return replace(self, kind=kind or self.kind, ray_address=self.ray_address if ray_address is None
                       else ray_address)


def pool_from_table(name: str, table: Any, where: str) -> PoolSpec:
    """A checked ``[pools.NAME]`` table."""
    check_name("pool", name)
    values = check_table(table, POOL_FIELDS, f"{where}: [pools.{name}]")
    if not any(values.get(key) for key in ("ray_resource", "slurm_partition", "slurm_constraint")):
        raise UsageError(f"{where}: [pools.{name}] needs ray_resource (Ray) or slurm_partition / "
                         "slurm_constraint (Slurm): how the scheduler finds its machines")
    return PoolSpec(name=name, **values)


def executor_from_table(table: Any, where: str) -> ExecutorSettings:
    """A checked ``[executor]`` table (with its ``[executor.slurm]``)."""
    if not isinstance(table, dict):
        raise UsageError(f"{where}: [executor] must be a table, got {shown(table)}")
    slurm = table.get("slurm", {})
    values = check_table({k: v for k, v in table.items() if k != "slurm"}, EXECUTOR_FIELDS, f"{where}: [executor]")
    return ExecutorSettings(**values, slurm=SlurmSettings(**check_table(slurm, SLURM_FIELDS,
                                                                       f"{where}: [executor.slurm]")))
