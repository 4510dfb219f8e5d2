"""A cell's definition compared: its fingerprint, and the values two definitions differ in.

A *definition* is everything that determines a cell's figures, in four
sections (:data:`SECTIONS`); :mod:`amp_suite.sweep.fingerprint` builds it for
a planned cell and every stored result carries it.  This room only reads
definitions, so both the sweep (``--resume``, ``compare``) and the report (an
AMP row compared only with an fp32 row of the same settings) share one hash
and one wording of a difference.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from amp_suite.records.plain import to_plain

# Characters of the hex digest kept: 48 bits, ample for the cells of one output directory.
FINGERPRINT_CHARS = 12

# The sections of a definition, in the order messages name them.
SECTIONS = ("workload", "data", "options", "environment")


def canonical_json(value: Any) -> str:
    return json.dumps(to_plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)



def fingerprint(definition: Mapping[str, Any]) -> str:
    """The short stable hash of a definition's canonical JSON (keys sorted, no spaces)."""
    return hashlib.sha256(canonical_json(dict(definition)).encode("utf-8")).hexdigest()[:FINGERPRINT_CHARS]


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
