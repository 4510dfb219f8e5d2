"""The verdict: the answer of a sweep in a few lines, before any table.

One :class:`VerdictLine` per framework and AMP precision (and per workload,
device kind, device count, mode and batch size where the sweep has several):
the speed-up over fp32 with its 95% interval and trust marks, the peak-memory
ratio, the accuracy change in points.  Then one :class:`FrameworkVerdict` per
framework: a sentence naming the best precision on this machine and why a
figure is not to be trusted where it is not.

Everything here is read from the summary and per-cell frames the report
already computes (:func:`amp_suite.report.normalize.summary_frame` and
:func:`~amp_suite.report.normalize.results_frame`); the terminal, ``report.md``
and ``report.html`` render the same :class:`Verdict`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from amp_suite.precision import BASELINE
from amp_suite.report.intervals import Interval, format_ratio
from amp_suite.report.marks import (
    EMULATED_MARK,
    FLAG_MARK,
    NO_DIFFERENCE_MARK,
    NOISIER_MARK,
    SINGLE_RUN_MARK,
    TOO_WIDE_MARK,
    interval_mark,
)
from amp_suite.report.seeds import accuracy_verdict_text
from amp_suite.report.text import one_line_text

if TYPE_CHECKING:
    import pandas as pd

# An accuracy drop of more than this many points is named in the framework's sentence.
ACCURACY_CAUTION_PT = 1.0
# Longest reason quoted from a measurement flag.
REASON_CHARS = 80
# Where the next flag starts in the per-cell frame's "; "-joined flags: "; " before words and a colon ("machine
# busy: ..."), not a "; " inside one flag ("...; use --steps 18 or more").
_FLAG_START = re.compile(r"; (?=[\w ,.'-]+:)")
# The columns of a summary row that place it, beside its precision.
PLACE_COLUMNS = ("workload", "framework", "device_kind", "devices", "mode", "batch_size")


@dataclass(frozen=True)
class VerdictLine:
    """One AMP precision of one framework (at one place of the sweep) against that framework's fp32."""

    place: str  # what the line is about besides its precision: "torch", or "torch / resnet18 / gpu"
    framework: str
    precision: str
    status: str  # "ok", or why no figure (failed, oom, ...)
    speedup: float | None  # throughput over fp32's
    speedup_low: float | None  # its 95% interval; None without one
    speedup_high: float | None
    memory_ratio: float | None  # peak memory over fp32's
    memory_low: float | None
    memory_high: float | None
    accuracy_delta_pt: float | None  # validation accuracy minus fp32's, in percentage points (over seeds: the mean
    # of the paired differences); None: n/a
    accuracy_verdict: str | None  # the verdict over seeds with its interval (seeds.py); None: fewer than 2 seeds
    marks: tuple[str, ...]  # trust marks of the speed-up: FLAG_MARK, SINGLE_RUN_MARK, ≈, ?, ≁
    cautions: tuple[str, ...]  # why the speed-up is not to be trusted, one phrase each; empty: trusted
    emulated: bool = False  # the precision is emulated on this device (fp8 without FP8 matmuls): no speed-up
    declared: str = ""  # choices away from the precision's default recipe: "loss scaling none, keep_fp32 dense"

    @property
    def label(self) -> str:
        """The precision as the verdict names it: with its declared choices (``amp_fp16 (loss scaling none)``)."""
        return f"{self.precision} ({self.declared})" if self.declared else self.precision

    @property
    def trusted(self) -> bool:
        return self.status == "ok" and self.speedup is not None and not self.cautions

    @property
    def faster(self) -> bool:
        """Measurably faster than fp32: the interval lies above 1.0."""
        return self.speedup_low is not None and self.speedup_low > 1.0

    @property
    def slower(self) -> bool:
        """Measurably slower than fp32: the interval lies below 1.0."""
        return self.speedup_high is not None and self.speedup_high < 1.0


@dataclass(frozen=True)
class FrameworkVerdict:
    """The sentence for one framework (at one place): the best precision here, and what not to trust."""

    place: str
    best: str  # the precision to use on this machine (fp32 when no AMP precision is measurably faster); "" unknown
    sentence: str


