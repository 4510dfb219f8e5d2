"""Typed fields for configuration tables and command-line values.

One :class:`Field` says what a key may hold: its type (booleans are never
numbers, integers never floats), its range, whether it may be absent
(``None``), its allowed choices.  :func:`check_table` checks a whole TOML
table against a mapping of key -> field and rejects unknown keys with the
closest valid name; :func:`check_value` checks one value.  Every problem is a
one-line :class:`~amp_suite.errors.UsageError`.

Names (workloads, frameworks, precisions) must pass :func:`check_name`: they
end up in file names and in markdown tables, so they are short and made of
letters, digits, ``_``, ``-``, ``.`` and ``@`` (``torch@2.12``, an environment).
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from amp_suite.errors import UsageError

# Longest name of a workload, framework or precision.
NAME_CHARS = 64
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]*")
# The largest count a ``count`` field takes as one integer (``seeds = 5``).
MAX_COUNT = 10_000
# Longest text value shown back in an error message.
SHOWN_CHARS = 60

_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               tuple: "a list of strings"}


@dataclass(frozen=True)
class Field:
    """What one key may hold.

    ``kind`` is ``bool``, ``int``, ``float`` (an integer is accepted and made
    a float), ``str`` or ``tuple`` (a list of strings, returned as a tuple).
    ``minimum``/``maximum`` bound numbers inclusively, ``above`` exclusively;
    floats must be finite.  ``choices`` lists the allowed strings.  A
    ``tuple`` field with ``items=int`` holds integers within the bounds (or a
    string of ``choices``); a single value is taken as a list of one.  With
    ``names``, every string must be a valid name (:func:`check_name`); lists
    must then be non-empty and without duplicates.  Strings, and lists of
    integers, must not be empty unless ``empty`` allows it.  With ``count``, a
    single integer ``N`` (not in a list) of an ``items=int`` list stands for
    ``0, 1, ..., N-1`` (``seeds = 5``: five seeds).
    """

    kind: type
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    choices: tuple[str, ...] = ()
    optional: bool = False
    names: bool = False
    empty: bool = False
    items: type = str
    count: bool = False


def shown(value: Any) -> str:
    """``repr(value)`` cut short enough for a one-line message."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "...'"


class FlagValueError(UsageError, argparse.ArgumentTypeError):
    """A flag's text that cannot be read as its kind of value; argparse puts the flag's name before the message."""


class ListTextError(FlagValueError):
    """A comma-separated list with an empty entry."""


def comma_separated(text: str, flag: str = "") -> tuple[str, ...]:
    """``torch, keras`` -> ("torch", "keras"); blank text is the empty list.  ``flag`` names the option in the
    message (argparse, calling this as a flag's type, names it itself).

    An empty entry (``fp32,,amp_bf16``, a trailing comma) is refused in one line: it is a typo more often
    than a wish, and dropping it in silence would run a different sweep than the one typed.
    """
    if not text.strip():
        return ()
    parts = tuple(part.strip() for part in text.split(","))
    named = [part for part in parts if part]
    named_by = flag if not flag or flag.endswith("=") else f"{flag} "  # "--frameworks 'x'", "frameworks='x'"
    if not named:
        raise ListTextError(f"{named_by}{shown(text)} names nothing between its commas")
    if len(named) < len(parts):
        raise ListTextError(f"{named_by}{shown(text)} has an empty entry between commas; "
                            f"did you mean {shown(','.join(named))}?")
    return parts


