"""Sweeps on real clusters: a two-node Ray cluster and a one-node Slurm cluster, each on loopback only.

Each cluster runs inside a network namespace the test makes (tests/helpers/ray_cluster.py,
slurm_cluster.py), and so does the sweep's client; the tests skip, saying why, where Ray, Slurm or
network namespaces are missing.  Fake-framework cells keep them short; one sweep adds torch cells.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from amp_suite.config.catalog import load_config
from suite_cli import HELPERS, REPO, TINY_CONFIG

# Slow (a real cluster). No two local clusters start side by side, whichever lane runs them: the harnesses
# take one machine-wide lock (tests/helpers/local_clusters.py).
pytestmark = pytest.mark.slow

POOLS = """
[pools.a]
ray_resource = "pool_a"
slurm_partition = "debug"
price_per_hour = 1.0

[pools.b]
ray_resource = "pool_b"
slurm_partition = "other"
price_per_hour = 3.0
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "benchmarks.toml"
    path.write_text(TINY_CONFIG.format(out=(tmp_path / "out").as_posix()) + POOLS)
    return path


def _sweep(*args: str) -> list[str]:
    return [sys.executable, "-m", "amp_suite", "run", "-p", "fakefw", "--dataset", "synthetic", *args]


def _rows(tmp_path: Path) -> dict[str, dict]:
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    return {row["key"]: row for row in map(json.loads, lines)}


def _ray_skip() -> None:
    from ray_cluster import namespace_problem, ray_problem

    for problem in (ray_problem(), namespace_problem()):
        if problem:
            pytest.skip(problem)


def _client_env(cluster, **extra: str) -> dict[str, str]:
    return {**cluster.env, "PYTHONPATH": str(HELPERS), **extra}


def test_a_ray_sweep_spreads_cells_over_both_pools_into_one_store(tmp_path):
    _ray_skip()
    pytest.importorskip("torch")
    from ray_cluster import ray_cluster

    config = _config(tmp_path)
    with ray_cluster(tmp_path) as cluster:
        done = cluster.run(_sweep("--config", str(config), "--executor", "ray", "--ray-address", cluster.address,
                                  "--pools", "a,b", "--frameworks", "fake,torch", "--precisions", "fp32,amp_bf16"),
                           env=_client_env(cluster), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(tmp_path)
    assert len(rows) == 2 * 2 * 2 and all(r["status"] == "ok" for r in rows.values())
    nodes = {pool: {r["environment"]["node"] for r in rows.values() if r["config"]["pool"] == pool}
             for pool in ("a", "b")}
    assert len(nodes["a"]) == 1 and len(nodes["b"]) == 1 and nodes["a"] != nodes["b"]  # one node per pool
    assert all(node.startswith("127.0.0.1 ") for node in nodes["a"] | nodes["b"])  # loopback only
    assert "torch/tiny/amp_bf16/pool-b/r0" in rows
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Across pools" in report and "| torch " in report and "- pool b: node" in report
    assert "8 cells queued on ray (127.0.0.1:" in done.stderr


def test_a_lost_ray_node_fails_its_cell_keeps_the_rest_and_resume_runs_only_the_rest(tmp_path, monkeypatch):
    _ray_skip()
    from ray_cluster import ray_cluster

    gate = tmp_path / "gate"
    # Every amp_bf16 cell waits for the gate file; the nodes inherit these variables when they start.
    monkeypatch.setenv("FAKEFW_MODE", "gate")
    monkeypatch.setenv("FAKEFW_TARGET", "amp_bf16")
    monkeypatch.setenv("FAKEFW_GATE", str(gate))
    config = _config(tmp_path)
    sweep = _sweep("--config", str(config), "--executor", "ray", "--pools", "a,b", "--frameworks", "fake",
                   "--precisions", "fp32,amp_bf16", "--timeout", "300")
    with ray_cluster(tmp_path) as cluster:
        client = cluster.popen([*sweep, "--ray-address", cluster.address], env=_client_env(cluster), cwd=REPO,
                               stdout=open(tmp_path / "client.log", "w"), stderr=open(tmp_path / "client.err", "w"))
        waiting_b = tmp_path / "out" / "logs" / "fake__tiny__amp_bf16__pool-b__r0.log"
        deadline = time.monotonic() + 180
        while not waiting_b.exists() and time.monotonic() < deadline and client.poll() is None:
            time.sleep(0.2)
        assert waiting_b.exists(), (tmp_path / "client.err").read_text()[-3000:]
        time.sleep(2)  # the cell is in its worker now, waiting at the gate
        cluster.kill_node(1)
        gate.write_text("open")  # pool a's waiting cell goes on
        assert client.wait(timeout=240) == 1  # a failed cell
        rows = _rows(tmp_path)
        lost = rows["fake/tiny/amp_bf16/pool-b/r0"]
        assert lost["status"] == "failed" and "NodeDiedError" in lost["error"], lost["error"]
        kept = [key for key, row in rows.items() if row["status"] == "ok"]
        assert "fake/tiny/amp_bf16/pool-a/r0" in kept and "fake/tiny/fp32/pool-a/r0" in kept
        assert len(rows) == 4  # every cell has its row: none lost
        resumed = cluster.run([*sweep, "--ray-address", cluster.address, "--resume"], env=_client_env(cluster),
                              cwd=REPO, capture_output=True, text=True, timeout=300)
    after = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()][4:]
    assert sorted(row["key"] for row in after) == sorted(set(rows) - set(kept)), resumed.stderr[-3000:]
    # Only the missing cells were tried again; pool b has no node any more, which each one says.
    assert all(row["status"] in ("unavailable", "failed") and "no node of the Ray cluster has" in row["error"]
               for row in after), [row["error"] for row in after]


