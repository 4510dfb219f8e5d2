"""What the host cannot keep of a plugin's answer: a figure that cannot be stored, a declaration it cannot use.

Each function names the problem in words a plugin author can act on (or
returns None); the host lists the plugin as failed, or leaves the value out,
with that text.  Answers' types are checked against the specs by
:mod:`amp_suite.plugins.contracts`.
"""

from __future__ import annotations

from typing import Any

from amp_suite.errors import UsageError
from amp_suite.records import FrameworkInfo, FrameworkOption, PrecisionApplied, to_plain
from amp_suite.schema import Field, check_value
from amp_suite.stored_values import number_problem


def figure_problem(key: str, value: Any) -> str | None:
    """Why a figure ``measure`` gave cannot be kept (``is an integer of 81 bits...``), or None.

    A figure must survive the result file as it is read back (no integer
    beyond :data:`~amp_suite.stored_values.MAX_STORED_INT`, no nesting deeper
    than :data:`~amp_suite.stored_values.MAX_STORED_DEPTH`), and a memory
    figure (a key ending in ``_bytes``) must be a number or None.
    """
    plain = to_plain(value)
    if key.endswith("_bytes") and not (plain is None or (isinstance(plain, (int, float))
                                                          and not isinstance(plain, bool))):
        return f"is {type(value).__name__} {str(value)[:60]!r}; a memory figure must be a number of bytes (or None)"
    problem = number_problem(plain, key)
    if problem:
        if isinstance(plain, int) and not isinstance(plain, bool):
            return f"is an integer of {plain.bit_length()} bits; a figure must fit in 64 bits"
        return f"cannot be stored: {problem}"
    return None


def declaration_problem(info: FrameworkInfo) -> str | None:
    """What in ``info`` the host cannot use (an option that is no ``FrameworkOption``, a default its own
    schema refuses, a probe that is no module name), or None."""
    for key, option in info.options.items():
        if not isinstance(option, FrameworkOption) or not isinstance(option.schema, Field):
            return (f"options[{key!r}] is {type(option).__name__}; it must be "
                    "FrameworkOption(Field(...), default, help)")
        try:
            check_value(f"option {key}", option.default, option.schema)
        except UsageError as exc:
            return f"the default of {exc} (its own schema refuses it)"
    for name in ("doctor_probe", "calibration_probe"):
        module = getattr(info, name)
        if not isinstance(module, str) or (module and not all(part.isidentifier() for part in module.split("."))):
            return f"{name} {module!r} is not a module name (e.g. 'my_plugin.doctor')"
    return None


# The dtypes a PrecisionApplied may name (numpy's spelling, as every framework's dtype name reads).
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64")


def applied_problem(precision: str, applied: PrecisionApplied) -> str | None:
    """Why ``set_precision``'s answer for a cell of ``precision`` cannot be its record of what ran, or None.

    It must name the cell's precision, name each dtype as numpy does, and compute in the dtype the precision
    means (:data:`amp_suite.plugins.kit.COMPUTE_DTYPES`): an amp_bf16 cell that computed in float32 would be
    reported as AMP's speed-up.
    """
    from amp_suite.plugins.kit import COMPUTE_DTYPES

    if applied.precision != precision:
        return (f"set_precision returned precision {str(applied.precision)[:40]!r} for a cell of {precision}; it must "
                "name the precision it was asked to apply")
    for name in ("compute_dtype", "param_dtype", "output_dtype"):
        value = getattr(applied, name)
        if value not in DTYPE_NAMES:
            return f"set_precision returned {name} {str(value)[:40]!r}; allowed: {', '.join(DTYPE_NAMES)}"
    expected = COMPUTE_DTYPES.get(precision)
    if expected and applied.compute_dtype != expected:
        return (f"set_precision returned compute_dtype {applied.compute_dtype!r} for a cell of {precision}; "
                f"{precision} computes in {expected} (raise UnsupportedError where it cannot)")
    return None
