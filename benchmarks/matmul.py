"""What can this machine's matrix units do?  fp32 vs bf16 vs fp16 matmul in PyTorch.

Prints the throughput of an N x N matmul in each dtype and its ratio to fp32,
so a report's AMP speed-ups can be read against the hardware's own ceiling
(on CPUs: AVX-512 BF16/FP16 and AMX; on GPUs: tensor cores).

    python benchmarks/matmul.py [--size 2048] [--repeats 20] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget", type=float, default=5.0,
                        help="seconds: a dtype whose first call takes longer is timed once (no fast kernel)")
    args = parser.parse_args()

    import torch

    from amp_suite.machine.environment import cpu_info

    info = cpu_info()
    print(f"torch {torch.__version__}, {args.device}, {info['cpu_model']} "
          f"(flags: {', '.join(info['cpu_flags']) or 'none of interest'}), {torch.get_num_threads()} threads")
    n = args.size
    flops = 2 * n ** 3
    base = None
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        a = torch.randn(n, n, device=args.device).to(dtype)
        b = torch.randn(n, n, device=args.device).to(dtype)
        # A first, small call: a dtype without fast kernels (fp16 on most CPUs)
        # would take minutes at full size, so it is measured small and scaled.
        probe = max(256, n // 8)
        start = time.perf_counter()
        (a[:probe, :probe] @ b[:probe, :probe]).sum().item()
        estimate = (time.perf_counter() - start) * (n / probe) ** 3
        repeats = args.repeats + 3 if estimate < args.budget else 0
        times = []
        for index in range(repeats):
            start = time.perf_counter()
            (a @ b).sum().item()  # .item() waits for the device
            if index >= 3:  # the first calls pick kernels
                times.append(time.perf_counter() - start)
        if not times:
            print(f"{str(dtype).removeprefix('torch.'):<9} no fast kernel: ~{estimate:.0f} s per matmul "
                  f"(estimated from {probe}x{probe}); skipped")
            continue
        seconds = statistics.median(times)
        tflops = flops / seconds / 1e12
        base = base or tflops
        print(f"{str(dtype).removeprefix('torch.'):<9} {seconds * 1000:9.2f} ms  {tflops:7.3f} TFLOP/s  "
              f"{tflops / base:5.2f}x fp32")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
