"""A real single-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's packages.

Everything lives in a temporary directory (configuration, munge key and socket, state, spool, logs,
pid files) and in a network namespace the helper creates itself, so the daemons listen, and every
client talks, on that namespace's loopback only: no traffic leaves it. Clients (sbatch, squeue,
scancel, a Python process using submitit) run inside the same namespace through
``SlurmCluster.run``/``SlurmCluster.popen``, with ``SLURM_CONF`` pointing at the generated
``slurm.conf`` (which also names munge's socket: ``AuthInfo=socket=...``).

Needs root (network namespaces, ``SlurmUser=root``) and the packages::

    apt-get install -y slurmctld slurmd slurm-client munge

With ``accounting=True`` the cluster also runs slurmdbd on a private MariaDB server, so that
``sacct`` answers. submitit reads a job's state only through ``sacct``: without accounting a job that
ends without writing its result (cancelled, killed, timed out) stays ``UNKNOWN`` to submitit, and
``job.result()`` waits forever. That needs two more packages::

    apt-get install -y slurmdbd mariadb-server

``slurm_problem()`` says why a test must skip when any of this is missing.

Two things a container forces on the configuration (both found the hard way):

* ``ip netns exec`` remounts ``/sys`` for the command it runs, which hides ``/sys/fs/cgroup``;
  slurmd 22.05 initialises its cgroup plugin whatever the proctrack and task plugins are, and
  ``CgroupPlugin=autodetect`` (the default) then fails ("No filesystem mounted on /sys/fs/cgroup").
  A ``cgroup.conf`` naming ``cgroup/v1`` loads the plugin without touching any cgroup: with
  ``proctrack/linuxproc`` and ``task/none`` nothing ever uses it.
* Slurm fails to resolve even ``127.0.0.1`` ("getaddrinfo() failed: Name or service not known")
  when the namespace's only IPv4 address is ``127.0.0.1``: the signature of ``AI_ADDRCONFIG``, which
  glibc satisfies with any other IPv4 address. A second loopback address (``127.0.0.2/8`` on ``lo``)
  does it; nothing listens or sends on it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_clusters import one_local_cluster_at_a_time

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo", "scontrol")
ACCOUNTING_PROGRAMS = ("slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb-install-db")
INSTALL_HINT = "slurmctld, slurmd and munge are not installed: apt-get install slurmctld slurmd slurm-client munge"
ACCOUNTING_HINT = "slurmdbd and MariaDB are not installed: apt-get install slurmdbd mariadb-server"
PARTITIONS = ("debug", "other")
CLUSTER_NAME = "ampsuite"
READY_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0
LEFTOVER_GRACE_S = 2.0
REAL_MEMORY_MB = 1024

_netns_problem: list[str | None] = []


def _which(program: str) -> str | None:
    # The daemons live in /usr/sbin, which a non-login PATH may lack.
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin:/usr/bin:/bin")


def _program(name: str) -> str:
    return _which(name) or name


def slurm_problem(*, accounting: bool = False) -> str | None:
    """Why a real Slurm cluster cannot be started here, or None when it can.

    The reasons: the programs are not installed (the message names the apt-get command; with
    ``accounting``, slurmdbd and MariaDB too), the process is not root, or ``ip netns add`` fails
    (no CAP_SYS_ADMIN, no iproute2). The namespace probe runs once per process; its answer is cached.
    """
    if any(_which(p) is None for p in PROGRAMS):
        return INSTALL_HINT
    if accounting and any(_which(p) is None for p in ACCOUNTING_PROGRAMS):
        return ACCOUNTING_HINT
    if os.geteuid() != 0:
        return "a real Slurm cluster needs root (network namespace, SlurmUser=root)"
    if not _netns_problem:
        _netns_problem.append(_probe_netns())
    return _netns_problem[0]


def _probe_netns() -> str | None:
    if _which("ip") is None:
        return "`ip` (iproute2) is not installed: apt-get install iproute2"
    name = f"ampprobe{os.getpid()}{secrets.token_hex(2)}"
    try:
        proc = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`ip netns add` failed: {exc}"
    if proc.returncode != 0:
        return f"`ip netns add` failed (exit {proc.returncode}): {proc.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, timeout=30)
    return None


@dataclass(frozen=True)
class SlurmCluster:
    """A running cluster, as ``slurm_cluster`` yields it.

    ``namespace``: the network namespace the daemons listen in (loopback only). ``conf``: the
    generated slurm.conf. ``env``: what a client needs on top of the caller's environment
    (``SLURM_CONF``). ``partitions``: ``("debug", "other")``, both on the one node, ``debug`` the
    default. ``node``: the node's name (the host's short name, what ``hostname`` prints in a job).
    ``root``: the temporary directory everything lives in (``logs/`` holds the daemons' logs).
    ``accounting``: whether slurmdbd runs (``sacct`` answers). ``logs``: the daemons' log files.
    ``daemons``: each daemon's name (munged, mariadb, slurmdbd, slurmctld, slurmd) and pid.
    """

    namespace: str
    conf: Path
    env: dict[str, str]
    partitions: tuple[str, ...]
    node: str
    root: Path
    accounting: bool = False
    logs: tuple[Path, ...] = field(default=(), repr=False)
    daemons: dict[str, int] = field(default_factory=dict)

    def command(self, args: Sequence[str | os.PathLike[str]]) -> list[str]:
        """``args`` prefixed so that they run inside the namespace (``ip netns exec NAME ...``)."""
        return ["ip", "netns", "exec", self.namespace, *(os.fspath(arg) for arg in args)]

    def environ(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The caller's environment, plus ``env``, plus ``extra``."""
        return {**os.environ, **self.env, **(extra or {})}

    def run(self, args: Sequence[str | os.PathLike[str]], **kw: Any) -> subprocess.CompletedProcess[Any]:
        """Run ``args`` inside the namespace with the cluster's environment and wait for it.

        Keywords go to ``subprocess.run``; an ``env`` given is merged on top of the cluster's.
        Defaults: ``capture_output=True`` (unless ``stdout``/``stderr`` is given), ``text=True``,
        ``timeout=120``; no ``check``.
        """
        kw["env"] = self.environ(kw.get("env"))
        kw.setdefault("text", True)
        kw.setdefault("timeout", 120)
        if "stdout" not in kw and "stderr" not in kw:
            kw.setdefault("capture_output", True)
        return subprocess.run(self.command(args), **kw)

    def popen(self, args: Sequence[str | os.PathLike[str]], **kw: Any) -> subprocess.Popen[Any]:
        """Start ``args`` inside the namespace with the cluster's environment (``subprocess.Popen``).

        An ``env`` given is merged on top of the cluster's. ``ip netns exec`` enters the namespace
        and execs the command, so ``.pid`` and signals reach the command itself.
        """
        kw["env"] = self.environ(kw.get("env"))
        return subprocess.Popen(self.command(args), **kw)

    def log_tails(self, lines: int = 30) -> str:
        """The last ``lines`` lines of each daemon's log, for an error message."""
        out = []
        for path in self.logs:
            if not path.exists():
                continue
            text = path.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {path} (last {lines} lines) ---\n" + "\n".join(text))
        return "\n".join(out)


def _free_ports(namespace: str, count: int) -> list[int]:
    """``count`` distinct TCP ports free on the namespace's loopback (bound together, then let go)."""
    code = (
        "import socket\n"
        f"socks = [socket.socket() for _ in range({count})]\n"
        "for s in socks: s.bind(('127.0.0.1', 0))\n"
        "print(' '.join(str(s.getsockname()[1]) for s in socks))\n"
    )
    proc = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60, check=True)
    return [int(p) for p in proc.stdout.split()]


