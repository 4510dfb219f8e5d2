"""Does AMP cost accuracy beyond the noise of the seed? mnist_cnn and mnist_resnet8 over five seeds.

Runs one sweep with ``amp_suite.run`` (the engine of ``amp-suite run``):
``--workloads`` (default ``mnist_cnn,mnist_resnet8``) in ``--frameworks``
(default the three) and ``--precisions`` (default fp32, amp_bf16 and
amp_fp16), each cell from ``--seeds`` seeds (default 5: seeds 0 to 4) on the
shipped MNIST split, with learning curves at each epoch's end.  Then prints
the verdicts of ``amp_suite.equivalence``: for every workload, framework and
AMP precision, the validation accuracy AMP − fp32 in points over the seeds,
its 95% interval and the verdict against ``--margin`` (equivalent, better,
worse, or inconclusive with the seeds that would likely settle it), the
validation loss beside it, then each framework against the first at fp32.

    python benchmarks/seeds_equivalence.py [--workloads mnist_cnn,mnist_resnet8]
        [--frameworks torch,keras,jax] [--precisions fp32,amp_bf16,amp_fp16] [--seeds 5]
        [--epochs 1] [--steps N] [--margin 0.5] [--device cpu|gpu|auto] [--out DIR] [--resume]

On a 2-core CPU the default (2 workloads × 3 frameworks × 3 precisions × 5
seeds = 90 cells) takes long: ``--steps 20 --seeds 3`` gives a first look,
and ``--resume`` finishes an interrupted run.  This is a measurement, not a
test: nothing here passes or fails on a figure.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="mnist_cnn,mnist_resnet8")
    parser.add_argument("--frameworks", default="torch,keras,jax")
    parser.add_argument("--precisions", default="fp32,amp_bf16,amp_fp16")
    parser.add_argument("--seeds", default="5", help="a count (5: seeds 0 to 4) or a list (0,1,2)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=None, help="steps per epoch (default: each workload's own)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--margin", type=float, default=0.5, help="equivalence margin, points of accuracy")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    parser.add_argument("--out", default="amp-suite-seeds-equivalence")
    parser.add_argument("--resume", action="store_true", help="keep the cells a previous run finished")
    return parser.parse_args(argv)


def run_sweep(args: argparse.Namespace) -> Any:
    import amp_suite
    from amp_suite.config.settings import parse_seeds

    settings: dict[str, Any] = {"seeds": parse_seeds(args.seeds), "epochs": args.epochs, "warmup": args.warmup,
                                "repeats": 1, "device": args.device, "out": args.out, "latency_steps": 0,
                                "dataset": "mnist", "train_split": "test[:8000]", "val_split": "test[8000:]",
                                "equivalence_margin": args.margin, "curve_every": 0}
    if args.steps is not None:
        settings["steps"] = args.steps
    return amp_suite.run(frameworks=args.frameworks, workloads=args.workloads, precisions=args.precisions,
                         resume=args.resume, **settings)


def _interval(row: Any, digits: int) -> str:
    mean, low, high = row["mean"], row["low"], row["high"]  # row.mean would be the Series' method
    if row["seeds"] < 2 or math.isnan(low):
        return f"{mean:+.{digits}f} (no interval)"
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def verdict_table(frame: Any) -> list[str]:
    """One line per comparison: accuracy (points) with its verdict, then the loss."""
    lines = [f"{'workload':<15} {'framework':<10} {'precision':<9} {'against':<8} {'seeds':>5}  "
             f"{'accuracy, points [95%]':<28} {'verdict':<36} loss [95%]"]
    keys = ["comparison", "workload", "framework", "precision", "control"]
    for _, group in frame.groupby(keys, sort=False):
        accuracy = group[group["figure"] == "val_accuracy"]
        loss = group[group["figure"] == "val_loss"]
        first = group.iloc[0]
        verdict = "n/a"
        accuracy_text = "n/a"
        if len(accuracy):
            row = accuracy.iloc[0]
            accuracy_text = _interval(row, 2)
            settle = row["seeds_to_settle"]
            known = settle is not None and not (isinstance(settle, float) and math.isnan(settle))
            verdict = row["verdict"] + (f" (~{int(settle)} seeds to settle)" if known else "")
        loss_text = f"{_interval(loss.iloc[0], 4)} {loss.iloc[0]['verdict']}" if len(loss) else "n/a"
        lines.append(f"{first['workload']:<15} {first['framework']:<10} {first['precision']:<9} "
                     f"{first['control']:<8} {int(first['seeds']):>5}  {accuracy_text:<28} {verdict:<36} "
                     f"{loss_text}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    frame = run_sweep(args)
    import amp_suite

    verdicts = amp_suite.equivalence(frame.attrs["out_dir"], margin=args.margin)
    print(f"\nAMP against fp32 (and framework against framework at fp32) over seeds, margin ±{args.margin:g} "
          f"points of validation accuracy:\n")
    print("\n".join(verdict_table(verdicts)) if not verdicts.empty else "no pairs: no cell finished with a seed "
          "in two precisions")
    failed = frame[frame["status"] != "ok"]
    if len(failed):
        print(f"\n{len(failed)} cell(s) without figures: "
              + ", ".join(sorted({f"{r.framework} {r.precision} {r.status}" for r in failed.itertuples()})))
    return 0


if __name__ == "__main__":
    sys.exit(main())
