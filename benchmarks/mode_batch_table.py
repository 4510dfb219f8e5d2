"""The mode x precision x batch table of mnist_cnn and cifar10_resnet18 on the machine at hand.

Runs one sweep (``amp_suite.run``, the engine of ``amp-suite run``) over the
frameworks' execution modes, the precisions and the batch sizes, then prints
the report's throughput table (images/s; AMP's speed-up over fp32 in the same
mode and batch; the ratio over the framework's least compiled mode; GPU busy
% on a GPU, ↯ under 50%), what its marks mean, and the best configuration
found per framework.  A mode a framework lacks is ``unsupported`` there, a
batch that does not fit is ``oom at batch N``; neither stops the sweep.

    python benchmarks/mode_batch_table.py [--device auto|cpu|gpu] [--frameworks torch,keras,jax]
        [--workloads mnist_cnn,cifar10_resnet18] [--modes eager,graph,compiled,cudagraphs]
        [--precisions ...] [--batch-sizes ...] [--steps N] [--warmup N] [--repeats N] [--out DIR]

Defaults follow the device: on a GPU every precision and batches 128, 512 and
2048; on a CPU fp32 and amp_bf16, batches 32 and 128 and few steps (a CPU
compiles each PyTorch compiled cell for tens of seconds).
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    parser.add_argument("--frameworks", default="torch,keras,jax")
    parser.add_argument("--workloads", default="mnist_cnn,cifar10_resnet18")
    parser.add_argument("--modes", default="eager,graph,compiled,cudagraphs")
    parser.add_argument("--precisions", default=None, help="default: fp32,tf32,amp_fp16,amp_bf16 on a GPU, "
                        "fp32,amp_bf16 on a CPU")
    parser.add_argument("--batch-sizes", default=None, help="default: 128,512,2048 on a GPU, 32,128 on a CPU")
    parser.add_argument("--steps", type=int, default=None, help="default: 60 on a GPU, 8 on a CPU")
    parser.add_argument("--warmup", type=int, default=None, help="default: 20 on a GPU, 3 on a CPU")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--out", default="amp-suite-mode-batch")
    args = parser.parse_args()

    import amp_suite
    from amp_suite.machine.environment import gpu_info
    from amp_suite.report.normalize import (
        best_configuration_lines,
        comparison_tables,
        mode_lines,
        summary_frame,
    )
    from amp_suite.sweep.stored import load_results

    gpu = args.device == "gpu" or (args.device == "auto" and bool(gpu_info()))
    precisions = args.precisions or ("fp32,tf32,amp_fp16,amp_bf16" if gpu else "fp32,amp_bf16")
    batches = args.batch_sizes or ("128,512,2048" if gpu else "32,128")
    steps = args.steps or (60 if gpu else 8)
    warmup = args.warmup if args.warmup is not None else (20 if gpu else 3)
    started = time.monotonic()
    frame = amp_suite.run(
        frameworks=args.frameworks, workloads=args.workloads, precisions=precisions,
        modes=tuple(args.modes.split(",")), batch_sizes=tuple(int(b) for b in batches.split(",")),
        steps=steps, warmup=warmup, repeats=args.repeats, device="gpu" if gpu else args.device,
        out=args.out, quiet=False, dataset="synthetic", latency_steps=0)
    results, environment = load_results(frame.attrs["out_dir"])
    summary = summary_frame(results, environment)
    for title, table in comparison_tables(summary, environment).items():
        if title.startswith("Throughput"):
            print(f"\n{title}\n")
            print(table.to_markdown(index=False, disable_numparse=True))
    print()
    for line in mode_lines(summary) + best_configuration_lines(summary):
        print(line)
    print(f"{len(results)} cells in {time.monotonic() - started:.0f} s; the full report: "
          f"{frame.attrs['out_dir']}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
