"""Checks of :func:`amp_suite.run`'s arguments, with the messages the CLI gives for the same mistakes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from amp_suite.errors import UsageError
from amp_suite.schema import comma_separated, shown


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
        return comma_separated(value, "plugins=")
    items = listed(value)
    if isinstance(items, tuple) and all(isinstance(item, str) for item in items):
        return items
    raise UsageError(f"plugins must be a module name or a list of module names, got {shown(value)}")


# Most items read from a generator given for a list of names: more is no list of names.
LISTED_ITEMS = 100_000


def listed(value: Any) -> Any:
    """A list, a tuple, a set or any other iterable (a generator) as a tuple; text, bytes, a mapping or a
    non-iterable as it is (the caller's check names the wrong type)."""
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(value)
    items = []
    iterator: Iterator[Any] = iter(value)
    for item in iterator:
        items.append(item)
        if len(items) > LISTED_ITEMS:
            raise UsageError(f"a list of names holds more than {LISTED_ITEMS} items")
    return tuple(items)


def directory_path(name: str, value: Any) -> Path:
    """A sweep directory argument: text or a path-like, else a one-line :class:`UsageError`."""
    if isinstance(value, str) or (isinstance(value, os.PathLike) and isinstance(os.fspath(value), str)):
        return Path(value)
    raise UsageError(f"{name} must be a sweep's output directory (a str or pathlib.Path), got {shown(value)}")


def device_counts(value: Any) -> Any:
    """``devices=``: one count (``2``) stands for ``[2]``; anything else is left to the schema."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    return value
