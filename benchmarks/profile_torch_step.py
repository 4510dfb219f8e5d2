"""Where the time of the suite's PyTorch training step goes: host time, kernels per step, GPU idle time.

Builds the suite's own PyTorch model, optimizer and step (the plugin's hooks,
the same code a cell runs) for one workload, precision and mode, warms it up
(compilation and cuDNN autotuning happen there), then:

* times ``--steps`` steps with one wait at the end, noting how long the host
  took to dispatch each step (``host ms/step``) against the step's time
  (``wall ms/step``): a host time close to the wall time means the step is
  launch-bound, the GPU waiting on Python and the dispatcher;
* profiles ``--profile-steps`` more with ``torch.profiler``: kernels and
  launches per step, the fraction of the profiled span the GPU ran no kernel,
  and the top kernels (GPU time) and operators (host time).

    python benchmarks/profile_torch_step.py --device cuda --workload cifar10_resnet18 \\
        --precision amp_bf16 [--mode eager|compiled|cudagraphs] [--batch-size N] \\
        [--forward-compile] [--warmup 20] [--steps 50] [--profile-steps 10] [--top 12] [--out DIR] [--trace]

It writes a short text summary to stdout and, with ``--out DIR``, the same
text to ``DIR/profile-WORKLOAD-PRECISION-MODE-bBATCH.txt`` (``--trace`` adds a
Chrome trace beside it).  On a CPU (``--device cpu``) there are no kernels to
count: the summary says so and lists the top operators by host time.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

# Names of CUDA runtime and driver calls that start work on the GPU (host side of a launch).
LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                "cudaGraphLaunch", "cuGraphLaunch", "cudaLaunchCooperativeKernel")


def build(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """(torch, the plugin's model, its step function, the staged batches) for the run the flags describe."""
    import dataclasses

    import torch

    from amp_suite.config.catalog import load_config
    from amp_suite.datasets import run_pipeline
    from amp_suite.records import RunSpec
    from amp_suite.workloads.workload import init_variables
    from amp_suite_plugins.torch import plugin

    workload = load_config(None).workloads[args.workload]
    total = args.warmup + args.steps + args.profile_steps
    run = RunSpec(framework="torch", workload=workload.name, precision=args.precision, steps=total,
                  warmup=args.warmup, batch_size=args.batch_size or workload.batch_size,
                  device="gpu" if args.device == "cuda" else "cpu",
                  mode="" if args.mode == "eager" else args.mode,
                  options={"compile": True} if args.forward_compile else {})
    workload = dataclasses.replace(workload, optimizer=dataclasses.replace(workload.optimizer, decay_steps=total))
    device = plugin.select_device(run)
    if args.mode not in plugin.MODES[device.kind]:
        raise SystemExit(f"mode {args.mode!r} does not run on a {device.kind} (there: "
                         f"{', '.join(plugin.MODES[device.kind])})")
    applied = plugin.set_precision(run, device)
    weights, state = init_variables(workload, run.seed)
    model = plugin.build_model(run, workload, weights, state, applied, device)
    batches = run_pipeline(run, workload).batches(0, 0, min(total, 16))  # cycled: staging is not what is measured
    staged = plugin.stage_batches(run, model, batches)
    return torch, model, plugin.make_step(torch, model), staged


def sync(torch: Any, model: Any) -> None:
    if model.device_type == "cuda":
        torch.cuda.synchronize()


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def summarize(torch: Any, model: Any, profile: Any, steps: int, top: int) -> list[str]:
    """The profile in a few lines: kernels and launches per step, GPU idle fraction, top kernels and operators."""
    from torch.autograd import DeviceType

    events = list(profile.events())
    lines = []
    gpu = [e for e in events if e.device_type == DeviceType.CUDA]
    launches = sum(1 for e in events if e.device_type == DeviceType.CPU and e.name in LAUNCH_CALLS)
    cpu_ops = [e for e in events if e.device_type == DeviceType.CPU]
    if model.device_type != "cuda":
        lines.append("kernels per step: none to count on a CPU (operators run on the host; see the top operators)")
    else:
        kernels = [e for e in gpu if not e.name.startswith(("Memcpy", "Memset"))]
        lines.append(f"kernels per step: {len(kernels) / steps:.0f} (GPU activities with copies and sets: "
                     f"{len(gpu) / steps:.0f}); launch calls per step: {launches / steps:.0f} "
                     "(a CUDA graph launch counts once)")
        if gpu and cpu_ops:
            begin = min(e.time_range.start for e in cpu_ops + gpu)
            end = max(e.time_range.end for e in cpu_ops + gpu)
            busy = union_seconds([(e.time_range.start, e.time_range.end) for e in gpu])
            span = max(end - begin, 1e-9)
            lines.append(f"GPU idle: {1 - busy / span:.0%} of the profiled {span / 1000 / steps:.2f} ms per step "
                         f"(some GPU activity {busy / 1000 / steps:.2f} ms per step)")
        averages = sorted((a for a in profile.key_averages() if _device_time(a) > 0),
                          key=_device_time, reverse=True)[:top]
        total = sum(_device_time(a) for a in profile.key_averages()) or 1.0
        lines.append(f"top {len(averages)} kernels and operators by GPU time (self):")
        for a in averages:
            lines.append(f"  {_device_time(a) / 1000 / steps:8.3f} ms/step {_device_time(a) / total:5.1%} "
                         f"x{a.count / steps:5.1f}  {a.key[:90]}")
    averages = sorted(profile.key_averages(), key=lambda a: a.self_cpu_time_total, reverse=True)[:top]
    lines.append(f"top {len(averages)} operators by host time (self):")
    for a in averages:
        lines.append(f"  {a.self_cpu_time_total / 1000 / steps:8.3f} ms/step x{a.count / steps:5.1f}  {a.key[:90]}")
    return lines


def _device_time(average: Any) -> float:
    """Self device time of a profiler average in microseconds (its name changed across torch versions)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(average, name, None)
        if value is not None:
            return float(value)
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--workload", default="cifar10_resnet18")
    parser.add_argument("--precision", default="amp_bf16", choices=("fp32", "tf32", "amp_fp16", "amp_bf16"))
    parser.add_argument("--mode", default="eager", choices=("eager", "compiled", "cudagraphs"))
    parser.add_argument("--batch-size", type=int, default=None, help="default: the workload's own")
    parser.add_argument("--forward-compile", action="store_true",
                        help="eager mode with the torch option compile = true (the forward pass alone compiled)")
    parser.add_argument("--warmup", type=int, default=20, help="steps before anything is measured (compilation)")
    parser.add_argument("--steps", type=int, default=50, help="timed steps (host and wall time per step)")
    parser.add_argument("--profile-steps", type=int, default=10, help="steps under torch.profiler")
    parser.add_argument("--top", type=int, default=12, help="rows of each top list")
    parser.add_argument("--out", default=None, help="also write the summary (and --trace) into this folder")
    parser.add_argument("--trace", action="store_true", help="with --out: a Chrome trace of the profiled steps")
    args = parser.parse_args()
    for name in ("warmup", "steps", "profile_steps", "top"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.device == "cpu" and args.precision == "tf32":
        parser.error("--precision tf32 needs a GPU (TF32 is NVIDIA tensor-core math)")
    torch, model, step, staged = build(args)
    batch = args.batch_size or len(staged[0][1])
    title = (f"{args.workload} {args.precision} mode {args.mode}"
             + (" (option compile: the forward pass compiled)" if args.forward_compile else "")
             + f", batch {batch}, on {args.device}")
    if model.device_type == "cuda":
        title += f" ({torch.cuda.get_device_name(0)})"
    lines = [f"profile of the suite's PyTorch step: {title}, torch {torch.__version__}"]

    began = time.perf_counter()
    for index in range(args.warmup):
        step(staged[index % len(staged)])
    sync(torch, model)
    lines.append(f"warm-up: {args.warmup} steps in {time.perf_counter() - began:.2f} s (compilation included)")

    host = 0.0
    sync(torch, model)
    start = time.perf_counter()
    for index in range(args.steps):
        before = time.perf_counter()
        step(staged[index % len(staged)])
        host += time.perf_counter() - before
    sync(torch, model)
    wall = time.perf_counter() - start
    lines.append(f"host ms/step {host / args.steps * 1000:.3f} (dispatching a step, no wait); wall ms/step "
                 f"{wall / args.steps * 1000:.3f} ({batch * args.steps / wall:,.0f} images/s); host/wall "
                 f"{host / wall:.0%}" + (" - launch-bound: the GPU waits on the host"
                                          if model.device_type == "cuda" and host / wall > 0.8 else ""))

    activities = [torch.profiler.ProfilerActivity.CPU]
    if model.device_type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        for index in range(args.profile_steps):
            step(staged[index % len(staged)])
        sync(torch, model)
    lines.append(f"torch.profiler over {args.profile_steps} steps:")
    try:
        lines += summarize(torch, model, profile, args.profile_steps, args.top)
    except Exception as exc:  # a profiler field renamed in another torch: keep the timings above
        lines.append(f"could not summarize the profile ({type(exc).__name__}: {exc}); the timings above stand")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"profile-{args.workload}-{args.precision}-{args.mode}{'-forward-compile' if args.forward_compile else ''}-b{batch}"
        (folder / f"{stem}.txt").write_text(text, encoding="utf-8")
        if args.trace:
            profile.export_chrome_trace(str(folder / f"{stem}.trace.json"))
        print(f"written: {folder / stem}.txt" + (" and .trace.json" if args.trace else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
