"""``--executor slurm``: each cell a Slurm job, submitted through submitit.

A job asks for the pool's partition (else ``[executor.slurm] partition``) and
constraint, ``--gres=gpu:N`` for a cell of N devices on ``--device gpu``, and
a time limit of the cell's timeout plus a margin (or ``time_limit_min``).
submitit pickles :func:`~amp_suite.sweep.executors.node.run_cell_on_node` and its
payload into a folder on the shared filesystem (``OUT/slurm-jobs`` unless
``[executor.slurm] folder`` says otherwise); the job runs it with the same
Python, which starts the cell's worker as the local runner does.  A job that
Slurm preempted (or requeued after a node failure) is cancelled and submitted
once more; any other end without a result makes the cell ``failed`` with
Slurm's state.  submitit reads job states with ``sacct``: the cluster needs
Slurm's accounting (slurmdbd), or a cancelled job's cell waits for ever.
"""

from __future__ import annotations

import math
import os
import platform
import signal
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amp_suite.config.executors import SlurmSettings
from amp_suite.errors import UsageError, message_line, one_line
from amp_suite.sweep.executors.node import pool_machine, run_cell_on_node
from amp_suite.sweep.executors.remote import Finished, SubmitRefused

if TYPE_CHECKING:
    from amp_suite.sweep.runner import Cell

# Slurm states after which the cell is submitted once more.
RETRIED_STATES = ("PREEMPTED", "NODE_FAIL", "REQUEUED")
# Seconds to wait for accounting to record how a job that gave a failed cell ended.
STATE_WAIT_S = 15.0
# Minutes added to a cell's timeout for its job's time limit (start-up, imports, the result's way back).
TIME_MARGIN_MIN = 10
# Time limit of the short job that describes a pool's machine.
POOL_DESCRIPTION_MIN = 10
# Seconds one sbatch may take to accept or refuse a job.
SBATCH_TIMEOUT_S = 60.0


def slurm_cell(payload: dict[str, Any]) -> dict[str, Any]:
    """The job of one cell: the cell, run on this node, its result naming the node."""
    out = run_cell_on_node(payload)
    out["environment"]["node"] = f"{platform.node()} job {os.environ.get('SLURM_JOB_ID', '?')}"
    return out


def placement_parameters(pool: Any, settings: SlurmSettings) -> dict[str, Any]:
    """submitit's parameters that put a job where ``pool`` (or no pool: ``None``) says: partition, constraint, account.

    Shared by a cell's job and its pool's description job, so both land on the same kind of node.
    """
    params: dict[str, Any] = {"nodes": 1}
    partition = (pool.slurm_partition if pool is not None and pool.slurm_partition else "") or settings.partition
    if partition:
        params["slurm_partition"] = partition
    if pool is not None and pool.slurm_constraint:
        params["slurm_constraint"] = pool.slurm_constraint
    if settings.account:
        params["slurm_account"] = settings.account
    return params


def job_parameters(cell: Cell, settings: SlurmSettings, pools: dict[str, Any]) -> dict[str, Any]:
    """submitit's parameters for ``cell``'s job."""
    run = cell.run
    pool = pools.get(run.pool) if run.pool else None
    minutes = settings.time_limit_min or math.ceil(run.timeout_s / 60) + TIME_MARGIN_MIN
    params: dict[str, Any] = {"timeout_min": minutes, "name": f"amp-suite {run.key}", "tasks_per_node": 1,
                              **placement_parameters(pool, settings)}
    if settings.qos:
        params["slurm_qos"] = settings.qos
    if settings.cpus_per_task:
        params["cpus_per_task"] = settings.cpus_per_task
    if settings.mem_gb:
        params["mem_gb"] = settings.mem_gb
    if run.device == "gpu":
        params["slurm_gres"] = f"gpu:{run.devices}"
    return params


