"""Data parallel beyond one step: faults of a torchrun cell, and a cell on two nodes.

That one data-parallel step on 2 devices is the step of the mean loss over
the global batch (per-replica BatchNorm: the mean of the per-shard steps;
synchronized BatchNorm: one device's step) is part of the conformance kit,
``BackendConformance.test_two_devices_match_one_device_on_the_global_batch``
(:mod:`amp_suite.testing.data_parallel`), which ``tests/test_frameworks.py``
runs for PyTorch, Keras and JAX.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from suite_cli import REPO

# Every test here starts a real framework (slow on 2 cores): -m 'not slow' leaves them out.
pytestmark = pytest.mark.slow

MODULES = {"torch": ("torch",), "keras": ("tensorflow", "keras"), "jax": ("jax", "haiku", "jmp", "optax")}
FRAMEWORKS = [pytest.param(name, marks=pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in mods), reason=f"{name} is not installed"))
    for name, mods in MODULES.items()]


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


def _torchrun_folders(folder: Path) -> list[str]:
    """The log folders a torchrun left in ``folder``: its own default's, or one the launcher made there."""
    return sorted(path.name for path in folder.iterdir() if path.name.startswith(("torchelastic_", "amp-suite-")))


def _long_torch_sweep(tiny_config, out, precisions: str, *flags: str, **popen) -> subprocess.Popen:
    """A 2-device torch sweep of 3000 steps per cell, long enough to be killed in the middle."""
    return subprocess.Popen(
        [sys.executable, "-m", "amp_suite", "run", "--config", str(tiny_config), "--frameworks", "torch",
         "--precisions", precisions, "--devices", "2", "--steps", "3000", "--warmup", "1", *flags,
         "--out", str(out)], cwd=REPO, **popen)


@pytest.mark.skipif(not sys.platform.startswith("linux") or importlib.util.find_spec("torch") is None,
                    reason="needs Linux /proc and torch")
def test_kill_9_of_one_rank_fails_its_cell_leaves_no_process_and_the_sweep_goes_on(tiny_config, tmp_path):
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    sweep = _long_torch_sweep(tiny_config, out, "fp32,amp_bf16", "--timeout", "600",
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(scratch)})
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
        # the failed cell's torchrun took its log folder (in the output's logs/, beside the cell's result file) with
        # it; nothing went to the temporary folder (torchrun's own default, /tmp/torchelastic_*, was never removed)
        assert not (out / "logs" / "torch__tiny__fp32__d2__r0.log.torchrun").exists()
        assert not _torchrun_folders(scratch), _torchrun_folders(scratch)
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
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    sweep = _long_torch_sweep(tiny_config, out, "fp32", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "TMPDIR": str(scratch)})
    _wait_for(lambda: len([env for env in _cell_processes(str(out)).values() if "LOCAL_RANK" in env]) == 2, 300,
              "both ranks' start")
    sweep.kill()
    sweep.wait(timeout=60)
    _wait_for(lambda: not _cell_processes(str(out)), 60, "the end of torchrun and both ranks")
    # torchrun died with the host (SIGKILL: no clean-up ran), so its log folder stays, but with the cell's other
    # files in the output's logs/, where the cell's next run replaces it, not in the temporary folder
    assert (out / "logs" / "torch__tiny__fp32__d2__r0.log.torchrun").is_dir()
    assert not _torchrun_folders(scratch), _torchrun_folders(scratch)


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
    for node, (_, err) in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, err[-3000:]
    rows = [json.loads((tmp_path / f"node{rank}" / "results.jsonl").read_text()) for rank in (0, 1)]
    for rank, row in enumerate(rows):
        assert row["status"] == "ok" and row["key"] == f"{framework}/tiny/fp32/d2/r0"
        process = row["environment"]["process"]
        assert (process["nnodes"], process["node_rank"], process["num_processes"]) == (2, rank, 2)
        assert process["first_replica"] == rank  # each node trains on its own half of every global batch
        # a torchrun that ended removed its log folder (in logs/, beside the cell's result file, also gone)
        assert not [p.name for p in (tmp_path / f"node{rank}" / "logs").iterdir() if not p.name.endswith(".log")]
    # one cell: the same global-batch losses and the same slowest-process window on both nodes
    np.testing.assert_allclose(rows[1]["metrics"]["step_losses"], rows[0]["metrics"]["step_losses"], rtol=1e-6)
    assert rows[0]["metrics"]["window_time_s"] == pytest.approx(rows[1]["metrics"]["window_time_s"], rel=1e-9)
