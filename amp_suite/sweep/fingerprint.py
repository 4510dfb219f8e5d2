"""A cell's definition and its fingerprint: everything that determines its figures, hashed.

A cell's key (``torch/mnist_cnn/fp32/r0``) names it; its *definition* says
what it is: the whole workload record (layers, optimizer, sizes), the data
(dataset and splits), the run options and the environment that runs it
(framework versions, or the environment's name and requirements).  The
*fingerprint* is a short hash of the definition's canonical JSON.  Every stored
result carries both, so ``--resume`` keeps a result only while its fingerprint
is the planned cell's, and says what changed when it is not
(:func:`resume_reason`); ``amp-suite compare`` names the differences between
two sweeps' definitions (:func:`definition_changes`).

The workload is serialized field by field from its dataclass, so a field
added to :class:`~amp_suite.records.Workload` later joins the fingerprint
without a change here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from amp_suite.records import CellResult, RunSpec, Workload, to_plain

# Characters of the hex digest kept: 48 bits, ample for the cells of one output directory.
FINGERPRINT_CHARS = 12

# Workload fields that do not change a figure (a name, a description).
WORKLOAD_TEXT_FIELDS = ("name", "description")
# RunSpec fields that name the cell (its key) rather than define it.
IDENTITY_FIELDS = ("framework", "workload", "precision", "repeat", "variant", "pool", "mode", "batch_axis",
                   "seed_axis")
# RunSpec fields that describe the data.
DATA_FIELDS = ("dataset", "train_split", "val_split", "synthetic_fallback")
# RunSpec fields that describe where the worker runs, not what it computes (the environment is its own section).
PLACE_FIELDS = ("timeout_s", "data_dir", "download", "node_rank", "coordinator", "environment", "python",
                "launcher_program")

# A workload value whose JSON is longer than this (an EfficientNet's layers: 170,000 characters) is stored as its
# own hash and length, so every line of results.jsonl stays small; a change of it still changes the fingerprint.
LONG_VALUE_CHARS = 4000

# The sections of a definition, in the order messages name them.
SECTIONS = ("workload", "data", "options", "environment")


def environment_record(framework: str, environment: str = "", *, versions: Mapping[str, str] | None = None,
                       requirements: tuple[str, ...] = (), python: str = "") -> dict[str, Any]:
    """The environment part of a definition.

    ``environment`` is the environment's name ("" for the host's interpreter);
    ``versions`` the installed versions of the framework's distributions where
    they are known (the host's interpreter); ``requirements`` what a managed
    environment was built from; ``python`` a user's own interpreter.
    """
    record: dict[str, Any] = {"framework": framework, "name": environment or "this interpreter"}
    if versions:
        record["versions"] = dict(sorted(versions.items()))
    if requirements:
        record["requirements"] = list(requirements)
    if python:
        record["python"] = python
    return record


def cell_definition(run: RunSpec, workload: Workload, environment: Mapping[str, Any] | None = None
                    ) -> dict[str, Any]:
    """Everything that determines ``run``'s figures, as plain JSON values, in four sections (:data:`SECTIONS`)."""
    whole = to_plain(asdict(workload))
    config = to_plain(asdict(run))
    options = {name: value for name, value in config.items()
               if name not in IDENTITY_FIELDS and name not in DATA_FIELDS and name not in PLACE_FIELDS}
    return {
        "workload": {name: _compact(value) for name, value in whole.items() if name not in WORKLOAD_TEXT_FIELDS},
        "data": {name: config[name] for name in DATA_FIELDS},
        "options": options,
        "environment": to_plain(dict(environment or environment_record(run.framework, run.environment,
                                                                       python=run.python))),
    }


def _canonical(value: Any) -> str:
    return json.dumps(to_plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _compact(value: Any) -> Any:
    """``value``, or ``{"sha256": ..., "items": N}`` in its place when its JSON is longer than LONG_VALUE_CHARS."""
    text = _canonical(value)
    if len(text) <= LONG_VALUE_CHARS:
        return value
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()[:FINGERPRINT_CHARS],
            "items": len(value) if isinstance(value, (list, dict)) else 1}


def fingerprint(definition: Mapping[str, Any]) -> str:
    """The short stable hash of a definition's canonical JSON (keys sorted, no spaces)."""
    return hashlib.sha256(_canonical(dict(definition)).encode("utf-8")).hexdigest()[:FINGERPRINT_CHARS]


@dataclass(frozen=True)
class Change:
    """One difference between two definitions: where (``workload``, ``input_size``) and the two values."""

    section: str
    path: str
    before: Any
    after: Any

    def describe(self) -> str:
        """``input_size 28 -> 56``; a value present on one side only reads ``absent``."""
        return f"{self.path} {shown_value(self.before)} -> {shown_value(self.after)}"


_ABSENT = object()


def shown_value(value: Any) -> str:
    """A definition's value in a message: ``absent`` where one side lacks it, long values cut to 60 characters."""
    if value is _ABSENT:
        return "absent"
    text = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _walk(before: Any, after: Any, path: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(before, dict) and isinstance(after, dict):
        for name in sorted(set(before) | set(after), key=str):
            inner = f"{path}.{name}" if path else str(name)
            yield from _walk(before.get(name, _ABSENT), after.get(name, _ABSENT), inner)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for index, (one, other) in enumerate(zip(before, after, strict=True)):
            yield from _walk(one, other, f"{path}[{index}]")
    elif before != after:
        yield path, before, after


def definition_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """Every value that differs between two definitions, section by section (a path per value)."""
    changes: list[Change] = []
    for section in [*SECTIONS, *sorted((set(before) | set(after)) - set(SECTIONS))]:
        one, other = before.get(section, {}), after.get(section, {})
        try:
            changes.extend(Change(section, path or section, old, new) for path, old, new in _walk(one, other, ""))
        except RecursionError:  # a stored line nested beyond reason: named whole, never a crash
            changes.append(Change(section, section, "(nested too deeply to compare)", "(another definition)"))
    return changes


def describe_changes(changes: list[Change], limit: int = 3) -> str:
    """``its workload changed (input_size 28 -> 56) and its options changed (steps 4 -> 8)``."""
    parts = []
    for section in dict.fromkeys(change.section for change in changes):
        inside = [change for change in changes if change.section == section]
        shown = ", ".join(change.describe() for change in inside[:limit])
        more = len(inside) - limit
        parts.append(f"its {section} changed ({shown}" + (f" and {more} more" if more > 0 else "") + ")")
    return " and ".join(parts)


def resume_reason(previous: CellResult, definition: Mapping[str, Any]) -> str:
    """Why ``--resume`` cannot keep ``previous`` for a cell defined as ``definition``; "" when it can.

    A result stored without a fingerprint (by an amp-suite before fingerprints)
    is rerun: nothing says which workload, data or versions produced it, and a
    kept stale figure is worse than a cell run again.
    """
    if not previous.fingerprint:
        return "rerun, its stored result has no fingerprint (an older amp-suite stored it), so what produced it " \
               "cannot be checked"
    if previous.fingerprint == fingerprint(definition):
        return ""
    changes = definition_changes(previous.definition or {}, definition)
    if not changes:  # the stored definition was cut or edited: the fingerprints alone tell
        return f"rerun, its fingerprint changed ({previous.fingerprint} -> {fingerprint(definition)})"
    return "rerun, " + describe_changes(changes)
