"""A real multi-node Ray cluster on this machine, confined to loopback in a network namespace of its own.

Ray ignores a loopback ``--node-ip-address`` on a machine that has another interface and binds to that
one (ray-project/ray#26293, #59110).  In a fresh network namespace whose only interface is ``lo``, Ray
has nothing but 127.0.0.1 to choose, so nothing a test starts can talk beyond loopback.  Needs root
and iproute2 (:func:`namespace_problem` says why not) and ray itself (:func:`ray_problem`).

Every node is a ``ray start`` of its own (the head first) with its own ``--temp-dir``, so each is a
separate raylet, told apart by the ``--temp_dir`` on its raylet's command line.  The cluster's
processes, and every command run through :meth:`RayCluster.run`/:meth:`RayCluster.popen`, live in the
namespace, which is also how teardown finds them all.  Teardown does not use ``ray stop``: that kills
every Ray process on the machine, whatever cluster (or namespace) it belongs to.

Ports: a fresh namespace has a port space of its own, so the cluster uses Ray's usual ones (GCS 6379,
client server 10001, ...) without clashing with anything outside it or with another such cluster.
Only the dashboard agent's HTTP port, fixed per node, is set apart for each node.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import psutil

from local_clusters import one_local_cluster_at_a_time

NAMESPACE_PREFIX = "amp-ray-"
GCS_PORT = 6379
# Per node: the object store's size (Ray's floor is 75 MB; its default, 30% of memory).
OBJECT_STORE_BYTES = 100_000_000
# Node i's dashboard agent HTTP port is AGENT_PORT + i (Ray gives every node 52365: one namespace, one port).
AGENT_PORT = 52365
# All the nodes' `ray start`s together (each takes 10-25 s on 2 busy cores).
START_TIMEOUT_S = 120.0
RAY_MISSING = "ray is not installed (pip install 'amp-suite[cluster]')"


@cache
def ray_problem() -> str | None:
    """Why this Python cannot start a Ray cluster (ray missing or broken), or None when it can.

    Imports ray in a child process (once per process), so the tests' own process stays free of it.
    """
    if importlib.util.find_spec("ray") is None:
        return RAY_MISSING
    done = subprocess.run([sys.executable, "-c", "import ray"], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return RAY_MISSING if "No module named 'ray" in last else f"ray does not import: {last}"
    return None


@cache
def namespace_problem() -> str | None:
    """Why network namespaces cannot be made here (not root, no ``ip``, ``ip netns add`` fails), or None.

    Tried once per process: adds a probe namespace, brings its loopback up and deletes it.
    """
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) to make a network namespace with"
    name = f"{NAMESPACE_PREFIX}probe-{secrets.token_hex(4)}"
    try:
        for args in (["ip", "netns", "add", name], ["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"]):
            done = subprocess.run(args, capture_output=True, text=True, timeout=30)
            if done.returncode != 0:
                return f"`{' '.join(args)}` failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"cannot make a network namespace: {e}"
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)
    return None


def namespace_exists(namespace: str) -> bool:
    """True while ``ip netns list`` names ``namespace``."""
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30, check=True)
    return namespace in (line.split()[0] for line in done.stdout.splitlines() if line.strip())


def netns_inode(namespace: str) -> int:
    """The inode of network namespace ``namespace``: what ``/proc/PID/ns/net`` of its processes stat to."""
    return os.stat(f"/run/netns/{namespace}").st_ino


def processes_in_netns(inode: int) -> list[int]:
    """Pids of the live processes (zombies left out) in the network namespace with this inode.

    Finds them by the namespace itself, so also once it has lost its name (``ip netns delete``).
    """
    pids = []
    for pid in psutil.pids():
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino == inode and _running(psutil.Process(pid)):
                pids.append(pid)
        except (OSError, psutil.Error):
            pass
    return pids


def describe(pids: Sequence[int]) -> str:
    """``pid: status, command line`` of each pid, for a failure message."""
    lines = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            lines.append(f"{pid}: {proc.status()}, {' '.join(proc.cmdline()) or proc.name()}")
        except psutil.Error as e:
            lines.append(f"{pid}: {type(e).__name__}")
    return "; ".join(lines)


def listening(inode: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket listening in the network namespace with this inode.

    Read from ``/proc/PID/net/tcp{,6}`` of a process in it (those list the sockets of PID's network
    namespace); an IPv4-mapped IPv6 address (gRPC's ``[::ffff:127.0.0.1]``) reads as its IPv4 one.
    """
    for pid in processes_in_netns(inode):
        found: set[tuple[str, int]] = set()
        try:
            for table in ("tcp", "tcp6"):
                for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                    fields = line.split()  # sl local_address rem_address st ...; st 0A is LISTEN
                    if fields[3] == "0A":
                        found.add(_socket_address(fields[1]))
        except OSError:
            continue
        return found
    return set()


