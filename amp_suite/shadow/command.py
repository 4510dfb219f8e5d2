"""``amp-suite numerics``: trace every planned run in a process of its own, compare, write the report.

Each run is a fresh interpreter under the process supervisor
(:mod:`amp_suite.processes.tree`) with the run's time limit, its output in
``OUT/logs/KEY.log``; it writes its traces to ``OUT/traces/KEY.npz`` and how
it ended to ``OUT/traces/KEY.json``.  A run that fails, hangs or crashes is a
:class:`~amp_suite.numerics.records.NumericsRun` with that status: the others
go on, and their comparisons are written.  Then every traced run is set
beside each shadow of its framework and workload
(:func:`amp_suite.numerics.compare.compare_steps`) and
:mod:`amp_suite.shadow.report` writes the files.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from amp_suite.config.catalog import check_framework_tables, find_config, load_config
from amp_suite.config.precision_options import check_precision_options
from amp_suite.errors import UsageError, one_line
from amp_suite.host_watch import HOST_PID_ENV
from amp_suite.launchers.single import worker_import_path
from amp_suite.numerics.compare import compare_steps
from amp_suite.numerics.records import BisectOutcome, LayerNumerics, NumericsRun, StepTrace
from amp_suite.owned_paths import FORCE_FLAG, read_private_file
from amp_suite.processes import tree as process_tree
from amp_suite.safe_files import (
    UnsafeFileError,
    check_real_directory,
    check_regular_or_absent,
    open_for_writing,
    read_regular,
    write_file_atomically,
)
from amp_suite.shadow.bisect import bisect, check_bisect
from amp_suite.shadow.plan import SHADOWS, NumericsRequest, PlannedRun, check_request, has_fp64, plan_runs
from amp_suite.shadow.report import LAYERS_FILE, MARKDOWN_FILE, RECORD_PREFIX, REPORT_FILES, write_report
from amp_suite.shadow.traces import TRACE_SUFFIXES, TRACES_DIR, load_traces
from amp_suite.shadow.worker import BOOTSTRAP, run_to_dict, trace_run
from amp_suite.sweep.output_dir import output_path
from amp_suite.sweep.resolve import absent_plugins, make_host, worker_env, worker_plugin_modules
from amp_suite.sweep.runner import gpu_numbering, one_gpu_visible

LOGS_DIR = "logs"
# Lines of a failed run's log kept in its record.
LOG_TAIL_LINES = 8


@dataclass
class NumericsOutcome:
    """What the command did: every run, every compared layer, the files written."""

    out_dir: Path
    runs: list[NumericsRun]
    layers: list[LayerNumerics]
    written: list[Path]
    search: BisectOutcome | None = None
    # A sentence per requested run the report could not set beside its shadow, and why (comparison_gaps).
    gaps: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every run traced; 1 when any did not (the rest is still compared and written)."""
        return 0 if all(run.status == "ok" for run in self.runs) else 1


def prepare_out(text: str | Path, *, force: bool = False, planned: list[PlannedRun] | None = None) -> Path:
    """The output directory, checked and created: empty, new, or one this command wrote before (``force`` to
    replace what an earlier run there wrote).

    Refused, each in one line before any run starts and before anything is created: what
    :func:`~amp_suite.sweep.output_dir.output_path` refuses (``/``, the home directory, a broken link, a file,
    ...); a directory holding other things; an earlier run's results without ``force``; and a link or special
    file where this command writes (its reports, ``logs/``, ``traces/``, the files of the ``planned`` runs),
    which it never follows.
    """
    directory = output_path(text)
    try:
        if directory.is_dir():
            _refuse_foreign_or_earlier(directory, force)
        for folder in (LOGS_DIR, TRACES_DIR):
            check_real_directory(directory / folder)
        for name in REPORT_FILES:
            check_regular_or_absent(directory / name)
        check_run_paths(directory, planned or [])
        for made in (directory, directory / LOGS_DIR, directory / TRACES_DIR):
            made.mkdir(parents=True, exist_ok=True)
    except UnsafeFileError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot create output directory {str(directory)!r}: {exc.strerror or one_line(exc)}") \
            from None
    return directory


