"""``--executor ray``: each cell a Ray task, on a node of its pool, with the devices it needs.

The task asks for ``cpus_per_cell`` CPUs, the cell's GPUs when it runs on
``--device gpu`` (``num_gpus`` = its devices: Ray places a task on one node,
so a data-parallel cell's launcher finds all its devices there), and one unit
of its pool's custom resource (``[pools.NAME] ray_resource``): a node that
advertises ``{"a100": 1}`` runs one cell at a time.  Ray retries nothing
(``max_retries=0``): a node lost mid-cell makes that cell ``failed`` with
Ray's reason, and a queued cell whose pool has no alive node left is
cancelled and ``failed`` (Ray would keep it pending for ever).  Ctrl-C cancels every task (``force=True``); each cell's worker
dies with its task.

Every node must have this amp-suite (and the cell's framework or
environment) installed at the same path, and the sweep's output directory on
a shared filesystem: the worker writes its log there (docs/cluster.md).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from amp_suite.errors import SweepInterrupted, UsageError, message_line, one_line
from amp_suite.sweep.executors.node import pool_machine, run_cell_on_node
from amp_suite.sweep.executors.remote import Finished

if TYPE_CHECKING:
    from amp_suite.sweep.runner import Cell

# Seconds between two checks that every queued task still has an alive node that can run it.
FEASIBLE_EVERY_S = 10.0
# Seconds to wait for the head node's port to answer (as a gRPC server) before Ray is asked to connect.
CONNECT_TIMEOUT_S = 10.0
# An HTTP/2 client's first bytes: the connection preface, then an empty SETTINGS frame (RFC 9113, 3.4).
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
# The frame type of SETTINGS, the first frame an HTTP/2 (gRPC) server sends.
HTTP2_SETTINGS = 0x04
# Seconds to wait for the small task that describes each pool's machine.
POOL_PROBE_TIMEOUT_S = 120.0


def ray_cell(payload: dict[str, Any]) -> dict[str, Any]:
    """The Ray task of one cell: the cell, run on this node, its result naming the node."""
    import ray

    out = run_cell_on_node(payload)
    context = ray.get_runtime_context()
    out["environment"]["node"] = f"{ray.util.get_node_ip_address()} {context.get_node_id()[:8]}"
    return out


def cell_resources(cell: Cell, pools: dict[str, Any], cpus: float) -> dict[str, Any]:
    """The task options of ``cell``: CPUs, GPUs and its pool's resource."""
    run = cell.run
    options: dict[str, Any] = {"num_cpus": cpus, "num_gpus": run.devices if run.device == "gpu" else 0,
                               "max_retries": 0}
    if run.pool:
        options["resources"] = {pools[run.pool].ray_resource: 1}
    return options


