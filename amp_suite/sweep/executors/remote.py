"""The loop every cluster executor shares: submit every cell, store each result as it comes back.

A scheduler (Ray, Slurm) is wrapped by a :class:`Scheduler`: it submits one
cell's payload and returns a handle, says which handles finished, turns a
finished handle into a result (or into a failure with the scheduler's
reason, and whether the scheduler says the cell was preempted, in which case
it is submitted once more), and cancels handles.  The host stays the only
writer of ``results.jsonl``.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from amp_suite.records import CellResult, cell_from_dict
from amp_suite.sweep.executors.node import cell_payload

if TYPE_CHECKING:
    from amp_suite.sweep.runner import Cell, ProgressCallback
    from amp_suite.sweep.store import ResultStore

# Seconds between two lines saying how many cells are queued, running and done.
STATUS_EVERY_S = 30.0


class SubmitRefused(Exception):
    """The scheduler refused one cell (a QOS limit, a bad partition): that cell fails, the others go on."""


@dataclass(frozen=True)
class Finished:
    """A finished handle: its result dict, or why it has none (``error``) and whether to submit it again."""

    result: dict[str, Any] | None = None
    error: str = ""
    preempted: bool = False


class Scheduler(Protocol):
    """One cluster scheduler, as the shared loop uses it."""

    name: str

    def start(self, cells: list[Cell], pools: dict[str, Any]) -> dict[str, str]:
        """Connect; check every cell can be placed.  Returns ``{cell key: reason}`` of cells that cannot."""
        ...

    def submit(self, cell: Cell, payload: dict[str, Any]) -> Hashable:
        """Queue one cell; its handle."""
        ...

    def finished(self, handles: list[Hashable], timeout_s: float) -> list[Hashable]:
        """The handles that finished (waiting up to ``timeout_s`` for one)."""
        ...

    def outcome(self, handle: Hashable) -> Finished:
        """What a finished handle gave."""
        ...

    def running(self, handles: list[Hashable]) -> int | None:
        """How many of ``handles`` are running now (None: the scheduler cannot tell cheaply)."""
        ...

    def cancel(self, handles: list[Hashable]) -> None:
        """Cancel queued and running handles."""
        ...

    def stop(self) -> None:
        """Disconnect."""
        ...


def run_remote(scheduler: Scheduler, cells: list[Cell], store: ResultStore, *, kept: Mapping[str, CellResult],
               env: dict[str, str], progress: ProgressCallback | None, pools: dict[str, Any]) -> Iterator[CellResult]:
    """Run ``cells`` through ``scheduler``; store and yield each result in the order they finish."""
    from amp_suite.sweep.runner import cell_log_path, store_result, with_log

    total, count = len(cells), 0
    todo: list[Cell] = []
    for cell in cells:
        previous = kept.get(cell.run.key)
        if previous is None:
            todo.append(cell)
            continue
        count += 1
        if progress:
            progress(count, total, cell, previous)
        yield previous
    if not todo:
        return
    unplaceable = scheduler.start(todo, pools)
    inflight: dict[Hashable, tuple[Cell, int, float]] = {}
    nodes: Counter[str] = Counter()
    try:
        for cell in todo:
            log_path = cell_log_path(store.directory, cell.run)
            if cell.run.key in unplaceable:
                result = with_log(cell.result("unavailable", error=unplaceable[cell.run.key]), log_path)
                result = store_result(store, cell, result)
                count += 1
                if progress:
                    progress(count, total, cell, result)
                yield result
                continue
            log_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                inflight[scheduler.submit(cell, cell_payload(cell, log_path, env))] = (cell, 1, time.monotonic())
            except SubmitRefused as exc:
                result = with_log(cell.result("failed", error=str(exc)), log_path)
                result = store_result(store, cell, result)
                count += 1
                if progress:
                    progress(count, total, cell, result)
                yield result
        _say(f"{len(inflight)} cell{'' if len(inflight) == 1 else 's'} queued on {scheduler.name}")
        last_status = time.monotonic()
        while inflight:
            for handle in scheduler.finished(list(inflight), timeout_s=2.0):
                cell, attempt, started = inflight.pop(handle)
                outcome = scheduler.outcome(handle)
                if outcome.preempted and attempt == 1:
                    _say(f"{cell.run.key}: {outcome.error}; submitted once more")
                    log_path = cell_log_path(store.directory, cell.run)
                    try:
                        inflight[scheduler.submit(cell, cell_payload(cell, log_path, env))] = (cell, 2,
                                                                                             time.monotonic())
                        continue
                    except SubmitRefused as exc:
                        outcome = Finished(error=f"{outcome.error}; submitting it again failed: {exc}")
                result = _result_of(cell, outcome, time.monotonic() - started, store)
                nodes[str((result.environment or {}).get("node") or "no node")] += 1
                result = store_result(store, cell, result)
                count += 1
                if progress:
                    progress(count, total, cell, result)
                yield result
            if time.monotonic() - last_status >= STATUS_EVERY_S and inflight:
                last_status = time.monotonic()
                running = scheduler.running(list(inflight))
                state = (f"{running} running, {len(inflight) - running} queued" if running is not None
                         else f"{len(inflight)} queued or running")
                _say(f"{scheduler.name}: {count}/{total} done ({_by_node(nodes)}), {state}")
    except BaseException:
        if inflight:
            _say(f"cancelling {len(inflight)} queued and running cells on {scheduler.name}")
            scheduler.cancel(list(inflight))
        raise
    finally:
        scheduler.stop()
    _say(f"{scheduler.name}: {count}/{total} done ({_by_node(nodes)})")


def _result_of(cell: Cell, outcome: Finished, seconds: float, store: ResultStore) -> CellResult:
    from amp_suite.sweep.runner import cell_log_path, with_log

    if outcome.result is not None:
        return cell_from_dict(outcome.result)
    result = cell.result("failed", error=outcome.error, wall_time_s=seconds)
    return with_log(result, cell_log_path(store.directory, cell.run))


def _by_node(nodes: Counter[str]) -> str:
    return ", ".join(f"{node}: {n}" for node, n in sorted(nodes.items())) or "none yet"


def _say(text: str) -> None:
    print(f"amp-suite: {text}", file=sys.stderr, flush=True)
