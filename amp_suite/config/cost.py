"""What a cell costs: money per epoch and per million training images.

Given a price per hour of the machine (``--price-per-hour``, or ``[cost]`` in
``benchmarks.toml``), each ok cell's cost comes from its *steady-state*
throughput: warm-up steps (compilation, autotuning) are left out, as they are
from every other figure.

* cost per epoch = price per hour x (images per epoch / steady-state images/s) / 3600,
  where images per epoch = the steps of one epoch x the batch size;
* cost per million images = price per hour x (10^6 / steady-state images/s) / 3600;
* AMP's saving = fp32's cost per million images minus the precision's, in money
  and as a fraction of fp32's cost.
"""

from __future__ import annotations

from typing import Any

from amp_suite.schema import Field, check_table, check_value

DEFAULT_CURRENCY = "USD"
# Keys of the [cost] table (and the --price-per-hour / --currency flags).
COST_FIELDS: dict[str, Field] = {
    "price_per_hour": Field(float, minimum=0, maximum=1_000_000),
    "currency": Field(str, names=True),
}


def cost_settings(table: dict[str, Any] | None, **overrides: Any) -> dict[str, Any]:
    """The checked cost settings: ``[cost]`` with overrides applied; empty without a price."""
    given = {k: v for k, v in overrides.items() if v is not None}
    for key, value in given.items():  # a flag's (or keyword's) value named as the other settings are, not [cost]'s
        if key in COST_FIELDS:
            check_value(key, value, COST_FIELDS[key])
    merged = {**(table or {}), **given}
    checked = check_table(merged, COST_FIELDS, "[cost]")
    if checked.get("price_per_hour") is None:
        return {}
    return {"price_per_hour": checked["price_per_hour"], "currency": checked.get("currency", DEFAULT_CURRENCY)}


def cell_cost(throughput: float | None, images_per_epoch: float | None,
              price_per_hour: float) -> tuple[float | None, float | None]:
    """``(cost per epoch, cost per million images)`` at ``price_per_hour``; None without a throughput."""
    if not throughput or throughput <= 0:
        return None, None
    per_second = price_per_hour / 3600.0
    per_million = per_second * 1e6 / throughput
    per_epoch = per_second * images_per_epoch / throughput if images_per_epoch else None
    return per_epoch, per_million
