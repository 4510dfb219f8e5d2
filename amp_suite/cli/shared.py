"""What the command handlers share: list flags, one-line messages, the plugin host, and this command line run again."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from amp_suite.schema import comma_separated


def _csv(text: str | None, flag: str) -> tuple[str, ...] | None:
    return None if text is None else comma_separated(text, flag)


def _one_line_text(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def own_command() -> list[str]:
    """The command line that runs this command line again, in this interpreter (``doctor --acceptance``
    runs ``amp-suite doctor``, ``run`` and ``calibrate`` through it)."""
    return [sys.executable, "-m", "amp_suite"]


def _host(modules: list[str], *, strict: bool = True):
    from amp_suite.sweep.resolve import make_host

    return make_host(modules, strict=strict)


def _cost_overrides(args: argparse.Namespace) -> dict:
    return {k: v for k, v in (("price_per_hour", args.price_per_hour), ("currency", args.currency))
            if v is not None}


def out_text(path: Path | str) -> str:
    """A path as one bounded piece of a one-line message (a newline or a huge name cannot split or flood it)."""
    from amp_suite.report.text import path_text

    return path_text(path)


def _print_reporter_failures(outcome) -> None:
    for failure in outcome.failures:
        print(f"amp-suite: error: reporter {failure.plugin!r} failed: {_one_line_text(failure.error)}",
              file=sys.stderr)