def _refuse_foreign_or_earlier(directory: Path, force: bool) -> None:
    """A one-line :class:`UsageError` for a directory holding something this command did not write, or an
    earlier run's results (without ``force``).

    Ours means ``numerics.jsonl`` is a regular file (not a link) whose first line is one of this command's
    records; nothing else in the directory makes it ours.
    """
    if not any(directory.iterdir()):
        return
    head = read_private_file(directory, LAYERS_FILE, 4096)
    # an empty file is what a run stopped before its first traced run writes: its own, holding nothing
    if head is None or not (head.startswith(RECORD_PREFIX) or not head.strip()):
        raise UsageError(f"{str(directory)!r} is neither empty nor an output of amp-suite numerics (no "
                         f"{LAYERS_FILE} it wrote); choose another --out")
    if not force:
        raise UsageError(f"{str(directory)!r} holds the results of an earlier amp-suite numerics ({LAYERS_FILE}); "
                         f"they are kept: choose another --out, or pass {FORCE_FLAG} to replace them")


def check_run_paths(out_dir: Path, planned: list[PlannedRun]) -> None:
    """A one-line :class:`UsageError` when a file a planned run writes (its log, traces, outcome, request) is a
    link or a special file."""
    try:
        for plan in planned:
            check_regular_or_absent(out_dir / LOGS_DIR / f"{plan.key}.log")
            for suffix in TRACE_SUFFIXES:
                check_regular_or_absent(out_dir / TRACES_DIR / f"{plan.key}{suffix}")
    except UnsafeFileError as exc:
        raise UsageError(str(exc)) from None


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])


def run_in_process(planned: PlannedRun, out_dir: Path, env: dict[str, str]) -> NumericsRun:
    """Trace ``planned`` in a fresh interpreter; every outcome (a crash, a time limit) becomes a record."""
    traces, outcome = out_dir / TRACES_DIR / f"{planned.key}.npz", out_dir / TRACES_DIR / f"{planned.key}.json"
    request_path = out_dir / TRACES_DIR / f"{planned.key}.request.json"
    log_path = out_dir / LOGS_DIR / f"{planned.key}.log"
    for stale in (traces, outcome):
        stale.unlink(missing_ok=True)
    run = planned.run
    child_env = {**os.environ, **env, "AMP_SUITE_WORKER_PATH": os.pathsep.join(worker_import_path(run.plugin_modules)),
                 HOST_PID_ENV: str(os.getpid())}
    child_env.update(one_gpu_visible(run, child_env))
    child_env.update(gpu_numbering(run))
    failed = NumericsRun(run.framework, run.workload, run.precision, "failed", log=str(log_path))
    try:
        write_file_atomically(request_path, json.dumps({"run": asdict(planned.run),
                                                        "workload": asdict(planned.workload),
                                                        "traces": str(traces), "outcome": str(outcome)}))
        with open_for_writing(log_path) as log:
            proc = process_tree.start([sys.executable, "-c", BOOTSTRAP, "amp_suite.shadow.worker", str(request_path)],
                                      stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=child_env)
            try:
                proc.wait(timeout=run.timeout_s)
            except subprocess.TimeoutExpired:
                process_tree.end(proc)
                return replace(failed, status="timeout", error=f"no traces after {run.timeout_s:g} s; process killed")
            except BaseException:
                process_tree.end(proc)
                raise
    finally:  # the worker's order serves one run: gone however the run ends (a stop, a time limit, a crash)
        with contextlib.suppress(OSError):  # never in place of the error or stop that ended the run
            request_path.unlink(missing_ok=True)
    try:
        record = json.loads(read_regular(outcome))
    except (OSError, ValueError):
        tail = _log_tail(log_path).splitlines()
        return replace(failed, error=f"the process exited with code {proc.returncode} and no outcome"
                       + (f": {tail[-1][:300]}" if tail else ""))
    return NumericsRun(**{**record, "losses": tuple(record["losses"]), "loss_scales": tuple(record["loss_scales"]),
                          "layers": tuple(record["layers"]), "log": str(log_path)})


