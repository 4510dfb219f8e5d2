"""The catalog's named entries read into records: workloads, presets, published articles and their figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amp_suite.config.settings import SETTINGS_FIELDS, check_names
from amp_suite.errors import UsageError
from amp_suite.precision import PRECISIONS
from amp_suite.records import Workload
from amp_suite.schema import Field, check_name, check_table, shown
from amp_suite.workloads.workload import workload_from_config

# Keys of a [presets.NAME] table besides the sweep settings it fills.
PRESET_FIELDS: dict[str, Field] = {
    "description": Field(str),  # one line, shown by `amp-suite list`
    "published": Field(str, names=True),  # the [published.NAME] table of the article's figures
    "notes": Field(tuple),  # how the preset differs from the article on every machine
    "fit_devices": Field(bool),  # device counts above what the machine offers become the most it offers
}


# Settings a preset may fill: every [defaults] key except those that name one machine among several.
PRESET_SETTINGS = tuple(name for name in SETTINGS_FIELDS if name not in ("nnodes", "node_rank", "coordinator"))


# What a published figure measures, as a report names it.
PUBLISHED_METRICS = {
    "epoch_time": "time per epoch",
    "total_time": "training time",
    "peak_memory": "peak memory",
    "val_accuracy": "validation accuracy",
}


# Keys of a [published.NAME] table (its figures apart).
PUBLISHED_FIELDS: dict[str, Field] = {
    "article": Field(str),
    "framework": Field(str),
    "hardware": Field(str),
    "setup": Field(str),
    "context": Field(str),
    "precision": Field(str, names=True),  # the precision here that stands for the article's AMP
}


# Keys of one [[published.NAME.figures]] entry.
FIGURE_FIELDS: dict[str, Field] = {
    "workload": Field(str, names=True),
    "metric": Field(str, choices=tuple(PUBLISHED_METRICS)),
    "unit": Field(str),
    "baseline": Field(float, minimum=0),
    "compared": Field(float, minimum=0),
    "ratio_min": Field(float, above=0),
    "ratio_max": Field(float, above=0),
    "compare": Field(str, choices=("precision", "devices")),
    "devices": Field(int, minimum=2, maximum=4096),
    "precision": Field(str, names=True),
    "where": Field(str),
    "hardware": Field(str),
    "note": Field(str),
}


@dataclass(frozen=True)
class Preset:
    """A ``[presets.NAME]`` table: the sweep settings it fills and what it reproduces."""

    name: str
    description: str
    settings: dict[str, Any]  # checked SweepSettings fields
    published: str | None = None  # the [published.NAME] table of its article's figures
    notes: tuple[str, ...] = ()
    fit_devices: bool = False


def _workload(name: Any, table: Any, path: Path) -> Workload:
    check_name("workload", name)
    if not isinstance(table, dict):
        raise UsageError(f"{path}: workloads.{name} must be a table ([workloads.{name}]), got {shown(table)}")
    try:
        return workload_from_config(name, table)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _preset(name: str, table: Any, path: Path) -> Preset:
    """A checked ``[presets.NAME]`` table."""
    check_name("preset", name)
    where = f"{path}: [presets.{name}]"
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table, got {shown(table)}")
    spelled: dict[str, Any] = {}
    for key, value in table.items():
        if key.replace("-", "_") in spelled:
            raise UsageError(f"{where}: {key.replace('-', '_')} is given twice")
        spelled[key.replace("-", "_")] = value
    values = check_table(spelled, {**PRESET_FIELDS, **{k: SETTINGS_FIELDS[k] for k in PRESET_SETTINGS}}, where)
    if "description" not in values:
        raise UsageError(f"{where}: description is missing (the one line `amp-suite list` shows)")
    try:
        check_names("precision", values.get("precisions", ("fp32",)), PRECISIONS)
        if values.get("device", "auto") not in ("auto", "cpu", "gpu"):
            raise UsageError(f"unknown device {shown(values['device'])}; allowed: auto, cpu, gpu")
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    settings = {key: value for key, value in values.items() if key in PRESET_SETTINGS}
    return Preset(name, " ".join(values["description"].split()), settings, values.get("published"),
                  tuple(values.get("notes", ())), values.get("fit_devices", False))


def _published(name: str, table: Any, path: Path) -> dict[str, Any]:
    """A checked ``[published.NAME]`` table: the article, its hardware and its figures."""
    check_name("published figures", name)
    where = f"{path}: [published.{name}]"
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table, got {shown(table)}")
    figures = table.get("figures")
    values = check_table({k: v for k, v in table.items() if k != "figures"}, PUBLISHED_FIELDS, where)
    for required in ("article", "hardware"):
        if required not in values:
            raise UsageError(f"{where}: {required} is missing")
    if not isinstance(figures, list) or not figures:
        raise UsageError(f"{where}: figures must be a list of tables ([[published.{name}.figures]]), "
                         f"got {shown(figures)}")
    values["figures"] = [_figure(figure, f"{where} figure {index + 1}") for index, figure in enumerate(figures)]
    return values


def _figure(table: Any, where: str) -> dict[str, Any]:
    figure = check_table(table, FIGURE_FIELDS, where)
    for required in ("workload", "metric", "where"):
        if required not in figure:
            raise UsageError(f"{where}: {required} is missing")
    ranged = "ratio_min" in figure or "ratio_max" in figure
    if ranged and not ("ratio_min" in figure and "ratio_max" in figure):
        raise UsageError(f"{where}: ratio_min and ratio_max come together")
    if ranged and figure["ratio_min"] > figure["ratio_max"]:
        raise UsageError(f"{where}: ratio_min ({figure['ratio_min']}) is above ratio_max ({figure['ratio_max']})")
    if not ranged and "compared" not in figure:
        raise UsageError(f"{where}: give compared (and baseline), or ratio_min and ratio_max")
    if figure.get("compare") == "devices" and not ("devices" in figure and "baseline" in figure):
        raise UsageError(f"{where}: compare = \"devices\" needs devices (the count published) and baseline")
    return figure