class SlurmScheduler:
    """The :class:`~amp_suite.sweep.executors.remote.Scheduler` of a Slurm cluster, through submitit."""

    def __init__(self, settings: SlurmSettings, out_dir: Path) -> None:
        self.settings = settings
        self.folder = Path(settings.folder) if settings.folder else out_dir / "slurm-jobs"
        self.name = "slurm"
        self.pools: dict[str, Any] = {}
        self.pool_info: dict[str, dict[str, Any]] = {}
        self._executor: Any = None

    def start(self, cells: list[Cell], pools: dict[str, Any]) -> dict[str, str]:
        try:
            import submitit
        except ImportError:
            raise UsageError("--executor slurm needs submitit: pip install 'amp-suite[cluster]'") from None
        self.pools = pools
        try:
            self._executor = submitit.AutoExecutor(folder=str(self.folder / "%j"), cluster="slurm",
                                                   slurm_max_num_timeout=0)
        except RuntimeError as exc:  # no srun/sbatch
            raise UsageError(f"--executor slurm: {one_line(exc)}") from None
        self.pool_info = self._describe_pools(sorted({c.run.pool for c in cells if c.run.pool}))
        return {}

    def _describe_pools(self, names: list[str]) -> dict[str, dict[str, Any]]:
        """One short job per pool that describes its machine (the report's cross-pool table)."""
        jobs = {}
        for name in names:
            pool = self.pools[name]
            self._executor.update_parameters(timeout_min=POOL_DESCRIPTION_MIN, name=f"amp-suite pool {name}",
                                              **placement_parameters(pool, self.settings))
            try:
                jobs[name] = submitted_in_time(lambda: self._executor.submit(pool_machine))
            except Exception as exc:  # its cells will say why too
                self.pool_info[name] = {"error": f"Slurm refused its job: {_sbatch_reason(exc)}"}
        info: dict[str, dict[str, Any]] = dict(self.pool_info)
        for name, job in jobs.items():
            try:
                info[name] = job.result()
            except Exception as exc:  # a pool that cannot be described still runs its cells
                info[name] = {"error": message_line(exc, last=True)}
        return info

    def submit(self, cell: Cell, payload: dict[str, Any]) -> Hashable:
        self._executor.update_parameters(**job_parameters(cell, self.settings, self.pools))
        try:
            return submitted_in_time(lambda: self._executor.submit(slurm_cell, payload))
        except Exception as exc:  # sbatch refused the job: this cell fails, the others go on
            raise SubmitRefused(f"Slurm refused its job: {_sbatch_reason(exc)}") from None

    def finished(self, handles: list[Any], timeout_s: float) -> list[Any]:
        import time

        deadline = time.monotonic() + timeout_s
        while True:
            # submitit counts a preempted job as unfinished (Slurm may requeue it): it is ours to submit again.
            done = [job for job in handles if job.done() or _retried(str(job.state))]
            if done or time.monotonic() >= deadline:
                return done
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def outcome(self, handle: Any) -> Finished:
        job: Any = handle
        state = str(job.state)
        if _retried(state):
            job.cancel(check=False)  # keep Slurm from requeueing it beside the copy submitted now
            return Finished(error=f"Slurm job {job.job_id} ended {state}", preempted=True)
        try:
            result = job.result()
        except Exception as exc:
            return Finished(error=f"Slurm job {job.job_id} ended {state}: {message_line(exc, last=True)}")
        if result.get("status") != "ok":
            state = _final_state(job)
            if not state.startswith("COMPLETED"):
                # The worker was stopped under the job (scancel, the time limit): say what Slurm did.
                result["error"] = f"Slurm job {job.job_id} ended {state}: {result.get('error', '')}"
        return Finished(result=result)

    def running(self, handles: list[Any]) -> int | None:
        return len([job for job in handles if str(job.state) == "RUNNING"])

    def cancel(self, handles: list[Any]) -> None:
        for job in handles:
            try:
                job.cancel(check=False)
            except Exception:  # already gone
                pass

    def stop(self) -> None:
        return None


def submitted_in_time(submit: Callable[[], Any]) -> Any:
    """``submit()`` (submitit runs ``sbatch``, with no time limit), in at most :data:`SBATCH_TIMEOUT_S`.

    An ``sbatch`` that hangs (a slurmctld that does not answer) is ended, and
    the submission fails with a one-line :class:`RuntimeError` (the caller
    makes it a refused job) instead of holding the sweep silently.
    """
    import threading

    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["job"] = submit()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=call, name="amp-suite-sbatch", daemon=True)
    thread.start()
    thread.join(SBATCH_TIMEOUT_S)
    if thread.is_alive():
        for pid in _children_named("sbatch"):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        thread.join(5.0)
        raise RuntimeError(f"sbatch did not answer within {SBATCH_TIMEOUT_S:g} s (is slurmctld up? `sinfo` "
                           "tells); it was ended")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["job"]


def _children_named(name: str) -> list[int]:
    """This process's running children whose command is ``name`` (Linux's ``/proc``; none elsewhere)."""
    found = []
    me = str(os.getpid())
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                head, _, rest = fh.read().rpartition(b")")
        except OSError:
            continue
        fields = rest.split()
        if len(fields) > 1 and fields[1].decode() == me and head.partition(b"(")[2].decode("utf-8", "replace") == name:
            found.append(int(entry))
    return found


def _final_state(job: Any, wait_s: float = STATE_WAIT_S) -> str:
    """The job's state as accounting records it once it has ended (asked afresh; it lags the job's end)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        try:
            state = str(job.get_info(mode="force").get("State") or job.state)
        except Exception:  # accounting cannot be asked: what submitit last saw
            return str(job.state)
        if not state.startswith(("RUNNING", "PENDING", "COMPLETING", "UNKNOWN")) or time.monotonic() >= deadline:
            return state
        time.sleep(0.5)


def _sbatch_reason(exc: BaseException) -> str:
    """The line of sbatch's complaint that says why (its ``error:`` lines), else the exception's last line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if "error:" in line.lower() or "fatal" in line.lower()]
    return said[-1][:300] if said else message_line(exc, last=True)


def _retried(state: str) -> bool:
    return any(state.startswith(retried) for retried in RETRIED_STATES)

