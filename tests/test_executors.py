"""Executors (amp_suite.sweep.executors): their tables, their checks and the loop every cluster executor shares.

The loop is driven here by a scheduler of our own that runs cells in worker processes on this
machine, so what it does with results, failures, preemptions, resumes and Ctrl-C is checked without
a cluster; the real Ray and Slurm clusters are in test_cluster.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from amp_suite.config.catalog import load_config
from amp_suite.config.executors import ExecutorSettings, PoolSpec, SlurmSettings
from amp_suite.records import CellResult, RunSpec
from amp_suite.report.normalize import render_markdown, results_frame, summary_frame
from amp_suite.sweep.executors.node import cell_payload, run_cell_on_node
from amp_suite.sweep.executors.ray_scheduler import cell_resources, placement_problem
from amp_suite.sweep.executors.remote import Finished, run_remote
from amp_suite.sweep.executors.select import check_executor
from amp_suite.sweep.executors.slurm_scheduler import job_parameters
from amp_suite.sweep.fingerprint import kept_results
from amp_suite.sweep.runner import Cell
from amp_suite.sweep.store import ResultStore
from suite_cli import one_line_error as _error
from suite_cli import run_cli
from suite_cli import tiny_config_file as _config

POOLS = """
[pools.t4]
ray_resource = "t4"
slurm_partition = "gpu-t4"
price_per_hour = 0.35

[pools.a100]
ray_resource = "a100"
slurm_partition = "gpu"
slurm_constraint = "a100"
price_per_hour = 3.0

[executor]
kind = "ray"
ray_address = "10.0.0.1:6379"

