"""The Ray cluster harness (tests/helpers/ray_cluster.py) on a real two-node cluster confined to loopback.

Each test starts its own cluster (about 25 s on 2 cores) in a network namespace of its own; clients
run inside that namespace too.  They skip where ray is missing or network namespaces cannot be made.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from local_clusters import named_namespace_with_inode
from processes import alive
from ray_cluster import (
    RayCluster,
    describe,
    namespace_exists,
    namespace_problem,
    processes_in_netns,
    ray_cluster,
    ray_problem,
)

# Slow (a real cluster). No two local clusters start side by side, whichever lane runs them: the harnesses
# take one machine-wide lock (tests/helpers/local_clusters.py).
pytestmark = pytest.mark.slow

# Runs on node 0 (pool_a) and node 1 (pool_b), says where it ran.
WHERE_CLIENT = textwrap.dedent("""
    import json, os, socket
    import ray

    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)

    @ray.remote
    def where():
        return {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "host_ip": socket.gethostbyname(socket.gethostname())}

    tasks = [where.options(resources={pool: 1}).remote() for pool in ("pool_a", "pool_b")]
    ran = ray.get(tasks, timeout=60)
    nodes = [{"node_id": n["NodeID"], "ip": n["NodeManagerAddress"], "alive": n["Alive"]} for n in ray.nodes()]
    print(json.dumps({"ran": ran, "nodes": nodes}))
""")


# Holds a task running (and itself waiting on it) until killed.
LINGER_CLIENT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import ray

    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR", log_to_driver=False)

    @ray.remote
    def linger(marker):
        Path(marker).touch()
        time.sleep(600)

    ray.get(linger.options(resources={"pool_b": 1}).remote(sys.argv[1]))
""")


def _require_cluster() -> None:
    problem = ray_problem() or namespace_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RayCluster]:
    _require_cluster()
    started = time.monotonic()
    with ray_cluster(tmp_path) as running:
        print(f"cluster {running.namespace} up in {time.monotonic() - started:.1f} s")
        yield running
        stopping = time.monotonic()
    print(f"cluster down in {time.monotonic() - stopping:.1f} s")
    assert not namespace_exists(running.namespace)


def _wait_for(paths: list[Path], proc: subprocess.Popen[str], timeout: float) -> None:
    """Wait until every file in ``paths`` exists; fail with the client's output if it exits first."""
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the client exited ({proc.returncode}) before its tasks ran:\n{out}\n{err[-3000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"the client's tasks did not start within {timeout} s:\n{out}\n{err[-3000:]}")
        time.sleep(0.1)


def test_tasks_run_on_both_nodes_on_loopback(cluster: RayCluster) -> None:
    links = cluster.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=30, check=True)
    assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"]

    done = cluster.run([sys.executable, "-c", WHERE_CLIENT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    on_a, on_b = report["ran"]
    assert (on_a["node_id"], on_b["node_id"]) == cluster.node_ids
    assert on_a["node_ip"] == on_b["node_ip"] == "127.0.0.1"
    assert sorted((n["node_id"], n["ip"], n["alive"]) for n in report["nodes"]) == sorted(
        (node, "127.0.0.1", True) for node in cluster.node_ids)
    # Every listening socket of the cluster (GCS, raylets, agents, ...) is on loopback.
    sockets = cluster.listening()
    assert ("127.0.0.1", 6379) in sockets
    assert {address for address, _ in sockets} == {"127.0.0.1"}, sorted(sockets)


def _ray_processes() -> dict[int, str]:
    """Every Ray process on the machine (raylet, GCS, agents, workers): pid -> command line."""
    found: dict[int, str] = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info.get("cmdline") or [])
        if any(mark in line for mark in ("raylet", "gcs_server", "ray/dashboard", "default_worker.py", "ray::")):
            found[proc.info["pid"]] = line
    return found


def test_teardown_leaves_no_process_and_no_namespace(tmp_path: Path) -> None:
    _require_cluster()
    before = _ray_processes()
    started = time.monotonic()
    with ray_cluster(tmp_path) as cluster:
        up = time.monotonic() - started
        marker = tmp_path / "lingering"
        client = cluster.popen([sys.executable, "-c", LINGER_CLIENT, str(marker)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        _wait_for([marker], client, timeout=60)
        ours = {pid: psutil.Process(pid) for pid in cluster.pids()}
        assert set(cluster.raylet_pids) | {client.pid} <= set(ours)
        stopping = time.monotonic()
    down = time.monotonic() - stopping
    print(f"cluster up in {up:.1f} s, down in {down:.1f} s ({len(ours)} processes)")
    # The client still waiting on its task went with the cluster.
    assert client.wait(timeout=10) is not None
    assert not namespace_exists(cluster.namespace)
    in_netns = processes_in_netns(cluster.netns_inode)
    # Were a process of ours left, our namespace would live on and keep its inode number; a named namespace
    # holding the number now is a newer one (another harness's, or a probe's), so nothing of ours is left.
    reused = named_namespace_with_inode(cluster.netns_inode)
    assert in_netns == [] or reused is not None, describe(in_netns)
    left = [pid for pid, proc in ours.items() if proc.is_running() and alive(pid)]
    assert left == []
    # Whatever Ray processes appeared meanwhile belong to someone else: none in our namespace or dirs.
    new = {pid: line for pid, line in _ray_processes().items() if pid not in before}
    assert not set(new) & set(ours)
    assert not [line for line in new.values() if str(cluster.temp_dirs[0].parent) in line], new
    assert not any(d.exists() for d in cluster.temp_dirs)
    assert (cluster.log_dir / "node0" / "gcs_server.out").exists()
    assert (cluster.log_dir / "node1" / "raylet.out").exists()