def test_ctrl_c_cancels_every_ray_task_and_leaves_no_worker(tmp_path, monkeypatch):
    _ray_skip()
    from processes import alive
    from ray_cluster import ray_cluster

    pidfile = tmp_path / "worker.pid"
    monkeypatch.setenv("FAKEFW_MODE", "hang")
    monkeypatch.setenv("FAKEFW_PIDFILE", str(pidfile))
    config = _config(tmp_path)
    with ray_cluster(tmp_path) as cluster:
        client = cluster.popen(_sweep("--config", str(config), "--executor", "ray", "--ray-address", cluster.address,
                                      "--pools", "a,b", "--frameworks", "fake", "--precisions", "fp32,amp_bf16"),
                               env=_client_env(cluster), cwd=REPO, stdout=open(tmp_path / "client.log", "w"),
                               stderr=open(tmp_path / "client.err", "w"))
        deadline = time.monotonic() + 180
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        worker = int(pidfile.read_text())
        client.send_signal(signal.SIGINT)
        assert client.wait(timeout=120) == 128 + signal.SIGINT
        deadline = time.monotonic() + 30
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(worker), "a cell's worker outlived its cancelled task"
        assert not [p for p in cluster.pids() if "amp_suite.cell.worker" in _cmdline(p)]
    err = (tmp_path / "client.err").read_text()
    assert "cancelling 4 queued and running cells" in err and "interrupted by SIGINT" in err


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _slurm_skip() -> None:
    from slurm_cluster import slurm_problem

    problem = slurm_problem(accounting=True)  # submitit reads job states with sacct
    if problem:
        pytest.skip(problem)
    pytest.importorskip("submitit")


def test_a_slurm_sweep_runs_its_cells_as_jobs_and_a_cancelled_job_fails_its_cell(tmp_path, monkeypatch):
    _slurm_skip()
    from slurm_cluster import slurm_cluster

    gate = tmp_path / "gate"
    config = _config(tmp_path)
    assert load_config(config).pools["b"].slurm_partition == "other"
    monkeypatch.setenv("FAKEFW_MODE", "gate")
    monkeypatch.setenv("FAKEFW_TARGET", "amp_bf16")
    monkeypatch.setenv("FAKEFW_GATE", str(gate))
    sweep = _sweep("--config", str(config), "--executor", "slurm", "--pools", "a,b", "--frameworks", "fake",
                   "--precisions", "fp32,amp_bf16", "--timeout", "300")
    with slurm_cluster(tmp_path, accounting=True) as cluster:
        env = {**cluster.env, "PYTHONPATH": str(HELPERS)}
        client = cluster.popen(sweep, env=env, cwd=REPO, stdout=open(tmp_path / "client.log", "w"),
                               stderr=open(tmp_path / "client.err", "w"))
        waiting_b = tmp_path / "out" / "logs" / "fake__tiny__amp_bf16__pool-b__r0.log"
        deadline = time.monotonic() + 180
        while not waiting_b.exists() and time.monotonic() < deadline and client.poll() is None:
            time.sleep(0.2)
        assert waiting_b.exists(), (tmp_path / "client.err").read_text()[-3000:]
        time.sleep(2)
        queue = cluster.run(["squeue", "-h", "-o", "%i %j"], capture_output=True, text=True, timeout=60).stdout
        job = next(line.split()[0] for line in queue.splitlines() if "pool-b" in line and "amp_bf16" in line)
        assert cluster.run(["scancel", job], timeout=60).returncode == 0
        gate.write_text("open")
        assert client.wait(timeout=300) == 1, (tmp_path / "client.err").read_text()[-3000:]
        rows = _rows(tmp_path)
        cancelled = rows["fake/tiny/amp_bf16/pool-b/r0"]
        assert cancelled["status"] == "failed" and "CANCELLED" in cancelled["error"], cancelled["error"]
        assert [r["status"] for k, r in rows.items() if k != cancelled["key"]] == ["ok"] * 3
        resumed = cluster.run([*sweep, "--resume"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 cell queued on slurm" in resumed.stderr
    after = _rows(tmp_path)
    assert all(row["status"] == "ok" for row in after.values()) and len(after) == 4
    assert "## Across pools" in (tmp_path / "out" / "report.md").read_text()
    assert os.path.isdir(tmp_path / "out" / "slurm-jobs")