@dataclass(frozen=True)
class Verdict:
    lines: tuple[VerdictLine, ...]
    frameworks: tuple[FrameworkVerdict, ...]

    @property
    def empty(self) -> bool:
        return not self.lines and not self.frameworks


def accuracy_verdict(line_figures: dict[str, Any]) -> str | None:
    """Whether the AMP accuracy is equivalent to fp32's, over the sweep's seeds.

    A sweep with a seed axis (``--seeds``) pairs each AMP seed with the same
    seed in fp32 and judges the paired differences against the sweep's
    ``equivalence_margin`` (:mod:`amp_suite.report.seeds`, which put the
    verdict on the summary row ``line_figures``): ``equivalent within ±0.5 pt:
    [-0.21, +0.35] over 5 seeds``.  ``None`` where fewer than two seeds paired
    (the line shows the bare difference).
    """
    return accuracy_verdict_text(line_figures)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _place_label(row: Any, varying: dict[str, bool]) -> str:
    parts = [str(row["framework"])]
    if varying["workload"]:
        parts.append(str(row["workload"]))
    if varying["device_kind"]:
        parts.append(str(row["device_kind"] or "–"))
    if varying["devices"] or int(row["devices"]) != 1:
        parts.append(f"{int(row['devices'])} devices")
    if varying["mode"] and row["mode"]:
        parts.append(str(row["mode"]))
    if varying["batch_size"]:
        parts.append(f"batch {int(row['batch_size'])}")
    return one_line_text(" / ".join(parts), 120)


def _flag_reasons(cells: pd.DataFrame, row: Any) -> list[str]:
    """The first words of each distinct measurement flag of the row's ok repeats (``machine busy``)."""
    if cells.empty:
        return []
    match = cells[(cells["status"] == "ok") & (cells["precision"] == row["precision"])]
    for column in PLACE_COLUMNS:
        if column in ("devices", "batch_size"):
            match = match[match[column].fillna(0).astype(int) == int(row[column])]
        else:
            match = match[match[column] == row[column]]
    reasons: list[str] = []
    for text in match["measurement_flags"].fillna(""):
        for flag in _FLAG_START.split(str(text)):
            head = flag.split(":")[0].split("(")[0].strip()
            head = one_line_text(head, REASON_CHARS)
            if head and head not in reasons:
                reasons.append(head)
    return reasons


def _line(row: Any, cells: pd.DataFrame, place: str) -> VerdictLine:
    differ = str(row.get("settings_differ") or "")
    if row["status"] == "ok" and differ:  # no comparison with an fp32 of other steps, data or versions
        return VerdictLine(place=place, framework=str(row["framework"]), precision=str(row["precision"]),
                           status=f"not compared: {differ}", speedup=None, speedup_low=None, speedup_high=None,
                           memory_ratio=None, memory_low=None, memory_high=None, accuracy_delta_pt=None,
                           accuracy_verdict=None, marks=(), cautions=(), emulated=bool(row.get("emulated")),
                           declared=str(row.get("declared") or ""))
    ok = row["status"] == "ok"
    speedup = _number(row.get("speedup")) if ok else None
    interval = Interval(speedup if speedup is not None else math.nan,
                        _number(row.get("speedup_low")) or math.nan, _number(row.get("speedup_high")) or math.nan)
    marks: list[str] = []
    cautions: list[str] = []
    if ok and speedup is not None:
        if row.get("flagged"):
            marks.append(FLAG_MARK)
            reasons = _flag_reasons(cells, row)
            cautions.append(f"flagged {FLAG_MARK}" + (f" ({', '.join(reasons)})" if reasons else ""))
        if not interval.known:
            marks.append(SINGLE_RUN_MARK)
            cautions.append("a single run, no interval")
        mark = interval_mark(interval)
        if mark:
            marks.append(mark)
        if mark == TOO_WIDE_MARK:
            cautions.append("its runs (repeats, seeds) disagree too much to tell anything")
        if row.get("speedup_noisier"):
            marks.append(NOISIER_MARK)
            cautions.append("its runs (repeats, seeds) disagree far more than the rest of the sweep's")
    accuracy = _number(row.get("accuracy_delta")) if ok else None
    paired = _number(row.get("accuracy_difference_pt")) if ok else None  # the paired mean over seeds, in points
    return VerdictLine(
        place=place, framework=str(row["framework"]), precision=str(row["precision"]), status=str(row["status"]),
        speedup=speedup, speedup_low=_number(row.get("speedup_low")) if ok else None,
        speedup_high=_number(row.get("speedup_high")) if ok else None,
        memory_ratio=_number(row.get("memory_ratio")) if ok else None,
        memory_low=_number(row.get("memory_ratio_low")) if ok else None,
        memory_high=_number(row.get("memory_ratio_high")) if ok else None,
        accuracy_delta_pt=paired if paired is not None else None if accuracy is None else accuracy * 100.0,
        accuracy_verdict=accuracy_verdict(dict(row)) if ok else None,
        marks=tuple(marks), cautions=tuple(cautions), emulated=bool(row.get("emulated")),
        declared=str(row.get("declared") or ""))


