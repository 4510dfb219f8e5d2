"""Is the suite's PyTorch step as fast as an idiomatic PyTorch loop, on a GPU (or the CPU)?

For each workload, precision and mode it runs, each in a fresh process and
alternating which goes first from round to round:

* **idiomatic**: ``torch_idiomatic.py``, a hand-written ``nn.Module`` and the
  loop a PyTorch user writes (channels-last, autocast, ``GradScaler`` for
  fp16, ``cudnn.benchmark``; in the compiled modes ``torch.compile(model)``),
  timed from the end of warm-up to a ``torch.cuda.synchronize``;
* **suite**: the same model, weights, batches and precision through
  amp-suite's worker (``run_in_worker``) in the same mode, steady-state
  throughput of one timed window.

Both sides start from the suite's initial weights and train on the suite's
own batches (written once to an ``.npz``), so their first-step losses must
agree; a row whose losses differ by more than 2% stops the script.  It
prints images/s of both, their ratio (suite / idiomatic: 1.0 means the suite
adds nothing) and the suite cell's mean GPU utilization (NVML) on a GPU.

    python benchmarks/torch_gpu_speed.py --device cuda \\
        [--workloads mnist_cnn,cifar10_resnet18] [--precisions fp32,tf32,amp_fp16,amp_bf16] \\
        [--modes eager] [--batch-size N] [--steps 80] [--warmup 20] [--rounds 1]

On a CPU (``--device cpu``, for checking the script; tf32 rows are skipped
there) keep sizes tiny: ``--workloads mnist_cnn --batch-size 16 --steps 6 --warmup 2``.
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

import numpy as np

REPO = Path(__file__).resolve().parent.parent
LOSS_TOLERANCE = 0.02  # relative spread of the first step's loss over a row's runs (GPU kernels differ in rounding)


def suite_run(workload_name: str, precision: str, mode: str, args: argparse.Namespace):
    """The suite's RunSpec of one row, and its workload (the optimizer's decay over the run's steps)."""
    from amp_suite.config.catalog import load_config
    from amp_suite.records import RunSpec

    workload = load_config(None).workloads[workload_name]
    batch = args.batch_size or workload.batch_size
    run = RunSpec(framework="torch", workload=workload_name, precision=precision, steps=args.steps,
                  warmup=args.warmup, batch_size=batch, latency_steps=0, window_steps=args.steps - args.warmup,
                  timeout_s=1800, device="gpu" if args.device == "cuda" else "cpu",
                  mode="" if mode == "eager" else mode)
    return run, workload


def write_inputs(workload_name: str, args: argparse.Namespace, path: Path) -> Path:
    """The run's batches (the suite's own pipeline) and initial weights, for the idiomatic loop."""
    from amp_suite.datasets import run_pipeline
    from amp_suite.workloads.workload import init_variables

    run, workload = suite_run(workload_name, "fp32", "eager", args)
    batches = run_pipeline(run, workload).epoch(0)[:args.steps]
    weights, state = init_variables(workload, run.seed)
    np.savez(path, images=np.stack([b.images for b in batches]), labels=np.stack([b.labels for b in batches]),
             **weights, **state)
    return path


def idiomatic_spec(workload_name: str, precision: str, mode: str, args: argparse.Namespace,
                   data: Path) -> dict:
    """The ``SPEC_JSON`` object of ``torch_idiomatic.py`` for one row."""
    from dataclasses import asdict

    _, workload = suite_run(workload_name, precision, mode, args)
    return {"model": workload.model, "num_classes": workload.num_classes, "input_size": workload.input_size,
            "channels": workload.channels, "precision": precision, "mode": mode, "device": args.device,
            "steps": args.steps, "warmup": args.warmup, "optimizer": asdict(workload.optimizer),
            "data": str(data)}


def idiomatic(workload_name: str, precision: str, mode: str, args: argparse.Namespace, data: Path):
    """(images/s, first step's loss) of the idiomatic loop, in a fresh process."""
    spec = idiomatic_spec(workload_name, precision, mode, args, data)
    child = subprocess.run([sys.executable, str(REPO / "benchmarks" / "torch_idiomatic.py"), json.dumps(spec)],
                           capture_output=True, text=True)
    if child.returncode != 0:
        raise SystemExit(f"idiomatic loop failed ({workload_name} {precision} {mode}):\n{child.stderr[-3000:]}")
    figures = json.loads(child.stdout.strip().splitlines()[-1])
    return float(figures["throughput"]), float(figures["first_step_loss"]), None


