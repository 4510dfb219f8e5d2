"""The sweep engine: a plan run under the output lock, its results stored and reported.

``amp-suite run`` and :func:`amp_suite.run` both come here (:func:`sweep`), so
the command line and the API check the same inputs, hold the same lock and
write the same files.  :func:`sweep` is two steps: the request resolved into
a :class:`~amp_suite.sweep.plan.SweepPlan` (:func:`amp_suite.sweep.resolve.resolve`:
configuration, preset, checks, environments, executor, cells), then
:func:`execute`, which only runs a plan: the output directory prepared, data
fetched, the cells run by the plan's executor (one process per cell),
``environment.json`` and the report written.  Reading a finished sweep back
is :mod:`amp_suite.sweep.stored`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from amp_suite.config.settings import SweepSettings
from amp_suite.config.workload_datasets import DatasetChoice
from amp_suite.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, StorageError, SweepInterrupted, UsageError, one_line
from amp_suite.records import BENIGN_STATUSES, CellResult
from amp_suite.report.superseded import without_superseded
from amp_suite.report.text import path_text, pooled_label
from amp_suite.sweep.output_dir import ENVIRONMENT_FILE, RESULTS_FILE
from amp_suite.sweep.plan import SweepPlan, SweepRequest
from amp_suite.sweep.report_files import write_recorded_report
from amp_suite.sweep.resolve import resolve, worker_env
from amp_suite.sweep.stored import warn_about_other_settings, warn_skipped_lines

__all__ = ["SweepOutcome", "SweepRequest", "execute", "resolve", "sweep"]


@dataclass
class SweepOutcome:
    """What a sweep did: its results, the report files, how it ended and its exit code."""

    out_dir: Path
    results: list[CellResult]
    environment: dict[str, Any]
    written: list[Path]
    reporter_failures: list[Any]
    stopped_by: int | None = None
    storage_failed: bool = False
    ran: int = 0  # the cells this run ran (results --resume kept are not counted)

    @property
    def exit_code(self) -> int:
        if self.stopped_by is not None:
            return 128 + self.stopped_by
        if self.storage_failed or self.reporter_failures:
            return EXIT_USAGE
        return EXIT_OK if all(r.status in BENIGN_STATUSES for r in self.results) else EXIT_FAILED


def _fetch_data(settings: SweepSettings, choices: Iterable[DatasetChoice]) -> None:
    """Verify (or download) every data file of every workload's dataset before the first cell starts."""
    from amp_suite.datasets import fetch
    from amp_suite.datasets.fetch import ChecksumMismatch, DatasetError

    for choice in {(c.dataset, c.train_split, c.val_split): c for c in choices}.values():  # each data once
        try:
            fetch(choice.dataset, choice.train_split, choice.val_split,
                  data_dir=settings.data_dir, allow_download=settings.download)
        except ChecksumMismatch as exc:
            raise UsageError(str(exc)) from None
        except DatasetError as exc:
            if not settings.synthetic_fallback:
                raise UsageError(f"{exc}; or set synthetic_fallback = true to run on synthetic data") from None
            print(f"amp-suite: warning: {exc}; synthetic data will stand in for {choice.dataset} (the report "
                  "says so)", file=sys.stderr)


def sweep(request: SweepRequest, progress: Callable | None = None) -> SweepOutcome:
    """Resolve the request into its plan, then run it (:func:`execute`).

    Raises :class:`UsageError` for bad input (before any cell runs) and
    :class:`~amp_suite.errors.PluginError` for a broken plugin.  A stop signal
    (Ctrl-C, SIGTERM, SIGHUP) during the sweep ends it early: the report is
    written from the finished cells and ``stopped_by`` names the signal.
    """
    return execute(resolve(request), progress)


def execute(plan: SweepPlan, progress: Callable | None = None) -> SweepOutcome:
    """Run every cell of ``plan`` under the output lock and write the report; decides nothing the plan says."""
    from amp_suite.sweep.output_dir import OutputLock, prepare_output_dir

    for note in plan.notes:
        print(f"amp-suite: {note}", file=sys.stderr)
    made = not os.path.lexists(plan.out_dir)
    out_dir = prepare_output_dir(plan.out_dir)
    with OutputLock(out_dir):
        try:
            _fetch_data(plan.settings, plan.datasets.values())
        except UsageError:
            if made:  # nothing ran: the directory this run made goes again, as it was never there
                _remove_unused_output(out_dir)
            raise
        return _run_locked(plan, out_dir, progress)


