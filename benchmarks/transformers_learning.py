"""Do the transformers learn, in every framework and precision? A fixed budget, then validation figures.

Runs two sweeps with ``amp_suite.run`` (the engine of ``amp-suite run``), one
per model, each on its own dataset:

* ``mnist_vit_tiny`` on the shipped MNIST split (``test[:8000]`` trains,
  ``test[8000:]`` validates) for ``--vit-epochs`` epochs of its 62 steps:
  its validation accuracy (issue 40 aims at 95% or more);
* ``text_gpt_nano`` on the shipped Shakespeare text for ``--gpt-epochs``
  epochs of ``--gpt-steps`` steps: its validation bits per character beside
  the text's unigram baseline (4.72 bits per character: a model below it has
  learnt more than character frequencies).

Then prints one table: a row per framework and precision, the ViT's accuracy,
the GPT's bits per character, the baseline, how far below it the GPT got, and
tokens/s.  A cell that did not finish shows its status (``unsupported`` for a
framework whose plugin does not build the transformer kinds yet, with the
kinds it lacks in the error), so the table is useful with whatever frameworks
run today; ``--plugin MODULE`` adds a plugin module, as ``amp-suite run -p``.

    python benchmarks/transformers_learning.py [--frameworks torch,keras,jax]
        [--precisions fp32,amp_bf16,amp_fp16] [--vit-epochs 3] [--gpt-epochs 2] [--gpt-steps 128]
        [--models vit,gpt] [--device cpu|gpu|auto] [--out DIR] [--plugin MODULE] [--inline]

This is a measurement, not a test: nothing here passes or fails on a figure.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

# What each model trains on, and the figure its column shows.
MODELS = {"vit": "mnist_vit_tiny", "gpt": "text_gpt_nano"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,keras,jax")
    parser.add_argument("--precisions", default="fp32,amp_bf16,amp_fp16")
    parser.add_argument("--models", default="vit,gpt", help="which of vit, gpt to train")
    parser.add_argument("--vit-epochs", type=int, default=3, help="epochs of 62 steps (batch 128) of the ViT")
    parser.add_argument("--vit-steps", type=int, default=None, help="steps per ViT epoch (default: its own 62)")
    parser.add_argument("--gpt-epochs", type=int, default=2, help="epochs of the GPT")
    parser.add_argument("--gpt-steps", type=int, default=None, help="steps per GPT epoch (default: its own 128)")
    parser.add_argument("--warmup", type=int, default=3, help="steps of each first epoch kept out of the timing")
    parser.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    parser.add_argument("--out", default="amp-suite-transformers-learning")
    parser.add_argument("--plugin", action="append", default=[], help="an extra plugin module (repeatable)")
    parser.add_argument("--inline", action="store_true", help="run the cells in this process (debugging)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"unknown model {unknown[0]!r}; allowed: {', '.join(MODELS)}")
    return args


def train(model: str, args: argparse.Namespace) -> Any:
    """One sweep of ``model`` over the frameworks and precisions; its frame (one row per cell)."""
    import amp_suite

    epochs = args.vit_epochs if model == "vit" else args.gpt_epochs
    steps = args.vit_steps if model == "vit" else args.gpt_steps
    settings: dict[str, Any] = {"epochs": epochs, "warmup": args.warmup, "repeats": 1, "device": args.device,
                                "out": str(Path(args.out) / model), "latency_steps": 0,
                                "synthetic_fallback": False}
    if steps is not None:
        settings["steps"] = steps
    return amp_suite.run(frameworks=args.frameworks, workloads=MODELS[model], precisions=args.precisions,
                         plugins=tuple(args.plugin), inline=args.inline, quiet=False, **settings)


def _figure(row: Any, column: str, spec: str) -> str:
    if row is None:
        return "–"
    if row.status != "ok":
        return row.status
    value = getattr(row, column)
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else spec.format(value)


def learning_table(frames: dict[str, Any], frameworks: list[str], precisions: list[str]) -> list[dict[str, str]]:
    """A row per framework and precision: the ViT's accuracy, the GPT's bits per character and the baseline."""
    cells = {(model, r.framework, r.precision): r for model, frame in frames.items() for r in frame.itertuples()}
    rows = []
    for framework in frameworks:
        for precision in precisions:
            vit, gpt = cells.get(("vit", framework, precision)), cells.get(("gpt", framework, precision))
            below = "–"
            if gpt is not None and gpt.status == "ok" and gpt.unigram_bits_per_char == gpt.unigram_bits_per_char:
                below = f"{gpt.unigram_bits_per_char - gpt.val_bits_per_char:+.3f}"
            rows.append({
                "framework": framework, "precision": precision,
                "ViT MNIST val accuracy": _figure(vit, "val_accuracy", "{:.2%}") if "vit" in frames else "not run",
                "GPT val bits/char": _figure(gpt, "val_bits_per_char", "{:.3f}") if "gpt" in frames else "not run",
                "unigram baseline": _figure(gpt, "unigram_bits_per_char", "{:.3f}") if "gpt" in frames else "–",
                "baseline − GPT": below,
                "GPT tokens/s": _figure(gpt, "tokens_per_s", "{:,.0f}") if "gpt" in frames else "–",
            })
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import pandas as pd

    started = time.monotonic()
    frames = {model: train(model, args) for model in args.models.split(",")}
    frameworks, precisions = args.frameworks.split(","), args.precisions.split(",")
    table = pd.DataFrame(learning_table(frames, frameworks, precisions))
    print()
    print(table.to_markdown(index=False, disable_numparse=True))
    print()
    for model, frame in frames.items():
        done = frame[frame.status == "ok"]
        if done.empty:
            print(f"{MODELS[model]}: no framework finished a cell (see {frame.attrs['out_dir']}/report.md)")
        for row in frame[frame.status != "ok"].itertuples():
            print(f"{MODELS[model]} / {row.framework} / {row.precision}: {row.status}: {row.error}")
    print(f"{sum(len(f) for f in frames.values())} cells in {time.monotonic() - started:.0f} s; the reports: "
          + ", ".join(f"{frame.attrs['out_dir']}/report.md" for frame in frames.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