[executor.slurm]
account = "ml"
time_limit_min = 30
"""


def test_pools_and_the_executor_are_read_from_benchmarks_toml(tmp_path):
    config = load_config(_config(tmp_path, POOLS))
    assert config.pools["a100"] == PoolSpec("a100", "a100", "gpu", "a100", 3.0)
    assert config.executor.kind == "ray" and config.executor.ray_address == "10.0.0.1:6379"
    assert config.executor.slurm == SlurmSettings(account="ml", time_limit_min=30)
    flagged = config.executor.with_flags("slurm", None)
    assert flagged.kind == "slurm" and flagged.ray_address == "10.0.0.1:6379"
    assert "unknown executor 'k8s'; allowed: local, ray, slurm" in _error(lambda: config.executor.with_flags("k8s", None))


@pytest.mark.parametrize("extra,expected", [
    ("[pools.x]\nprice_per_hour = 1.0\n", "needs ray_resource (Ray) or slurm_partition"),
    ("[pools.x]\nray_resource = \"x\"\nprice_per_hr = 1.0\n", "did you mean 'price_per_hour'"),
    ("[executor]\nkind = \"k8s\"\n", "kind"),
    ("[executor.slurm]\ntime_limit = 5\n", "did you mean 'time_limit_min'"),
])
def test_a_bad_pool_or_executor_table_is_one_line(tmp_path, extra, expected):
    path = _config(tmp_path, "\n" + extra)
    message = _error(lambda: load_config(path))
    assert expected in message and str(path) in message


def test_the_executor_refuses_what_it_cannot_run():
    pools = {"t4": PoolSpec("t4", ray_resource="t4"), "cpu": PoolSpec("cpu", slurm_partition="cpu")}
    local, ray = ExecutorSettings(), ExecutorSettings(kind="ray")
    assert "add --executor ray or --executor slurm" in _error(lambda: check_executor(local, ("t4",), pools,
                                                                                      inline=False))
    assert "unknown pool 'h100'; declared: t4, cpu" in _error(lambda: check_executor(ray, ("h100",), pools,
                                                                                      inline=False))
    assert "--inline runs cells in this process" in _error(lambda: check_executor(ray, (), pools, inline=True))
    pytest.importorskip("ray")
    assert "pool 'cpu' has no ray_resource" in _error(lambda: check_executor(ray, ("cpu",), pools, inline=False))
    check_executor(ray, ("t4",), pools, inline=False)  # fine


def test_cluster_flags_on_the_command_line_are_checked_before_any_cell(tmp_path):
    config = _config(tmp_path, POOLS)
    done = run_cli("run", "--config", str(config), "-p", "fakefw", "--pools", "t4,h100", "--executor", "ray")
    assert done.returncode == 2 and "unknown pool 'h100'" in done.stderr
    done = run_cli("run", "--config", str(config), "-p", "fakefw", "--executor", "slurmm")
    assert done.returncode == 2 and "unknown executor 'slurmm'" in done.stderr
    assert not (tmp_path / "out" / "results.jsonl").exists()


def _cell(tmp_path: Path, **run: Any) -> Cell:
    config = load_config(_config(tmp_path))
    spec = RunSpec(**{"framework": "fake", "workload": "tiny", "precision": "fp32", "steps": 4, "warmup": 1,
                      "plugin_modules": ("fakefw",), **run})
    return Cell(spec, config.workloads["tiny"])


def test_a_cells_task_asks_for_its_gpus_and_one_unit_of_its_pool(tmp_path):
    pools = {"a100": PoolSpec("a100", ray_resource="a100")}
    cell = _cell(tmp_path, device="gpu", devices=4, pool="a100")
    options = cell_resources(cell, pools, 2.0)
    assert options == {"num_cpus": 2.0, "num_gpus": 4, "max_retries": 0, "resources": {"a100": 1}}
    nodes = [{"Alive": True, "Resources": {"CPU": 8.0, "GPU": 2.0, "a100": 1.0}},
             {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 8.0, "a100": 1.0}}]
    assert "no node of the Ray cluster has CPU 2, GPU 4, a100 1" in placement_problem(options, nodes)
    nodes.append({"Alive": True, "Resources": {"CPU": 64.0, "GPU": 8.0, "a100": 2.0}})
    assert placement_problem(options, nodes) is None
    assert cell_resources(_cell(tmp_path), {}, 1.0) == {"num_cpus": 1.0, "num_gpus": 0, "max_retries": 0}


def test_a_cells_job_asks_slurm_for_its_pool_gpus_and_time(tmp_path):
    pools = {"a100": PoolSpec("a100", slurm_partition="gpu", slurm_constraint="a100")}
    cell = _cell(tmp_path, device="gpu", devices=2, pool="a100", timeout_s=900.0)
    params = job_parameters(cell, SlurmSettings(partition="default", account="ml"), pools)
    assert params["slurm_partition"] == "gpu" and params["slurm_constraint"] == "a100"
    assert params["slurm_gres"] == "gpu:2" and params["slurm_account"] == "ml" and params["nodes"] == 1
    assert params["timeout_min"] == 15 + 10  # the cell's timeout plus the margin
    cpu = job_parameters(_cell(tmp_path), SlurmSettings(partition="cpu", time_limit_min=5), {})
    assert cpu["slurm_partition"] == "cpu" and "slurm_gres" not in cpu and cpu["timeout_min"] == 5


def test_a_pools_description_job_lands_where_its_cells_jobs_do(tmp_path):
    from amp_suite.sweep.executors.slurm_scheduler import SlurmScheduler

    class RecordingExecutor:  # submitit's AutoExecutor, as far as describing pools goes
        def __init__(self) -> None:
            self.parameters: dict[str, Any] = {}
            self.submitted: list[dict[str, Any]] = []

        def update_parameters(self, **params: Any) -> None:
            self.parameters = params

        def submit(self, fn: Any) -> Any:
            self.submitted.append(dict(self.parameters))
            if self.parameters.get("slurm_partition") == "refused":
                raise RuntimeError("sbatch failed\nsbatch: error: invalid partition specified: refused")
            return SimpleNamespace(result=lambda: {"cpu": "described"})

    pools = {"a100": PoolSpec("a100", slurm_partition="gpu", slurm_constraint="a100"),
             "old": PoolSpec("old", slurm_partition="refused")}
    settings = SlurmSettings(partition="default", account="ml", qos="high")
    scheduler = SlurmScheduler(settings, tmp_path)
    scheduler.pools, scheduler._executor = pools, RecordingExecutor()
    info = scheduler._describe_pools(["a100", "old"])
    described = scheduler._executor.submitted[0]
    cell_job = job_parameters(_cell(tmp_path, device="gpu", devices=2, pool="a100"), settings, pools)
    for key in ("slurm_partition", "slurm_constraint", "slurm_account", "nodes"):
        assert described[key] == cell_job[key], key
    assert "slurm_gres" not in described and described["name"] == "amp-suite pool a100"
    assert info["a100"] == {"cpu": "described"}
    assert info["old"] == {"error": "Slurm refused its job: sbatch: error: invalid partition specified: refused"}


def test_a_node_runs_the_cell_in_a_fresh_worker_with_the_hosts_thread_settings(tmp_path, monkeypatch):
    cell = _cell(tmp_path)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    payload = json.loads(json.dumps(cell_payload(cell, tmp_path / "logs" / "a.log", {})))  # plain JSON
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what Ray sets for a task of one CPU
    out = run_cell_on_node(payload)
    import os

    assert "OMP_NUM_THREADS" not in os.environ  # the host had none: the worker gets none
    assert out["status"] == "ok" and out["environment"]["pid"] != os.getpid()
    assert out["environment"]["node"]


class FakeScheduler:
    """Runs each submitted cell at once in a worker on this machine; scripted failures and preemptions."""

    name = "fake cluster"

    def __init__(self, scripted: dict[str, list[Finished]] | None = None, interrupt_after: int | None = None):
        self.scripted = scripted or {}
        self.submitted: list[str] = []
        self.cancelled: list[str] = []
        self.stopped = False
        self.interrupt_after = interrupt_after
        self.pool_info: dict[str, Any] = {}

    def start(self, cells, pools):
        return {c.run.key: "no node has GPU 8" for c in cells if c.run.devices == 8}

    def submit(self, cell, payload):
        handle = f"{cell.run.key}#{len(self.submitted)}"
        self.submitted.append(handle)
        self.payloads = getattr(self, "payloads", {})
        self.payloads[handle] = payload
        return handle

    def finished(self, handles, timeout_s):
        if self.interrupt_after is not None and len(self.submitted) - len(handles) >= self.interrupt_after:
            raise KeyboardInterrupt
        return handles[:1]

    def outcome(self, handle):
        key = handle.split("#")[0]
        if self.scripted.get(key):
            return self.scripted[key].pop(0)
        return Finished(result=run_cell_on_node(self.payloads[handle]))

    def running(self, handles):
        return None

    def cancel(self, handles):
        self.cancelled.extend(handles)

    def stop(self):
        self.stopped = True


def test_the_loop_stores_every_result_retries_a_preempted_cell_once_and_names_failures(tmp_path):
    store = ResultStore(tmp_path / "out")
    cells = [_cell(tmp_path, precision=p) for p in ("fp32", "amp_fp16", "amp_bf16")] + [_cell(tmp_path, devices=8)]
    keys = [c.run.key for c in cells]
    scheduler = FakeScheduler({
        keys[1]: [Finished(error="Slurm job 7 ended PREEMPTED", preempted=True)],  # then it runs
        keys[2]: [Finished(error="Slurm job 8 ended PREEMPTED", preempted=True),
                  Finished(error="Slurm job 9 ended PREEMPTED", preempted=True)],  # twice: failed
    })
    results = {r.key: r for r in run_remote(scheduler, cells, store, kept={}, env={}, progress=None, pools={})}
    assert results[keys[0]].status == "ok" and results[keys[1]].status == "ok"
    assert results[keys[2]].status == "failed" and "PREEMPTED" in results[keys[2]].error
    assert results[keys[3]].status == "unavailable" and "GPU 8" in results[keys[3]].error
    assert sum(1 for h in scheduler.submitted if h.startswith(keys[1])) == 2
    assert sum(1 for h in scheduler.submitted if h.startswith(keys[2])) == 2  # retried once, not twice
    assert scheduler.stopped
    assert {r.key for r in store.load()} == set(keys)  # the host stored every one


def test_resume_skips_finished_cells_and_ctrl_c_cancels_the_rest(tmp_path):
    store = ResultStore(tmp_path / "out")
    cells = [_cell(tmp_path, precision=p, repeat=r) for r in (0, 1) for p in ("fp32", "amp_bf16")]
    first = list(run_remote(FakeScheduler(), cells[:2], store, kept={}, env={}, progress=None, pools={}))
    assert [r.status for r in first] == ["ok", "ok"]
    scheduler = FakeScheduler(interrupt_after=1)
    seen: list[CellResult] = []
    with pytest.raises(KeyboardInterrupt):
        kept, _ = kept_results(store.latest_by_key(), cells)
        for result in run_remote(scheduler, cells, store, kept=kept, env={}, progress=None, pools={}):
            seen.append(result)
    assert [r.key for r in seen[:2]] == [cells[0].run.key, cells[1].run.key]  # kept from the store
    assert len(scheduler.submitted) == 2 and not any(h.startswith(cells[0].run.key) for h in scheduler.submitted)
    assert sorted(scheduler.cancelled) == sorted(set(scheduler.submitted) - {s for s in scheduler.submitted
                                                                              if s.split("#")[0] in
                                                                              {r.key for r in seen}})
    assert scheduler.stopped
    assert len(store.load()) == len(seen)  # nothing finished is lost, nothing unfinished is stored


def _pooled(pool: str, precision: str, throughput: float, repeat: int = 0) -> CellResult:
    config = {"framework": "torch", "pool": pool, "batch_size": 8, "dataset": "mnist"}
    return CellResult(key=f"torch/w/{precision}/pool-{pool}/r{repeat}", framework="torch", workload="w",
                      precision=precision, repeat=repeat, status="ok", config=config,
                      device={"kind": "gpu", "name": "NVIDIA T4" if pool == "t4" else "NVIDIA A100"},
                      metrics={"throughput": throughput, "framework_version": "2.13.0", "val_accuracy": 0.9})


def test_the_cross_pool_table_puts_each_pools_speed_up_and_cost_side_by_side():
    results = [_pooled(pool, p, t, r) for r in (0, 1) for pool, p, t in [
        ("t4", "fp32", 1000.0), ("t4", "amp_fp16", 2500.0), ("a100", "fp32", 4000.0), ("a100", "amp_fp16", 8000.0)]]
    environment = {"pools": {"t4": {"price_per_hour": 0.36, "machine": {"node": "n1", "gpus": [{"name": "T4"}]}},
                             "a100": {"price_per_hour": 3.6, "machine": {"node": "n2", "gpus": [{"name": "A100"}]}}}}
    summary, cells = summary_frame(results, environment), results_frame(results, environment)
    assert set(summary["framework"]) == {"torch on t4", "torch on a100"}  # never each other's baseline
    report = render_markdown(results, environment)
    assert "## Across pools" in report
    row = next(line for line in report.splitlines() if line.startswith("| w ") and "amp_fp16" in line
               and "per M images" in line)
    assert "2,500 img/s (2.50x)" in row and "8,000 img/s (2.00x)" in row
    assert "0.04 per M images" in row  # 10^6 / 2500 x 0.36 / 3600
    assert "0.125 per M images" in row  # 10^6 / 8000 x 3.6 / 3600
    assert "- pool a100: node n2" in report and "A100; 3.6 per hour" in report
    assert cells["pool"].tolist().count("t4") == 4


def test_a_bad_or_unreachable_ray_address_and_missing_slurm_tools_are_one_line(tmp_path, monkeypatch):
    from amp_suite.sweep.executors.ray_scheduler import check_reachable

    pytest.importorskip("ray")
    assert "must be HOST:PORT" in _error(lambda: check_executor(ExecutorSettings("ray", "notanaddress"), (), {},
                                                                inline=False))
    assert "goes with --executor ray" in _error(lambda: check_executor(ExecutorSettings("slurm", "h:1"), (), {},
                                                                       inline=False))
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}" in _error(lambda: check_reachable(f"127.0.0.1:{port}"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    pytest.importorskip("submitit")
    assert "needs Slurm's sbatch, srun, sacct on PATH" in _error(
        lambda: check_executor(ExecutorSettings("slurm"), (), {}, inline=False))


def test_a_refused_submission_fails_its_cell_and_the_others_go_on(tmp_path):
    from amp_suite.sweep.executors.remote import SubmitRefused

    class Refusing(FakeScheduler):
        def submit(self, cell, payload):
            if cell.run.precision == "amp_fp16":
                raise SubmitRefused("Slurm refused its job: sbatch: error: QOSMaxSubmitJobPerUserLimit")
            return super().submit(cell, payload)

    store = ResultStore(tmp_path / "out")
    cells = [_cell(tmp_path, precision=p) for p in ("fp32", "amp_fp16", "amp_bf16")]
    results = {r.precision: r for r in run_remote(Refusing(), cells, store, kept={}, env={}, progress=None,
                                                  pools={})}
    assert results["amp_fp16"].status == "failed" and "QOSMaxSubmitJobPerUserLimit" in results["amp_fp16"].error
    assert results["fp32"].status == "ok" and results["amp_bf16"].status == "ok"
    assert len(store.load()) == 3