def _slurm_conf(root: Path, node: str, ports: Mapping[str, int], munge_socket: Path, accounting: bool) -> str:
    cpus = min(2, os.cpu_count() or 1)
    if accounting:
        storage = ["AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
                   f"AccountingStoragePort={ports['slurmdbd']}",
                   # The munge socket for talking to slurmdbd (AuthInfo's is not used there).
                   f"AccountingStoragePass={munge_socket}"]
    else:
        storage = ["AccountingStorageType=accounting_storage/none"]
    lines = [
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={ports['slurmctld']}",
        f"SlurmdPort={ports['slurmd']}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run' / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'logs' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'logs' / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        f"PlugStackConfig={root / 'plugstack.conf'}",
        # A container without cgroups: track processes through /proc, bind no task, gather nothing.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        *storage,
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "ReturnToService=2",
        "MailProg=/bin/true",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        # Seconds between a cancelled step's SIGTERM and its SIGKILL.
        "KillWait=5",
        # A finished job stays in the controller's memory (squeue, scontrol) for 5 minutes.
        "MinJobAge=300",
        f"NodeName={node} NodeAddr=127.0.0.1 NodeHostname={node} CPUs={cpus} RealMemory={REAL_MEMORY_MB} "
        "State=UNKNOWN",
        *(f"PartitionName={name} Nodes=ALL MaxTime=INFINITE State=UP" + (" Default=YES" if i == 0 else "")
          for i, name in enumerate(PARTITIONS)),
    ]
    return "\n".join(lines) + "\n"


