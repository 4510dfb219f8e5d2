"""Whether the fp8 precision's matmuls reach FP8 tensor cores, how close they land to the NumPy recipe, and at what speed.

    python benchmarks/fp8_native_check.py --framework torch|jax [--json OUT.json]

For each of two shapes (the character GPT's MLP, 4096 x 128 -> 512, and a
large 8192 x 4096 -> 4096 matmul) it runs the plugin's own fp8 dense layer
(``amp_suite_plugins.torch.fp8.fp8_linear``, ``amp_suite_plugins.jax.fp8.fp8_matmul``)
forward and backward on the framework's default device and prints:

- **the path**: PyTorch counts ``aten::_scaled_mm`` calls in one forward and
  backward (3 when the native path runs); JAX counts XLA's cuBLASLt FP8 GEMM
  calls (``__cublas$lt$matmul$f8``) in the compiled program's text: 0 on an
  H100 before the layer's optimization barrier, and 0 by construction since
  (a count above 0 would say that XLA now rewrites through it);
- **the numbers**: the relative difference (max |a - b| / max |b|) of the
  output and both gradients from the recipe's NumPy reference
  (``amp_suite.numerics.fp8.dense_forward`` and ``dense_backward``, float64),
  and ``fp8_rounding``: ``kept`` when every product lies far nearer the
  recipe than the same products without FP8 rounding do, ``dropped`` when it
  lies as far (a compiler removed the casts: XLA on an H100 did, before the
  JAX layer held its FP8 values behind an optimization barrier);
- **the speed**: forward and backward of the fp8 layer against the same
  matmul in bfloat16, in TFLOP/s (3 matmuls of ``2 * rows * in * out`` each),
  timed over 20 calls after 5 (device work waited for: CUDA events in
  PyTorch, ``block_until_ready`` in JAX).

On a CPU or a GPU without FP8 tensor cores both frameworks run the emulated
recipe: the counts are 0 and the speed is the emulation's. It needs a GPU of
compute capability 8.9 or newer to say anything of FP8 hardware; docs/gpu.md
quotes what an H100 gave.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from amp_suite.numerics.formats import BFLOAT16, round_to
from amp_suite.numerics.fp8 import dense_backward, dense_forward

SHAPES = {"gpt_mlp": (4096, 128, 512), "large": (8192, 4096, 4096)}
WARMUP, TIMED = 5, 20


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def inputs(rows: int, features_in: int, features_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x (rows, in), w (in, out) and an output gradient, float32, from seed 0; x and the gradient are bfloat16
    values, as the layer's input and incoming gradient are under amp_bf16."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, features_in)).astype(np.float32)  # the layer's input under amp_bf16
    w = (rng.standard_normal((features_in, features_out)) / np.sqrt(features_in)).astype(np.float32)
    grad = (rng.standard_normal((rows, features_out)) * 1e-3).astype(np.float32)
    return bfloat16_values(x), w, bfloat16_values(grad)


def bfloat16_values(values: np.ndarray) -> np.ndarray:
    """``values`` truncated to bfloat16's 8 significant bits (exact in bfloat16, so every side starts equal)."""
    return (values.view(np.uint32) & 0xFFFF0000).view(np.float32)