def closest(word: str, candidates: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'X'?)`` for the closest candidate, or an empty string.

    The same name in other case comes first (``FP32``: fp32), then the one candidate that holds the word as a part
    of its own (``fp16``: amp_fp16, which spelling alone would take for fp64), then the closest spelling.
    """
    names = [str(candidate) for candidate in candidates]
    lowered = word.lower()
    same = [name for name in names if name.lower() == lowered]
    holding = [name for name in names if lowered and lowered in re.split(r"[_@.-]", name.lower())]
    match = same or (holding if len(holding) == 1 else []) or [
        names[[name.lower() for name in names].index(found)]
        for found in difflib.get_close_matches(lowered, [name.lower() for name in names], n=1, cutoff=0.6)]
    return f" (did you mean {match[0]!r}?)" if match else ""


def check_name(kind: str, name: Any) -> str:
    """``name`` if it can be a file name and a table cell; else a one-line error."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"{kind} name must be a non-empty string, got {shown(name)}")
    if len(name) > NAME_CHARS:
        raise UsageError(f"{kind} name {shown(name)} is longer than {NAME_CHARS} characters")
    if not NAME_PATTERN.fullmatch(name):
        raise UsageError(f"{kind} name {shown(name)} may hold only letters, digits, '_', '-', '.' and '@', "
                         "and must start with a letter or digit")
    return name