def _remove_unused_output(out_dir: Path) -> None:
    """Remove what :func:`prepare_output_dir` and the lock put in a new ``out_dir``: the lock file, then the
    ``logs`` folder and the directory, each only when empty."""
    from amp_suite.sweep.output_dir import LOCK_FILE, LOGS_DIR

    for remove in (lambda: os.unlink(out_dir / LOCK_FILE), lambda: os.rmdir(out_dir / LOGS_DIR),
                   lambda: os.rmdir(out_dir)):
        try:
            remove()
        except OSError:
            return


def _run_locked(plan: SweepPlan, out_dir: Path, progress: Callable | None) -> SweepOutcome:
    from amp_suite.calibration.ceiling import attach_calibration
    from amp_suite.machine.environment import host_environment
    from amp_suite.safe_files import write_file_atomically
    from amp_suite.sweep.executors.select import run_cells
    from amp_suite.sweep.fingerprint import kept_results
    from amp_suite.sweep.store import ResultStore

    request, host, config, settings, cells, datasets = (plan.request, plan.host, plan.config, plan.settings,
                                                         plan.cells, plan.datasets)
    store = ResultStore(out_dir)
    if request.resume:
        warn_skipped_lines(store)
        warn_about_other_settings(out_dir, asdict(settings))
    environment = host_environment(host.distributions())
    environment["config_file"] = str(config.path) if config.path is not None else "none (the packaged catalog)"
    environment["settings"] = asdict(settings)
    # every cell this run plans (key, framework as reported, workload, precision): a report of the folder tells a
    # run killed part-way (no stop recorded) by the cells of it that have no result
    environment["planned_cells"] = [[cell.run.key, pooled_label(cell.run.label, cell.run.pool), cell.run.workload,
                                     cell.run.precision] for cell in cells]
    if datasets:  # which dataset and splits each workload trained on (the report's header says so)
        environment["workload_datasets"] = {name: asdict(choice) for name, choice in datasets.items()}
    if plan.preset is not None:
        environment["preset"] = dict(plan.preset)
    if plan.cost:
        environment["cost"] = dict(plan.cost)
    attach_calibration(environment)

    def write_environment() -> None:
        try:
            write_file_atomically(out_dir / ENVIRONMENT_FILE, json.dumps(environment, indent=2, default=str))
        except OSError as exc:
            raise UsageError(f"cannot write {out_dir / ENVIRONMENT_FILE}: {exc.strerror or exc}") from None

    # An earlier run's environment.json stays until this run finishes a cell of its own: a run stopped before
    # that (a signal, SIGKILL included, or a failed store) leaves the earlier run's folder as it was.
    earlier = os.path.lexists(out_dir / ENVIRONMENT_FILE)
    if not earlier:
        write_environment()
    # decided once, before any cell runs: the results --resume keeps (environment.json or not), and why it runs others
    kept, reruns = kept_results(store.latest_by_key(), cells) if request.resume else ({}, {})
    to_run = f" ({len(kept)} kept from the last run, {len(cells) - len(kept)} to run)" if kept else ""
    print(f"amp-suite: {cells_announced(len(cells), settings.repeats, request.auto_repeats)}{to_run} -> "
          f"{path_text(out_dir)}/{plan.synthetic_note}", file=sys.stderr)
    _say_reruns(reruns)
    if datasets and len({choice.dataset for choice in datasets.values()}) > 1:
        print("amp-suite: datasets: " + "; ".join(f"{name}: {choice.text}" for name, choice in datasets.items()),
              file=sys.stderr)
    started = time.perf_counter()
    outcome = SweepOutcome(out_dir, [], environment, [], [])
    try:
        for result in run_cells(plan.executor, list(cells), store, inline=request.inline,
                                kept=kept, env=worker_env(host),
                                progress=None if request.quiet else progress, pools=config.pools,
                                environment=environment):
            ran_here = result is not kept.get(result.key)  # not a result --resume kept
            if earlier and ran_here and not outcome.ran:  # the first cell this run ran
                write_environment()
            outcome.ran += ran_here
            outcome.results.append(result)
        if request.auto_repeats:
            _auto_repeats(plan, store, environment, outcome, progress)
    except KeyboardInterrupt as exc:
        outcome.stopped_by = exc.signum if isinstance(exc, SweepInterrupted) else signal.SIGINT
        stored = ("finished cells are kept in results.jsonl (the same command with --resume runs the rest)"
                  if outcome.results else "no cell finished (the same command runs them all)")
        print(f"amp-suite: interrupted by {signal.Signals(outcome.stopped_by).name}; {stored}", file=sys.stderr)
    except StorageError as exc:
        outcome.storage_failed = True
        print(f"amp-suite: error: {one_line(exc)}; the sweep stops, {len(outcome.results)} finished cells are "
              "stored (free space or fix permissions, then run again with --resume)", file=sys.stderr)
    if earlier and not outcome.ran and (outcome.stopped_by is not None or outcome.storage_failed):
        print(f"amp-suite: no cell finished: the earlier report and environment in {path_text(out_dir)} are kept "
              "as they were", file=sys.stderr)
        return outcome
    if outcome.stopped_by is not None or outcome.storage_failed:  # the report says what did not run
        finished = {result.key for result in outcome.results}
        environment["incomplete"] = {
            "reason": (f"interrupted by {signal.Signals(outcome.stopped_by).name}" if outcome.stopped_by is not None
                       else "stopped: a result could not be stored"),
            "planned": len(cells), "not_run": [cell.run.key for cell in cells if cell.run.key not in finished],
            # each as framework, workload, precision: the verdict names an AMP precision that did not run
            "not_run_cells": [[pooled_label(cell.run.label, cell.run.pool), cell.run.workload, cell.run.precision]
                              for cell in cells if cell.run.key not in finished]}
    # what the cluster's nodes of each pool are, learnt while the cells ran; or what did not run
    if "pools" in environment or "incomplete" in environment:
        try:
            write_file_atomically(out_dir / ENVIRONMENT_FILE, json.dumps(environment, indent=2, default=str))
        except OSError as exc:
            print(f"amp-suite: warning: cannot update {out_dir / ENVIRONMENT_FILE}: {exc.strerror or exc}",
                  file=sys.stderr)
    planned = {cell.run.key for cell in cells} | {cell.run.key for more in plan.more_repeats for cell in more}
    others = [key for key in store.latest_by_key() if key not in planned]
    report_environment = {**environment, "other_results": {"keys": others}} if others else environment
    report = write_recorded_report(host, outcome.results, out_dir, report_environment)
    outcome.written, outcome.reporter_failures = list(report.written), list(report.failures)
    print_verdict(*without_superseded(outcome.results, environment))  # the answer first, then where the files are
    kept_count = len(outcome.results) - outcome.ran  # --resume's cells of the last run, not run again
    print(f"amp-suite: {outcome.ran} cell{'' if outcome.ran == 1 else 's'} "
          + (f"run ({kept_count} kept from the last run) " if kept_count else "")
          + f"in {time.perf_counter() - started:.0f} s; wrote "
          + (", ".join(path_text(p) for p in report.written) or "no report"), file=sys.stderr)
    if others:
        print(f"amp-suite: note: {RESULTS_FILE} also holds {len(others)} result{'' if len(others) == 1 else 's'} "
              f"of cells this run did not plan ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}), left "
              f"out of its report: amp-suite report {path_text(out_dir)} renders them all together", file=sys.stderr)
    for failure in report.failures:
        print(f"amp-suite: error: reporter {failure.plugin!r} failed: {failure.error}", file=sys.stderr)
    return outcome


