"""Reading ``numerics.jsonl`` back: the runs, the layer rows and the ``--bisect`` search an output holds."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from amp_suite.numerics.records import BisectOutcome, BisectTrial, LayerNumerics, NumericsRun
from amp_suite.shadow.report import LAYERS_FILE


def _number_back(value: Any) -> Any:
    """A float :func:`to_plain` wrote as text (``"nan"``, ``"inf"``) read back as a float."""
    return float(value) if value in ("nan", "inf", "-inf") else value


def _numbers_back(values: list[Any]) -> tuple[Any, ...]:
    """A list of floats (a diverged run's losses: ``"nan"`` among them) read back as a tuple of floats."""
    return tuple(_number_back(value) for value in values)


def _search(record: dict[str, Any]) -> BisectOutcome:
    """The ``"record": "bisect"`` line of numerics.jsonl (its ``record`` key taken out) as a :class:`BisectOutcome`."""
    trials = tuple(BisectTrial(**{**trial, "kept": tuple(trial["kept"]), "losses": _numbers_back(trial["losses"]),
                                  "loss_gap": float(_number_back(trial["loss_gap"]))})
                   for trial in record.pop("trials"))
    found = record.pop("found")
    return BisectOutcome(**{**record, "reference_losses": _numbers_back(record["reference_losses"]), "trials": trials,
                            "found": None if found is None else tuple(found)})


def read_numerics_and_search(directory: str | Path) -> tuple[list[NumericsRun], list[LayerNumerics],
                                                             BisectOutcome | None]:
    """The runs, the layer rows and the search of ``--bisect`` (``None`` when it holds none) of
    ``DIRECTORY/numerics.jsonl``, read once; a ``FileNotFoundError`` naming it when absent."""
    path = Path(directory) / LAYERS_FILE
    runs: list[NumericsRun] = []
    layers: list[LayerNumerics] = []
    search: BisectOutcome | None = None
    run_fields = {f.name for f in fields(NumericsRun)}
    layer_fields = {f.name for f in fields(LayerNumerics)}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        kind = record.pop("record", "")
        if kind == "bisect":
            search = _search(record)
            continue
        values = {key: _number_back(value) for key, value in record.items()}
        if kind == "run":
            values = {k: (_numbers_back(v) if k in ("losses", "loss_scales") else tuple(v)) if isinstance(v, list)
                      else v for k, v in values.items() if k in run_fields}
            runs.append(NumericsRun(**values))
        elif kind == "layer":
            layers.append(LayerNumerics(**{k: v for k, v in values.items() if k in layer_fields}))
    return runs, layers, search


def read_numerics(directory: str | Path) -> tuple[list[NumericsRun], list[LayerNumerics]]:
    """The runs and layer rows of ``DIRECTORY/numerics.jsonl``; a ``FileNotFoundError`` naming it when absent."""
    runs, layers, _ = read_numerics_and_search(directory)
    return runs, layers