def placement_problem(options: dict[str, Any], nodes: list[dict[str, Any]]) -> str | None:
    """Why no alive node can ever run a task with ``options`` (None: one can)."""
    wanted = {"CPU": options["num_cpus"], "GPU": options["num_gpus"], **options.get("resources", {})}
    wanted = {name: amount for name, amount in wanted.items() if amount}
    for node in nodes:
        have = node.get("Resources") or {}
        if node.get("Alive") and all(have.get(name, 0) >= amount for name, amount in wanted.items()):
            return None
    asked = ", ".join(f"{name} {amount:g}" for name, amount in wanted.items())
    return f"no node of the Ray cluster has {asked} (ray status shows what each node advertises)"


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A one-line error unless a gRPC server (as Ray's GCS is) answers at ``address`` within ``timeout_s``.

    Ray itself retries for minutes, and hangs on a port where something else
    listens; so the port is asked first to open an HTTP/2 connection, and must
    answer with its SETTINGS frame.  With ``RAY_USE_TLS`` set only the port is
    checked (the handshake is then TLS's).
    """
    import os
    import socket

    from amp_suite.config.settings import check_coordinator

    try:
        host, port = check_coordinator(address)
    except UsageError:
        raise UsageError(f"--ray-address must be HOST:PORT (the head node's GCS, e.g. 10.0.0.1:6379), got "
                         f"{address!r}") from None
    deadline = time.monotonic() + timeout_s
    connected = False
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            connected = True
            if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
                return
            connection.sendall(HTTP2_PREFACE)
            answer = b""
            while len(answer) < 9:
                connection.settimeout(max(deadline - time.monotonic(), 0.001))
                chunk = connection.recv(9 - len(answer))
                if not chunk:
                    break
                answer += chunk
    except TimeoutError:
        if not connected:
            raise UsageError(f"cannot reach the Ray cluster at {address}: no connection within {timeout_s:g} s "
                             "(is `ray start --head` running there?)") from None
        answer = None
    except OSError as exc:
        raise UsageError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc} (is `ray start "
                         "--head` running there?)") from None
    if answer is None or len(answer) < 9 or answer[3] != HTTP2_SETTINGS:
        said = "no answer" if not answer else "an answer that is not gRPC's"
        raise UsageError(f"{address} is not a Ray cluster: {said} within {timeout_s:g} s where the head node's GCS "
                         "(a gRPC server) would answer at once; give the address `ray start --head` printed")


@contextmanager
def keeping_signal_handlers() -> Iterator[None]:
    """The host's SIGTERM, SIGINT and SIGHUP handlers stay the host's through a call into Ray.

    ``ray.init`` installs a SIGTERM handler that exits with code 15 (and no
    "interrupted" line); one that Ray's handler fires during the call becomes
    the host's :class:`~amp_suite.errors.SweepInterrupted`.
    """
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    numbers = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    kept = {number: signal.getsignal(number) for number in numbers}
    try:
        yield
    except SystemExit as exc:
        if exc.code in numbers:  # Ray's handler: sys.exit(signum)
            raise SweepInterrupted(int(exc.code)) from None
        raise
    finally:
        for number, handler in kept.items():
            if handler is not None:
                signal.signal(number, handler)


class RayScheduler:
    """The :class:`~amp_suite.sweep.executors.remote.Scheduler` of a Ray cluster."""

    def __init__(self, address: str, cpus_per_cell: float = 1.0) -> None:
        self.address = address
        self.cpus = cpus_per_cell
        self.name = f"ray ({address or 'a local instance started for the sweep'})"
        self.pools: dict[str, Any] = {}
        self._task: Any = None
        self.pool_info: dict[str, dict[str, Any]] = {}
        self._options: dict[Any, dict[str, Any]] = {}
        self._stranded: dict[Any, str] = {}  # queued tasks whose pool lost every node that could run them
        self._checked = 0.0

    def start(self, cells: list[Cell], pools: dict[str, Any]) -> dict[str, str]:
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install 'amp-suite[cluster]'") from None
        if self.address:
            check_reachable(self.address)
        try:  # "local": a new instance for this sweep, never one RAY_ADDRESS or an earlier `ray start` names
            with keeping_signal_handlers():
                ray.init(address=self.address or "local", log_to_driver=False, include_dashboard=False,
                         configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError, OSError) as exc:
            raise UsageError(f"cannot connect to the Ray cluster at {self.address or 'a local instance'}: "
                             f"{message_line(exc)}") from None
        self.pools = pools
        self._task = ray.remote(ray_cell)
        nodes = ray.nodes()
        unplaceable: dict[str, str] = {}
        for cell in cells:
            if cell.run.pool and not pools[cell.run.pool].ray_resource:
                unplaceable[cell.run.key] = f"pool {cell.run.pool!r} names no ray_resource"
                continue
            problem = placement_problem(cell_resources(cell, pools, self.cpus), nodes)
            if problem:
                unplaceable[cell.run.key] = problem
        self.pool_info = self._describe_pools({c.run.pool for c in cells if c.run.pool
                                               and c.run.key not in unplaceable}, ray)
        return unplaceable

    def _describe_pools(self, names: set[str], ray: Any) -> dict[str, dict[str, Any]]:
        probe = ray.remote(pool_machine)
        refs = {name: probe.options(num_cpus=0, resources={self.pools[name].ray_resource: 0.001},
                                    max_retries=0).remote() for name in sorted(names)}
        info: dict[str, dict[str, Any]] = {}
        waiting = dict(refs)
        deadline = time.monotonic() + POOL_PROBE_TIMEOUT_S
        while waiting and time.monotonic() < deadline:
            ready, _ = ray.wait(list(waiting.values()), num_returns=len(waiting), timeout=FEASIBLE_EVERY_S)
            nodes = ray.nodes()
            for name, ref in list(waiting.items()):
                if ref in ready:
                    try:
                        info[name] = ray.get(ref)
                    except Exception as exc:  # a pool that cannot be described still runs its cells
                        info[name] = {"error": one_line(exc)}
                elif placement_problem({"num_cpus": 0, "num_gpus": 0,
                                        "resources": {self.pools[name].ray_resource: 0.001}}, nodes):
                    info[name] = {"error": "no alive node advertises its resource"}
                    ray.cancel(ref, force=True)
                else:
                    continue
                del waiting[name]
        for name, ref in waiting.items():
            info[name] = {"error": f"its node did not answer within {POOL_PROBE_TIMEOUT_S:g} s"}
            ray.cancel(ref, force=True)
        return info

    def submit(self, cell: Cell, payload: dict[str, Any]) -> Hashable:
        options = cell_resources(cell, self.pools, self.cpus)
        handle = self._task.options(**options).remote(payload)
        self._options[handle] = options
        return handle

    def finished(self, handles: list[Any], timeout_s: float) -> list[Any]:
        """The finished tasks, and the queued ones no alive node can run any more (their pool lost its nodes)."""
        import ray

        ready, _ = ray.wait(handles, num_returns=len(handles), timeout=timeout_s, fetch_local=False)
        if time.monotonic() - self._checked >= FEASIBLE_EVERY_S:
            self._checked = time.monotonic()
            nodes = ray.nodes()
            for handle in handles:
                if handle in ready or handle in self._stranded:
                    continue
                problem = placement_problem(self._options[handle], nodes)
                if problem:  # Ray would keep it pending for ever
                    self._stranded[handle] = problem
                    ray.cancel(handle, force=True)
        return list(ready) + [h for h in handles if h in self._stranded and h not in ready]

    def outcome(self, handle: Any) -> Finished:
        import ray

        if handle in self._stranded:
            return Finished(error=f"Ray: no alive node can run it any more: {self._stranded.pop(handle)}")
        try:
            return Finished(result=ray.get(handle))
        except ray.exceptions.RayTaskError as exc:  # our own code raised on the node
            return Finished(error=f"the cell's task raised on its node: {one_line(exc.cause or exc)}")
        except ray.exceptions.RayError as exc:  # the node or its worker died, the task was cancelled
            return Finished(error=f"Ray: {type(exc).__name__}: {message_line(exc)}")

    def running(self, handles: list[Any]) -> int | None:
        return None

    def cancel(self, handles: list[Any]) -> None:
        import ray

        for handle in handles:
            try:
                ray.cancel(handle, force=True)
            except Exception:  # already finished, or its node is gone
                pass

    def stop(self) -> None:
        import ray

        ray.shutdown()