def print_verdict(results: list[CellResult], environment: dict[str, Any]) -> None:
    """The sweep's verdict (:mod:`amp_suite.report.verdict`) on standard output; nothing when no cell ran."""
    from amp_suite.report.normalize import sweep_verdict
    from amp_suite.report.verdict_text import terminal_lines

    lines = terminal_lines(sweep_verdict(results, environment)) if results else []
    if lines:
        sys.stderr.flush()  # the progress lines before it, where both streams reach one terminal
        print("\n".join(lines), flush=True)


def cells_announced(planned: int, repeats: int, auto_repeats: int = 0) -> str:
    """``18 cells``; under ``--repeats auto`` also the most it may run: ``4 cells now, up to 10 (--repeats
    auto adds repeats of the cells whose speed-up intervals are wider than asked, up to 5 per cell)``."""
    text = f"{planned} cell{'' if planned == 1 else 's'}"
    if not auto_repeats or auto_repeats <= repeats or repeats <= 0:
        return text
    most = planned // repeats * auto_repeats
    return (f"{text} now, up to {most} (--repeats auto adds repeats of the cells whose speed-up intervals are "
            f"wider than asked, up to {auto_repeats} per cell)")


# The first round of ``--repeats auto`` (two repeats: the fewest that give an interval).
AUTO_FIRST_REPEATS = 2
# ``--repeats auto``'s default cap on repeats per cell.
AUTO_MAX_REPEATS = 5


