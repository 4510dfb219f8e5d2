"""Fidelity benchmark of the JAX plugin on a transformer: the suite's ``mnist_vit_tiny`` cell beside a haiku ViT.

The **idiomatic** side is the ViT a haiku user writes: ``hk.Conv2D`` patches,
a class token and positions as ``hk.get_parameter``, pre-norm blocks of
``hk.LayerNorm``, one fused q/k/v ``hk.Linear`` and ``jax.nn.dot_product_attention``,
``hk.Linear`` MLPs with exact GELU; a jmp policy on the network (LayerNorm
kept in float32 by its own policy, as haiku's ImageNet example keeps
BatchNorm); ``optax.adamw`` with a decay mask after
``optax.clip_by_global_norm`` on a warm-up + cosine schedule; one jitted step
with donated state, timed from the end of warm-up to one final wait.  The
**suite** side is the same workload, batch and precision through amp-suite's
runner and worker (steady-state throughput of its measurement window).  Both
start from the suite's initial weights and see the suite's batches, in the
same order (written by this script from the suite's own pipeline), and their
first-step losses must agree.  Each run is a fresh process; the two sides
alternate over ``--rounds`` rounds.  It prints suite/idiomatic throughput
(ratio of medians, and per round).  Target: >= 0.95.

    python benchmarks/overhead_vit_jax.py [--precisions fp32,amp_bf16] [--steps 30] [--warmup 10] [--rounds 3]
    python benchmarks/overhead_vit_jax.py --idiomatic PRECISION STEPS WARMUP DATA   (one idiomatic run)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import fidelity_rounds
import numpy as np
from fidelity_rounds import REPO, WORKLOAD


def suite_run(precision: str, steps: int, warmup: int) -> tuple[Any, Any]:
    """The suite's run of ``mnist_vit_tiny`` (synthetic images: both sides read the same ones), and its workload."""
    return fidelity_rounds.suite_run("jax", precision, steps, warmup, catalog=REPO / "benchmarks.toml")


def write_inputs(steps: int, warmup: int, path: Path) -> Path:
    """The suite's first epoch of batches, its initial weights and the workload's sizes and optimizer."""
    from amp_suite.datasets import run_pipeline
    from amp_suite.workloads.workload import init_variables, variable_specs

    run, workload = suite_run("fp32", steps, warmup)
    batches = run_pipeline(run, workload).epoch(0)
    weights, _ = init_variables(workload, run.seed)
    shape, optimizer = workload.transformer, workload.optimizer
    meta = {"width": shape.width, "depth": shape.depth, "heads": shape.heads, "mlp": shape.mlp, "patch": shape.patch,
            "classes": workload.num_classes, "learning_rate": optimizer.learning_rate,
            "weight_decay": optimizer.weight_decay, "warmup_steps": optimizer.warmup_steps,
            "clip_norm": optimizer.clip_norm, "beta1": optimizer.beta1, "beta2": optimizer.beta2,
            "epsilon": optimizer.epsilon, "decayed": sorted(v.name for v in variable_specs(workload) if v.decay)}
    np.savez(path, images=np.stack([b.images for b in batches]), labels=np.stack([b.labels for b in batches]),
             meta=np.asarray(json.dumps(meta)), **weights)
    return path