def suite(workload_name: str, precision: str, mode: str, args: argparse.Namespace):
    """(images/s, first step's loss, mean GPU utilization %) of the suite's cell, in a fresh worker."""
    from amp_suite.sweep.runner import Cell, run_in_worker

    run, workload = suite_run(workload_name, precision, mode, args)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_in_worker(Cell(run, workload), log_path=Path(tmp) / "worker.log")
    if result.status != "ok":
        raise SystemExit(f"suite run failed: {workload_name} {precision} {mode}: {result.status}: {result.error}")
    metrics = result.metrics
    return (float(metrics["throughput"]), float(metrics["first_step_loss"]),
            metrics.get("gpu_utilization_pct_mean"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--workloads", default="mnist_cnn,cifar10_resnet18")
    parser.add_argument("--precisions", default="fp32,tf32,amp_fp16,amp_bf16")
    parser.add_argument("--modes", default="eager", help="eager, compiled, cudagraphs (GPU only), comma-separated")
    parser.add_argument("--batch-size", type=int, default=None, help="default: each workload's own")
    parser.add_argument("--steps", type=int, default=80, help="steps of a run, warm-up included")
    parser.add_argument("--warmup", type=int, default=20, help="steps before the clock starts (compilation too)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds per row (fresh processes)")
    args = parser.parse_args()
    if not 1 <= args.warmup < args.steps:
        parser.error(f"--warmup must be at least 1 and below --steps ({args.steps}), got {args.warmup}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda, but torch sees no CUDA GPU (use --device cpu to check the script)")
        print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"{args.steps} steps per run ({args.warmup} warm-up, compilation included), {args.rounds} round(s), "
          "each run in a fresh process; ratio = suite / idiomatic images/s")
    print(f"{'workload':<17} {'precision':<9} {'mode':<10} {'batch':>5} {'idiomatic img/s':>15} "
          f"{'suite img/s':>11} {'ratio':>6} {'GPU busy':>8}  first-step losses")
    scratch = tempfile.TemporaryDirectory()
    worst = float("inf")
    for workload_name in args.workloads.split(","):
        data = write_inputs(workload_name, args, Path(scratch.name) / f"{workload_name}.npz")
        for mode in args.modes.split(","):
            if mode == "cudagraphs" and args.device != "cuda":
                print(f"{workload_name:<17} {'*':<9} {mode:<10} skipped: CUDA graphs need a GPU")
                continue
            for precision in args.precisions.split(","):
                if precision == "tf32" and args.device != "cuda":
                    print(f"{workload_name:<17} {precision:<9} {mode:<10} skipped: no TF32 on a CPU")
                    continue
                ours, theirs, losses, busy = [], [], [], []
                for round_index in range(args.rounds):
                    sides = ("idiomatic", "suite") if round_index % 2 == 0 else ("suite", "idiomatic")
                    for side in sides:
                        run_side = idiomatic if side == "idiomatic" else suite
                        throughput, loss, utilization = run_side(workload_name, precision, mode, args, *(
                            (data,) if side == "idiomatic" else ()))
                        (theirs if side == "idiomatic" else ours).append(throughput)
                        losses.append(loss)
                        if utilization is not None:
                            busy.append(float(utilization))
                spread = (max(losses) - min(losses)) / abs(statistics.median(losses))
                if not spread <= LOSS_TOLERANCE:  # NaN too
                    raise SystemExit(f"{workload_name} {precision} {mode}: first-step losses {losses} differ by "
                                     f"{spread:.1%}: the idiomatic loop does not compute what the suite computes")
                ratio = statistics.median(ours) / statistics.median(theirs)
                worst = min(worst, ratio)
                batch = args.batch_size or suite_run(workload_name, precision, mode, args)[0].batch_size
                gpu = f"{statistics.median(busy):.0f}%" if busy else "-"
                print(f"{workload_name:<17} {precision:<9} {mode:<10} {batch:>5} {statistics.median(theirs):>15,.0f} "
                      f"{statistics.median(ours):>11,.0f} {ratio:>6.3f} {gpu:>8}  "
                      f"{', '.join(f'{v:.4f}' for v in losses)}", flush=True)
    scratch.cleanup()
    print(f"worst ratio {worst:.3f} (1.0: the suite's step is as fast as the idiomatic loop)")
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    print(f"took {time.monotonic() - started:.0f} s")
    sys.exit(code)