def _slurmdbd_conf(root: Path, node: str, ports: Mapping[str, int], munge_socket: Path) -> str:
    lines = [
        "AuthType=auth/munge",
        f"AuthInfo=socket={munge_socket}",
        f"DbdHost={node}",
        "DbdAddr=127.0.0.1",
        f"DbdPort={ports['slurmdbd']}",
        "SlurmUser=root",
        f"PidFile={root / 'run' / 'slurmdbd.pid'}",
        f"LogFile={root / 'logs' / 'slurmdbd.log'}",
        "DebugLevel=info",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        f"StoragePort={ports['mariadb']}",
        # MariaDB runs with --skip-grant-tables: any user gets in.
        "StorageUser=root",
        "StorageLoc=slurm_acct_db",
    ]
    return "\n".join(lines) + "\n"


def _stop(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM each process in turn (in the order given), SIGKILL one that outlives ``grace_s``."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def _namespace_pids(namespace: str) -> list[int]:
    proc = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30)
    return [int(p) for p in proc.stdout.split() if p.isdigit() and int(p) != os.getpid()]


def _clear_namespace(namespace: str, grace_s: float) -> None:
    """End every process still in ``namespace`` (slurmstepd, job steps, clients), then delete it.

    SIGTERM once, SIGKILL to whatever is left after ``grace_s`` (submitit's job ignores SIGTERM).
    """
    pids = _namespace_pids(namespace)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 30)
        while (pids := _namespace_pids(namespace)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not pids:
            break
    subprocess.run(["ip", "netns", "delete", namespace], capture_output=True, timeout=30)


@contextmanager
def slurm_cluster(tmp_path: Path, *, accounting: bool = False, extra_conf: Sequence[str] = (),
                  ready_timeout_s: float = READY_TIMEOUT_S) -> Iterator[SlurmCluster]:
    """:func:`_slurm_cluster` once no other local cluster runs (:mod:`local_clusters`)."""
    with one_local_cluster_at_a_time(), _slurm_cluster(tmp_path, accounting=accounting, extra_conf=extra_conf,
                                                       ready_timeout_s=ready_timeout_s) as cluster:
        yield cluster


@contextmanager
def _slurm_cluster(tmp_path: Path, *, accounting: bool, extra_conf: Sequence[str],
                   ready_timeout_s: float) -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd under ``tmp_path`` in a new network namespace.

    With ``accounting``, also a private MariaDB server and slurmdbd, before slurmctld (``sacct``
    answers; submitit needs it to see a job cancelled). ``extra_conf``: lines appended to slurm.conf
    (a later line wins for a scalar option; a new ``PartitionName=`` line adds a partition, e.g. one
    with a higher ``PriorityTier`` beside ``PreemptType=preempt/partition_prio``). Yields once
    ``sinfo`` shows the node idle within ``ready_timeout_s``; past it, or when a daemon exits early,
    raises RuntimeError with the daemons' log tails. On exit stops the daemons in reverse order
    (SIGTERM, then SIGKILL after a grace period), ends every other process left in the namespace
    (slurmstepd, job steps, clients: SIGTERM, SIGKILL 2 s later), and deletes the namespace.
    """
    problem = slurm_problem(accounting=accounting)
    if problem is not None:
        raise RuntimeError(problem)
    root = Path(tmp_path) / "slurm"
    logs = root / "logs"
    for sub in ("state", "spool", "logs", "run", "munge", "conf"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for sub in ("munge", "conf"):
        os.chmod(root / sub, 0o700)
    node = socket.gethostname().split(".")[0]
    namespace = f"ampslurm{os.getpid()}{secrets.token_hex(3)}"
    names = ["munged", *(["mariadb", "slurmdbd"] if accounting else []), "slurmctld", "slurmd"]
    daemon_logs = tuple(logs / f"{name}.{ext}" for name in names for ext in ("log", "out"))
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []  # (name, process) in start order

    subprocess.run(["ip", "netns", "add", namespace], check=True, capture_output=True, timeout=30)
    try:
        for args in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", "127.0.0.2/8", "dev", "lo"]):
            subprocess.run(["ip", "netns", "exec", namespace, *args], check=True, capture_output=True, timeout=30)
        port_names = ["slurmctld", "slurmd", *(["slurmdbd", "mariadb"] if accounting else [])]
        ports = dict(zip(port_names, _free_ports(namespace, len(port_names)), strict=True))

        key = root / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        os.chmod(key, 0o400)
        munge_socket = root / "munge" / "munge.socket"
        # slurmdbd finds slurmdbd.conf beside slurm.conf (SLURM_CONF's folder), and slurmd cgroup.conf.
        conf = root / "conf" / "slurm.conf"
        conf.write_text(_slurm_conf(root, node, ports, munge_socket, accounting)
                        + "".join(f"{line}\n" for line in extra_conf))
        (root / "plugstack.conf").write_text("")
        (root / "conf" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        cluster = SlurmCluster(namespace=namespace, conf=conf, env={"SLURM_CONF": str(conf)},
                               partitions=PARTITIONS, node=node, root=root, accounting=accounting,
                               logs=daemon_logs)

        def start(name: str, args: list[str]) -> None:
            with open(logs / f"{name}.out", "wb") as sink:
                proc = cluster.popen(args, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                     start_new_session=True)
            procs.append((name, proc))
            cluster.daemons[name] = proc.pid

        def wait(ready: Callable[[], bool], what: str, timeout_s: float) -> None:
            _wait_for(ready, what, timeout_s, procs, cluster)

        start("munged", [_program("munged"), "--foreground", "--force", f"--key-file={key}",
                         f"--socket={munge_socket}", f"--pid-file={root / 'run' / 'munged.pid'}",
                         f"--log-file={logs / 'munged.log'}", f"--seed-file={root / 'munge' / 'munged.seed'}"])
        wait(munge_socket.exists, "munged's socket", 20)

        if accounting:
            _start_accounting(cluster, ports, munge_socket, start, wait)

        start("slurmctld", [_program("slurmctld"), "-D", "-i", "-f", str(conf)])
        start("slurmd", [_program("slurmd"), "-D", "-f", str(conf), "-N", node])

        def idle() -> bool:
            out = cluster.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=30).stdout.split()
            return out[:2] == [node, "idle"]

        wait(idle, f"node {node} idle in sinfo", ready_timeout_s)
        yield cluster
    finally:
        _stop([proc for _, proc in procs[::-1]], STOP_GRACE_S)
        _clear_namespace(namespace, LEFTOVER_GRACE_S)


Waiter = Callable[[Callable[[], bool], str, float], None]


def _start_accounting(cluster: SlurmCluster, ports: Mapping[str, int], munge_socket: Path,
                      start: Callable[[str, list[str]], None], wait: Waiter) -> None:
    """MariaDB (its own datadir, TCP on the namespace's loopback, no grant tables), then slurmdbd."""
    root, logs = cluster.root, cluster.root / "logs"
    datadir = root / "mariadb"
    socket_path = root / "run" / "mariadb.sock"
    options = ["--no-defaults", f"--datadir={datadir}", "--user=root", "--innodb-log-file-size=8M",
               "--innodb-buffer-pool-size=32M"]
    install = subprocess.run([_program("mariadb-install-db"), *options, "--auth-root-authentication-method=normal",
                              "--skip-test-db"], capture_output=True, text=True, timeout=120)
    if install.returncode != 0:
        raise RuntimeError(f"mariadb-install-db failed ({install.returncode}):\n{install.stdout}\n{install.stderr}")
    start("mariadb", [_program("mariadbd"), *options, "--skip-grant-tables", "--skip-log-bin",
                      "--bind-address=127.0.0.1", f"--port={ports['mariadb']}", f"--socket={socket_path}",
                      f"--pid-file={root / 'run' / 'mariadb.pid'}", f"--log-error={logs / 'mariadb.log'}"])
    wait(socket_path.exists, "MariaDB's socket", 60)

    dbd_conf = cluster.conf.parent / "slurmdbd.conf"
    dbd_conf.write_text(_slurmdbd_conf(root, cluster.node, ports, munge_socket))
    os.chmod(dbd_conf, 0o600)  # slurmdbd refuses a slurmdbd.conf others can read
    start("slurmdbd", [_program("slurmdbd"), "-D"])

    def answers() -> bool:
        proc = cluster.run(["sacctmgr", "-n", "-P", "list", "cluster"], timeout=30)
        return proc.returncode == 0

    wait(answers, "slurmdbd answering sacctmgr", 60)
    # slurmctld registers itself with slurmdbd only once the cluster is known there.
    add = cluster.run(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME], timeout=30)
    if add.returncode != 0 and "already exists" not in add.stdout + add.stderr:
        raise RuntimeError(f"sacctmgr add cluster failed:\n{add.stdout}{add.stderr}\n{cluster.log_tails()}")


def _wait_for(ready: Callable[[], bool], what: str, timeout_s: float,
              procs: Sequence[tuple[str, subprocess.Popen[bytes]]], cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        dead = [f"{name} (exit {proc.returncode})" for name, proc in procs if proc.poll() is not None]
        if dead:
            raise RuntimeError(f"a Slurm daemon exited while waiting for {what}: {dead}\n{cluster.log_tails()}")
        if ready():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} after {timeout_s:.0f}s\n{cluster.log_tails()}")
        time.sleep(0.3)