def _bound(value: float) -> str:
    """A range bound as written: 4294967295 rather than 4.29497e+09."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e18 else f"{value:g}"


def _check_number(name: str, value: Any, field: Field) -> int | float:
    if field.kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise UsageError(f"{name} must be an integer, got {shown(value)}")
    if field.kind is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UsageError(f"{name} must be a number, got {shown(value)}")
        try:
            value = float(value)
        except OverflowError:
            raise UsageError(f"{name} is too large, got {shown(value)}") from None
        if not math.isfinite(value):
            raise UsageError(f"{name} must be a finite number, got {value}")
    if field.minimum is not None and value < field.minimum:
        raise UsageError(f"{name} must be >= {_bound(field.minimum)}, got {value}{_allowed(field)}")
    if field.above is not None and value <= field.above:
        raise UsageError(f"{name} must be > {_bound(field.above)}, got {value}{_allowed(field)}")
    if field.maximum is not None and value > field.maximum:
        raise UsageError(f"{name} must be <= {_bound(field.maximum)}, got {value}{_allowed(field)}")
    return value


def _allowed(field: Field) -> str:
    """`` (allowed: 1 to 1000000)``: the whole range, where a value has a bound on each side."""
    if field.maximum is None:
        return ""
    if field.minimum is not None:
        low = _bound(field.minimum)
    elif field.above is not None:
        low = f"above {_bound(field.above)}"
    else:
        return ""
    return f" (allowed: {low} to {_bound(field.maximum)})"


def number_parser(field: Field) -> Callable[[str], Any]:
    """An argparse ``type`` for a number ``field``: its error names the value and the values allowed
    (``'abc' is not a whole number (allowed: 1 to 1000000)``); the bounds themselves are checked with the field."""
    kind = field.kind

    def parse(text: str) -> Any:
        try:
            return kind(text)
        except (TypeError, ValueError):
            what = "a whole number" if kind is int else "a number"
            raise FlagValueError(f"{shown(text)} is not {what}{_range_text(field)}") from None

    return parse


def _range_text(field: Field) -> str:
    """`` (allowed: 1 to 1000000)``, `` (allowed: 0 or more)``, `` (allowed: above 0)``: what a number field takes
    (a range bounded on both sides as every other message gives it, :func:`_allowed`)."""
    if _allowed(field):
        return _allowed(field)
    if field.minimum is not None:
        return f" (allowed: {_bound(field.minimum)} or more)"
    if field.above is not None:
        return f" (allowed: above {_bound(field.above)})"
    return f" (allowed: up to {_bound(field.maximum)})" if field.maximum is not None else ""


def _check_text(name: str, value: Any, field: Field) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{name} must be a string, got {shown(value)}")
    if "\0" in value:
        raise UsageError(f"{name} must not contain a NUL character")
    if not value.strip() and not field.empty:
        raise UsageError(f"{name} must not be empty")
    if field.choices and value not in field.choices:
        raise UsageError(f"{name} must be one of {', '.join(field.choices)}; got {shown(value)}"
                         + closest(value, field.choices))
    if field.names:
        check_name(name, value)
    return value


def check_value(name: str, value: Any, field: Field) -> Any:
    """``value`` checked against ``field`` (floats made float, lists made tuples)."""
    if value is None:
        if field.optional:
            return None
        raise UsageError(f"{name} must be {_KIND_NAMES[field.kind]}, got nothing")
    if field.kind is bool:
        if not isinstance(value, bool):
            raise UsageError(f"{name} must be true or false, got {shown(value)}")
        return value
    if field.kind in (int, float):
        return _check_number(name, value, field)
    if field.kind is str:
        return _check_text(name, value, field)
    if field.kind is tuple and field.items is int:
        return _check_int_list(name, value, field)
    if field.kind is tuple:
        if not isinstance(value, (list, tuple)):
            raise UsageError(f"{name} must be a list of strings, got {shown(value)}")
        items = tuple(_check_text(name, item, field) for item in value)
        if field.names and not items:
            raise UsageError(f"{name} must name at least one")
        twice = _repeated(items)
        if twice:
            raise UsageError(f"{name} lists {shown(twice[0])} more than once")
        return items
    raise TypeError(f"no check for fields of kind {field.kind!r}")


def _repeated(items: Iterable[Any]) -> list[Any]:
    """The items that occur more than once, in order of their second occurrence (one pass)."""
    seen: set[Any] = set()
    twice: list[Any] = []
    for item in items:
        if item in seen and item not in twice[-1:]:
            twice.append(item)
        seen.add(item)
    return twice


def _check_int_list(name: str, value: Any, field: Field) -> tuple[Any, ...]:
    if field.count and isinstance(value, int) and not isinstance(value, bool):
        return counted(name, value, field)
    values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    if not values and field.empty:  # an empty list that means "unset" (batch_sizes)
        return ()
    if not values:
        raise UsageError(f"{name} must name at least one")
    allowed = " or ".join(["integers", *(repr(c) for c in field.choices)])
    out: list[Any] = []
    for item in values:
        if isinstance(item, str) and item in field.choices:
            out.append(item)
            continue
        if not isinstance(item, int) or isinstance(item, bool):
            raise UsageError(f"{name} must be {allowed}, got {shown(item)}")
        out.append(_check_number(name, item, Field(int, minimum=field.minimum, maximum=field.maximum)))
    twice = [str(item) for item in _repeated(out)]
    if twice:
        raise UsageError(f"{name} lists {twice[0]} more than once")
    return tuple(out)


def counted(name: str, count: int, field: Field) -> tuple[int, ...]:
    """``0, 1, ..., count-1`` for a ``count`` field given one integer (one-line error for a count below 1)."""
    if not 1 <= count <= MAX_COUNT:
        listed = (f" from {_bound(field.minimum)} to {_bound(field.maximum)}"
                  if field.minimum is not None and field.maximum is not None else "")
        raise UsageError(f"{name} must be a count from 1 to {MAX_COUNT} or a list of integers{listed}, got {count}")
    return _check_int_list(name, tuple(range(count)), Field(tuple, items=int, minimum=field.minimum,
                                                            maximum=field.maximum))


def check_table(table: Any, fields: Mapping[str, Field], where: str) -> dict[str, Any]:
    """Every key of ``table`` checked against ``fields``; unknown keys are refused.

    ``where`` names the table in messages, e.g. ``[frameworks.torch]``.
    Returns the checked values (keys present in ``table`` only).
    """
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table, got {shown(table)}")
    checked: dict[str, Any] = {}
    for key, value in table.items():
        if key not in fields:
            allowed = ", ".join(fields) or "none"
            raise UsageError(f"{where}: unknown key {shown(key)}{closest(key, tuple(fields))}; allowed: {allowed}")
        checked[key] = check_value(f"{where} {key}", value, fields[key])
    return checked
