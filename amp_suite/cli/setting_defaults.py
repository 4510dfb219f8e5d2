"""What ``amp-suite run --help`` says each setting defaults to: the value a plain run here would take.

A setting's flag has no default of its own (``None``: the config decides),
so argparse has nothing to show.  The values a plain run takes come from the
packaged catalog's ``[defaults]`` (and ``./benchmarks.toml``'s, when there is
one), with ``[defaults.on_cpu]`` or ``[defaults.on_gpu]`` over them on that
device kind.  They are read only when help is printed, so every other command
loads no catalog for them; a configuration that cannot be read leaves the
help as it was and says why in its closing lines.
"""

from __future__ import annotations

import argparse
from dataclasses import fields
from functools import cache
from typing import Any

from amp_suite.config.settings import SweepSettings
from amp_suite.errors import UsageError


def shown_default(value: Any) -> str | None:
    """A setting's value as ``--help`` shows it; None for an unset one (no default to show)."""
    if value is None or value == ():
        return None
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


@cache
def run_defaults() -> tuple[dict[str, str], str]:
    """(setting name -> its default as help shows it, the closing note naming where they come from).

    A setting whose default differs on a GPU shows both: ``20; on a GPU: 1500``.
    """
    from amp_suite.config.catalog import find_config, for_device_kind, load_config

    try:
        path = find_config(None)
        config = load_config(path)
    except (UsageError, OSError) as exc:
        return {}, f"Defaults: not shown, the configuration cannot be read ({exc})."
    cpu, gpu = for_device_kind(config, "cpu").settings, for_device_kind(config, "gpu").settings
    shown: dict[str, str] = {}
    for declared in fields(SweepSettings):
        on_cpu, on_gpu = shown_default(getattr(cpu, declared.name)), shown_default(getattr(gpu, declared.name))
        if on_cpu is None and on_gpu is None:
            continue
        shown[declared.name] = (on_cpu or "unset") if on_cpu == on_gpu else \
            f"{on_cpu or 'unset'}; on a GPU: {on_gpu or 'unset'}"
    source = f"the packaged catalog extended by {path}" if path is not None else "the packaged catalog"
    return shown, (f"Defaults: what a plain run takes from {source} ([defaults], with [defaults.on_cpu] or "
                   "[defaults.on_gpu] on that device); a preset, --config and the flags replace them, and these lines do not "
                   "follow --config or --preset. "
                   "--dry-run prints the plan a command would run.")


class RunHelpFormatter(argparse.HelpFormatter):
    """``amp-suite run --help``: each setting's help ends with the default a plain run here takes.

    ``defaults`` (setting name -> shown default) is empty until the parser fills it for the help it prints: Python
    3.14's argparse formats each help string as its flag is added, and that check must load no configuration."""

    defaults: dict[str, str] = {}  # replaced per formatter, never mutated

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        default = self.defaults.get(action.dest)
        if text and default is not None:
            return f"{text} [default: {default.replace('%', '%%')}]"
        return text
