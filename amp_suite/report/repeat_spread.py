"""Whether repeats of one seed trained alike: the report's note when they did not.

A repeat runs the same cell again in a fresh process: the same definition
(fingerprint), the same seed, so the same initial weights and the same
batches.  Where the framework's training is deterministic, its repeats end
with the same loss and accuracy to the last bit (on this project's CPUs they
do).  Where they do not (GPU kernels that add in no fixed order, atomics), the
spread between repeats is noise that a change of precision also carries, so
the report says so beside any accuracy figure: an accuracy change between
precisions within that spread is not the precision's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from amp_suite.records import CellResult
from amp_suite.report.frames import cell_seed
from amp_suite.report.text import table_text

# Groups named in the note before "and N more".
NAMED = 4


@dataclass(frozen=True)
class RepeatSpread:
    """One cell's repeats of one seed that did not end alike."""

    workload: str
    framework: str
    precision: str
    mode: str
    seed: int
    repeats: int
    final_losses: tuple[float, ...]
    accuracies: tuple[float, ...]

    def text(self) -> str:
        low, high = min(self.final_losses), max(self.final_losses)
        middle = sorted(self.final_losses)[len(self.final_losses) // 2]
        apart = f" ({(high - low) / abs(middle) * 100:.2g}% apart)" if middle else ""
        where = f"{table_text(self.framework)} {self.precision}" + (f" {self.mode}" if self.mode else "")
        text = (f"{where} on {table_text(self.workload)}, seed {self.seed}: final loss {low:.6g} to "
                f"{high:.6g}{apart}")
        if self.accuracies:
            text += f", validation accuracy {min(self.accuracies) * 100:.2f}% to {max(self.accuracies) * 100:.2f}%"
        return text + f" over {self.repeats} repeats"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def repeat_spreads(results: Iterable[CellResult]) -> list[RepeatSpread]:
    """Each cell (definition, framework, precision, mode, seed) whose finished repeats ended with other losses."""
    groups: dict[tuple, list[CellResult]] = {}
    for result in results:
        if result.status == "ok" and _number((result.metrics or {}).get("final_loss")) is not None:
            key = (result.fingerprint, result.workload, result.framework, result.precision, result.mode or "",
                   cell_seed(result.config or {}))
            groups.setdefault(key, []).append(result)
    spreads = []
    for (_, workload, framework, precision, mode, seed), group in groups.items():
        losses = tuple(float((r.metrics or {})["final_loss"]) for r in group)
        accuracies = tuple(a for a in (_number((r.metrics or {}).get("val_accuracy")) for r in group)
                           if a is not None)
        if len(group) > 1 and (len(set(losses)) > 1 or len(set(accuracies)) > 1):
            spreads.append(RepeatSpread(workload, framework, precision, mode, seed, len(group), losses, accuracies))
    return spreads


def repeat_spread_lines(results: Iterable[CellResult]) -> list[str]:
    """The report header's note on repeats of one seed that trained differently (none when all trained alike)."""
    spreads = repeat_spreads(results)
    if not spreads:
        return []
    more = f"; and {len(spreads) - NAMED} more cells" if len(spreads) > NAMED else ""
    return [f"> **Repeats of one seed trained differently:** {'; '.join(s.text() for s in spreads[:NAMED])}{more}. "
            "The same seed, weights and batches ended elsewhere, so training is not deterministic here (on a GPU, "
            "kernels that add in no fixed order). An accuracy or loss change between precisions within this "
            "spread is noise, not the precision's; `--seeds` measures the change over seeds.", ""]