def not_run_cells(environment: dict[str, Any] | None) -> tuple[tuple[str, str, str], ...]:
    """The framework, workload and precision of each planned cell a stopped sweep did not run
    (``environment["incomplete"]["not_run_cells"]``; none when the sweep finished)."""
    info = (environment or {}).get("incomplete")
    listed = info.get("not_run_cells") if isinstance(info, dict) else None
    if not isinstance(listed, list):
        return ()
    return tuple((item[0], item[1], item[2]) for item in listed
                 if isinstance(item, list) and len(item) == 3 and all(isinstance(part, str) for part in item))


def build_verdict(summary: pd.DataFrame, cells: pd.DataFrame,
                  not_run: tuple[tuple[str, str, str], ...] = ()) -> Verdict:
    """The verdict of a sweep from its summary frame and its per-cell frame; ``not_run`` (:func:`not_run_cells`)
    names the precisions a stopped sweep did not reach, so its verdict does not read as AMP tried and lost."""
    if summary.empty:
        return Verdict((), ())
    varying = {column: summary[column].nunique() > 1 for column in PLACE_COLUMNS}
    # A mode is named where the sweep has a mode axis or a framework ran in several (as the tables do).
    varying["mode"] = bool(summary["mode_axis"].fillna(False).astype(bool).any()) \
        or bool((summary.groupby(["workload", "framework"])["mode"].nunique() > 1).any())
    precisions = list(dict.fromkeys([*summary["precision"], *(precision for _, _, precision in not_run)]))
    order = {p: i for i, p in enumerate(_precision_order(precisions))}
    lines: list[VerdictLine] = []
    frameworks: list[FrameworkVerdict] = []
    for _, group in summary.groupby(list(PLACE_COLUMNS), sort=False):
        first = group.iloc[0]
        place = _place_label(first, varying)
        rows = sorted((row for _, row in group.iterrows()), key=lambda r: order.get(r["precision"], 99))
        baseline = next((r for r in rows if r["precision"] == BASELINE), None)
        mine = [_line(r, cells, place) for r in rows if r["precision"] != BASELINE]
        lines += mine
        measured = {r["precision"] for r in rows}
        missing = sorted({precision for framework, workload, precision in not_run
                          if (framework, workload) == (first["framework"], first["workload"])
                          and precision != BASELINE and precision not in measured}, key=lambda p: order.get(p, 99))
        frameworks.append(_framework_verdict(place, baseline, mine, missing))
    # a framework and workload of which no cell ran before the sweep stopped: named too, never left out in silence
    ran = set(zip(summary["framework"], summary["workload"], strict=True))
    unreached: dict[tuple[str, str], list[str]] = {}
    for framework, workload, precision in not_run:
        if (framework, workload) not in ran:
            unreached.setdefault((framework, workload), []).append(precision)
    several_workloads = varying["workload"] or any(workload not in set(summary["workload"]) for _, workload in unreached)
    for (framework, workload), missed in unreached.items():
        place = one_line_text(f"{framework} / {workload}" if several_workloads else framework, 120)
        named = ", ".join(sorted(dict.fromkeys(missed), key=lambda p: order.get(p, 99)))
        frameworks.append(FrameworkVerdict(place, "", f"{place}: no cell ran (the sweep stopped first: {named} not "
                                                      "run), so nothing is judged here."))
    return Verdict(tuple(lines), tuple(frameworks))


