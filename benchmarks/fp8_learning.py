"""Does the fp8 recipe cost accuracy? The ViT and the GPT under fp8, amp_bf16 and fp32, over seeds.

Runs one sweep per model with ``amp_suite.run`` (the engine of ``amp-suite
run``), with the seeds as a sweep axis (``--seeds 3``: seeds 0, 1 and 2, the
same initial weights and batch order in every precision):

* ``mnist_vit_tiny`` on the shipped MNIST split for ``--vit-epochs`` epochs:
  its validation accuracy;
* ``text_gpt_nano`` on the shipped Shakespeare text for ``--gpt-epochs``
  epochs of ``--gpt-steps`` steps: its validation bits per character.

Then prints a row per framework and precision: the mean over seeds with the
smallest and largest seed, and the mean of the paired differences (seed by
seed) from ``amp_bf16`` and from ``fp32``.  On a CPU ``fp8`` is emulated
(docs/layers.md, "FP8"): these figures say what the recipe does to learning,
nothing about its speed, so no speed is printed.

    python benchmarks/fp8_learning.py [--frameworks torch,jax,keras] [--seeds 3]
        [--precisions fp32,amp_bf16,fp8] [--models vit,gpt] [--vit-epochs 1] [--vit-steps N]
        [--gpt-epochs 1] [--gpt-steps N] [--device cpu|gpu|auto] [--out DIR]

This is a measurement, not a test: nothing here passes or fails on a figure.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# The model's workload, and the figure that says how well it learnt (higher or lower is better).
MODELS = {"vit": ("mnist_vit_tiny", "val_accuracy", "{:.2%}", 100.0, "pt"),
          "gpt": ("text_gpt_nano", "val_bits_per_char", "{:.3f}", 1.0, "bits/char")}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,jax,keras")
    parser.add_argument("--precisions", default="fp32,amp_bf16,fp8")
    parser.add_argument("--seeds", default="3", help="a count (3: seeds 0 to 2) or a list (0,1,2), as amp-suite run")
    parser.add_argument("--models", default="vit,gpt", help="which of vit, gpt to train")
    parser.add_argument("--vit-epochs", type=int, default=1)
    parser.add_argument("--vit-steps", type=int, default=None, help="steps per ViT epoch (default: its own 62)")
    parser.add_argument("--gpt-epochs", type=int, default=1)
    parser.add_argument("--gpt-steps", type=int, default=None, help="steps per GPT epoch (default: its own 128)")
    parser.add_argument("--warmup", type=int, default=2, help="steps of each first epoch kept out of the timing")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    parser.add_argument("--out", default="amp-suite-fp8-learning")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; allowed: {', '.join(MODELS)}")
    return args


def _seeds(text: str) -> int | list[int]:
    """``3`` (a count) or ``0,1,2`` (a list), as ``amp_suite.run(seeds=...)`` takes them."""
    parts = [int(part) for part in text.split(",")]
    return parts[0] if len(parts) == 1 else parts


def train(model: str, args: argparse.Namespace) -> Any:
    """One sweep of ``model`` over the frameworks, precisions and seeds; its frame (one row per cell)."""
    import amp_suite

    epochs = args.vit_epochs if model == "vit" else args.gpt_epochs
    steps = args.vit_steps if model == "vit" else args.gpt_steps
    settings: dict[str, Any] = {"epochs": epochs, "warmup": args.warmup, "repeats": 1, "device": args.device,
                                "out": str(Path(args.out) / model), "latency_steps": 0, "seeds": _seeds(args.seeds),
                                "synthetic_fallback": False}
    if steps is not None:
        settings["steps"] = steps
    return amp_suite.run(frameworks=args.frameworks, workloads=MODELS[model][0], precisions=args.precisions,
                         quiet=False, **settings)


def _by_seed(frame: Any, framework: str, precision: str, column: str) -> dict[int, float]:
    """The figure of each seed's ok cell of ``framework`` and ``precision``."""
    rows = frame[(frame.framework == framework) & (frame.precision == precision) & (frame.status == "ok")]
    return {int(r.seed): float(getattr(r, column)) for r in rows.itertuples()
            if getattr(r, column) is not None and not math.isnan(float(getattr(r, column)))}


def _paired(mine: dict[int, float], other: dict[int, float], unit: float) -> str:
    seeds = sorted(set(mine) & set(other))
    if not seeds:
        return "–"
    return f"{statistics.fmean((mine[s] - other[s]) * unit for s in seeds):+.3f} ({len(seeds)} seeds)"


def learning_rows(model: str, frame: Any, frameworks: list[str], precisions: list[str]) -> list[dict[str, str]]:
    """A row per framework and precision: mean [min, max] over seeds, and the paired differences."""
    _, column, spec, unit, units = MODELS[model]
    rows = []
    for framework in frameworks:
        figures = {p: _by_seed(frame, framework, p, column) for p in precisions}
        for precision in precisions:
            mine = figures[precision]
            failed = frame[(frame.framework == framework) & (frame.precision == precision) & (frame.status != "ok")]
            value = (f"{spec.format(statistics.fmean(mine.values()))} [{spec.format(min(mine.values()))}, "
                     f"{spec.format(max(mine.values()))}]" if mine else
                     (str(failed.status.iloc[0]) if len(failed) else "–"))
            rows.append({"model": MODELS[model][0], "framework": framework, "precision": precision,
                         f"{column} mean [min, max]": value,
                         f"vs amp_bf16 ({units})": _paired(mine, figures.get("amp_bf16", {}), unit)
                         if precision != "amp_bf16" else "",
                         f"vs fp32 ({units})": _paired(mine, figures.get("fp32", {}), unit) if precision != "fp32"
                         else ""})
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import pandas as pd

    started = time.monotonic()
    frameworks, precisions = args.frameworks.split(","), args.precisions.split(",")
    for model in args.models.split(","):
        frame = train(model, args)
        print()
        print(pd.DataFrame(learning_rows(model, frame, frameworks, precisions)).to_markdown(
            index=False, disable_numparse=True))
        for row in frame[frame.status != "ok"].itertuples():
            print(f"{MODELS[model][0]} / {row.framework} / {row.precision}: {row.status}: {row.error}")
        print(f"report: {frame.attrs['out_dir']}/report.md")
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
