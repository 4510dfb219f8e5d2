"""The real Slurm harness (tests/helpers/slurm_cluster.py): a one-node cluster in a network namespace.

Each test starts its own cluster (munged, slurmctld, slurmd; slurmdbd on MariaDB where submitit has
to see a job's end state) and skips, with the apt-get command, where Slurm is not installed, the
process is not root, or no network namespace can be made.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processes import alive
from slurm_cluster import SlurmCluster, slurm_cluster, slurm_problem

# Slow (a real cluster). No two local clusters start side by side, whichever lane runs them: the harnesses
# take one machine-wide lock (tests/helpers/local_clusters.py).
pytestmark = pytest.mark.slow

# The client runs inside the namespace with the test's own Python: submitit's jobs run
# `sys.executable -m submitit.core._submit`, so the node (this machine) imports the same submitit.
# Functions defined here live in the client's __main__, which submitit (cloudpickle) pickles by value.
CLIENT = r'''
import json, os, socket, sys, time

import submitit


def where():
    return {"pid": os.getpid(), "host": socket.gethostname(), "python": sys.executable,
            "job_id": os.environ.get("SLURM_JOB_ID"), "partition": os.environ.get("SLURM_JOB_PARTITION")}


def nap():
    time.sleep(60)
    return "woke"


def say(**fields):  # submitit's logger writes to stdout too: the test reads only these lines
    print("@@", json.dumps(fields), flush=True)


mode, folder = sys.argv[1], sys.argv[2]
executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
executor.update_parameters(slurm_partition="other", timeout_min=5, cpus_per_task=1)
job = executor.submit(where if mode == "where" else nap)
say(event="submitted", job_id=job.job_id, client_pid=os.getpid())
if mode == "where":
    say(event="result", result=job.result(), state=job.state)
    sys.exit(0)

sys.stdin.readline()  # the test cancels the job with scancel, then writes a line
deadline = time.monotonic() + 60
while not job.done(force_check=True) and time.monotonic() < deadline:
    time.sleep(0.5)
state = job.state
try:
    outcome = {"returned": repr(job.result())}
except Exception as exc:
    outcome = {"raised": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": str(exc)}
say(event="outcome", state=state, **outcome)
'''


def _require(accounting: bool = False) -> None:
    problem = slurm_problem(accounting=accounting)
    if problem is not None:
        pytest.skip(problem)


def _job_state(cluster: SlurmCluster, job_id: str) -> str:
    """The controller's JobState for ``job_id`` ("" while it does not know it)."""
    proc = cluster.run(["scontrol", "show", "job", "-o", job_id], timeout=30)
    fields = dict(tok.split("=", 1) for tok in proc.stdout.split() if "=" in tok)
    return fields.get("JobState", "")


def _wait_state(cluster: SlurmCluster, job_id: str, wanted: set[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while (state := _job_state(cluster, job_id)) not in wanted:
        assert time.monotonic() < deadline, f"job {job_id} is {state!r}, not {wanted}\n{cluster.log_tails()}"
        time.sleep(0.5)
    return state


def test_sbatch_wrap_hostname_completes(tmp_path: Path) -> None:
    _require()
    with slurm_cluster(tmp_path) as cluster:
        assert cluster.partitions == ("debug", "other")
        submitted = cluster.run(["sbatch", "--parsable", "--partition=debug", f"--output={tmp_path}/host-%j.out",
                                 "--wrap", "hostname"])
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.strip().split(";")[0]
        state = _wait_state(cluster, job_id, {"COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"}, 60)
        assert state == "COMPLETED", cluster.log_tails()
        assert (tmp_path / f"host-{job_id}.out").read_text().strip() == socket.gethostname()
        queue = cluster.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%i %P %T"])
        assert queue.stdout.split() == [job_id, "debug", "COMPLETED"]
        # The namespace has loopback only: nothing the daemons or jobs send can leave it.
        links = cluster.run(["ip", "-o", "link", "show"]).stdout.splitlines()
        assert [line.split(":")[1].strip() for line in links] == ["lo"]
        daemons, namespace = dict(cluster.daemons), cluster.namespace
    assert sorted(daemons) == ["munged", "slurmctld", "slurmd"]
    assert not [name for name, pid in daemons.items() if alive(pid)]
    assert namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def _said(out: str) -> list[dict]:
    """The client's ``say`` lines in ``out``."""
    return [json.loads(line[3:]) for line in out.splitlines() if line.startswith("@@ ")]


def _client(cluster: SlurmCluster, tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    """The submitit client (CLIENT) in the cluster's namespace, its standard streams piped."""
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    return cluster.popen([sys.executable, str(script), mode, str(tmp_path / "submitit")], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_submitit_runs_a_function_in_partition_other(tmp_path: Path) -> None:
    _require()
    with slurm_cluster(tmp_path) as cluster:
        client = _client(cluster, tmp_path, "where")
        try:
            out, err = client.communicate(timeout=80)
        finally:
            client.kill()
        assert client.returncode == 0, f"{out}\n{err}\n{cluster.log_tails()}"
        submitted, result = _said(out)
        print("submitit result:", result)
        where = result["result"]
        assert where["host"] == socket.gethostname()
        assert where["pid"] != submitted["client_pid"]
        assert where["job_id"] == submitted["job_id"]
        assert where["partition"] == "other"
        assert where["python"] == sys.executable
        assert _job_state(cluster, submitted["job_id"]) == "COMPLETED"