def _socket_address(field: str) -> tuple[str, int]:
    """``/proc/net/tcp``'s ``0100007F:18EB`` as ("127.0.0.1", 6379): hex, each 32-bit word in host order."""
    raw, port = field.split(":")
    packed = bytes.fromhex(raw)
    ip = ipaddress.ip_address(b"".join(packed[i:i + 4][::-1] for i in range(0, len(packed), 4)))
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip), int(port, 16)


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _running(proc: psutil.Process) -> bool:
    """True while ``proc`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _awaits_reaping(proc: psutil.Process) -> bool:
    """True while ``proc`` (not a reuse of its pid) is in the process table, as a zombie too, unless it is
    a child of this process (a client from :meth:`RayCluster.popen`: its caller reaps it)."""
    try:
        return proc.is_running() and not (proc.status() == psutil.STATUS_ZOMBIE and proc.ppid() == os.getpid())
    except psutil.Error:
        return False


def _kill_all(procs: Sequence[psutil.Process], timeout: float = 15.0) -> list[psutil.Process]:
    """SIGKILL ``procs`` (in order) and wait for them to die; returns those still running after ``timeout``."""
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass
    deadline = time.monotonic() + timeout
    left = [p for p in procs if _running(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = [p for p in left if _running(p)]
    return left


@dataclass(frozen=True)
class RayCluster:
    """A running cluster: node 0 is the head (GCS and ``resources[0]``), node ``i`` the ``i``-th ``ray start``.

    ``env`` is the environment for clients: the inherited one less every ``RAY_*`` variable, plus
    ``RAY_ADDRESS`` (so ``ray.init()`` and ``ray status`` find this cluster) and
    ``RAY_USAGE_STATS_ENABLED=0``.  :meth:`run` and :meth:`popen` use it unless given ``env=``.
    """

    namespace: str
    netns_inode: int
    """The namespace's inode (:func:`processes_in_netns` finds its processes even after it lost its name)."""
    address: str
    env: dict[str, str]
    temp_dirs: tuple[Path, ...]
    """Each node's ``--temp-dir`` (short: Ray's unix sockets under it must stay below 108 bytes)."""
    raylet_pids: tuple[int, ...]
    node_ids: tuple[str, ...]
    """Each node's Ray node id (hex), as ``ray.get_runtime_context().get_node_id()`` gives it."""
    log_dir: Path
    """The ``ray start`` output (``ray-start-<i>.log``) and, after teardown, Ray's session logs (``node<i>/``)."""

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` as a command line that runs it inside the namespace."""
        return ["ip", "netns", "exec", self.namespace, *map(str, args)]

    def run(self, args: Sequence[str], **popen_kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """``subprocess.run(args, **popen_kwargs)`` inside the namespace, with :attr:`env` unless given ``env=``."""
        popen_kwargs.setdefault("env", self.env)
        return subprocess.run(self.command(args), **popen_kwargs)

    def popen(self, args: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
        """``subprocess.Popen`` likewise; ``ip netns exec`` execs ``args``, so its pid is the command's."""
        popen_kwargs.setdefault("env", self.env)
        return subprocess.Popen(self.command(args), **popen_kwargs)

    def pids(self) -> list[int]:
        """Every live process in the cluster's namespace: Ray's and the clients'."""
        return processes_in_netns(self.netns_inode)

    def listening(self) -> set[tuple[str, int]]:
        """The (address, port) of every TCP socket listening in the namespace."""
        return listening(self.netns_inode)

    def node_processes(self, index: int) -> list[psutil.Process]:
        """Node ``index``'s raylet first, then its descendants: its workers and its two agents.

        For the head that leaves out the GCS, the dashboard, the autoscaler monitor and the client
        server, which serve the whole cluster.
        """
        raylet = _process(self.raylet_pids[index])
        if raylet is None:
            return []
        try:
            return [raylet, *raylet.children(recursive=True)]
        except psutil.NoSuchProcess:
            return [raylet]

    def kill_node(self, index: int) -> None:
        """SIGKILL node ``index``'s raylet, its workers and its agents (a lost node); return once they are dead.

        Nothing is said to Ray: its GCS finds the raylet gone by itself, and a driver waiting on a
        task that ran there gets ``ray.exceptions.NodeDiedError`` (within seconds here).
        """
        if not 0 <= index < len(self.raylet_pids):
            raise IndexError(f"node {index}: the cluster has {len(self.raylet_pids)} nodes")
        left = _kill_all(self.node_processes(index))
        if left:
            raise RuntimeError(f"node {index}'s processes outlived SIGKILL: {[p.pid for p in left]}")


def _ray(*args: str) -> list[str]:
    """A ``ray`` command line for this Python's ray (its console script's module: no PATH needed)."""
    return [sys.executable, "-m", "ray.scripts.scripts", *args]


def _start_node(namespace: str, args: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start one ``ray start`` inside the namespace, its output going to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(["ip", "netns", "exec", namespace, *args], env=dict(env), stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _started(starts: Sequence[subprocess.Popen[bytes]], commands: Sequence[list[str]], logs: Sequence[Path],
             deadline: float) -> None:
    """Wait for ``ray start`` processes to finish; raise with the output of one that failed or hangs."""
    for start, command, log in zip(starts, commands, logs, strict=True):
        try:
            rc: int | None = start.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            start.kill()
            start.wait()
            rc = None
        if rc != 0:
            why = "did not finish in time" if rc is None else f"failed ({rc})"
            raise RuntimeError(f"{' '.join(command)} {why}:\n{log.read_text()[-4000:]}")


def _find_raylet(inode: int, temp_dir: Path) -> tuple[int, str] | None:
    """(pid, node id) of the raylet in the namespace started with ``--temp_dir=temp_dir``, or None."""
    flag = f"--temp_dir={temp_dir}"
    for pid in processes_in_netns(inode):
        proc = _process(pid)
        line = _cmdline(proc) if proc is not None else []
        if line and Path(line[0]).name == "raylet" and flag in line:
            return pid, next(a.split("=", 1)[1] for a in line if a.startswith("--node_id="))
    return None


def _teardown(namespace: str, inode: int, base: Path) -> None:
    """SIGKILL every process in the namespace (and any naming ``base``), then delete the namespace.

    Waits (10 s at most) for the killed processes to be reaped too: ``ray start`` daemonizes Ray's
    processes, so they are init's children and stay zombies until init gets round to them (~1 s here).
    """
    killed: list[psutil.Process] = []
    # A raylet may spawn a worker while the others die: go round until two scans a moment apart find none (one
    # empty scan let a process through once, seen in the namespace after teardown), for 30 s at most.
    empty_scans, deadline = 0, time.monotonic() + 30
    while empty_scans < 2 and time.monotonic() < deadline:
        procs = [p for p in map(_process, processes_in_netns(inode)) if p is not None]
        procs += [p for p in psutil.process_iter() if p not in procs and any(str(base) in a for a in _cmdline(p))]
        procs = [p for p in procs if _running(p)]
        if not procs:
            empty_scans += 1
            time.sleep(0.2)
            continue
        empty_scans = 0
        killed += procs
        _kill_all(procs)
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True, timeout=30)
    deadline = time.monotonic() + 10
    while any(_awaits_reaping(p) for p in killed) and time.monotonic() < deadline:
        time.sleep(0.1)


def _save_logs(temp_dirs: Sequence[Path], log_dir: Path) -> None:
    """Copy each node's Ray session logs into ``log_dir/node<i>`` (best effort: they are for debugging)."""
    for index, temp_dir in enumerate(temp_dirs):
        for logs in temp_dir.glob("session_*/logs"):
            try:
                shutil.copytree(logs, log_dir / f"node{index}", dirs_exist_ok=True)
            except (OSError, shutil.Error):
                pass


@contextmanager
def ray_cluster(tmp_path: Path, resources: Sequence[Mapping[str, float]] = ({"pool_a": 1}, {"pool_b": 1}),
                cpus: int = 1) -> Iterator[RayCluster]:
    """:func:`_ray_cluster` once no other local cluster runs (:mod:`local_clusters`)."""
    with one_local_cluster_at_a_time(), _ray_cluster(tmp_path, resources, cpus) as cluster:
        yield cluster


@contextmanager
def _ray_cluster(tmp_path: Path, resources: Sequence[Mapping[str, float]], cpus: int) -> Iterator[RayCluster]:
    """Start a Ray cluster of ``len(resources)`` nodes, node ``i`` offering ``resources[i]`` and ``cpus`` CPUs.

    All of it in a new network namespace ``amp-ray-<random>`` with only ``lo`` (up), bound to 127.0.0.1.
    The head starts first; the other nodes start together as soon as its GCS listens.  Each node's
    object store is 100 MB.  On leaving, SIGKILLs every process in the namespace (the cluster's and
    any client still running), deletes the namespace and the nodes' temp dirs; the ``ray start``
    output and Ray's session logs stay in ``tmp_path/"ray-logs"``.  Raises RuntimeError when a node
    does not start (with that ``ray start``'s output).
    """
    if not resources:
        raise ValueError("a cluster needs at least one node")
    namespace = f"{NAMESPACE_PREFIX}{secrets.token_hex(4)}"
    address = f"127.0.0.1:{GCS_PORT}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # Ray 2.60 turns token authentication on for a head that finds ~/.ray/auth_token (any earlier local
    # ray.init may have written one) while joining nodes and clients leave it off: say it for all of them.
    env.update(RAY_ADDRESS=address, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    log_dir = tmp_path / "ray-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ip", "netns", "add", namespace], check=True, capture_output=True, timeout=30)
    try:
        inode = netns_inode(namespace)
        # Not under tmp_path: pytest's paths are too long for the unix sockets Ray makes in a session dir.
        base = Path(tempfile.mkdtemp(prefix=NAMESPACE_PREFIX, dir="/tmp"))
    except OSError:
        subprocess.run(["ip", "netns", "delete", namespace], capture_output=True, timeout=30)
        raise
    temp_dirs = tuple(base / f"n{i}" for i in range(len(resources)))
    try:
        subprocess.run(["ip", "netns", "exec", namespace, "ip", "link", "set", "lo", "up"], check=True,
                       capture_output=True, timeout=30)
        common = ["--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus), "--num-gpus", "0",
                  "--object-store-memory", str(OBJECT_STORE_BYTES), "--disable-usage-stats",
                  # No log monitor (one Python process less per node): workers' output stays in the session logs.
                  "--include-log-monitor=false"]
        commands = [
            _ray("start", *(["--head", "--port", str(GCS_PORT), "--include-dashboard=false"] if index == 0
                            else ["--address", address]),
                 *common, "--resources", json.dumps(dict(pool)), "--temp-dir", str(temp_dir),
                 "--dashboard-agent-listen-port", str(AGENT_PORT + index))
            for index, (pool, temp_dir) in enumerate(zip(resources, temp_dirs, strict=True))]
        logs = [log_dir / f"ray-start-{index}.log" for index in range(len(commands))]
        deadline = time.monotonic() + START_TIMEOUT_S
        starts = [_start_node(namespace, commands[0], env, logs[0])]
        while starts[0].poll() is None and time.monotonic() < deadline:
            if GCS_PORT in {port for _, port in listening(inode)}:
                starts += [_start_node(namespace, c, env, log)
                           for c, log in zip(commands[1:], logs[1:], strict=True)]
                break
            time.sleep(0.2)
        _started(starts, commands[:len(starts)], logs[:len(starts)], deadline)
        if len(starts) < len(commands):
            raise RuntimeError(f"the head's GCS never listened on {GCS_PORT} (see {logs[0]})")
        raylets = [_find_raylet(inode, temp_dir) for temp_dir in temp_dirs]
        if None in raylets:
            missing = [index for index, raylet in enumerate(raylets) if raylet is None]
            raise RuntimeError(f"no raylet running for nodes {missing} after ray start (see {log_dir})")
        yield RayCluster(namespace=namespace, netns_inode=inode, address=address, env=env, temp_dirs=temp_dirs,
                         raylet_pids=tuple(r[0] for r in raylets if r), node_ids=tuple(r[1] for r in raylets if r),
                         log_dir=log_dir)
    finally:
        _teardown(namespace, inode, base)
        _save_logs(temp_dirs, log_dir)
        shutil.rmtree(base, ignore_errors=True)
