"""Fidelity benchmark: is each plugin as fast as its framework's idiomatic loop?

For every framework, precision and input size it runs, each in a fresh
process and interleaved over several rounds:

* **idiomatic**: the loop a framework expert would write (``idiomatic_loops.py``:
  eager PyTorch with channels-last; Keras ``compile(jit_compile=True)`` +
  ``train_on_batch``; a jitted haiku step with donation), timed from the end
  of warm-up to one final wait;
* **suite**: the same model, batch and precision through amp-suite's runner
  and worker (``mnist_cnn`` at 28x28, ``mnist_cnn_128`` at 128x128),
  steady-state throughput from its measurement windows.

It prints suite/idiomatic throughput: the ratio of the two medians over
rounds (the figure judged against the target), the median of each round's
ratio (the two runs of a round are adjacent in time, so a slow drift of a
shared machine cancels in it) and each round's ratio, so the noise is
visible.  Target: >= 0.95 for every row.

    python benchmarks/overhead.py [--frameworks torch,keras,jax] [--sizes 28,128]
        [--precisions fp32,amp_bf16] [--steps 60] [--warmup 10] [--steps-128 20] [--warmup-128 4]
        [--rounds 5] [--max-rounds 15] [--row-seconds 180]

At 128x128 a run has its own, shorter step count: on a CPU without bf16
instructions PyTorch's bf16 step there runs at a few images per second, and
60 steps in each of six runs would take the better part of an hour.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TARGET = 0.95
WORKLOADS = {28: "mnist_cnn", 128: "mnist_cnn_128"}
LOSS_TOLERANCE = 0.01  # relative spread of the first step's loss over a row's runs (bf16 rounding stays far below)


def steps_of(size: int, args: argparse.Namespace) -> tuple[int, int]:
    """(steps, warm-up steps) of one run at ``size``."""
    return (args.steps, args.warmup) if size == 28 else (args.steps_128, args.warmup_128)


def suite_run(framework: str, precision: str, size: int, args: argparse.Namespace, batch: int):
    """The suite's run of one row, and its workload."""
    from amp_suite.config.catalog import load_config
    from amp_suite.records import RunSpec

    workload = load_config(REPO / "benchmarks.toml").workloads[WORKLOADS[size]]
    steps, warmup = steps_of(size, args)
    run = RunSpec(framework=framework, workload=workload.name, precision=precision, steps=steps,
                  warmup=warmup, batch_size=batch, latency_steps=0, window_steps=steps,
                  timeout_s=3600)
    return run, workload


def write_inputs(size: int, args: argparse.Namespace, batch: int, path: Path) -> Path:
    """The first epoch's batches and the initial weights of the suite's run at ``size``.

    They come from the suite's own dataset loading, input pipeline and
    initializer, so the idiomatic loop starts from the same weights and sees
    the same images, in the same order, as the suite.
    """
    from amp_suite.datasets import run_pipeline
    from amp_suite.workloads.workload import init_variables

    run, workload = suite_run("torch", "fp32", size, args, batch)
    batches = run_pipeline(run, workload).epoch(0)
    weights, _ = init_variables(workload, run.seed)
    np.savez(path, images=np.stack([b.images for b in batches]), labels=np.stack([b.labels for b in batches]),
             **weights)
    return path


def idiomatic(framework: str, precision: str, size: int, args: argparse.Namespace, batch: int,
              data: Path) -> tuple[float, float]:
    """(images/s, first step's loss) of the idiomatic loop."""
    steps, warmup = steps_of(size, args)
    child = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "idiomatic_loops.py"), framework, precision, str(size),
         str(steps), str(warmup), str(batch), str(data)],
        capture_output=True, text=True, check=True,
    )
    figures = json.loads(child.stdout.strip().splitlines()[-1])
    return float(figures["throughput"]), float(figures["first_step_loss"])


def suite(framework: str, precision: str, size: int, args: argparse.Namespace, batch: int) -> tuple[float, float]:
    """(images/s, first step's loss) of the suite's run."""
    from amp_suite.sweep.runner import Cell, run_in_worker

    run, workload = suite_run(framework, precision, size, args, batch)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_in_worker(Cell(run, workload), log_path=Path(tmp) / "worker.log")
    if result.status != "ok":
        raise SystemExit(f"suite run failed: {framework} {precision} {size}: {result.status}: {result.error}")
    return float(result.metrics["throughput"]), float(result.metrics["first_step_loss"])


