"""The verdict rendered: as plain lines for a terminal and as a markdown section.

:mod:`amp_suite.report.verdict` composes the :class:`~amp_suite.report.verdict.Verdict` from the report's frames;
this room only writes it out, cell by cell, so the terminal, ``report.md`` and ``report.html`` (which takes the
cells) show the same text.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from amp_suite.report.intervals import Interval, format_ratio
from amp_suite.report.marks import (
    EMULATED_MARK,
    FLAG_MARK,
    NO_DIFFERENCE_MARK,
    NOISIER_MARK,
    SINGLE_RUN_MARK,
    TOO_WIDE_MARK,
)
from amp_suite.report.verdict import Verdict, VerdictLine, speedup_text


def speedup_cell(line: VerdictLine) -> str:
    """``1.52x (1.40–1.65) ⚑ 1 run``: the speed-up, its interval and its marks (``n/a`` and why without one)."""
    if line.status != "ok":
        return f"n/a ({line.status})"
    if line.emulated:
        return f"n/a ({EMULATED_MARK}: no FP8 matmul ran, so no speed-up to measure)"
    if line.speedup is None:
        return "n/a"
    return " ".join([speedup_text(line), *line.marks])


def memory_cell(line: VerdictLine) -> str:
    if line.memory_ratio is None:
        return "n/a"
    return format_ratio(Interval(line.memory_ratio,
                                 line.memory_low if line.memory_low is not None else math.nan,
                                 line.memory_high if line.memory_high is not None else math.nan))


def accuracy_cell(line: VerdictLine) -> str:
    if line.accuracy_delta_pt is None:
        return "n/a"
    text = f"{line.accuracy_delta_pt:+.2f} pt"
    return f"{text} ({line.accuracy_verdict})" if line.accuracy_verdict else text


MARK_LEGEND = (f"{FLAG_MARK} flagged: its timing is not to be trusted as it stands; {SINGLE_RUN_MARK}: a single run, "
               f"no interval; {NO_DIFFERENCE_MARK}: the interval contains 1.0, no measurable difference; "
               f"{TOO_WIDE_MARK}: too noisy to tell; {NOISIER_MARK}: repeats far noisier than the sweep's")


def terminal_lines(verdict: Verdict) -> list[str]:
    """The verdict as plain lines for a terminal (or a notebook's output)."""
    if verdict.empty:
        return []
    header = ("place", "precision", "speed-up over fp32 (95% interval)", "memory vs fp32", "accuracy vs fp32")
    rows = [(line.place, line.label, speedup_cell(line), memory_cell(line), accuracy_cell(line))
            for line in verdict.lines]
    widths = [max(len(text) for text in column) for column in zip(header, *rows, strict=True)]
    out = ["Verdict (AMP against fp32 in the same framework, on this machine):"]
    out += ["  " + "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True)).rstrip()
            for row in ((header, *rows) if rows else ())]  # no AMP line: the sentences alone
    out += [f"  {item.sentence}" for item in verdict.frameworks]
    if any(line.marks for line in verdict.lines):
        out.append(f"  ({MARK_LEGEND})")
    return out


# Longest verdict sentence written whole (one per framework and workload; far above any the verdict composes).
SENTENCE_CHARS = 2500


def markdown_lines(verdict: Verdict, cell: Callable[..., str] = lambda text, limit=0: str(text)) -> list[str]:
    """The verdict as a markdown section body: a table, then one bullet per framework.

    ``cell`` escapes a stored text for a table cell (the report's ``table_text``).
    """
    if verdict.empty:
        return ["_no results_", ""]
    out = []
    if verdict.lines:
        out += ["| framework | precision | speed-up over fp32 (95% interval) | peak memory vs fp32 | "
                "validation accuracy vs fp32 |", "| --- | --- | --- | --- | --- |"]
        out += [f"| {cell(line.place)} | {cell(line.label)} | {cell(speedup_cell(line))} | "
                f"{memory_cell(line)} | {accuracy_cell(line)} |" for line in verdict.lines]
        out.append("")
    # a sentence is amp-suite's own, made of bounded parts: whole, as the terminal and report.html print it (its
    # last clauses say what an fp8 speed is and why a figure is not trusted)
    out += [f"- {cell(item.sentence, SENTENCE_CHARS)}" for item in verdict.frameworks]
    out.append("")
    if any(line.marks for line in verdict.lines):
        out += [MARK_LEGEND + ".", ""]
    return out