def idiomatic_loop(precision: str, steps: int, warmup: int, data: str) -> tuple[float, float]:
    """(images/s, first step's loss) of the hand-written haiku ViT."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import haiku as hk
    import jax
    import jax.numpy as jnp
    import jmp
    import optax

    with np.load(data) as arrays:
        images, labels = arrays["images"], arrays["labels"]
        meta = json.loads(str(arrays["meta"]))
        canonical = {k: arrays[k] for k in arrays.files if "/" in k}
    width, heads, patch = meta["width"], meta["heads"], meta["patch"]

    class LayerNorm(hk.LayerNorm):
        def __init__(self, name: str) -> None:
            super().__init__(axis=-1, create_scale=True, create_offset=True, eps=1e-5, name=name)

    class Attention(hk.Module):
        def __call__(self, x: Any) -> Any:
            n, t, f = x.shape
            q, k, v = jnp.split(hk.Linear(3 * f, name="qkv")(x).reshape(n, t, 3, heads, f // heads), 3, axis=2)
            mixed = jax.nn.dot_product_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0])
            return hk.Linear(f, name="out")(mixed.reshape(n, t, f))

    class ViT(hk.Module):
        def __call__(self, x: Any) -> Any:
            x = hk.Conv2D(width, patch, stride=patch, padding="VALID", name="patch")(x)
            x = x.reshape(x.shape[0], -1, width)
            token = hk.get_parameter("cls", (width,), init=jnp.zeros)
            x = jnp.concatenate([jnp.broadcast_to(token, (x.shape[0], 1, width)), x], axis=1)
            x = x + hk.get_parameter("pos", x.shape[1:], init=jnp.zeros)
            for i in range(1, meta["depth"] + 1):
                x = x + Attention(name=f"block{i}_attn")(LayerNorm(f"block{i}_ln1")(x))
                y = jax.nn.gelu(hk.Linear(meta["mlp"], name=f"block{i}_mlp1")(LayerNorm(f"block{i}_ln2")(x)),
                                approximate=False)
                x = x + hk.Linear(width, name=f"block{i}_mlp2")(y)
            return hk.Linear(meta["classes"], name="head")(LayerNorm("final_ln")(x)[:, 0])

    compute = {"amp_bf16": jnp.bfloat16, "amp_fp16": jnp.float16}.get(precision, jnp.float32)
    hk.mixed_precision.set_policy(ViT, jmp.Policy(jnp.float32, compute, jnp.float32))
    hk.mixed_precision.set_policy(LayerNorm, jmp.Policy(jnp.float32, jnp.float32, compute))
    net = hk.without_apply_rng(hk.transform(lambda x: ViT(name="vit")(x)))
    params = jax.tree_util.tree_map(np.asarray, net.init(jax.random.PRNGKey(0), images[0]))
    decayed = set(meta["decayed"])
    mask = {module: {leaf: _canonical_name(module, leaf) in decayed for leaf in leaves}
            for module, leaves in params.items()}
    params = _load(params, canonical)
    if steps <= meta["warmup_steps"]:
        raise SystemExit(f"STEPS must exceed the workload's {meta['warmup_steps']} warm-up steps, got {steps}")
    schedule = optax.warmup_cosine_decay_schedule(0.0, meta["learning_rate"], meta["warmup_steps"], steps, 0.0)
    optimizer = optax.chain(optax.clip_by_global_norm(meta["clip_norm"]),
                            optax.adamw(schedule, b1=meta["beta1"], b2=meta["beta2"], eps=meta["epsilon"],
                                        weight_decay=meta["weight_decay"], mask=mask))
    opt_state = optimizer.init(params)

    def loss_fn(p: Any, x: Any, y: Any) -> Any:
        return optax.softmax_cross_entropy_with_integer_labels(net.apply(p, x).astype(jnp.float32), y).mean()

    def step(p: Any, s: Any, x: Any, y: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = optimizer.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    step = jax.jit(step, donate_argnums=(0, 1))
    order = np.arange(steps) % images.shape[0]
    xs, ys = jax.device_put(images[order]), jax.device_put(labels[order])
    params = jax.device_put(params)
    for index in range(steps):
        if index == warmup:
            jax.block_until_ready(params)
            start = time.perf_counter()
        params, opt_state, loss = step(params, opt_state, xs[index], ys[index])
        if index == 0:
            first = float(loss)
    jax.block_until_ready((params, loss))
    return (steps - warmup) * images.shape[1] / (time.perf_counter() - start), first


def _canonical_name(module: str, leaf: str) -> str:
    """The suite's name of a haiku ViT parameter: ``vit/block1_attn/qkv`` ``w`` -> ``block1_attn/qkv_w``."""
    parts = module.split("/")
    if len(parts) == 1:  # the ViT's own parameters: the class token and the positions
        return {"cls": "cls/token", "pos": "pos/table"}[leaf]
    if len(parts) == 3:  # an attention's two Linears
        return f"{parts[1]}/{parts[2]}_{leaf}"
    return f"{parts[1]}/{leaf}"


def _load(params: dict[str, dict[str, np.ndarray]], canonical: dict[str, np.ndarray]) -> dict[str, Any]:
    """The suite's canonical variables in the haiku ViT's tree (the same layouts)."""
    loaded: dict[str, dict[str, np.ndarray]] = {}
    for module, leaves in params.items():
        loaded[module] = {}
        for leaf, value in leaves.items():
            key = _canonical_name(module, leaf)
            if canonical[key].shape != value.shape:
                raise SystemExit(f"{key}: canonical shape {canonical[key].shape} != haiku {value.shape}")
            loaded[module][leaf] = canonical[key]
    return loaded


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--idiomatic":
        precision, steps, warmup, data = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        throughput, first = idiomatic_loop(precision, steps, warmup, data)
        print(json.dumps({"throughput": throughput, "first_step_loss": first}))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precisions", default="fp32,amp_bf16")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not 1 <= args.warmup < args.steps:
        parser.error(f"--warmup must be at least 1 and below --steps ({args.steps})")
    print(f"{WORKLOAD} (batch 128), {args.steps} steps ({args.warmup} warm-up), {args.rounds} interleaved rounds, "
          "each run in a fresh process")
    print(f"{'precision':<9} {'idiomatic img/s':>15} {'suite img/s':>11} {'ratio':>6}  per round")
    worst = float("inf")
    with tempfile.TemporaryDirectory() as scratch:
        data = write_inputs(args.steps, args.warmup, Path(scratch) / "inputs.npz")
        for precision in args.precisions.split(","):
            measured = fidelity_rounds.interleaved_rounds(
                args.rounds, lambda: fidelity_rounds.suite(*suite_run(precision, args.steps, args.warmup)),  # noqa: B023
                lambda: fidelity_rounds.idiomatic(__file__, precision, args.steps, args.warmup, data),  # noqa: B023
                f"jax {precision}")
            worst = min(worst, measured.ratio)
            print(f"{precision:<9} {statistics.median(measured.idiomatic):>15,.0f} "
                  f"{statistics.median(measured.suite):>11,.0f} {measured.ratio:>6.3f}  ({measured.per_round})",
                  flush=True)
    print(fidelity_rounds.verdict(worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
