"""Values read back from disk are data: checked before any report uses them.

``results.jsonl``, ``environment.json`` and the calibration cache are files a
crash, a full disk or another person may have changed.  These checks find
what would break a report (a number too large for a float, a list where text
belongs) and name it, so that the caller can skip the line or drop the entry
with a warning and write the report from the rest.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

# Largest magnitude a stored integer may have (far above any byte count or step count).
MAX_STORED_INT = 2**63
# Deepest nesting a stored value may have.
MAX_STORED_DEPTH = 64

# Operations a calibration measures; each maps a dtype to TFLOP/s.
MEASURED_OPS = ("matmul", "conv")
# environment.json fields a report reads, with the JSON types they must have.
ENVIRONMENT_TYPES: dict[str, type[Any] | tuple[type[Any], ...]] = {
    "amp_suite_version": str, "python": str, "platform": str, "date": str, "cpu_model": str,
    "cpu_count": int, "cpu_flags": list, "gpus": list, "packages": dict, "git_commit": (str, type(None)),
    "config_file": str, "settings": dict, "preset": dict, "cost": dict, "calibration": dict, "incomplete": dict,
}


def number_problem(value: Any, where: str = "", depth: int = 0) -> str | None:
    """Where in ``value`` a number is not finite or out of range (``metrics.peak_rss_bytes``), or None."""
    if depth > MAX_STORED_DEPTH:
        return f"{where or 'value'} is nested too deeply"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None
    if isinstance(value, int):
        return None if abs(value) <= MAX_STORED_INT else f"{where or 'value'} is out of range"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where or 'value'} is not a finite number"
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        problem = number_problem(item, f"{where}.{key}" if where else str(key), depth + 1)
        if problem:
            return problem
    return None


def environment_problems(environment: dict[str, Any]) -> list[str]:
    """The fields of a stored environment record that a report cannot use, each with the reason."""
    problems: list[str] = []
    for name, kind in ENVIRONMENT_TYPES.items():
        if name not in environment:
            continue
        value = environment[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            problems.append(f"{name} (wrong type: {type(value).__name__})")
        elif name == "cpu_flags" and not all(isinstance(flag, str) for flag in value):
            problems.append(f"{name} (not a list of text)")
        elif name == "gpus" and not all(isinstance(gpu, dict) for gpu in value):
            problems.append(f"{name} (not a list of objects)")
        elif (problem := number_problem(value, name)) is not None:
            problems.append(problem)
    return problems


def clean_environment(environment: dict[str, Any]) -> list[str]:
    """Drop the fields of ``environment`` a report cannot use; returns what was dropped and why."""
    problems = environment_problems(environment)
    for problem in problems:
        environment.pop(problem.split(" ", 1)[0].split(".", 1)[0], None)
    return problems


def calibration_problem(data: Any) -> str | None:
    """Why a calibration (the cache file, or ``environment["calibration"]``) is unusable, or None.

    Expected: ``{"frameworks": {FRAMEWORK: {DEVICE_KIND: {OP: {DTYPE: TFLOPS}}}}}``
    with finite, non-negative figures (``sizes`` maps text to numbers).
    """
    if not isinstance(data, dict):
        return "not a JSON object"
    frameworks = data.get("frameworks")
    if not isinstance(frameworks, dict):
        return "no 'frameworks' object"
    for framework, kinds in frameworks.items():
        if not isinstance(kinds, dict):
            return f"frameworks.{framework} is not an object"
        for kind, ops in kinds.items():
            if not isinstance(ops, dict):
                return f"frameworks.{framework}.{kind} is not an object"
            for op, figures in ops.items():
                where = f"frameworks.{framework}.{kind}.{op}"
                if op not in MEASURED_OPS:
                    continue  # notes (kind, device, date, sizes, errors): the number check below covers them
                if not isinstance(figures, dict):
                    return f"{where} is not an object"
                for dtype, figure in figures.items():
                    if isinstance(figure, bool) or not isinstance(figure, (int, float)) \
                            or number_problem(figure) is not None or figure < 0:
                        return f"{where}.{dtype} is not a finite non-negative number"
    return number_problem(data)