def run_inline(planned: PlannedRun, out_dir: Path) -> NumericsRun:
    """Trace ``planned`` in this process (``--inline``)."""
    outcome = trace_run(planned.run, planned.workload, out_dir / TRACES_DIR / f"{planned.key}.npz")
    write_file_atomically(out_dir / TRACES_DIR / f"{planned.key}.json", json.dumps(run_to_dict(outcome)))
    return outcome


def compare_runs(planned: list[PlannedRun], runs: list[NumericsRun], out_dir: Path,
                 problems: dict[tuple[str, ...], str] | None = None) -> list[LayerNumerics]:
    """Every traced run beside every shadow of its framework and workload that traced (not itself, and a
    float64 shadow only beside the float32 one and the AMP runs).

    What could not be compared is printed, and kept in ``problems`` where given: under (framework, workload,
    precision) for traces that cannot be read, under (framework, workload, precision, shadow) for a run that
    cannot be set beside that shadow."""
    problems = {} if problems is None else problems
    traces: dict[tuple[str, str, str], list[StepTrace]] = {}
    for plan, run in zip(planned, runs, strict=False):
        if run.status == "ok":
            try:
                traces[(run.framework, run.workload, run.precision)] = load_traces(out_dir / TRACES_DIR
                                                                                  / f"{plan.key}.npz")
            except (OSError, ValueError, KeyError) as exc:  # a traces file that cannot be read: say so, go on
                print(f"amp-suite numerics: cannot read the traces of {plan.key}: {one_line(exc)}", file=sys.stderr)
                problems[(run.framework, run.workload, run.precision)] = \
                    f"the traces of the {run.precision} run cannot be read ({one_line(exc)})"
    rows: list[LayerNumerics] = []
    for (framework, workload, precision), steps in traces.items():
        for shadow in SHADOWS:
            if shadow == precision or (precision in SHADOWS and SHADOWS.index(precision) > SHADOWS.index(shadow)):
                continue
            shadow_steps = traces.get((framework, workload, shadow))
            if shadow_steps is None:
                continue
            try:
                for step, (mine, theirs) in enumerate(zip(steps, shadow_steps, strict=False)):
                    rows += compare_steps(mine, theirs, framework=framework, workload=workload,
                                          precision=precision, shadow_precision=shadow, step=step)
            except ValueError as exc:  # the plugin traced different names in two precisions: say so, go on
                print(f"amp-suite numerics: {framework}/{workload}/{precision} cannot be set beside its {shadow} "
                      f"shadow: {one_line(exc)}", file=sys.stderr)
                problems[(framework, workload, precision, shadow)] = \
                    f"it cannot be set beside the {shadow} shadow ({one_line(exc)})"
    return rows


def comparison_gaps(precisions: tuple[str, ...], planned: list[PlannedRun], runs: list[NumericsRun],
                    layers: list[LayerNumerics], problems: dict[tuple[str, ...], str]) -> list[str]:
    """A sentence for each requested run (framework, workload and one of ``precisions``) that has no rows beside
    its first shadow (``fp32``; ``fp64`` for ``fp32`` itself), and why: a run that did not finish or did not
    run (a stop), traces that cannot be read or set beside each other, or no shadow to set it beside."""
    ran = {(run.framework, run.workload, run.precision): run for run in runs}
    compared: dict[tuple[str, str, str], set[str]] = {}
    for row in layers:
        compared.setdefault((row.framework, row.workload, row.precision), set()).add(row.shadow)
    keys = {(plan.run.framework, plan.run.workload, plan.run.precision) for plan in planned}

    def not_traced(key: tuple[str, str, str], label: str) -> str | None:
        run = ran.get(key)
        if run is None:
            return f"{label} did not finish (the command was stopped before its end)"
        return None if run.status == "ok" else f"{label} did not finish ({run.status})"

    gaps = []
    for plan in planned:
        framework, workload, precision = key = (plan.run.framework, plan.run.workload, plan.run.precision)
        if precision not in precisions:
            continue
        later = SHADOWS[SHADOWS.index(precision) + 1:] if precision in SHADOWS else SHADOWS
        shadow = next((name for name in later if (framework, workload, name) in keys), None)
        where = f"{framework} / {workload} / {precision}"
        if shadow is None:
            gaps.append(f"Nothing compared for {where}: there is no more exact shadow to set it beside.")
            continue
        if shadow in compared.get(key, set()):
            continue
        reasons = [reason for reason in (not_traced(key, f"the {precision} run"),
                                         not_traced((framework, workload, shadow), f"the {shadow} shadow run"))
                   if reason]
        if not reasons:
            reasons = [problems.get(key) or problems.get((framework, workload, shadow)) or problems.get((*key, shadow))
                       or f"its traces could not be set beside the {shadow} shadow's"]
        others = sorted(compared.get(key, set()))
        start = (f"Not compared with the {shadow} shadow for {where} (only with {', '.join(others)})" if others
                 else f"Nothing compared for {where}")
        gaps.append(f"{start}: {'; '.join(reasons)}.")
    return gaps


