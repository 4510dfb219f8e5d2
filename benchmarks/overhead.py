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
        [--precisions fp32,amp_bf16] [--steps 60] [--warmup 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET = 0.95
WORKLOADS = {28: "mnist_cnn", 128: "mnist_cnn_128"}


def idiomatic(framework: str, precision: str, size: int, args: argparse.Namespace, batch: int) -> float:
    child = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "idiomatic_loops.py"), framework, precision, str(size),
         str(args.steps), str(args.warmup), str(batch)],
        capture_output=True, text=True, check=True,
    )
    return float(json.loads(child.stdout.strip().splitlines()[-1])["throughput"])


def suite(framework: str, precision: str, size: int, args: argparse.Namespace, batch: int) -> float:
    from amp_suite.config import load_config
    from amp_suite.records import RunSpec
    from amp_suite.runner import Cell, run_in_worker

    workload = load_config(REPO / "benchmarks.toml").workloads[WORKLOADS[size]]
    run = RunSpec(framework=framework, workload=workload.name, precision=precision, steps=args.steps,
                  warmup=args.warmup, batch_size=batch, latency_steps=0, window_steps=args.steps,
                  timeout_s=3600)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_in_worker(Cell(run, workload), log_path=Path(tmp) / "worker.log")
    if result.status != "ok":
        raise SystemExit(f"suite run failed: {framework} {precision} {size}: {result.status}: {result.error}")
    return float(result.metrics["throughput"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,keras,jax")
    parser.add_argument("--precisions", default="fp32,amp_bf16")
    parser.add_argument("--sizes", default="28,128")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128, help="at 28x28")
    parser.add_argument("--batch-size-128", type=int, default=32, help="at 128x128 (a 2-core CPU is slow there)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"mnist_cnn, {args.steps} steps ({args.warmup} warm-up), {args.rounds} interleaved rounds, "
          f"each run in a fresh process; the suite in one window with no latency phase")
    print(f"{'framework':<9} {'size':>4} {'batch':>5} {'precision':<9} {'idiomatic img/s':>15} "
          f"{'suite img/s':>11} {'ratio':>6} {'paired':>6}  per round")
    worst = float("inf")
    for framework in args.frameworks.split(","):
        for size in (int(s) for s in args.sizes.split(",")):
            batch = args.batch_size if size == 28 else args.batch_size_128
            for precision in args.precisions.split(","):
                ours, theirs = [], []
                for round_index in range(args.rounds):
                    # Alternate which side goes first, so drifts of a shared machine hit both.
                    sides = ("idiomatic", "suite") if round_index % 2 == 0 else ("suite", "idiomatic")
                    for side in sides:
                        if side == "idiomatic":
                            theirs.append(idiomatic(framework, precision, size, args, batch))
                        else:
                            ours.append(suite(framework, precision, size, args, batch))
                ratio = statistics.median(ours) / statistics.median(theirs)
                worst = min(worst, ratio)
                paired = statistics.median(o / t for o, t in zip(ours, theirs))
                rounds = ", ".join(f"{o / t:.2f}" for o, t in zip(ours, theirs))
                print(f"{framework:<9} {size:>4} {batch:>5} {precision:<9} {statistics.median(theirs):>15,.0f} "
                      f"{statistics.median(ours):>11,.0f} {ratio:>6.3f} {paired:>6.3f}  ({rounds})", flush=True)
    print(f"worst ratio {worst:.3f}: {'meets' if worst >= TARGET else 'MISSES'} the target of {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
