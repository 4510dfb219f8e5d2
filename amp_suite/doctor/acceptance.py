"""``amp-suite doctor --acceptance``: the whole GPU checklist as one command.

A maintainer who is lent a GPU for an afternoon wants one command that walks
every path a GPU user relies on, in the order they would check it by hand, and
leaves a report to paste into an issue.  This module is the command: it looks
at the machine (:func:`detect_machine`: ``nvidia-smi`` through
:func:`amp_suite.machine.devices.detect_nvidia`, and where each framework
runs), then plans, runs and reports (:func:`run_acceptance`), keeping the
report and its state file current for ``--resume``.  The rooms it calls:

- :mod:`.acceptance_records`: the typed pieces (a command, its result, a
  verdict, a check, the machine, the plan) and the sweeps the checklist runs;
- :mod:`.acceptance_plan`: which checks this machine can run (:func:`build_plan`);
- :mod:`.acceptance_output` and :mod:`.acceptance_checks`: reading what a
  command printed or wrote, and the judges, pure functions of it (so the GPU
  verdicts are tested on any machine by handing them what a GPU run prints);
- :mod:`.acceptance_run`: each command in a supervised process tree
  (the ``amp-suite`` command line the CLI hands down) with its own time limit
  (:func:`run_plan`);
- :mod:`.acceptance_report`: the markdown report (:func:`render_report`).

No framework is imported in this process.  Several checks may share one
command (the doctor answers the first three); it runs once.
"""

from __future__ import annotations

import datetime as _dt
import shlex
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from amp_suite.doctor.acceptance_plan import build_plan
from amp_suite.doctor.acceptance_records import FAIL, PASS, SKIP, Machine
from amp_suite.doctor.acceptance_report import REPORT_FIRST_WORDS, calibration_output, render_report
from amp_suite.doctor.acceptance_run import (
    AcceptanceRun,
    CheckOutcome,
    CommandRecord,
    CommandRunner,
    now,
    run_plan,
)
from amp_suite.envs.placement import describe_placement
from amp_suite.machine.devices import NvidiaInventory, detect_nvidia

BUILT_IN_FRAMEWORKS = ("torch", "keras", "jax")
DEFAULT_REPORT = "amp-suite-acceptance.md"


def detect_machine(frameworks: dict[str, Any], requested: Sequence[str], *, device: str = "auto") -> Machine:
    """The machine as the plan sees it; ``frameworks`` maps names to :class:`FrameworkInfo`.

    Reads ``nvidia-smi`` (never with ``--device cpu``) and looks for each
    framework's modules without importing them.
    """
    inventory = detect_nvidia() if device != "cpu" else NvidiaInventory(reason="not asked: --device cpu")
    kind = "gpu" if device == "gpu" or (device == "auto" and inventory.present) else "cpu"
    placements = _placements([n for n in requested if n in frameworks], frameworks, kind)
    installed, missing, where = [], {}, {}
    for name in requested:
        info = frameworks.get(name)
        placement = placements.get(name)
        if info is None:
            missing[name] = "no plugin provides it"
        elif placement is not None and placement.environment:
            where[name] = describe_placement(placement)
            if placement.problem:
                missing[name] = placement.problem
            else:
                installed.append(name)
        elif info.missing_modules():
            missing[name] = info.install_hint()
        else:
            installed.append(name)
            if placement is not None:
                where[name] = describe_placement(placement)
    return Machine(inventory, tuple(installed), missing, where)


def _placements(names: Sequence[str], frameworks: dict[str, Any], kind: str) -> dict[str, Any]:
    """Where the acceptance's sweeps (which read the packaged catalog alone) run each framework."""
    from amp_suite.config.catalog import load_config
    from amp_suite.envs.placement import place_for_checks
    from amp_suite.errors import UsageError

    try:
        return place_for_checks(names, load_config(None).environments, list(frameworks), None, kind)
    except UsageError:
        return {}


def default_frameworks(known: Sequence[str]) -> tuple[str, ...]:
    """The built-in frameworks a plugin provides, in the doctor's order."""
    return tuple(f for f in BUILT_IN_FRAMEWORKS if f in known)


