"""The report's cross-pool table: one row per workload, framework and precision, one column per device pool.

A sweep over ``--pools t4,a100,h100`` runs every cell on every pool (the
cluster executors, docs/cluster.md).  Each pool's column gives the
throughput with AMP's speed-up over fp32 *on that pool*, the speed-up's
ceiling there (from the calibration cached on the pool's node, where there
is one) and, with the pool's ``price_per_hour``, what a million training
images cost on it.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from amp_suite.calibration.ceiling import ceiling_ratio

CROSS_POOL_NOTE = (
    "Each pool's column: steady-state images/s, AMP's speed-up over fp32 on the same pool, the speed-up's "
    "ceiling there (the measured peak of the AMP dtype over fp32's, from the calibration cached on the pool's "
    "node: `amp-suite calibrate` there adds it) and the cost of a million training images at the pool's "
    "price_per_hour (10^6 / images/s x price / 3600). Pools' machines: see the lines below the table.")


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def cross_pool_table(summary: pd.DataFrame, cells: pd.DataFrame, environment: dict[str, Any]) -> pd.DataFrame:
    """Rows workload x framework x devices x precision, a column per pool; empty without two pools."""
    if cells.empty or "pool" not in cells:
        return pd.DataFrame()
    pools = [p for p in dict.fromkeys(cells["pool"]) if p]
    if len(pools) < 2:
        return pd.DataFrame()
    described = environment.get("pools") or {}
    names = {(row["framework"]): (row["label"], row["pool"], row["plugin"]) for _, row in cells.iterrows()}
    table: dict[tuple[str, str, int, str], dict[str, str]] = {}
    for _, row in summary.iterrows():
        label, pool, plugin = names.get(row["framework"], (row["framework"], "", row["framework"]))
        if not pool:
            continue
        key = (row["workload"], label, int(row["devices"]), row["precision"])
        table.setdefault(key, {})[pool] = _cell_text(row, described.get(pool) or {}, plugin)
    records = []
    for (workload, label, devices, precision), by_pool in table.items():
        record = {"workload": workload, "framework": label + (f" x{devices}" if devices != 1 else ""),
                  "precision": precision}
        record.update({pool: by_pool.get(pool, "–") for pool in pools})
        records.append(record)
    return pd.DataFrame(records, columns=["workload", "framework", "precision", *pools])


def _cell_text(row: pd.Series, pool: dict[str, Any], plugin: str) -> str:
    if row["status"] != "ok" or not _known(row["throughput"]):
        return str(row["status"])
    parts = [f"{row['throughput']:,.0f} img/s"]
    if row["precision"] != "fp32" and _known(row.get("speedup")):
        ceiling = ceiling_ratio(pool.get("calibration"), plugin, str(row["device_kind"]), str(row["precision"]))
        parts[0] += f" ({row['speedup']:.2f}x" + (f"; ceiling {ceiling:.2f}x)" if _known(ceiling) else ")")
    price = pool.get("price_per_hour")
    if _known(price) and row["throughput"]:
        parts.append(f"{1e6 / row['throughput'] * price / 3600:.4g} per M images")
    return " · ".join(parts)


def pool_lines(environment: dict[str, Any]) -> list[str]:
    """One line per pool: the machine its node is (CPU, GPUs) and its price."""
    lines = []
    for name, info in (environment.get("pools") or {}).items():
        machine = info.get("machine") or {}
        gpus = ", ".join(str(g.get("name", "?")) for g in machine.get("gpus") or []) or "no GPU"
        price = info.get("price_per_hour")
        text = (f"- pool {name}: {info['error']}" if info.get("error") else
                f"- pool {name}: node {machine.get('node', '?')}, {machine.get('cpu_model', '?')}, {gpus}")
        if _known(price):
            text += f"; {price:g} per hour"
        if not info.get("calibration"):
            text += "; no calibration cached there"
        lines.append(text)
    return lines
