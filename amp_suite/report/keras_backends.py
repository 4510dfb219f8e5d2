"""The report's Keras backends: which backend each Keras framework ran on, and the cost of the Keras layer.

Keras 3 runs on TensorFlow, JAX or PyTorch (frameworks ``keras``,
``keras@jax``, ``keras@torch``); each of its cells records the backend it ran
on as the figure ``keras_backend``.  :func:`backend_lines` names them in the
environment section.  :func:`keras_cost_table` puts each Keras cell beside
the native cell of its backend's framework (``keras@jax`` beside ``jax``,
``keras@torch`` beside ``torch``) on the same workload, device and precision,
when the sweep ran both: throughput and peak memory as ratios to the native
framework's, and the AMP speed-up of each over its own fp32.  TensorFlow has no
native plugin of its own, so ``keras`` on TensorFlow has no row.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from amp_suite.report.marks import EMULATED_MARK, FLAG_MARK, SINGLE_RUN_MARK

KERAS_COST_COLUMNS = ["workload", "device", "precision", "keras", "native", "throughput", "peak memory",
                      "speed-up over fp32"]
KERAS_COST_NOTE = (
    "Keras on a backend beside that backend's own framework in the same sweep (same workload, weights, batches "
    "and precision): throughput and peak memory of Keras as ratios to the native framework's (below 1.00x: "
    "Keras is slower or smaller), and each one's AMP speed-up over its own fp32 (native -> Keras). A ratio marked "
    f"{FLAG_MARK} has a flagged measurement on either side, {SINGLE_RUN_MARK!r} rests on a single run of either: "
    "read it as a hint, not a figure; an emulated precision (fp8 without FP8 matmuls) has no ratio of speed.")


def _keras_labels(cells: pd.DataFrame) -> dict[str, str]:
    """Framework label -> the Keras backend its cells recorded, for labels that recorded one."""
    if cells.empty or "keras_backend" not in cells:
        return {}
    found: dict[str, str] = {}
    for label, backend in zip(cells["framework"], cells["keras_backend"], strict=True):
        if isinstance(backend, str) and backend and label not in found:
            found[label] = backend
    return found


def backend_lines(cells: pd.DataFrame) -> list[str]:
    """One environment line naming the backend and versions of every Keras framework of the sweep."""
    labels = _keras_labels(cells)
    if not labels:
        return []
    versions: dict[str, str] = {}
    for label, version in zip(cells["framework"], cells["framework_version"], strict=True):
        if label in labels and isinstance(version, str) and version:
            versions.setdefault(label, version)
    parts = [f"{label}: Keras on {backend} (KERAS_BACKEND={backend}"
             + (f"; {versions[label]})" if label in versions else ")") for label, backend in labels.items()]
    return ["- Keras backends: " + "; ".join(parts)]


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _ratio(value: Any, ref: Any) -> str:
    return f"{value / ref:.2f}x" if _known(value) and _known(ref) and ref else "–"


def _runs(row: pd.Series) -> int:
    runs = row.get("ok_repeats")
    return int(runs) if _known(runs) else 0


def _speedup(row: pd.Series) -> str:
    return f"{row['speedup']:.2f}x" if _known(row.get("speedup")) else "–"


def keras_cost_table(summary: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Each Keras framework's summary row beside its backend's native framework (see the module's docstring)."""
    labels = _keras_labels(cells)
    if not labels or summary.empty:
        return pd.DataFrame(columns=KERAS_COST_COLUMNS)
    indexed = {(r["workload"], r["framework"], r["device_kind"], int(r["devices"]), r["precision"]): r
               for _, r in summary.iterrows()}
    records = []
    for (workload, label, kind, devices, precision), row in indexed.items():
        native = labels.get(label)
        ref = indexed.get((workload, native, kind, devices, precision)) if native else None
        if ref is None:
            continue
        emulated = bool(row.get("emulated")) or bool(ref.get("emulated"))
        marks = [mark for mark, present in (
            (FLAG_MARK, bool(row.get("flagged")) or bool(ref.get("flagged"))),
            (SINGLE_RUN_MARK, min(_runs(row), _runs(ref)) < 2)) if present]
        throughput = (f"– ({EMULATED_MARK}: the emulation's speed, no ratio)" if emulated
                      else " ".join([_ratio(row["throughput"], ref["throughput"]), *marks]))
        records.append({
            "workload": workload, "device": row["device"] + (f" x{devices}" if devices != 1 else ""),
            "precision": precision, "keras": label, "native": native,
            "throughput": throughput,
            "peak memory": _ratio(row["peak_memory_mib"], ref["peak_memory_mib"]),
            "speed-up over fp32": "–" if precision == "fp32" or emulated else f"{_speedup(ref)} -> {_speedup(row)}",
        })
    return pd.DataFrame(records, columns=KERAS_COST_COLUMNS)
