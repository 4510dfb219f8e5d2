"""PyTorch's own launcher (torchrun) starts one worker per device.

The torch plugin declares the program that implements it,
:attr:`~amp_suite.records.FrameworkInfo.launcher_program` (PyTorch's
``torch.distributed.run``), and the plan carries it into each data-parallel
cell's :attr:`~amp_suite.records.RunSpec.launcher_program`; nothing here
imports or names a framework.  The runner starts this module's bootstrap,
which sets the import path, ties itself to the runner (it dies with it), tells
its ranks to die with *it*, and runs that program as ``python -m PROGRAM``
would, with the command line unchanged.  torchrun
then starts ``--nproc-per-node`` workers, each with ``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set, and
tears the others down when one fails (PyTorch docs, "torchrun (Elastic
Launch)").  One node: ``--standalone`` (a local rendezvous on a free port).
Several nodes: a static rendezvous at the coordinator (``--nnodes``,
``--node-rank``, ``--master-addr``, ``--master-port``), which a scheduler
such as Slurm starts once per node.

torchrun starts each worker in a session of its own, so the runner's kill of
torchrun's process group does not reach the workers; they end themselves
when torchrun is gone (parent-death signal and a watcher thread, as every
worker does), and a worker that exits with a failure makes torchrun end the
others.  Workers cannot inherit the runner's result pipe (torchrun closes
inherited descriptors), so local rank 0 writes its node's result to a file
the runner names, reads and removes.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from amp_suite.config.settings import check_coordinator
from amp_suite.launchers.single import path_setter, worker_command
from amp_suite.records import RunSpec

# torchrun's --log-dir, as the environment variable it also reads.
LOG_DIR_ENV = "PET_LOG_DIR"
# The suffix of a cell's torchrun log folder, which replaces the result file's (``CELL.log.torchrun``).
LOG_FOLDER_SUFFIX = ".torchrun"
# The launcher's entry: import path first (kept for the workers), then torchrun.
TORCHRUN_BOOTSTRAP = (path_setter(".get")
                      + "from amp_suite.launchers.torchrun import main; sys.exit(main(sys.argv[1:]))")


def rendezvous_arguments(run: RunSpec) -> list[str]:
    """torchrun's options for ``run``: processes per node and the rendezvous."""
    args = ["--nproc-per-node", str(run.devices // run.nnodes), "--max-restarts", "0"]
    if run.nnodes == 1:
        return [*args, "--standalone"]
    host, port = check_coordinator(run.coordinator)
    return [*args, "--nnodes", str(run.nnodes), "--node-rank", str(run.node_rank),
            "--master-addr", host, "--master-port", str(port)]


def command(run: RunSpec, result_path: str, worker: str) -> list[str]:
    """The runner's command for a torchrun cell whose node result goes to ``result_path``; ``worker`` is the
    worker's module, each rank's program."""
    return [run.python or sys.executable, "-c", TORCHRUN_BOOTSTRAP, log_folder(result_path), run.launcher_program,
            *rendezvous_arguments(run), "--no-python",
            *worker_command(worker, "--result-file", result_path, python=run.python)]


def log_folder(result_path: str) -> str:
    """torchrun's log folder for the cell whose node result goes to ``result_path``: beside it, in the output's
    ``logs/`` (``CELL.log.result`` -> ``CELL.log.torchrun``)."""
    return str(Path(result_path).with_suffix(LOG_FOLDER_SUFFIX))


@dataclass(frozen=True)
class Torchrun:
    """The :class:`~amp_suite.launchers.Launcher` of torchrun cells: no inherited pipes, a result file."""

    name: str = "torchrun"
    # torchrun closes inherited descriptors: its workers could not write to the runner's pipes (the numbers
    # might even name other files of theirs), so local rank 0 writes a file and no progress comes back.
    inherits_pipes: bool = False

    def command(self, run: RunSpec, result: str, worker: str) -> list[str]:
        return command(run, result, worker)

    def failed_with_result(self, code: int, seen: str) -> str:
        # Local rank 0 saw the symptom (a collective broke); torchrun knows a rank failed.
        return (f"torchrun exited with code {code}: a rank failed or was killed, and the others were ended; "
                f"local rank 0 saw: {seen}")

    def failed_without_result(self, code: int | None) -> str:
        # torchrun ends every rank when one fails, then exits non-zero
        return (f"torchrun exited with code {code} and no result: a rank failed or was killed, and the others "
                "were ended (see the log)")


TORCHRUN = Torchrun()


def main(argv: list[str]) -> int:
    """``argv``: torchrun's log folder, then the launcher program and its arguments.  Runs the program as a child
    of the runner that dies with it."""
    import runpy

    from amp_suite.host_watch import HOST_PID_ENV, die_with_host_from_env

    die_with_host_from_env()
    folder, program, *arguments = argv
    if not program:
        print("amp-suite: the framework's plugin declares the torchrun launcher but no launcher_program "
              "(FrameworkInfo.launcher_program: the module that runs it)", file=sys.stderr)
        return 2
    os.environ[HOST_PID_ENV] = str(os.getpid())  # the workers watch torchrun
    sys.argv = [program, *arguments]
    # torchrun keeps its workers' error files in a log folder, by default a fresh /tmp/torchelastic_* that nothing
    # removes: one left behind per data-parallel cell.  It prints a failed worker's error before it exits, so the
    # folder holds nothing to keep once it has.  torchrun reads each option from a PET_ variable too (PET_LOG_DIR
    # is --log-dir), so the command line stays as it is; a folder the caller chose stays as well.  Ours is in the
    # output's logs/, beside the cell's result file: a host killed with SIGKILL (which kills this process too, so
    # nothing here can clean up) leaves it there with the cell's other files, not in /tmp, and the cell's next run
    # replaces it.
    made = "" if LOG_DIR_ENV in os.environ else folder
    if made:
        shutil.rmtree(made, ignore_errors=True)
        os.makedirs(made)
        os.environ[LOG_DIR_ENV] = made
    try:
        runpy.run_module(program, run_name="__main__", alter_sys=True)
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
    return 0
