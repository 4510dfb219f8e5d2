"""Whether an AMP row and its fp32 baseline ran the same cell but for the precision.

A folder's ``results.jsonl`` can hold cells of several runs: fp32 trained for
6 steps by a later run beside amp_bf16 trained for 3 by an earlier one.  The
summary pairs rows by workload, framework, device, mode and batch size, which
would then call a gap of training length an AMP effect.  Each stored result
carries its definition (everything that determines its figures, without its
precision: :mod:`amp_suite.records.definition`); an AMP row whose ``ok`` cells
were defined otherwise than its fp32 row's (the seed aside where seeds are
the sweep's axis, paired seed by seed) gets no comparison, and the report
says which values differ.
Results stored before definitions existed are not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from amp_suite.config.framework_tables import COMMON_FRAMEWORK_OPTIONS
from amp_suite.records import CellResult
from amp_suite.records.definition import definition_changes, fingerprint

# How many differing values a note names.
SHOWN_DIFFERENCES = 3


# The options a row of several devices runs otherwise than its one-device row by design (the scaling compares them).
DEVICE_OPTIONS = ("devices", "nnodes", "launcher")
# The framework options only some precisions apply (loss scaling: amp_fp16; layers kept in float32: AMP): fp32 and
# tf32 ignore them, so an fp32 or tf32 row is compared with an AMP row whatever these say on either side.
PRECISION_OPTIONS = tuple(COMMON_FRAMEWORK_OPTIONS)


def _comparable_definition(result: CellResult, ignore: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """``result``'s definition without its seed where seeds are the sweep's axis (``--seeds``: cells pair by
    seed), and without the options named in ``ignore`` (the run's own, or the framework's, its ``options``); None
    when it has none (stored before definitions).  Without a seed axis the seed is a setting like any other: an
    AMP cell run with ``--seed 7`` is not compared with an fp32 cell of seed 0."""
    definition = result.definition
    if not isinstance(definition, dict) or not definition:
        return None
    paired = bool((result.config or {}).get("seed_axis"))
    options = definition.get("options")
    if isinstance(options, dict):
        options = {name: value for name, value in options.items()
                   if not (name == "seed" and paired) and name not in ignore}
        if isinstance(options.get("options"), dict):
            options["options"] = {name: value for name, value in options["options"].items() if name not in ignore}
    return {**definition, "options": options}


def settings_key(result: CellResult, ignore: tuple[str, ...] = ()) -> str:
    """The fingerprint of what ``result`` ran but its precision, seed and the options in ``ignore``; "" when it
    records no definition."""
    definition = _comparable_definition(result, ignore)
    if definition is None:
        return ""
    try:
        return fingerprint(definition)
    except (TypeError, ValueError, RecursionError):  # a stored line beyond reason: not judged
        return ""


def differences(baseline: CellResult, other: CellResult, ignore: tuple[str, ...] = ()) -> str:
    """``steps 6 -> 3, warmup 2 -> 1``: the values of ``other``'s definition that differ from ``baseline``'s
    (each bounded, one side's missing value ``absent``), the first :data:`SHOWN_DIFFERENCES` of them."""
    changes = definition_changes(_comparable_definition(baseline, ignore) or {},
                                 _comparable_definition(other, ignore) or {})
    shown = [change.describe() for change in changes[:SHOWN_DIFFERENCES]]
    more = len(changes) - SHOWN_DIFFERENCES
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def mismatch_note(baseline: Mapping[str, CellResult], other: Mapping[str, CellResult], reference: str = "fp32",
                  ignore: tuple[str, ...] = ()) -> str:
    """Why a row's cells (``other``: settings key -> one result) cannot be compared with its ``reference`` row's
    (``baseline``: fp32's, tf32's, the one-device row's); "" when they ran alike, or when either side's cells
    record no definition.  ``ignore``: the options the keys were made without."""
    if not baseline or not other or "" in baseline or "" in other:
        return ""
    if set(baseline) == set(other) and len(other) == 1:
        return ""
    for cells, whose in ((baseline, f"{reference}'s own"), (other, "its")):
        if len(cells) > 1:
            first, second = list(cells.values())[:2]
            return f"{whose} repeats ran with different settings ({differences(first, second, ignore)})"
    [theirs], [mine] = baseline.values(), other.values()
    return f"ran with other settings than {reference} ({differences(theirs, mine, ignore)})"
