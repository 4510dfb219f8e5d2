"""What ran: the precision each framework really applied (its ``set_precision`` answer, a cell's ``applied``).

A precision name says what was asked for; the applied precision says what the
framework did: the dtype convolutions and dense layers computed in, the dtype
of the parameters and of the logits, the loss scaling, and the switches that
change results (TF32 flags, matmul precision, where BatchNorm computes).
Repeats of a cell apply the same precision, so the report shows one row per
framework and precision; a repeat that applied something else gets a row of
its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amp_suite.records import CellResult
from amp_suite.report.text import markdown_cell


@dataclass(frozen=True)
class AppliedPrecision:
    """One framework's precision as applied, from the ``applied`` record of its cells."""

    framework: str
    precision: str
    compute_dtype: str
    param_dtype: str
    output_dtype: str
    loss_scaling: str  # none, dynamic, static
    initial_loss_scale: float | None
    notes: tuple[str, ...]
    repeats: tuple[int, ...]  # the repeats that applied exactly this

    @property
    def loss_scaling_text(self) -> str:
        """``dynamic (from 32768)``; ``none (declared)`` where the precision has a loss scale that was turned off,
        ``n/a`` where it has none (fp32, bf16: nothing to scale)."""
        from amp_suite.precision import LOSS_SCALED_PRECISIONS

        if self.precision not in LOSS_SCALED_PRECISIONS and self.loss_scaling in ("", "none"):
            return "n/a"
        if self.loss_scaling == "none":
            return "none (declared: loss_scaling)"
        if self.loss_scaling == "" or self.initial_loss_scale is None:
            return self.loss_scaling or "–"
        return f"{self.loss_scaling} (from {self.initial_loss_scale:g})"


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _scale(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def applied_precisions(results: list[CellResult]) -> list[AppliedPrecision]:
    """One entry per framework, precision and distinct applied record, in the order the cells ran.

    Cells that never reached ``set_precision`` (unavailable, failed early) have no applied record and no entry.
    """
    seen: dict[tuple[str, str, str, str, str, str, float | None, tuple[str, ...]], list[int]] = {}
    for result in results:
        applied = result.applied or {}
        if not applied:
            continue
        notes = applied.get("notes") or ()
        notes = list(notes) if isinstance(notes, (list, tuple)) else [notes]
        kept = applied.get("keep_fp32") or ()
        if isinstance(kept, (list, tuple)) and kept:  # the layers option keep_fp32 kept: a note of the row
            notes.append(f"keep_fp32={','.join(str(k) for k in kept)} (these layers compute in float32)")
        key = (result.framework, result.precision, _text(applied.get("compute_dtype")),
               _text(applied.get("param_dtype")), _text(applied.get("output_dtype")),
               _text(applied.get("loss_scaling")), _scale(applied.get("initial_loss_scale")),
               tuple(str(n) for n in (notes if isinstance(notes, (list, tuple)) else [notes])))
        seen.setdefault(key, []).append(result.repeat)
    return [AppliedPrecision(*key, repeats=tuple(sorted(set(repeats)))) for key, repeats in seen.items()]


APPLIED_NOTE = ("What each framework applied for each precision (its `set_precision` answer): the dtype its "
                "convolutions and dense layers computed in, the dtypes of the parameters and the logits, the loss "
                "scaling, and the switches that change results.")


def applied_lines(results: list[CellResult]) -> list[str]:
    """The report section's markdown body, or ``[]`` when no cell recorded what it applied."""
    entries = applied_precisions(results)
    if not entries:
        return []
    several = {(e.framework, e.precision) for e in entries}
    split = len(several) < len(entries)  # some repeat applied something else: name the repeats
    header = ["framework", "precision", *(["repeats"] if split else []), "compute", "parameters", "logits",
              "loss scaling", "notes"]
    lines = [APPLIED_NOTE, "", "| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for e in entries:
        cells = [e.framework, e.precision, *([", ".join(map(str, e.repeats))] if split else []),
                 e.compute_dtype or "–", e.param_dtype or "–", e.output_dtype or "–", e.loss_scaling_text,
                 "; ".join(e.notes) or "–"]
        lines.append("| " + " | ".join(markdown_cell(c, 1500) for c in cells) + " |")
    return lines + [""]
