"""Presets: ``amp-suite run --preset NAME`` fills a sweep from ``[presets.NAME]``.

Settings come, last one winning, from amp-suite's built-in values, the
``[defaults]`` table, the preset, and the command line.  A preset's ``steps``
hold for each of its workloads, like ``--steps`` (a workload's own ``steps``
does not override them).  With ``fit_devices``, device counts above what the
machine offers become the most it offers that divides every batch.

The sweep records the preset in its environment record (``preset``): its
name, where it comes from, its settings, what the command line changed, how
the machine made it differ, its notes and the article's published figures, so
the report (and ``amp-suite report DIR`` later) can put those figures beside
the ratios measured here.  Nothing here imports a framework.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from amp_suite.config.catalog import Preset, SuiteConfig, with_overrides
from amp_suite.config.settings import SweepSettings
from amp_suite.errors import UsageError
from amp_suite.schema import check_name, closest, shown


@dataclass(frozen=True)
class PresetPlan:
    """A preset applied to a config, before the command line.

    ``settings``: ``[defaults]`` with the preset's settings; ``steps``: the
    preset's steps per epoch for every workload (``None``: it sets none);
    ``record``: what the environment record keeps (:func:`preset_record`).
    """

    preset: Preset
    settings: SweepSettings
    steps: int | None
    record: dict[str, Any]


def find_preset(config: SuiteConfig, name: str) -> Preset:
    """The preset called ``name``; an unknown name is one line naming the closest one."""
    check_name("preset", name)
    if name not in config.presets:
        known = list(config.presets)
        raise UsageError(f"unknown preset {shown(name)}; allowed: {', '.join(known) or 'none'}"
                         + closest(name, known))
    return config.presets[name]


def expand_preset(config: SuiteConfig, name: str, overrides: dict[str, Any] | None = None) -> PresetPlan:
    """``[presets.NAME]`` over ``[defaults]``; ``overrides`` (the command line) are recorded, not applied.

    A workload the preset names must be declared, unless the command line
    names the workloads itself.
    """
    preset = find_preset(config, name)
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    if "workloads" not in given:
        for workload in preset.settings.get("workloads", ()):
            if workload not in config.workloads:
                raise UsageError(f"preset {name!r} ({config.source('presets.' + name)}) names workload "
                                 f"{workload!r}, which no catalog file or benchmarks.toml declares"
                                 + closest(workload, list(config.workloads)))
    settings = with_overrides(config.settings, **preset.settings)
    return PresetPlan(preset, settings, preset.settings.get("steps"), preset_record(config, preset, given))


def preset_record(config: SuiteConfig, preset: Preset, given: dict[str, Any]) -> dict[str, Any]:
    """The environment record's ``preset``: JSON-ready, self-contained for the report."""
    command_line = {key: {"preset": _plain(preset.settings.get(key)), "used": _plain(value)}
                    for key, value in given.items()
                    if key in preset.settings and _plain(value) != _plain(preset.settings[key])}
    command_line.update({key: {"preset": None, "used": _plain(value)} for key, value in given.items()
                         if key not in preset.settings and key != "out"})
    return {
        "name": preset.name,
        "description": preset.description,
        "source": config.source(f"presets.{preset.name}"),
        "settings": {key: _plain(value) for key, value in preset.settings.items()},
        "command_line": command_line,
        "adjusted": [],
        "notes": list(preset.notes),
        "published_name": preset.published,
        "published": config.published.get(preset.published) if preset.published else None,
    }


def _plain(value: Any) -> Any:
    """Tuples as lists, so a value compares equal to itself after a JSON round trip."""
    return list(value) if isinstance(value, tuple) else value


def fit_device_counts(counts: tuple[int, ...], visible: int, batch_sizes: list[int]) -> tuple[int, ...]:
    """Each count made at most ``visible`` and a divisor of every batch size; duplicates dropped."""
    fitted: list[int] = []
    for count in counts:
        n = max(1, min(count, visible))
        while n > 1 and any(batch % n for batch in batch_sizes):
            n -= 1
        if n not in fitted:
            fitted.append(n)
    return tuple(fitted)
