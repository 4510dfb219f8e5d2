"""What a cluster node runs for one cell: the same fresh worker process the local runner starts.

A Ray task or a Slurm job calls :func:`run_cell_on_node` with a plain-JSON
payload (:func:`cell_payload`); it rebuilds the cell and runs it through
:func:`amp_suite.sweep.runner.run_in_worker`, so the cell gets the same timeout,
process-group containment and statuses as on the machine that planned the
sweep.  The worker dies with the task (``PR_SET_PDEATHSIG``), so a cancelled
task or a lost node leaves no worker behind.  The result goes back as a dict;
the planning host stores it.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

# Variables a scheduler sets for its tasks that would change how a cell's framework runs (Ray sets
# OMP_NUM_THREADS to the task's CPU count, 1 by default): the worker gets the planning host's value,
# or none, as it would locally.
SCHEDULER_THREAD_VARIABLES = ("OMP_NUM_THREADS",)


def cell_payload(cell: Any, log_path: Path, env: dict[str, str]) -> dict[str, Any]:
    """What a node needs to run ``cell`` (an :class:`amp_suite.sweep.runner.Cell`): JSON-able."""
    from amp_suite.launchers.single import import_root

    roots = [root for root in (import_root(name) for name in cell.run.plugin_modules) if root]
    return {"run": asdict(cell.run), "workload": asdict(cell.workload), "unavailable": cell.unavailable,
            "log_path": str(log_path), "env": dict(env), "plugin_roots": roots,
            "host_threads": {name: os.environ.get(name) for name in SCHEDULER_THREAD_VARIABLES}}


def run_cell_on_node(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one cell here, in a fresh worker process; its :class:`~amp_suite.records.CellResult` as a dict."""
    from amp_suite.records import run_from_dict, workload_from_dict
    from amp_suite.sweep.runner import Cell, run_in_worker

    for name, value in (payload.get("host_threads") or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    cell = Cell(run_from_dict(payload["run"]), workload_from_dict(payload["workload"]),
                payload.get("unavailable", ""))
    # Plugin modules the host loaded with -p from a folder of its own (on the shared filesystem): found
    # there, and imported here, so the worker's path (amp_suite.sweep.runner.worker_path) holds their folder.
    for root in payload.get("plugin_roots") or []:
        if root not in sys.path and os.path.isdir(root):
            sys.path.append(root)
    for name in cell.run.plugin_modules:
        try:
            importlib.import_module(name)
        except ImportError:  # the worker says which plugin is missing
            pass
    result = run_in_worker(cell, log_path=Path(payload["log_path"]), env=payload.get("env") or {})
    out = asdict(result)
    out["environment"].setdefault("node", platform.node())
    return out


def pool_machine() -> dict[str, Any]:
    """What a pool's node is (CPU, GPUs, driver), and the calibration this node has cached, if any."""
    from amp_suite.calibration.ceiling import read_cache
    from amp_suite.machine.environment import host_environment

    machine = host_environment()
    keep = ("cpu_model", "cpu_flags", "cpu_count", "gpus", "nvidia_driver")
    return {"machine": {k: machine[k] for k in keep if k in machine} | {"node": platform.node()},
            "calibration": read_cache(machine)}