def rounds_for(first_round_s: float, args: argparse.Namespace) -> int:
    """Rounds of a row: enough to fill ``--row-seconds``, between ``--rounds`` and ``--max-rounds``.

    A run's throughput varies by about +-12 % from one process to the next on
    the development VM, however many steps it takes (measured: 60 and 200
    steps of the same PyTorch loop spread alike), so only more processes
    narrow a row's median; rows whose runs are short get more of them.
    """
    return max(args.rounds, min(args.max_rounds, math.ceil(args.row_seconds / max(first_round_s, 1e-9))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,keras,jax")
    parser.add_argument("--precisions", default="fp32,amp_bf16")
    parser.add_argument("--sizes", default="28,128")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--steps-128", type=int, default=20, help="steps of a run at 128x128")
    parser.add_argument("--warmup-128", type=int, default=4, help="warm-up steps of a run at 128x128")
    parser.add_argument("--batch-size", type=int, default=128, help="at 28x28")
    parser.add_argument("--batch-size-128", type=int, default=32, help="at 128x128 (a 2-core CPU is slow there)")
    parser.add_argument("--rounds", type=int, default=5, help="fewest interleaved rounds of a row")
    parser.add_argument("--max-rounds", type=int, default=15)
    parser.add_argument("--row-seconds", type=float, default=180.0,
                        help="rows whose rounds are short get more of them, up to about this long in all")
    args = parser.parse_args()
    print(f"mnist_cnn, {args.steps} steps ({args.warmup} warm-up) at 28x28, {args.steps_128} "
          f"({args.warmup_128} warm-up) at 128x128, {args.rounds}-{args.max_rounds} interleaved rounds per row "
          f"(as many as fit in {args.row_seconds:.0f} s), "
          f"each run in a fresh process; the suite in one window with no latency phase")
    print(f"{'framework':<9} {'size':>4} {'batch':>5} {'precision':<9} {'idiomatic img/s':>15} "
          f"{'suite img/s':>11} {'ratio':>6} {'paired':>6}  per round")
    worst, widest = float("inf"), 0.0
    scratch = tempfile.TemporaryDirectory()
    data: dict[int, Path] = {}
    for framework in args.frameworks.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            batch = args.batch_size if size == 28 else args.batch_size_128
            if size not in data:
                data[size] = write_inputs(size, args, batch, Path(scratch.name) / f"inputs-{size}.npz")
            for precision in args.precisions.split(","):
                ours, theirs, losses = [], [], []
                rounds, round_index = args.rounds, 0
                while round_index < rounds:
                    started = time.monotonic()
                    # Alternate which side goes first, so drifts of a shared machine hit both.
                    sides = ("idiomatic", "suite") if round_index % 2 == 0 else ("suite", "idiomatic")
                    for side in sides:
                        if side == "idiomatic":
                            throughput, loss = idiomatic(framework, precision, size, args, batch, data[size])
                            theirs.append(throughput)
                        else:
                            throughput, loss = suite(framework, precision, size, args, batch)
                            ours.append(throughput)
                        losses.append(loss)
                    if round_index == 0:  # fixed by the first round's duration, never by the ratios seen
                        rounds = rounds_for(time.monotonic() - started, args)
                    round_index += 1
                # Same weights, same batch: the first step's loss agrees unless the loops compute different things.
                spread = (max(losses) - min(losses)) / abs(statistics.median(losses))
                if not spread <= LOSS_TOLERANCE:  # NaN too
                    raise SystemExit(f"{framework} {size} {precision}: first-step losses {losses} differ by "
                                     f"{spread:.1%}: the idiomatic loop does not compute what the suite computes")
                widest = max(widest, spread)
                ratio = statistics.median(ours) / statistics.median(theirs)
                worst = min(worst, ratio)
                paired = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
                per_round = ", ".join(f"{o / t:.2f}" for o, t in zip(ours, theirs, strict=True))
                print(f"{framework:<9} {size:>4} {batch:>5} {precision:<9} {statistics.median(theirs):>15,.0f} "
                      f"{statistics.median(ours):>11,.0f} {ratio:>6.3f} {paired:>6.3f}  ({per_round})", flush=True)
    scratch.cleanup()
    print(f"first-step losses of suite and idiomatic runs agree within {widest:.2e} (relative) in every row")
    print(f"worst ratio {worst:.3f}: {'meets' if worst >= TARGET else 'MISSES'} the target of {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
