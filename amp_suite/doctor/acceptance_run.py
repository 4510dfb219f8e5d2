"""Running an acceptance plan: each chosen check's command in a supervised process tree, judged as it ends.

:func:`run_plan` runs the checks a phase chose (``--checks``, ``--budget``), a
command shared by several checks once, and keeps an :class:`AcceptanceRun`
(outcomes, commands, logs) that the report is written from after every check.
"""

from __future__ import annotations

import datetime as _dt
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from amp_suite.doctor.acceptance_records import (
    FAIL,
    LABELS,
    SKIP,
    AcceptanceCheck,
    AcceptancePlan,
    Command,
    CommandResult,
    Verdict,
)
from amp_suite.doctor.phases import BUDGET_SPENT, choose, is_pending

# After the time limit a command gets SIGTERM (amp-suite run then writes its report), then SIGKILL.
TERM_GRACE_S = 30


# What runs one ``amp-suite`` command line for the acceptance (its arguments, a time limit): this process's own
# command in a supervised tree (:func:`run_supervised_command`), or a fake in the tests.  Not a sweep's executor
# (docs/architecture.md's glossary): it runs a command, not a cell.
CommandRunner = Callable[[Sequence[str], float], CommandResult]


def run_supervised_command(args: Sequence[str], timeout_s: float, *, program: Sequence[str]) -> CommandResult:
    """``PROGRAM ARGS`` as a supervised process tree; at the time limit SIGTERM, then the whole tree.

    ``program`` is the command line of ``amp-suite`` itself, which the command
    line hands down (:func:`amp_suite.cli.own_command`): the doctor sits below
    the command line in the layering and does not name it.  The tree (:mod:`amp_suite.processes.tree`) dies with this process, SIGKILL included, so a stopped or
    killed acceptance never leaves a sweep running; a command told to stop first gets SIGTERM, so a sweep
    keeps its finished cells and writes its report.
    """
    from amp_suite.processes import tree as process_tree

    started = time.perf_counter()
    process = process_tree.start([*program, *args], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        out, err = process.communicate(timeout=timeout_s)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGTERM)
        try:
            out, err = process.communicate(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
            out, err = process.communicate()
        code = None
    except BaseException:  # Ctrl-C of the acceptance run: stop what it started
        _signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            _signal_group(process, signal.SIGKILL)
        raise
    return CommandResult(code, out or "", err or "", time.perf_counter() - started)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    """SIGTERM: ask the supervised command to stop (it keeps what it finished); SIGKILL: end its whole tree."""
    from amp_suite.processes import tree as process_tree

    if signum == signal.SIGKILL:
        process_tree.end(process)
    else:
        process_tree.ask_to_stop(process)


@dataclass(frozen=True)
class CheckOutcome:
    check: AcceptanceCheck
    status: str
    observed: str
    result: CommandResult | None = None
    kept: str = ""  # when an earlier phase judged it: that phase's start (--resume)

    def line(self) -> str:
        if self.status == SKIP:
            return f"[SKIP] {self.check.name} — {self.observed}"
        kept = f" (kept from the phase of {self.kept})" if self.kept else ""
        return (f"[{LABELS[self.status]}] {self.check.name} — expected {self.check.expected}; "
                f"saw {self.observed}{kept}")

    @property
    def pending(self) -> bool:
        """Not judged yet: not asked for, or over the budget; a later --resume runs it."""
        return self.status == SKIP and is_pending(self.observed)


@dataclass(frozen=True)
class CommandRecord:
    """One command a phase ran: what the report's command table shows, kept across --resume."""

    display: str
    outcome: str
    seconds: float
    log: str = ""
    phase: str = ""


@dataclass
class AcceptanceRun:
    """A plan's outcomes so far, in plan order, and the commands run (this phase's and earlier ones')."""

    plan: AcceptancePlan
    outcomes: list[CheckOutcome] = field(default_factory=list)
    commands: list[CommandRecord] = field(default_factory=list)
    started: str = ""
    budget_s: float | None = None
    running: str = ""  # the check whose command runs now (written into the report before it starts)
    interrupted: str = ""  # why the phase stopped early (a signal), "" when it ran to its end
    phases: list[str] = field(default_factory=list)  # one line per phase, the earliest first
    calibration_output: str = ""  # an earlier phase's calibrate stdout (--resume)

    @property
    def failed(self) -> bool:
        return any(o.status == FAIL for o in self.outcomes)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    @property
    def pending(self) -> list[CheckOutcome]:
        return [o for o in self.outcomes if o.pending]


def run_plan(plan: AcceptancePlan, *, run_command: CommandRunner,
             emit: Callable[[str], None] = print,
             progress: Callable[[str], None] | None = None,
             asked: Sequence[str] = (), budget_s: float | None = None,
             kept: dict[str, CheckOutcome] | None = None, run: AcceptanceRun | None = None,
             on_change: Callable[[AcceptanceRun], None] | None = None,
             clock: Callable[[], float] = time.monotonic) -> AcceptanceRun:
    """Run the checks of ``plan`` this phase chose, in order (a command shared by several checks runs once);
    ``emit`` each check's line as it is judged.

    ``asked`` (keys) and ``budget_s`` choose what runs (:func:`amp_suite.doctor.phases.choose`);
    ``kept`` holds the outcomes an earlier phase judged (``--resume``), shown as they were.  Before
    each command the clock is read again: a command whose estimate no longer half fits what is left is
    skipped as pending, and a command runs under the smaller of its own limit and what is left, so the
    phase ends within its budget.  ``on_change`` is called before each command and after each check, so
    a report written there always holds every finished check, even when this process is killed.
    """
    kept = dict(kept or {})
    run = run or AcceptanceRun(plan, started=now(), budget_s=budget_s)
    choices = {c.key: c for c in choose(plan.checks, asked=set(asked), budget_s=budget_s, finished=set(kept))}
    started = clock()
    done: dict[tuple[str, ...], CommandResult] = {}
    logs = plan.workdir / "logs"
    def run_logged(command: Command, name: str, left: float | None) -> CommandResult:
        """The command, under the smaller of its own limit and what is left of the budget; logged."""
        limit = command.timeout_s if left is None else min(command.timeout_s, max(left, 1.0))
        shown = Command(_resumable(command), limit)
        for path, text in command.files:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
        if progress:
            progress(f"running {shown.display()} (time limit {limit:.0f} s)")
        run.running = name
        _changed(on_change, run)
        result = run_command(list(shown.args), limit)
        run.running = ""
        log = _save_log(logs, len(run.commands) + 1, shown, result)
        run.commands.append(CommandRecord(shown.display(), result.describe(), result.seconds,
                                          str(log) if log else "", run.started))
        return result

    for check in plan.checks:
        choice = choices[check.key]
        if check.skipped:
            outcome = CheckOutcome(check, SKIP, check.skip_reason)
        elif not choice.run:
            outcome = kept[check.key] if check.key in kept and not choice.reason else \
                CheckOutcome(check, SKIP, choice.reason)
        else:
            command = check.command
            result = done.get(command.args)
            left = None if budget_s is None else budget_s - (clock() - started)
            if result is None and left is not None and left < 0.5 * check.estimate_s:
                outcome = CheckOutcome(check, SKIP, f"{BUDGET_SPENT}: about {check.estimate_s:.0f} s needed, "
                                                    f"{max(left, 0):.0f} s left; --resume runs it")
            else:
                if result is None:
                    result = done[command.args] = run_logged(command, check.name, left)
                outcome = _judged(check, result, stopped_by_budget=budget_s is not None)
        run.outcomes.append(outcome)
        emit(outcome.line())
        _changed(on_change, run)
    return run


def _judged(check: AcceptanceCheck, result: CommandResult, *, stopped_by_budget: bool) -> CheckOutcome:
    """A check's outcome from its command's result; a command the budget stopped is pending, not judged."""
    command = check.command
    if result.timed_out and stopped_by_budget and command.timeout_s > result.seconds + 1:
        return CheckOutcome(check, SKIP, f"{BUDGET_SPENT} while it ran (stopped after {result.seconds:.0f} s); "
                                         "--resume runs it" + (", keeping the cells it finished" if command.out_dir
                                                               else ""), result)
    try:
        verdict = check.judge(result, command)
    except Exception as exc:  # a judge's bug must not hide the other checks
        verdict = Verdict(FAIL, f"could not judge the output: {type(exc).__name__}: {exc}")
    return CheckOutcome(check, verdict.status, verdict.observed, result)


def _changed(on_change: Callable[[AcceptanceRun], None] | None, run: AcceptanceRun) -> None:
    if on_change is not None:
        on_change(run)


def _resumable(command: Command) -> tuple[str, ...]:
    """A sweep whose folder already holds results (an earlier phase stopped it) continues with --resume."""
    if command.out_dir and command.args[0] == "run" and "--resume" not in command.args \
            and (Path(command.out_dir) / "results.jsonl").is_file():
        return (*command.args, "--resume")
    return command.args


def _save_log(logs: Path, number: int, command: Command, result: CommandResult) -> Path | None:
    path = logs / f"{number:02d}-{command.args[0]}.log"
    while path.exists():  # an earlier phase's log keeps its name
        number += 1
        path = logs / f"{number:02d}-{command.args[0]}.log"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        path.write_text(f"$ {command.display()}\n# {result.describe()} after {result.seconds:.1f} s\n"
                        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}\n", encoding="utf-8")
    except OSError:
        return None
    return path


def now() -> str:
    """The time now, in UTC, as the report and the state file write it."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