def _precision_order(precisions: list[str]) -> list[str]:
    from amp_suite.precision import PRECISIONS

    known = [p for p in PRECISIONS if p in precisions]
    return known + [p for p in precisions if p not in known]


def speedup_text(line: VerdictLine) -> str:
    """``1.52x (1.40–1.65)``: the speed-up and its interval, no marks (``n/a`` without one)."""
    if line.speedup is None:
        return "n/a"
    interval = Interval(line.speedup, line.speedup_low if line.speedup_low is not None else math.nan,
                        line.speedup_high if line.speedup_high is not None else math.nan)
    return format_ratio(interval)


def _framework_verdict(place: str, baseline: Any, lines: list[VerdictLine],
                       not_run: list[str] | None = None) -> FrameworkVerdict:
    emulated = [line.precision for line in lines if line.emulated and line.status == "ok"]
    if baseline is None or baseline["status"] != "ok":
        status = "did not run" if baseline is None else f"did not finish ({baseline['status']})"
        return FrameworkVerdict(place, "", f"{place}: the fp32 baseline {status}, so no AMP precision can be "
                                           "judged against it." + _emulated_text(emulated))
    measured = [line for line in lines if line.speedup is not None and not line.emulated]
    failed = [f"{line.label} {line.status}" for line in lines if line.status != "ok"]
    failed += [f"{precision} not run (the sweep stopped first)" for precision in not_run or ()]
    if not measured:
        if not failed and not emulated:
            return FrameworkVerdict(place, BASELINE, f"{place}: fp32 is the only precision that ran: no AMP "
                                                     "precision to compare with.")
        why = f" ({', '.join(failed)})" if failed else ""  # none measured: no claim that none was faster
        return FrameworkVerdict(place, BASELINE, f"{place}: no AMP precision has a speed-up to judge against "
                                                 f"fp32{why}." + _emulated_text(emulated))
    best = max(measured, key=lambda line: line.speedup or 0.0)
    figure = f"{speedup_text(best)} fp32"
    if best.faster and best.trusted:
        sentence = f"{place}: {best.label} is the best precision on this machine, {figure}"
        chosen = best.precision
    elif best.faster:
        sentence = (f"{place}: {best.label} is the fastest here at {figure}, but not to be trusted: "
                    + "; ".join(best.cautions))
        chosen = best.precision
    elif best.slower and all(line.slower for line in measured):
        sentence = (f"{place}: fp32 is the best precision on this machine: every AMP precision is measurably slower "
                    f"(the fastest, {best.label}, is {figure})")
        chosen = BASELINE
    else:
        sentence = (f"{place}: fp32 stays the choice on this machine: no AMP precision is measurably faster "
                    f"(the fastest, {best.label}, is {figure}"
                    + (f"; {NO_DIFFERENCE_MARK} its interval contains 1.0" if NO_DIFFERENCE_MARK in best.marks
                       else "") + ")")
        chosen = BASELINE
    worse = (best.accuracy_verdict or "").startswith("worse")  # over seeds, beyond the equivalence margin
    if chosen == best.precision and best.accuracy_delta_pt is not None \
            and (worse or best.accuracy_delta_pt < -ACCURACY_CAUTION_PT):
        sentence += f", though its validation accuracy is {best.accuracy_delta_pt:+.2f} pt below fp32's"
        if worse:
            sentence += " (worse than fp32's beyond the equivalence margin, over the seeds)"
    sentence += "."
    untrusted = [f"{line.label} ({'; '.join(line.cautions)})" for line in measured
                 if line.cautions and not (line is best and best.faster)]  # the best's are named already
    if untrusted:
        sentence += " Not to be trusted: " + ", ".join(untrusted) + "."
    if failed:
        sentence += " No figure: " + ", ".join(failed) + "."
    sentence += _emulated_text(emulated)
    return FrameworkVerdict(place, chosen, one_line_text(sentence, 1000))


def _emulated_text(precisions: list[str]) -> str:
    if not precisions:
        return ""
    return (f" {', '.join(precisions)} {'is' if len(precisions) == 1 else 'are'} {EMULATED_MARK} here (no FP8 matmul "
            "ran: none on this device, or none the framework reaches): its memory and accuracy are real, its speed is the emulation's, not FP8's.")
