"""Checks of :func:`amp_suite.run`'s arguments, with the messages the CLI gives for the same mistakes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from amp_suite.errors import UsageError
from amp_suite.schema import shown


def flag(name: str, value: Any) -> bool:
    """A boolean argument: ``True`` or ``False`` only (``"no"`` is not false)."""
    if not isinstance(value, bool):
        raise UsageError(f"{name} must be true or false, got {shown(value)}")
    return value


def config_path(value: Any) -> str | Path | None:
    """``config=``: a path (text or path-like) or None."""
    if value is None or isinstance(value, (str, Path)):
        return value
    if isinstance(value, os.PathLike):
        return Path(value)
    raise UsageError(f"config must be the path of a TOML file, got {shown(value)}")


def plugin_names(value: Any) -> tuple[str, ...]:
    """``plugins=``: one module name, a comma-separated text, or a list of names."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise UsageError(f"plugins must be a module name or a list of module names, got {shown(value)}")


def device_counts(value: Any) -> Any:
    """``devices=``: one count (``2``) stands for ``[2]``; anything else is left to the schema."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    return value
