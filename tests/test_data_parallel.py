"""Data parallel: one step on 2 devices is the step of the mean loss over the global batch.

Every framework runs its own engine (PyTorch DDP under torchrun, Keras
MirroredStrategy on 2 logical CPU devices, JAX shard_map over a 2-device
Mesh) through the conformance kit's probe (``ProbeRequest(devices=2)``), and
is compared with the same framework on one device.  The gradient is read
from one plain-SGD step, ``g = (w0 - w1) / lr``, with a learning rate so
large (1000) that the update dwarfs the float32 rounding of the weights it
is added to.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from amp_suite.testing import ProbeRequest, ProbeResult, run_probe
from conftest import REPO

MODULES = {"torch": ("torch",), "keras": ("tensorflow", "keras"), "jax": ("jax", "haiku", "jmp", "optax")}
FRAMEWORKS = [pytest.param(name, marks=pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in mods), reason=f"{name} is not installed"))
    for name, mods in MODULES.items()]
LEARNING_RATE = 1000.0
SGD = {"optimizer": "sgd", "learning_rate": LEARNING_RATE, "momentum": 0.0, "weight_decay": 0.0}
TABLES = {
    "mnist_cnn": {"model": "mnist_cnn", "input_size": 12, "channels": 1, "num_classes": 10, "batch_size": 16, **SGD},
    "resnet8": {"model": "resnet8", "input_size": 16, "channels": 3, "num_classes": 10, "batch_size": 16,
                "normalize": True, "augment": True, **SGD},
}
TOLERANCE = 1e-5  # relative, L2 norm per tensor
BATCH_NORM_STATISTICS = ("mean", "var")


def probe(tmp_path_factory, framework: str, model: str, **extra) -> ProbeResult:
    folder = tmp_path_factory.mktemp(f"{framework}-{model}")
    request = ProbeRequest(framework=framework, workload=model, table=TABLES[model], steps=1, batch_size=16, **extra)
    return run_probe(request, folder, timeout=900)


def trainable(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v for k, v in variables.items() if k.rsplit("/", 1)[1] not in BATCH_NORM_STATISTICS}


def gradients(result: ProbeResult) -> dict[str, np.ndarray]:
    before, after = trainable(result.initial), trainable(result.variables)
    return {name: (before[name].astype(np.float64) - after[name]) / LEARNING_RATE for name in before}


def worst(ours: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> tuple[float, str]:
    assert set(ours) == set(reference) and reference
    errors = {name: float(np.linalg.norm(ours[name] - reference[name]) / max(np.linalg.norm(reference[name]), 1e-30))
              for name in reference}
    name = max(errors, key=errors.get)
    return errors[name], name


def notes(result: ProbeResult) -> str:
    return " ".join(result.applied["notes"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_mnist_cnn_two_devices_match_one_device_on_the_global_batch(tmp_path_factory, framework):
    one = probe(tmp_path_factory, framework, "mnist_cnn")
    two = probe(tmp_path_factory, framework, "mnist_cnn", devices=2)
    assert "data_parallel=" in notes(two) and "contiguous slice of 8" in notes(two)
    error, name = worst(gradients(two), gradients(one))
    assert error <= TOLERANCE, (name, error)
    error, name = worst(trainable(two.variables), trainable(one.variables))  # one SGD step: the same parameters
    assert error <= TOLERANCE, (name, error)
    np.testing.assert_allclose(two.losses, one.losses, rtol=TOLERANCE)  # the global batch's mean loss


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_resnet8_per_replica_batch_norm_matches_the_per_shard_computation(tmp_path_factory, framework):
    # BatchNorm per replica: each device normalizes its own half, so the step's gradient is the mean of
    # the gradients one device computes on each half alone.
    two = probe(tmp_path_factory, framework, "resnet8", devices=2)
    halves = [gradients(probe(tmp_path_factory, framework, "resnet8", shard=(i, 2))) for i in range(2)]
    expected = {name: (halves[0][name] + halves[1][name]) / 2 for name in halves[0]}
    assert "batch_norm_statistics=per replica" in notes(two)
    error, name = worst(gradients(two), expected)
    assert error <= TOLERANCE, (name, error)
    assert np.abs(gradients(two)["bn1/scale"]).max() > 0  # BatchNorm really took part


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f.values[0] != "torch"])
def test_resnet8_synchronized_batch_norm_matches_one_device(tmp_path_factory, framework):
    # (PyTorch's SyncBatchNorm runs on GPUs only: on a CPU its cells keep per-replica statistics.)
    one = probe(tmp_path_factory, framework, "resnet8")
    two = probe(tmp_path_factory, framework, "resnet8", devices=2, sync_batch_norm=True)
    assert "batch_norm_statistics=synchronized" in notes(two)
    error, name = worst(gradients(two), gradients(one))
    assert error <= TOLERANCE, (name, error)
    stats = {k: v for k, v in one.variables.items() if k.rsplit("/", 1)[1] in BATCH_NORM_STATISTICS}
    assert stats
    for key, value in stats.items():  # running statistics of the global batch, as on one device
        np.testing.assert_allclose(two.variables[key], value, rtol=1e-4, atol=1e-6, err_msg=key)


# --- faults: a data-parallel cell's processes live and die together ---

def _cell_processes(marker: str) -> dict[int, dict[str, str]]:
    """Processes whose command line holds ``marker`` (the sweep's output directory), with their environment."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().decode("utf-8", "replace")
            if marker not in cmdline:
                continue
            with open(f"/proc/{entry}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = dict(item.split("=", 1) for item in fh.read().decode("utf-8", "replace").split("\0")
                           if "=" in item)
        except OSError:
            continue
        found[int(entry)] = env
    return found


def _wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {seconds} s")


def _long_torch_sweep(tiny_config, out, precisions: str, *flags: str, **popen) -> subprocess.Popen:
    """A 2-device torch sweep of 3000 steps per cell, long enough to be killed in the middle."""
    return subprocess.Popen(
        [sys.executable, "-m", "amp_suite", "run", "--config", str(tiny_config), "--frameworks", "torch",
         "--precisions", precisions, "--devices", "2", "--steps", "3000", "--warmup", "1", *flags,
         "--out", str(out)], cwd=REPO, **popen)


@pytest.mark.skipif(not sys.platform.startswith("linux") or importlib.util.find_spec("torch") is None,
                    reason="needs Linux /proc and torch")
def test_kill_9_of_one_rank_fails_its_cell_leaves_no_process_and_the_sweep_goes_on(tiny_config, tmp_path):
    out = tmp_path / "out"
    sweep = _long_torch_sweep(tiny_config, out, "fp32,amp_bf16", "--timeout", "600",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        marker = str(out / "logs" / "torch__tiny__fp32__d2__r0")
        rank1 = _wait_for(lambda: [pid for pid, env in _cell_processes(marker).items()
                                   if env.get("LOCAL_RANK") == "1"], 300, "rank 1's start")[0]
        time.sleep(3)
        os.kill(rank1, signal.SIGKILL)
        # the other rank and torchrun end, well before the cell's 600 s timeout
        _wait_for(lambda: not _cell_processes(marker), 120, "the end of every process of the killed cell")
        # the sweep goes on to the next cell, which is cut short (3000 steps are not needed to prove it runs)
        _wait_for(lambda: _cell_processes(str(out / "logs" / "torch__tiny__amp_bf16__d2__r0")), 300,
                  "the next cell's start")
    finally:
        sweep.terminate()
        sweep.communicate(timeout=300)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert rows[0]["key"] == "torch/tiny/fp32/d2/r0" and rows[0]["status"] == "failed"
    assert "exited with code" in rows[0]["error"]
    assert not _cell_processes(str(out))  # nothing of either cell is left


@pytest.mark.skipif(not sys.platform.startswith("linux") or importlib.util.find_spec("torch") is None,
                    reason="needs Linux /proc and torch")
def test_kill_9_of_the_host_ends_torchrun_and_every_rank(tiny_config, tmp_path):
    out = tmp_path / "out"
    sweep = _long_torch_sweep(tiny_config, out, "fp32", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: len([env for env in _cell_processes(str(out)).values() if "LOCAL_RANK" in env]) == 2, 300,
              "both ranks' start")
    sweep.kill()
    sweep.wait(timeout=60)
    _wait_for(lambda: not _cell_processes(str(out)), 60, "the end of torchrun and both ranks")


# --- several machines: two processes on this machine stand for two nodes ---

def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tf_config(workers: list[str], rank: int) -> dict[str, str]:
    """Keras's cluster description for node ``rank`` (MultiWorkerMirroredStrategy reads TF_CONFIG)."""
    return {"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}})}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_two_nodes_run_one_cell_together(tiny_config, tmp_path, framework):
    coordinator = f"127.0.0.1:{_free_port()}"
    workers = [f"127.0.0.1:{_free_port()}" for _ in range(2)]
    nodes = [subprocess.Popen(
        [sys.executable, "-m", "amp_suite", "run", "--config", str(tiny_config), "--frameworks", framework,
         "--precisions", "fp32", "--devices", "2", "--nnodes", "2", "--node-rank", str(rank),
         "--coordinator", coordinator, "--steps", "6", "--warmup", "1", "--timeout", "600",
         "--out", str(tmp_path / f"node{rank}")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(_tf_config(workers, rank) if framework == "keras" else {})})
        for rank in (0, 1)]
    outputs = [node.communicate(timeout=900) for node in nodes]
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err[-3000:]
    rows = [json.loads((tmp_path / f"node{rank}" / "results.jsonl").read_text()) for rank in (0, 1)]
    for rank, row in enumerate(rows):
        assert row["status"] == "ok" and row["key"] == f"{framework}/tiny/fp32/d2/r0"
        process = row["environment"]["process"]
        assert (process["nnodes"], process["node_rank"], process["num_processes"]) == (2, rank, 2)
        assert process["first_replica"] == rank  # each node trains on its own half of every global batch
    # one cell: the same global-batch losses and the same slowest-process window on both nodes
    np.testing.assert_allclose(rows[1]["metrics"]["step_losses"], rows[0]["metrics"]["step_losses"], rtol=1e-6)
    assert rows[0]["metrics"]["window_time_s"] == pytest.approx(rows[1]["metrics"]["window_time_s"], rel=1e-9)