def numerics(request: NumericsRequest) -> NumericsOutcome:
    """Check ``request``, trace every run, compare and write the report; see the module's docstring.

    Raises :class:`UsageError` for bad input, before any process starts.
    """
    config = load_config(find_config(request.config))
    host = make_host(request.plugins)
    frameworks = host.frameworks()
    check_request(request, config, frameworks)
    check_bisect(request)
    # The [frameworks.NAME] tables (loss_scaling, keep_fp32 ...) checked as amp-suite run checks them.
    config = check_framework_tables(config, frameworks, absent=absent_plugins(host))
    check_precision_options(config.framework_options, request.frameworks, request.precisions,
                            {name: config.workloads[name] for name in request.workloads})
    # every check of the request (the dataset against each workload among them) before the output is created
    planned = plan_runs(request, config, frameworks, worker_plugin_modules(host, request.plugins))
    # an earlier run's results (replaced with --force) stay until this run finishes one of its own
    earlier = read_private_file(output_path(request.out), LAYERS_FILE, 1) is not None
    out_dir = prepare_out(request.out, force=request.force, planned=planned)
    env = worker_env(host)
    runs: list[NumericsRun] = []
    try:
        for index, plan in enumerate(planned, start=1):
            label = f"{plan.run.framework}/{plan.run.workload}/{plan.run.precision}"
            print(f"amp-suite numerics: [{index}/{len(planned)}] {label} ...", file=sys.stderr, flush=True)
            run = run_inline(plan, out_dir) if request.inline else run_in_process(plan, out_dir, env)
            if plan.run.precision == "fp32" and not has_fp64(frameworks[plan.run.framework]):
                run = replace(run, note=f"no float64 shadow: {frameworks[plan.run.framework].display_name} "
                                        "declares no fp64 precision")
            runs.append(run)
            if run.status != "ok":
                print(f"amp-suite numerics: {label}: {run.status}: {run.error}", file=sys.stderr)
    except KeyboardInterrupt:  # stopped: the runs that finished are compared and written, then the stop goes on
        if earlier and not runs:  # a report of nothing never replaces the earlier run's
            print(f"amp-suite numerics: no run finished: the earlier {LAYERS_FILE} and {MARKDOWN_FILE} in "
                  f"{str(out_dir)[:300]!r} are kept as they were", file=sys.stderr)
            raise
        problems: dict[tuple[str, ...], str] = {}
        layers = compare_runs(planned, runs, out_dir, problems)
        write_report(out_dir, runs, layers, planned=len(planned),
                     gaps=comparison_gaps(request.precisions, planned, runs, layers, problems))
        raise
    problems = {}
    layers = compare_runs(planned, runs, out_dir, problems)
    gaps = comparison_gaps(request.precisions, planned, runs, layers, problems)
    search = None
    if request.bisect:
        write_report(out_dir, runs, layers, gaps=gaps)  # what is traced so far stays written while the search runs
        search = bisect(request, planned, runs, out_dir,
                        lambda plan: run_inline(plan, out_dir) if request.inline
                        else run_in_process(plan, out_dir, env))
    written = write_report(out_dir, runs, layers, search, gaps=gaps)
    return NumericsOutcome(out_dir, runs, layers, written, search, gaps)
