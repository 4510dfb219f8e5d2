"""What the ViT fidelity benchmarks share: the suite's cell, a hand-written loop in a child, interleaved rounds.

``overhead_vit_torch.py``, ``overhead_vit_jax.py`` and ``overhead_vit_keras.py``
each write one hand-written ("idiomatic") loop; everything around it is here,
so that the three measure in the same way:

* :func:`suite_run` is the suite's run of the ViT cell and its workload;
* :func:`suite` runs that cell through the suite's runner and worker (a fresh
  process) and returns its steady-state throughput and first-step loss;
* :func:`idiomatic` runs ``script --idiomatic PRECISION STEPS WARMUP DATA`` in
  a fresh process and reads the same two figures from its last line of JSON;
* :func:`interleaved_rounds` alternates the two sides over rounds (which side
  goes first swaps each round) and checks that their first-step losses agree.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WORKLOAD = "mnist_vit_tiny"
TARGET = 0.95
LOSS_TOLERANCE = 0.01


def suite_run(framework: str, precision: str, steps: int, warmup: int, *, catalog: Path | None = None,
              window_steps: int | None = None) -> tuple[Any, Any]:
    """The suite's run of the ViT cell of ``framework`` and its workload (``catalog``: a benchmarks.toml)."""
    from amp_suite.config.catalog import load_config
    from amp_suite.records import RunSpec

    workload = load_config(catalog).workloads[WORKLOAD]
    run = RunSpec(framework=framework, workload=WORKLOAD, precision=precision, steps=steps, warmup=warmup,
                  batch_size=workload.batch_size, latency_steps=0,
                  window_steps=steps if window_steps is None else window_steps, timeout_s=3600)
    return run, workload


def suite(run: Any, workload: Any) -> tuple[float, float]:
    """(images/s, first step's loss) of the suite's cell ``run``, run in its own worker process."""
    from amp_suite.sweep.runner import Cell, run_in_worker

    with tempfile.TemporaryDirectory() as tmp:
        result = run_in_worker(Cell(run, workload), log_path=Path(tmp) / "worker.log")
    if result.status != "ok":
        raise SystemExit(f"suite run failed: {run.framework} {run.precision}: {result.status}: {result.error}")
    return float(result.metrics["throughput"]), float(result.metrics["first_step_loss"])


def idiomatic(script: str, precision: str, steps: int, warmup: int, data: Path) -> tuple[float, float]:
    """(images/s, first step's loss) of ``script``'s hand-written loop, run in a fresh process."""
    child = subprocess.run([sys.executable, script, "--idiomatic", precision, str(steps), str(warmup), str(data)],
                           capture_output=True, text=True, check=True)
    figures = json.loads(child.stdout.strip().splitlines()[-1])
    return float(figures["throughput"]), float(figures.get("first_step_loss", "nan"))


@dataclass(frozen=True)
class Rounds:
    """The throughputs of both sides over the rounds, and the first-step losses of every run."""

    suite: list[float]
    idiomatic: list[float]
    losses: list[float]

    @property
    def ratio(self) -> float:
        """Suite over idiomatic, as a ratio of the medians."""
        return statistics.median(self.suite) / statistics.median(self.idiomatic)

    @property
    def per_round(self) -> str:
        return ", ".join(f"{o / t:.2f}" for o, t in zip(self.suite, self.idiomatic, strict=True))

    @property
    def loss_spread(self) -> float:
        """The first-step losses' range relative to their median (nan where a side gave none)."""
        finite = [loss for loss in self.losses if loss == loss]
        if len(finite) < 2:
            return float("nan")
        return (max(finite) - min(finite)) / abs(statistics.median(finite))


def interleaved_rounds(rounds: int, suite_side: Callable[[], tuple[float, float]],
                       idiomatic_side: Callable[[], tuple[float, float]], label: str,
                       loss_tolerance: float = LOSS_TOLERANCE) -> Rounds:
    """Run both sides ``rounds`` times, alternating which goes first; refuse disagreeing first-step losses."""
    ours: list[float] = []
    theirs: list[float] = []
    losses: list[float] = []
    for index in range(rounds):
        order = ("idiomatic", "suite") if index % 2 == 0 else ("suite", "idiomatic")
        for side in order:
            throughput, loss = idiomatic_side() if side == "idiomatic" else suite_side()
            (theirs if side == "idiomatic" else ours).append(throughput)
            losses.append(loss)
    measured = Rounds(suite=ours, idiomatic=theirs, losses=losses)
    if measured.loss_spread > loss_tolerance:
        raise SystemExit(f"{label}: first-step losses {losses} differ by {measured.loss_spread:.1%}: the "
                         "hand-written loop does not compute what the suite computes")
    return measured


def verdict(worst: float) -> str:
    """The closing line: the worst ratio against the target."""
    return f"worst ratio {worst:.3f}: {'meets' if worst >= TARGET else 'MISSES'} the target of {TARGET}"
