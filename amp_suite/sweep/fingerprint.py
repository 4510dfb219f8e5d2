"""A cell's definition and its fingerprint: everything that determines its figures, hashed.

A cell's key (``torch/mnist_cnn/fp32/r0``) names it; its *definition* says
what it is: the whole workload record (layers, optimizer, sizes), the data
(dataset and splits), the run options and the environment that runs it
(framework versions, or the environment's name and requirements).  The
*fingerprint* is a short hash of the definition's canonical JSON.  Every stored
result carries both, so ``--resume`` keeps a result only while its fingerprint
is the planned cell's, and says what changed when it is not
(:func:`resume_reason`); ``amp-suite compare`` names the differences between
two sweeps' definitions.  Hashing and comparing definitions live in
:mod:`amp_suite.records.definition`, which the report shares.

The workload is serialized field by field from its dataclass, so a field
added to :class:`~amp_suite.records.Workload` later joins the fingerprint
without a change here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from amp_suite.records import CellResult, RunSpec, Workload, to_plain
from amp_suite.records.definition import (
    FINGERPRINT_CHARS,
    canonical_json,
    definition_changes,
    describe_changes,
    fingerprint,
)

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
    """Everything that determines ``run``'s figures, as plain JSON values, in four sections
    (:data:`amp_suite.records.definition.SECTIONS`)."""
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


def _compact(value: Any) -> Any:
    """``value``, or ``{"sha256": ..., "items": N}`` in its place when its JSON is longer than LONG_VALUE_CHARS."""
    text = canonical_json(value)
    if len(text) <= LONG_VALUE_CHARS:
        return value
    return {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()[:FINGERPRINT_CHARS],
            "items": len(value) if isinstance(value, (list, dict)) else 1}


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


def kept_results(latest: Mapping[str, CellResult], cells: Iterable[Any]
                 ) -> tuple[dict[str, CellResult], dict[str, str]]:
    """What ``--resume`` keeps for ``cells`` (planned cells: ``run.key`` and ``definition``; planned_cell.py
    imports this module) of the stored results ``latest`` (each key's last), by cell key: a
    cell's result when it is ``ok`` with the cell's fingerprint; and, for each stored ``ok`` result it does not
    keep, why it reruns the cell (:func:`resume_reason`).

    A sweep decides this once, before any cell runs, and its executors run the cells it did not keep; the dry run's
    estimate asks the same."""
    kept: dict[str, CellResult] = {}
    reruns: dict[str, str] = {}
    for cell in cells:
        previous = latest.get(cell.run.key)
        if previous is None or previous.status != "ok":
            continue
        reason = resume_reason(previous, cell.definition)
        if reason:
            reruns[cell.run.key] = reason
        else:
            kept[cell.run.key] = previous
    return kept, reruns
