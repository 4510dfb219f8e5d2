"""What a hook may return, checked against the annotations in :mod:`amp_suite.plugins.hookspecs`.

The return annotation of every hookspec is the contract: ``write_report``
returns ``list[Path] | None``, ``train_epoch`` an ``EpochResult | None``, and
so on.  :func:`check_return` compares an answer with it (containers are
checked element by element, ``Any`` accepts everything) and raises a
one-line :class:`~amp_suite.errors.PluginError` naming the plugin, the hook,
what came back and what was expected.  ``EpochResult.extra`` is checked too:
its values become figures of the run, so they must be plain scalars.
"""

from __future__ import annotations

import inspect
import numbers
import types
import typing
from functools import cache
from typing import Any

from amp_suite.errors import PluginError

# Types an ``EpochResult.extra`` value may have (numpy scalars are numbers.Number too).
EXTRA_VALUE_TYPES = (bool, numbers.Number, str, type(None))


@cache
def return_types() -> dict[str, tuple[Any, str]]:
    """Hook name -> (resolved return type, the annotation as written in hookspecs)."""
    from amp_suite.plugins import hookspecs

    out = {}
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if hasattr(func, "amp_suite_spec"):
            out[name] = (typing.get_type_hints(func)["return"], str(inspect.signature(func).return_annotation))
    return out


def conforms(value: Any, expected: Any) -> bool:
    """Whether ``value`` has type ``expected`` (unions, list, tuple, dict and classes; Any matches all)."""
    if expected is Any:
        return True
    if expected is None or expected is type(None):
        return value is None
    origin = typing.get_origin(expected)
    args = typing.get_args(expected)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(conforms(item, args[0]) for item in value) if args else \
            isinstance(value, list)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(conforms(item, args[0]) for item in value)
        return not args or (len(args) == len(value) and all(conforms(v, a) for v, a in zip(value, args, strict=True)))
    if origin is dict:
        if not isinstance(value, dict):
            return False
        return not args or all(conforms(k, args[0]) and conforms(v, args[1]) for k, v in value.items())
    if isinstance(expected, type):
        return isinstance(value, expected)
    return True  # an annotation this checker does not understand accepts everything


def _what(value: Any) -> str:
    """A short description of ``value`` for an error line: its type, and a container's first offender."""
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"str {shown!r}"
    return type(value).__name__


def check_return(plugin: str, hook: str, value: Any) -> Any:
    """``value`` when it conforms to ``hook``'s declared return type, else a one-line :class:`PluginError`."""
    expected, written = return_types()[hook]
    if not conforms(value, expected):
        detail = _what(value)
        if isinstance(value, list) and value:
            arms = [arm for arm in typing.get_args(expected) or (expected,) if typing.get_origin(arm) is list]
            item_type = typing.get_args(arms[0])[0] if arms and typing.get_args(arms[0]) else Any
            wrong = [item for item in value if not conforms(item, item_type)]
            if wrong:
                detail += f" holding {_what(wrong[0])}"
        elif isinstance(value, dict):
            detail += " of " + ", ".join(sorted({f"{type(k).__name__}: {type(v).__name__}"
                                                 for k, v in list(value.items())[:5]}))
        raise PluginError(f"plugin {plugin!r}: {hook} returned {detail}; it must return {written}")
    if hook == "train_epoch" and value is not None:
        for key, item in value.extra.items():
            if not isinstance(key, str) or not isinstance(item, EXTRA_VALUE_TYPES):
                raise PluginError(
                    f"plugin {plugin!r}: train_epoch returned EpochResult.extra[{key!r}] = {_what(item)}; extra "
                    "values become figures of the run and must be numbers, strings, booleans or None"
                )
    return value


def check_logits(plugin: str, logits: Any, images: int, precision: str = "fp32") -> None:
    """``predict``'s answer: a float32 numpy array ``(images, classes)``, else a one-line :class:`PluginError`.

    Logits in a reduced dtype would make every comparison of the host round
    them again (and numpy cannot hold bfloat16): the contract is float32 out,
    whatever the compute dtype, and float64 under the ``fp64`` reference
    (:func:`amp_suite.precision.stored_dtype`).
    """
    import numpy as np

    from amp_suite.precision import stored_dtype

    expected = stored_dtype(precision)
    if not isinstance(logits, np.ndarray):
        raise PluginError(f"plugin {plugin!r}: predict returned {_what(logits)}; it must return a numpy array "
                          f"(np.asarray(..., dtype=np.{expected}))")
    if logits.dtype != expected:
        rule = "float32 whatever the compute dtype" if expected == "float32" else f"{expected} under {precision}"
        raise PluginError(f"plugin {plugin!r}: predict returned logits of dtype {logits.dtype}; they must be "
                          f"{rule} (cast them before returning)")
    if logits.ndim not in (2, 3) or logits.shape[0] != images:  # 3: (n, context, vocab) of a token workload
        raise PluginError(f"plugin {plugin!r}: predict returned logits of shape {logits.shape}; expected "
                          f"({images}, classes) for {images} images")
