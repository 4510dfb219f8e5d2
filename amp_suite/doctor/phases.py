"""Which acceptance checks run now: the checks asked for, the time budget, and what an earlier run finished.

A GPU machine is lent for minutes, each command for at most ten, so the
acceptance runs in phases: ``--checks`` names the checks to run (by key or
number), ``--budget`` gives the seconds this phase may take, and ``--resume``
continues a report an earlier phase left.  This module decides, before
anything runs, what fits: it walks the plan in its order (the most
informative check first), counts each command's estimated seconds once (the
doctor answers three checks), and skips, with the reason, a check that does
not fit or was not asked for.  :mod:`amp_suite.doctor.acceptance_run` runs what
it chose and re-checks the clock before each command.

Nothing here runs a command or imports a framework.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from amp_suite.errors import UsageError
from amp_suite.schema import comma_separated

# Skip reasons that leave a check pending: a later ``--resume`` runs it.
NOT_ASKED = "not asked for (--checks)"
OVER_BUDGET = "does not fit the budget"
BUDGET_SPENT = "the budget ran out"


class PlannedCheck(Protocol):
    """What the planner reads of a check (:class:`amp_suite.doctor.acceptance_records.AcceptanceCheck`)."""

    @property
    def key(self) -> str: ...

    @property
    def estimate_s(self) -> float: ...

    @property
    def skipped(self) -> bool: ...

    @property
    def command(self) -> object: ...


@dataclass(frozen=True)
class Choice:
    """One check's place in this phase: ``run`` it, or not, with the ``reason`` ("" when it runs).

    ``pending`` is true when a later ``--resume`` should run it (it was not asked
    for, or did not fit the budget), false for a check already finished or one
    this machine cannot run.
    """

    key: str
    run: bool
    reason: str = ""
    pending: bool = False


def parse_checks(text: str | None) -> tuple[str, ...]:
    """``--checks devices,3,sweep-torch`` as its words; ``None`` or blank is every check."""
    if text is None:
        return ()
    words = comma_separated(text, "--checks")
    if not words:
        raise UsageError(f"--checks {text!r} names no check; give keys or numbers, comma-separated")
    return words


def select(keys: Sequence[str], asked: Sequence[str]) -> set[str]:
    """The keys ``asked`` names, each a key, a number (1-based, in plan order) or a prefix ending a word
    (``sweep`` names every ``sweep-...``); an unknown word is a one-line error naming what is allowed."""
    chosen: set[str] = set()
    for word in asked:
        if word.isdigit():
            number = int(word)
            if not 1 <= number <= len(keys):
                raise UsageError(f"--checks: no check number {number}; allowed: 1 to {len(keys)} "
                                 f"({', '.join(f'{i} {k}' for i, k in enumerate(keys, 1))})")
            chosen.add(keys[number - 1])
            continue
        found = {k for k in keys if k == word or k.startswith(word + "-")}
        if not found:
            raise UsageError(f"--checks: unknown check {word!r}; allowed: {', '.join(keys)} "
                             f"or their numbers 1 to {len(keys)}")
        chosen |= found
    return chosen


def choose(checks: Sequence[PlannedCheck], *, asked: Collection[str] = (), budget_s: float | None = None,
           finished: Collection[str] = ()) -> list[Choice]:
    """One :class:`Choice` per check, in plan order.

    ``asked``: the keys to run (empty: all; a check sharing its command with one asked for runs too);
    ``finished``: keys an earlier phase
    judged (kept, not run again unless asked for by name); ``budget_s``: the
    seconds this phase may take (``None``: no limit).  A command shared by
    several checks is counted once.
    """
    if budget_s is not None and budget_s <= 0:
        raise UsageError(f"--budget must be a number of seconds above 0, got {budget_s:g}")
    choices: list[Choice] = []
    planned: set[object] = set()
    spent = 0.0
    # a check that shares its command with one asked for is judged too: its answer costs nothing more
    asked = {c.key for c in checks if c.key in asked or c.command in {a.command for a in checks if a.key in asked}}
    for check in checks:
        if check.skipped:
            choices.append(Choice(check.key, False))
            continue
        if asked and check.key not in asked:
            done = check.key in finished
            choices.append(Choice(check.key, False, "" if done else NOT_ASKED, pending=not done))
            continue
        if not asked and check.key in finished:
            choices.append(Choice(check.key, False))
            continue
        cost = 0.0 if check.command in planned else check.estimate_s
        if budget_s is not None and spent + cost > budget_s:
            choices.append(Choice(check.key, False, over_budget(cost, budget_s - spent, budget_s), pending=True))
            continue
        spent += cost
        planned.add(check.command)
        choices.append(Choice(check.key, True))
    return choices


def over_budget(needed_s: float, left_s: float, budget_s: float) -> str:
    """The skip reason of a check that does not fit."""
    return (f"{OVER_BUDGET}: about {needed_s:.0f} s needed, {max(left_s, 0):.0f} s of {budget_s:.0f} s left; "
            "--resume runs it")


def is_pending(reason: str) -> bool:
    """Whether a stored skip reason leaves the check for a later ``--resume``."""
    return reason.startswith((NOT_ASKED, OVER_BUDGET, BUDGET_SPENT))
