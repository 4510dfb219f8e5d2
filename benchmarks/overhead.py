"""Fidelity benchmark: does the suite slow down what it measures?

Runs the same PyTorch model, batch size and precision two ways, each in its own
fresh process, interleaved over several rounds:

* **bare**: a hand-written training loop (no amp-suite code in the loop), timed
  as samples over wall time of the steps after warm-up;
* **suite**: ``amp-suite``'s runner and worker, steady-state throughput.

It prints the ratio of suite-measured to bare throughput (median over rounds)
for fp32 and amp_bf16, and the same ratio for the median step time, which
shared 2-core machines disturb less.  Target: >= 0.97.

    python benchmarks/overhead.py [--steps 100] [--warmup 20] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "amp_bf16")
TARGET = 0.97


def bare_loop(precision: str, steps: int, warmup: int, batch_size: int) -> dict[str, float]:
    """Hand-written PyTorch loop: images/s over the steps after warm-up, and their median step time."""
    import numpy as np
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding="same"), nn.ReLU(), nn.AvgPool2d(2),
        nn.Conv2d(32, 64, 3, padding="same"), nn.ReLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(7 * 7 * 64, 256), nn.ReLU(), nn.Linear(256, 10),
    ).to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    batches = [
        (torch.from_numpy(rng.random((batch_size, 1, 28, 28), dtype=np.float32)).contiguous(
            memory_format=torch.channels_last),
         torch.from_numpy(rng.integers(0, 10, batch_size)))
        for _ in range(steps)
    ]
    use_amp = precision == "amp_bf16"
    start = 0.0
    step_times = []
    for index, (x, y) in enumerate(batches):
        if index == warmup:
            start = time.perf_counter()
        step_start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_amp):
            loss = nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        step_times.append(time.perf_counter() - step_start)
    loss.item()
    return {"throughput": (steps - warmup) * batch_size / (time.perf_counter() - start),
            "median_step_s": statistics.median(step_times[warmup:])}


def suite_figures(precision: str, steps: int, warmup: int, batch_size: int) -> dict[str, float]:
    """The same cell through amp-suite's runner, in a fresh worker process."""
    from amp_suite.config import load_config
    from amp_suite.records import RunSpec
    from amp_suite.runner import Cell, run_in_worker

    workload = load_config(REPO / "benchmarks.toml").workloads["mnist_cnn"]
    run = RunSpec(framework="torch", workload="mnist_cnn", precision=precision, steps=steps,
                  warmup=warmup, batch_size=batch_size, options={"channels_last": True}, timeout_s=1800)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_in_worker(Cell(run, workload), log_path=Path(tmp) / "worker.log")
    if result.status != "ok":
        raise SystemExit(f"suite run failed: {result.status}: {result.error}")
    return {"throughput": float(result.metrics["throughput"]),
            "median_step_s": float(result.metrics["step_time_median_s"])}


def _bare_in_child(precision: str, args: argparse.Namespace) -> dict[str, float]:
    child = subprocess.run(
        [sys.executable, __file__, "--bare", precision, "--steps", str(args.steps),
         "--warmup", str(args.warmup), "--batch-size", str(args.batch_size)],
        capture_output=True, text=True, check=True,
    )
    return json.loads(child.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--bare", metavar="PRECISION", help=argparse.SUPPRESS)  # child mode
    args = parser.parse_args()
    if args.bare:
        print(json.dumps(bare_loop(args.bare, args.steps, args.warmup, args.batch_size)))
        return 0

    print(f"mnist_cnn, PyTorch, batch {args.batch_size}, {args.steps} steps ({args.warmup} warm-up), "
          f"{args.rounds} interleaved rounds, each run in a fresh process")
    print(f"{'precision':<10} {'bare img/s':>11} {'suite img/s':>12} {'throughput ratio':>17} "
          f"{'step-time ratio':>16}  target >= {TARGET}")
    worst = float("inf")
    for precision in PRECISIONS:
        bare, suite = [], []
        for round_index in range(args.rounds):
            # Alternate which side goes first, so drifts of a shared machine hit both.
            order = ("bare", "suite") if round_index % 2 == 0 else ("suite", "bare")
            for side in order:
                if side == "bare":
                    bare.append(_bare_in_child(precision, args))
                else:
                    suite.append(suite_figures(precision, args.steps, args.warmup, args.batch_size))
        bare_tp = statistics.median(b["throughput"] for b in bare)
        suite_tp = statistics.median(s["throughput"] for s in suite)
        ratio = suite_tp / bare_tp
        step_ratio = (statistics.median(b["median_step_s"] for b in bare)
                      / statistics.median(s["median_step_s"] for s in suite))
        worst = min(worst, ratio)
        print(f"{precision:<10} {bare_tp:>11,.0f} {suite_tp:>12,.0f} {ratio:>17.3f} {step_ratio:>16.3f}"
              + "  (throughput per round: "
              + ", ".join(f"{s['throughput'] / b['throughput']:.2f}" for s, b in zip(suite, bare)) + ")")
    print(f"worst throughput ratio {worst:.3f}: {'meets' if worst >= TARGET else 'MISSES'} the target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