def wide_speedups(results: list[CellResult], environment: dict[str, Any], width: float) -> list[tuple]:
    """``(workload, framework, devices, precision, half-width)`` of each speed-up whose interval is too wide.

    A speed-up without an interval (fewer than two paired repeats) counts as
    too wide (half-width NaN).
    """
    from amp_suite.report.normalize import summary_frame

    summary = summary_frame(results, environment)
    wide = []
    for row in summary.itertuples():
        if row.precision == "fp32" or row.status != "ok" or row.speedup != row.speedup:
            continue
        low, high = row.speedup_low, row.speedup_high
        half = (high - low) / 2 / row.speedup if low == low and high == high and row.speedup else float("nan")
        if not half <= width:
            wide.append((row.workload, row.framework, int(row.devices), row.precision, half))
    return wide


def _say_reruns(reruns: dict[str, str]) -> None:
    """A line on standard error for each stored ok result ``--resume`` does not keep, and why it reruns the cell."""
    for key, reason in reruns.items():
        print(f"amp-suite: {key}: {reason}", file=sys.stderr)


def _auto_repeats(plan: SweepPlan, store, environment: dict[str, Any], outcome: SweepOutcome,
                  progress: Callable | None) -> None:
    """Add repeats of the cells whose speed-ups' intervals are too wide, up to the cap; record what happened."""
    from amp_suite.safe_files import write_file_atomically
    from amp_suite.sweep.executors.select import run_cells
    from amp_suite.sweep.fingerprint import kept_results

    request = plan.request
    cap, width = request.auto_repeats, request.auto_width
    repeat = plan.settings.repeats
    wide = wide_speedups(outcome.results, environment, width)
    while wide and repeat < cap:
        groups = {(w, f, d) for w, f, d, _, _ in wide}
        cells = [c for c in plan.repeat_cells(repeat) if (c.run.workload, c.run.label, c.run.devices) in groups]
        print(f"amp-suite: --repeats auto: {len(wide)} speed-up(s) wider than ±{width:.0%}; repeat {repeat} of "
              f"{len(cells)} cells", file=sys.stderr)
        kept, reruns = kept_results(store.latest_by_key(), cells) if request.resume else ({}, {})
        _say_reruns(reruns)
        for result in run_cells(plan.executor, cells, store, inline=request.inline,
                                kept=kept, env=worker_env(plan.host),
                                progress=None if request.quiet else progress, pools=plan.config.pools,
                                environment=environment):
            outcome.results.append(result)
            outcome.ran += result is not kept.get(result.key)  # a repeat --resume kept did not run
        repeat += 1
        wide = wide_speedups(outcome.results, environment, width)
    if wide:
        names = ", ".join(f"{w}/{f}/{p}" + (f" (±{h:.1%})" if h == h else " (no interval)")
                          for w, f, _, p, h in wide)
        text = (f"the cap of {cap} repeats was hit with {len(wide)} speed-up(s) still wider than ±{width:.0%}: "
                f"{names}")
    else:
        text = f"every speed-up's 95% interval is within ±{width:.0%} after at most {repeat} repeats (cap {cap})"
    environment["auto_repeats"] = {"cap": cap, "width": width, "repeats": repeat, "wide": len(wide), "summary": text}
    print(f"amp-suite: --repeats auto: {text}", file=sys.stderr)
    try:
        write_file_atomically(outcome.out_dir / ENVIRONMENT_FILE, json.dumps(environment, indent=2, default=str))
    except OSError:
        pass  # the report still says it