def run_acceptance(*, device: str, frameworks: Sequence[str] | None, known: dict[str, Any],
                   run_command: CommandRunner, report: str | None = None, plugins: Sequence[str] = (),
                   emit: Callable[[str], None] = print, progress: Callable[[str], None] | None = None,
                   workdir: Path | None = None, command_line: str | None = None,
                   checks: Sequence[str] = (), budget_s: float | None = None, resume: bool = False, force: bool = False) -> int:
    """``amp-suite doctor --acceptance``: plan, run, print, write the report; the exit code (1 when a check failed).

    ``checks`` (keys or numbers) and ``budget_s`` make this run one phase; ``resume`` continues the phase
    the report's state file recorded, keeping what it judged.  The report and its state are written
    before each command and after each check, and once more when a signal stops the phase.  An existing
    report file is replaced only when an acceptance run wrote it, or with ``force``.
    """
    from amp_suite.doctor.acceptance_state import (
        AcceptanceState,
        StoredOutcome,
        check_state_replaceable,
        load_state,
        state_path,
    )
    from amp_suite.doctor.phases import select
    from amp_suite.errors import UsageError
    from amp_suite.owned_paths import check_replaceable
    from amp_suite.safe_files import write_file_atomically

    report_path = Path(report or DEFAULT_REPORT)
    if report_path.exists() and not report_path.is_file():
        raise UsageError(f"--report {report_path} exists and is not a regular file")
    check_replaceable(report_path, command="amp-suite doctor --acceptance", first_line=REPORT_FIRST_WORDS,
                      force=force)
    state_file = state_path(report_path)
    previous = load_state(state_file) if resume else None  # --resume: read (and so checked) as a state
    if previous is None:
        check_state_replaceable(state_file, force=force)
    requested = tuple(frameworks) if frameworks else default_frameworks(list(known))
    if previous is not None:
        if frameworks and list(requested) != previous.frameworks:
            raise UsageError(f"--resume: the report {report_path} checked --frameworks "
                             f"{','.join(previous.frameworks)}, not {','.join(requested)}; give the same or none")
        if device != "auto" and device != previous.device:
            raise UsageError(f"--resume: the report {report_path} was made with --device {previous.device}, "
                             f"not {device}")
        requested, device = tuple(previous.frameworks), previous.device
        workdir = Path(previous.workdir)
    if workdir is None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        workdir = report_path.parent / f"{report_path.stem}-runs" / stamp
    machine = detect_machine(known, requested, device=device)
    plan = build_plan(machine, requested, Path(workdir).resolve(), device=device, plugins=plugins)
    asked = select([c.key for c in plan.checks], checks) if checks else set()
    by_key = {c.key: c for c in plan.checks}
    kept: dict[str, CheckOutcome] = {}
    run = AcceptanceRun(plan, started=now(), budget_s=budget_s)
    if previous is not None:
        kept = {key: CheckOutcome(by_key[key], item.status, item.observed, kept=item.phase)
                for key, item in previous.outcomes.items() if key in by_key}
        run.commands = [CommandRecord(str(c.get("display", "")), str(c.get("outcome", "")),
                                      float(c.get("seconds") or 0), str(c.get("log", "")), str(c.get("phase", "")))
                        for c in previous.commands]
        run.phases = list(previous.phases)
        run.calibration_output = previous.calibration_output
    words = ", ".join(sorted(asked, key=list(by_key).index)) if asked else "all checks"
    run.phases.append(f"phase started {run.started}: {words}"
                      + (f", budget {budget_s:g} s" if budget_s is not None else ", no budget")
                      + (" (--resume)" if previous is not None else ""))
    if command_line is None:
        words_ = ["amp-suite", "doctor", "--acceptance", "--device", device, "--frameworks", ",".join(requested),
                  *(a for p in plugins for a in ("-p", p)), *(("--report", report) if report else ())]
        command_line = shlex.join(words_)

    def save(current: AcceptanceRun) -> None:
        state = AcceptanceState(plan.mode, device, list(requested), str(plan.workdir), list(current.phases))
        for outcome in current.outcomes:
            if outcome.status in (PASS, FAIL):
                state.outcomes[outcome.check.key] = StoredOutcome(outcome.check.key, outcome.status,
                                                                  outcome.observed, outcome.kept or current.started)
        state.commands = [{"display": c.display, "outcome": c.outcome, "seconds": round(c.seconds, 1),
                           "log": c.log, "phase": c.phase} for c in current.commands]
        state.calibration_output = calibration_output(current)
        try:
            report_path.parent.mkdir(parents=True, exist_ok=True)
            write_file_atomically(report_path, render_report(current, command_line=command_line))
            write_file_atomically(state_file, state.to_json())
        except OSError as exc:
            raise UsageError(f"cannot write the report {report_path}: {exc.strerror or exc}") from None

    say = progress or (lambda text: None)
    say(f"{plan.mode.upper()} mode: {len(plan.checks)} checks, {sum(c.skipped for c in plan.checks)} skipped "
        f"on this machine" + (f", {len(kept)} kept from earlier phases" if kept else "")
        + (f", budget {budget_s:g} s" if budget_s is not None else "") + f"; files under {plan.workdir}")
    try:
        run_plan(plan, run_command=run_command, emit=emit, progress=progress, asked=tuple(asked), budget_s=budget_s,
                 kept=kept, run=run, on_change=save)
    except KeyboardInterrupt as exc:
        signum = getattr(exc, "signum", signal.SIGINT)
        run.interrupted = f"{signal.Signals(signum).name} while {run.running or 'between checks'}"
        run.running = ""
        save(run)
        emit(f"interrupted; report of the finished checks: {report_path} (--resume continues)")
        raise
    save(run)
    counts = {s: sum(o.status == s for o in run.outcomes) for s in (PASS, FAIL, SKIP)}
    left = len(run.pending)
    emit(f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
         + (f" ({left} still to run: --resume)" if left else "") + f"; report: {report_path}")
    return run.exit_code