def reference(x: np.ndarray, w: np.ndarray, grad: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    out = dense_forward(x.astype(np.float64), w.astype(np.float64), None)
    grad_x, grad_w = dense_backward(x.astype(np.float64), w.astype(np.float64), grad.astype(np.float64))
    return out, grad_x, grad_w


def judged(products: tuple[np.ndarray, np.ndarray, np.ndarray], x: np.ndarray, w: np.ndarray,
           grad: np.ndarray) -> dict[str, Any]:
    """The products' relative differences from the recipe, and whether their FP8 rounding was kept: each must lie
    within a quarter of the distance between the recipe and the same products unrounded (bfloat16 results)."""
    want = reference(x, w, grad)
    x64, w64, g64 = (a.astype(np.float64) for a in (x, w, grad))
    unrounded = tuple(round_to(p, BFLOAT16) for p in (x64 @ w64, g64 @ w64.T, x64.T @ g64))
    names = ("output", "grad_x", "grad_w")
    got = {name: relative(p, r) for name, p, r in zip(names, products, want, strict=True)}
    far = {name: relative(u, r) for name, u, r in zip(names, unrounded, want, strict=True)}
    kept = all(got[name] < far[name] / 4 for name in names)
    return {"relative_difference": got, "unrounded_difference": far, "fp8_rounding": "kept" if kept else "dropped"}


def check_torch(shape: tuple[int, int, int]) -> dict[str, Any]:
    import torch

    from amp_suite_plugins.torch.fp8 import fp8_linear

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    capability = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else None
    native = capability is not None and capability >= (8, 9) and torch.version.hip is None  # ROCm: other formats
    x_np, w_np, grad_np = inputs(*shape)
    x = torch.tensor(x_np, device=dev).to(torch.bfloat16).requires_grad_(True)
    weight = torch.tensor(w_np.T.copy(), device=dev, requires_grad=True)  # torch's (out, in)
    grad = torch.tensor(grad_np, device=dev).to(torch.bfloat16)
    found: dict[str, Any] = {"device": str(torch.cuda.get_device_name(dev)) if dev.type == "cuda" else "cpu",
                             "compute_capability": ".".join(map(str, capability)) if capability else None,
                             "native": native}

    def step(use_native: bool) -> tuple[Any, Any, Any]:
        x.grad = weight.grad = None
        out = fp8_linear(torch, x, weight, None, native=use_native)
        out.backward(grad)
        return out, x.grad, weight.grad

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
        out, grad_x, grad_w = step(native)
        if dev.type == "cuda":
            torch.cuda.synchronize()
    found["fp8_gemm_calls"] = sum(e.count for e in trace.key_averages() if e.key == "aten::_scaled_mm")
    found.update(judged((out.detach().float().cpu().numpy(), grad_x.float().cpu().numpy(),
                         grad_w.float().cpu().numpy().T), x_np, w_np, grad_np))

    def bf16_step() -> None:
        x.grad = weight.grad = None
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            out = torch.nn.functional.linear(x, weight)
        out.backward(grad)

    found["tflops"] = {"bf16": timed_torch(torch, dev, bf16_step, shape),
                       "fp8": timed_torch(torch, dev, lambda: step(native), shape)}
    return found


def timed_torch(torch: Any, dev: Any, fn: Any, shape: tuple[int, int, int]) -> float:
    for _ in range(WARMUP):
        fn()
    if dev.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(TIMED):
            fn()
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
    else:
        began = time.perf_counter()
        for _ in range(TIMED):
            fn()
        seconds = time.perf_counter() - began
    return flops(shape) * TIMED / seconds / 1e12


def flops(shape: tuple[int, int, int]) -> float:
    rows, features_in, features_out = shape
    return 3 * 2.0 * rows * features_in * features_out


def check_jax(shape: tuple[int, int, int]) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from amp_suite_plugins.jax.fp8 import fp8_gemm_calls, fp8_matmul

    dev = jax.devices()[0]
    x_np, w_np, grad_np = inputs(*shape)
    x, w = jnp.asarray(x_np, jnp.bfloat16), jnp.asarray(w_np)
    grad = jnp.asarray(grad_np, jnp.bfloat16)

    def forward_backward(matmul: Any) -> Any:
        def run(x: Any, w: Any, grad: Any) -> Any:
            out, pullback = jax.vjp(matmul, x, w)
            return (out, *pullback(grad.astype(out.dtype)))
        return jax.jit(run)

    fp8 = forward_backward(fp8_matmul)
    compiled = fp8.lower(x, w, grad).compile()
    text = compiled.as_text() or ""
    found: dict[str, Any] = {"device": f"{dev.platform}: {dev.device_kind}",
                             "compute_capability": getattr(dev, "compute_capability", None),
                             "fp8_gemm_calls": fp8_gemm_calls(text)}
    out, grad_x, grad_w = compiled(x, w, grad)
    found.update(judged(tuple(np.asarray(p, np.float32) for p in (out, grad_x, grad_w)), x_np, w_np, grad_np))
    bf16 = forward_backward(lambda x, w: jnp.matmul(x, w.astype(jnp.bfloat16)))
    found["tflops"] = {"bf16": timed_jax(bf16, (x, w, grad), shape), "fp8": timed_jax(compiled, (x, w, grad), shape)}
    return found


def timed_jax(fn: Any, args: tuple[Any, ...], shape: tuple[int, int, int]) -> float:
    import jax

    for _ in range(WARMUP):
        jax.block_until_ready(fn(*args))
    began = time.perf_counter()
    for _ in range(TIMED):
        result = fn(*args)
    jax.block_until_ready(result)
    return flops(shape) * TIMED / (time.perf_counter() - began) / 1e12


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax"), required=True)
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--json", type=Path, help="also write the findings here")
    args = parser.parse_args()
    unknown = [s for s in args.shapes.split(",") if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape {unknown[0]!r}; allowed: {', '.join(SHAPES)}")
    check = check_torch if args.framework == "torch" else check_jax
    results = {}
    for name in args.shapes.split(","):
        rows, features_in, features_out = SHAPES[name]
        try:
            found = check(SHAPES[name])
        except Exception as error:  # a path that breaks is the finding: say it, go on to the next shape
            found = {"error": f"{type(error).__name__}: {error}"}
        results[name] = found
        print(f"{args.framework} {name} ({rows} x {features_in} -> {features_out}): {json.dumps(found)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"framework": args.framework, "shapes": results}, indent=2))
    return 1 if any("error" in found for found in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
