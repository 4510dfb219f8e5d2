"""The report's lines for token workloads (language models) and for the dataset of each workload.

A token workload's cells carry ``tokens_per_s`` (samples/s x context),
``val_bits_per_char`` (validation loss / ln 2) and the dataset's unigram
baseline (``unigram_bits_per_char``) beside the figures every cell has.  The
report gives them a table of their own, one row per workload, framework and
precision (the median over repeats of the cells that finished), so the image
tables stay as they are.
"""

from __future__ import annotations

import math

import pandas as pd

from amp_suite.precision import PRECISIONS
from amp_suite.report.text import markdown_cell

# Columns of results.csv that only token workloads fill.
TOKEN_COLUMNS = ["tokens_per_s", "val_bits_per_char", "unigram_bits_per_char", "context"]
TOKEN_NOTE = ("Token workloads (language models): tokens/s is samples/s times the context; validation loss is "
              "the mean cross-entropy over every token, in bits per character (nats / ln 2), beside the "
              "unigram baseline of the dataset (the training split's character frequencies scored on the "
              "validation split: a model that learns anything beats it); accuracy is next-character accuracy "
              "over every validation token.")


def dataset_line(cells: pd.DataFrame) -> str:
    """``mnist`` for a sweep on one dataset; ``tiny: synthetic; text_gpt_nano: text`` when workloads differ."""
    pairs = {(w, d) for w, d in zip(cells["workload"], cells["dataset"], strict=True) if d}
    datasets = sorted({d for _, d in pairs})
    if len(datasets) <= 1:
        return ", ".join(datasets)
    by_workload: dict[str, list[str]] = {}
    for workload, dataset in sorted(pairs):
        by_workload.setdefault(workload, []).append(dataset)
    return "; ".join(f"{w}: {', '.join(d)}" for w, d in by_workload.items())


def _median(values: pd.Series) -> float:
    numbers = pd.to_numeric(values, errors="coerce").dropna()
    return float(numbers.median()) if len(numbers) else math.nan


def _fmt(value: float, spec: str) -> str:
    return "–" if value is None or math.isnan(value) else spec.format(value)


def token_frame(cells: pd.DataFrame) -> pd.DataFrame:
    """Token workloads' figures, a row per workload, framework and precision (empty when the sweep has none)."""
    if cells.empty or "tokens_per_s" not in cells:
        return pd.DataFrame()
    ok = cells[(cells["status"] == "ok") & pd.to_numeric(cells["tokens_per_s"], errors="coerce").notna()]
    if ok.empty:
        return pd.DataFrame()
    order = {p: i for i, p in enumerate(PRECISIONS)}
    # the sweep's order of workloads and frameworks (as every other table), precisions in their usual order
    first_seen = {key: i for i, key in enumerate(dict.fromkeys(zip(ok["workload"], ok["framework"], strict=True)))}
    records = []
    for (workload, framework, precision), group in sorted(
            ok.groupby(["workload", "framework", "precision"], sort=False),
            key=lambda item: (first_seen[item[0][:2]], order.get(item[0][2], len(order)))):
        accuracy = _median(group["val_accuracy"])
        records.append({
            "workload": markdown_cell(str(workload)), "framework": markdown_cell(str(framework)),
            "precision": markdown_cell(str(precision)),
            "samples/s": _fmt(_median(group["throughput"]), "{:,.1f}"),
            "tokens/s": _fmt(_median(group["tokens_per_s"]), "{:,.0f}"),
            "val bits/char": _fmt(_median(group["val_bits_per_char"]), "{:.3f}"),
            "unigram baseline": _fmt(_median(group["unigram_bits_per_char"]), "{:.3f}"),
            "next-token accuracy": _fmt(accuracy * 100 if not math.isnan(accuracy) else math.nan, "{:.2f}%"),
        })
    return pd.DataFrame(records)


def throughput_unit(token_workloads: pd.Series | list[bool]) -> str:
    """What a throughput column counts: ``images/s``, ``samples/s`` for token workloads alone, or both named."""
    flags = [bool(flag) for flag in token_workloads]
    if flags and all(flags):
        return "samples/s"
    return "images/s (samples/s for a token workload)" if any(flags) else "images/s"
