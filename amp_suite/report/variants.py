"""The report's comparison of framework variants: each environment of a framework against the first.

A sweep over ``--frameworks torch@2.12,torch@2.13`` runs one plugin in two
environments; its cells carry the environment's name as their framework
label, and the per-cell frame names the plugin (``plugin``).  For every
plugin that ran under two or more labels, :func:`variant_table` puts each
later label beside the first one on the same workload, device and
precision: throughput and peak memory as ratios, the AMP speed-up of each
(over its own fp32), and the accuracy difference.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

VARIANT_COLUMNS = ["workload", "device", "precision", "variant", "against", "throughput", "peak memory",
                   "speed-up over fp32", "accuracy"]


def variant_groups(cells: pd.DataFrame) -> dict[tuple[str, str], list[str]]:
    """(plugin, pool) -> the table names of its labels on that pool, in sweep order, where there are two or more.

    The names are the ``framework`` column's (:func:`amp_suite.report.normalize.pooled_label`): variants are
    compared on the same pool only.
    """
    if cells.empty or "plugin" not in cells:
        return {}
    groups: dict[tuple[str, str], list[str]] = {}
    for plugin, label, pool, name in zip(cells["plugin"], cells["label"], cells["pool"], cells["framework"],
                                         strict=True):
        names = groups.setdefault((plugin or label, pool or ""), [])
        if name not in names:
            names.append(name)
    return {key: names for key, names in groups.items() if len(names) > 1}


def _ratio(value: Any, ref: Any) -> str:
    if not _known(value) or not _known(ref) or not ref:
        return "–"
    return f"{value / ref:.2f}x"


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _speedup(row: pd.Series | None) -> str:
    if row is None or not _known(row.get("speedup")) or row["precision"] == "fp32":
        return "–"
    return f"{row['speedup']:.2f}x"


def variant_table(summary: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Each later variant of a framework against its first, per workload, device and precision."""
    groups = variant_groups(cells)
    if not groups or summary.empty:
        return pd.DataFrame(columns=VARIANT_COLUMNS)
    versions = _versions(cells)
    indexed = {(r["workload"], r["framework"], r["device_kind"], int(r["devices"]), r["precision"]): r
               for _, r in summary.iterrows()}
    records = []
    for labels in groups.values():
        first = labels[0]
        for (workload, label, kind, devices, precision), row in indexed.items():
            if label not in labels[1:]:
                continue
            ref = indexed.get((workload, first, kind, devices, precision))
            if ref is None:
                continue
            accuracy = "n/a"
            if _known(row["val_accuracy"]) and _known(ref["val_accuracy"]):
                accuracy = f"{(row['val_accuracy'] - ref['val_accuracy']) * 100:+.2f} pt"
            amp = "–" if precision == "fp32" else f"{_speedup(ref)} -> {_speedup(row)}"
            records.append({
                "workload": workload, "device": row["device"] + (f" x{devices}" if devices != 1 else ""),
                "precision": precision, "variant": f"{label} ({versions.get(label, '?')})",
                "against": f"{first} ({versions.get(first, '?')})",
                "throughput": _ratio(row["throughput"], ref["throughput"]),
                "peak memory": _ratio(row["peak_memory_mib"], ref["peak_memory_mib"]),
                "speed-up over fp32": amp, "accuracy": accuracy,
            })
    return pd.DataFrame(records, columns=VARIANT_COLUMNS)


def _versions(cells: pd.DataFrame) -> dict[str, str]:
    """Label -> the framework versions its ok cells reported (joined when they differ)."""
    seen: dict[str, list[str]] = {}
    for label, version in zip(cells["framework"], cells["framework_version"], strict=True):
        if version and isinstance(version, str):
            versions = seen.setdefault(label, [])
            if version not in versions:
                versions.append(version)
    return {label: ", ".join(versions) for label, versions in seen.items()}


VARIANT_NOTE = (
    "Each variant (an environment of the same framework, `[environments]` in benchmarks.toml) beside the first "
    "one of its framework in the sweep: throughput and peak memory as ratios to the first's, each one's AMP "
    "speed-up over its own fp32 (first -> variant), and the validation-accuracy difference.")


def environment_lines(cells: pd.DataFrame) -> list[str]:
    """One line per label that ran in an environment: its interpreter and framework version."""
    if cells.empty or "environment" not in cells:
        return []
    lines = []
    seen = set()
    versions = _versions(cells)
    for label, environment, interpreter in zip(cells["framework"], cells["environment"], cells["interpreter"],
                                               strict=True):
        if not environment or label in seen:
            continue
        seen.add(label)
        lines.append(f"- {label}: environment {environment!r}, {interpreter or 'no worker started'}"
                     + (f", framework {versions[label]}" if label in versions else ""))
    return lines
