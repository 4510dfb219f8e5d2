"""The report's loss-scaling section: how each ``amp_fp16`` cell's loss scale moved, and what it skipped.

One row per cell that ran under ``amp_fp16`` (:mod:`amp_suite.cell.loss_scale`
records the figures): the loss scaling it applied (``dynamic``, ``static``
or ``none``), its scale first and last, the smallest it reached, how many
times it was halved, and the steps skipped for inf/NaN gradients.  A cell
without loss scaling shows its skipped steps alone (always 0: nothing
checks its gradients), which is the point of ``loss_scaling = "none"``: its
float16 gradients may underflow, and its accuracy beside the scaled cells'
shows what that cost.
"""

from __future__ import annotations

from typing import Any

from amp_suite.precision import LOSS_SCALED_PRECISIONS
from amp_suite.records import CellResult
from amp_suite.report.text import markdown_cell

LOSS_SCALE_NOTE = ("The loss scale of each amp_fp16 cell: first → last, the smallest it reached, the times it was "
                   "halved (backoffs) and the steps skipped because their gradients held inf or NaN. Read after "
                   "every warm-up and latency step and at the end of each timed window, so no step waits for it "
                   "(`metrics[\"loss_scale_trajectory\"]` in results.jsonl holds the changes, step by step).")


def _scale(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


HEADER = ["workload", "framework", "precision", "repeat", "loss scaling", "scale first → last", "smallest",
          "backoffs", "skipped steps"]


def loss_scale_rows(results: list[CellResult]) -> list[list[str]]:
    """One row of :data:`HEADER` per ok cell of a precision with a loss scale, in the order the cells ran."""
    rows = []
    for r in results:
        if r.status != "ok" or r.precision not in LOSS_SCALED_PRECISIONS:
            continue
        m, applied = r.metrics or {}, r.applied or {}
        scaling = str(applied.get("loss_scaling") or "–")
        scaled = scaling in ("dynamic", "static")
        seed = (r.config or {}).get("seed")
        repeat = f"{r.repeat}" + (f" (seed {seed})" if (r.config or {}).get("seed_axis") else "")
        rows.append([r.workload, r.framework, r.precision, repeat, scaling,
                     f"{_scale(m.get('loss_scale_initial', applied.get('initial_loss_scale')))} → "
                     f"{_scale(m.get('loss_scale_final'))}" if scaled else "–",
                     _scale(m.get("loss_scale_min")) if scaled else "–",
                     str(m.get("loss_scale_backoffs", "–")) if scaled else "–",
                     str(m.get("skipped_steps", "–"))])
    return rows


def loss_scale_lines(results: list[CellResult]) -> list[str]:
    """The section's markdown (title included), or ``[]`` when no ok cell ran a precision with a loss scale."""
    rows = loss_scale_rows(results)
    if not rows:
        return []
    lines = ["## Loss scaling", "", LOSS_SCALE_NOTE, "", "| " + " | ".join(HEADER) + " |",
             "| " + " | ".join("---" for _ in HEADER) + " |"]
    lines += ["| " + " | ".join(markdown_cell(c, 200) for c in row) + " |" for row in rows]
    return lines + [""]
