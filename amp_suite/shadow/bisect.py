"""``amp-suite numerics --bisect``: a small set of layers to keep in float32 that brings an AMP run's losses back
within a tolerance of float32's.

Greedy, by the numerics report: the first trial is the AMP run the command
traced anyway; while its losses are further than ``tolerance`` (relative,
the largest gap over the traced steps) from the float32 shadow's and fewer
than ``max_runs`` runs were made, the layer whose activation adds the most
error (``error_added`` against the float32 shadow, at its worst step; the
weight gradients' relative error breaks ties and ranks layers without an
activation) among the layers not yet kept is added to ``keep_fp32``, and the
AMP run is traced again from the same weights and batches, in a process of its
own as every run of the command.  The float32 shadow is not run again: its
losses do not depend on ``keep_fp32``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from amp_suite.errors import UsageError, one_line
from amp_suite.numerics.compare import compare_steps
from amp_suite.numerics.records import BisectOutcome, BisectTrial, LayerNumerics, NumericsRun, StepTrace
from amp_suite.precision import AMP_PRECISIONS
from amp_suite.schema import shown
from amp_suite.shadow.plan import DEFAULT_MAX_RUNS, DEFAULT_TOLERANCE, MAX_RUNS, NumericsRequest, PlannedRun
from amp_suite.shadow.traces import TRACES_DIR, load_traces
from amp_suite.workloads.kept import layer_names

REFERENCE = "fp32"


@dataclass(frozen=True)
class TrialRun(PlannedRun):
    """A planned AMP run of the search, with its own file names (``KEY__trialN``)."""

    trial: int = 0

    @property
    def key(self) -> str:
        return f"{super().key}__trial{self.trial}"


def check_bisect(request: NumericsRequest) -> None:
    """A one-line :class:`UsageError` unless ``request`` names one framework, one workload and one AMP precision,
    a tolerance above 0 and a number of runs from 1 to :data:`MAX_RUNS`; without ``bisect``, unless the tolerance
    and the number of runs are the defaults (a value given for a search that does not run is a mistake)."""
    if not request.bisect:
        for label, value, default in (("tolerance", request.tolerance, DEFAULT_TOLERANCE),
                                      ("max_runs", request.max_runs, DEFAULT_MAX_RUNS)):
            if value != default:
                raise UsageError(f"{label}={shown(value)} is a setting of the bisect search: it needs bisect=True "
                                 "(--bisect)")
        return
    for label, names in (("framework", request.frameworks), ("workload", request.workloads),
                         ("precision", request.precisions)):
        if len(names) != 1:
            raise UsageError(f"--bisect searches one {label} at a time, got {len(names)}: {', '.join(names)}")
    if request.precisions[0] not in AMP_PRECISIONS:
        raise UsageError(f"--bisect keeps layers in float32 under AMP; precision {request.precisions[0]!r} is none "
                         f"of {', '.join(AMP_PRECISIONS)}")
    tolerance = request.tolerance
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not math.isfinite(tolerance) \
            or tolerance <= 0:
        raise UsageError(f"tolerance must be a positive relative loss gap (0.01 is 1%), got {shown(tolerance)}")
    runs = request.max_runs
    if isinstance(runs, bool) or not isinstance(runs, int) or not 1 <= runs <= MAX_RUNS:
        raise UsageError(f"max runs must be a whole number from 1 to {MAX_RUNS}, got {shown(runs)}")


def loss_gap(losses: tuple[float, ...], reference: tuple[float, ...]) -> float:
    """The largest ``|loss - reference| / |reference|`` over the steps both have (``nan`` for none, or a
    non-finite loss)."""
    pairs = list(zip(losses, reference, strict=False))
    if not pairs or not all(math.isfinite(a) and math.isfinite(b) for a, b in pairs):
        return math.nan
    return max(abs(a - b) / max(abs(b), 1e-30) for a, b in pairs)


def worst_layer(rows: list[LayerNumerics], candidates: list[str]) -> str:
    """Among ``candidates``, the layer the rows name worst: the largest ``error_added`` of its activation at any
    step, then the largest relative error of its weight gradients; "" when no candidate has a row."""
    scores: dict[str, tuple[float, float]] = {}

    def finite(value: float | None) -> float:
        return math.inf if value is not None and math.isnan(value) else float(value or 0.0)

    for row in rows:
        if row.layer not in candidates:
            continue
        added, gradient = scores.get(row.layer, (0.0, 0.0))
        if row.tensor == "activation":
            added = max(added, finite(row.error_added))
        else:
            gradient = max(gradient, finite(row.relative_error))
        scores[row.layer] = (added, gradient)
    if not scores:
        return ""
    return max(candidates, key=lambda name: (scores.get(name, (-1.0, -1.0)), -candidates.index(name)))


def _compare(traces: list[StepTrace], shadow: list[StepTrace], run: NumericsRun) -> list[LayerNumerics]:
    rows: list[LayerNumerics] = []
    for step, (mine, theirs) in enumerate(zip(traces, shadow, strict=False)):
        rows += compare_steps(mine, theirs, framework=run.framework, workload=run.workload, precision=run.precision,
                              shadow_precision=REFERENCE, step=step)
    return rows


def bisect(request: NumericsRequest, planned: list[PlannedRun], runs: list[NumericsRun], out_dir: Path,
           trace: Any) -> BisectOutcome:
    """Search as the module says, from the command's own ``planned`` runs and their outcomes ``runs``;
    ``trace(planned) -> NumericsRun`` traces one more run (in a process of its own, or inline)."""
    by_precision = {plan.run.precision: (plan, run) for plan, run in zip(planned, runs, strict=False)}
    precision = request.precisions[0]
    amp_plan, amp_run = by_precision[precision]
    reference_plan, reference_run = by_precision[REFERENCE]
    base: dict[str, Any] = dict(framework=amp_run.framework, workload=amp_run.workload, precision=precision,
                                tolerance=float(request.tolerance), max_runs=request.max_runs)
    if reference_run.status != "ok":
        trial = BisectTrial(tuple(amp_plan.run.options.get("keep_fp32", ())), amp_run.status, math.nan,
                            amp_run.losses, error=f"the float32 shadow did not run: {reference_run.error}")
        return BisectOutcome(**base, reference_losses=(), trials=(trial,), found=None)
    shadow = load_traces(out_dir / TRACES_DIR / f"{reference_plan.key}.npz")
    candidates = list(layer_names(amp_plan.workload.layers))
    given = tuple(str(name) for name in amp_plan.run.options.get("keep_fp32", ()))
    kept = given
    trials: list[BisectTrial] = []
    plan, run = amp_plan, amp_run
    while True:
        if run.status != "ok":
            trials.append(BisectTrial(kept, run.status, math.nan, run.losses, error=run.error))
            break
        gap = loss_gap(run.losses, reference_run.losses)
        left = [name for name in candidates if name not in kept]
        try:
            rows = _compare(load_traces(out_dir / TRACES_DIR / f"{plan.key}.npz"), shadow, run)
        except (OSError, ValueError, KeyError) as exc:
            trials.append(BisectTrial(kept, "failed", gap, run.losses, error=f"cannot compare: {one_line(exc)}"))
            break
        worst = worst_layer(rows, left)
        trials.append(BisectTrial(kept, "ok", gap, run.losses, worst=worst))
        within = math.isfinite(gap) and gap <= request.tolerance
        if within:
            return BisectOutcome(**base, reference_losses=reference_run.losses, trials=tuple(trials),
                                 found=tuple(name for name in kept if name not in given))
        if len(trials) >= request.max_runs or not worst:
            break
        kept = (*kept, worst)
        plan = TrialRun(replace(amp_plan.run, options={**amp_plan.run.options, "keep_fp32": list(kept)}),
                        amp_plan.workload, False, trial=len(trials))
        print(f"amp-suite numerics: bisect trial {len(trials) + 1}/{request.max_runs}: keep_fp32 = "
              f"{', '.join(kept)} ...", file=sys.stderr, flush=True)
        run = trace(plan)
    return BisectOutcome(**base, reference_losses=reference_run.losses, trials=tuple(trials), found=None)


def bisect_lines(outcome: BisectOutcome) -> list[str]:
    """The markdown section of the search: what it found (or that it found nothing), and every trial."""
    where = f"{outcome.framework} / {outcome.workload} / {outcome.precision}"
    lines = [f"## Bisect: {where}", ""]
    if outcome.found is None:
        lines.append(f"No set of layers kept in float32 brought the losses within {100 * outcome.tolerance:g}% of "
                     f"float32's in {len(outcome.trials)} run(s) (at most {outcome.max_runs}).")
    elif not outcome.found:
        lines.append(f"The losses are within {100 * outcome.tolerance:g}% of float32's as they are: no layer "
                     "needs to be kept in float32.")
    else:
        lines.append(f"Keeping {', '.join(outcome.found)} in float32 (`keep_fp32 = "
                     f"[{', '.join(repr(n).replace(chr(39), chr(34)) for n in outcome.found)}]`) brings the losses "
                     f"within {100 * outcome.tolerance:g}% of float32's.")
    lines += ["", f"float32 losses: {', '.join(f'{v:.6g}' for v in outcome.reference_losses) or '–'}", "",
              "| trial | keep_fp32 | status | loss gap | losses | worst layer left |",
              "| --- | --- | --- | --- | --- | --- |"]
    for index, trial in enumerate(outcome.trials, start=1):
        gap = "–" if math.isnan(trial.loss_gap) else f"{100 * trial.loss_gap:.3g}%"
        status = trial.status + (f": {trial.error}" if trial.error else "")
        lines.append(f"| {index} | {', '.join(trial.kept) or '–'} | {status.replace('|', '/')} | {gap} | "
                     f"{', '.join(f'{v:.6g}' for v in trial.losses) or '–'} | {trial.worst or '–'} |")
    lines.append("")
    return lines


def bisect_sentence(outcome: BisectOutcome) -> str:
    """The search's result in one sentence (what the command prints)."""
    where = f"({outcome.framework}, {outcome.workload}, {outcome.precision})"
    last = outcome.trials[-1] if outcome.trials else None
    gap = "" if last is None or math.isnan(last.loss_gap) else f"; the last loss gap {100 * last.loss_gap:.3g}%"
    if outcome.found is None:
        measured = [trial for trial in outcome.trials if trial.status == "ok" and math.isfinite(trial.loss_gap)]
        best = min(measured, key=lambda trial: trial.loss_gap, default=None)
        closest = "" if best is None or best is last else (
            f"; the closest was keep_fp32 = {list(best.kept)} at {100 * best.loss_gap:.3g}%")
        return (f"bisect: no set of layers kept in float32 brought the losses within {100 * outcome.tolerance:g}% of "
                f"float32's in {len(outcome.trials)} run(s){gap}{closest} {where}.")
    if not outcome.found:
        return f"bisect: the losses are within {100 * outcome.tolerance:g}% of float32's as they are{gap} {where}."
    return (f"bisect: keep_fp32 = {list(outcome.found)} brings the losses within {100 * outcome.tolerance:g}% of "
            f"float32's{gap} {where}.")
