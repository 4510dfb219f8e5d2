"""The scales and amax an FP8 layer used in a traced step, and what its casts lost: ``StepTrace.extra`` figures.

Under the ``fp8`` precision every FP8 matmul casts three operands with a
per-tensor scale from their current amax (:mod:`amp_suite.numerics.fp8`):
the activation entering it (``input``) and the weight in ``float8_e4m3fn``,
the gradient flowing back into it (``gradient``) in ``float8_e5m2``.  A
backend's ``trace_step`` hands each operand, with the scale and amax its own
cast used, to an :class:`Fp8Recorder`; the recorder counts, with
:mod:`amp_suite.numerics.formats`, the share of values the cast saturates at
the format's largest finite value and the share of nonzero values it flushes
to zero, so the shares mean the same in every framework.

Figures are named ``OPERAND_FIGURE`` (``input_amax``, ``weight_scale``,
``gradient_flushed`` ...); an attention layer has two FP8 matmuls, so its
figures carry the projection first (``qkv.input_amax``, ``out.weight_scale``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from amp_suite.numerics.formats import FloatFormat, float_format, saturate

# The operands of an FP8 matmul, in the order of a training step, and the figures recorded for each.
OPERANDS = ("input", "weight", "gradient")
FIGURES = ("amax", "scale", "saturated", "flushed")


def figure_name(projection: str, operand: str, figure: str) -> str:
    """``input_amax`` for a dense layer's matmul, ``qkv.input_amax`` for an attention layer's projection."""
    return f"{projection}.{operand}_{figure}" if projection else f"{operand}_{figure}"


def cast_shares(values: np.ndarray, scale: float, fmt: FloatFormat) -> tuple[float, float]:
    """``(saturated, flushed)``: the shares of ``values`` that ``values * scale`` cast to ``fmt`` with saturation
    puts on ``±max_finite``, and of nonzero finite values it rounds to zero."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return 0.0, 0.0
    finite = np.isfinite(x)
    cast = saturate(np.where(finite, x * scale, 0.0), fmt)
    saturated = np.count_nonzero(finite & (np.abs(cast) == fmt.max_finite))
    flushed = np.count_nonzero(finite & (x != 0) & (cast == 0))
    return saturated / x.size, flushed / x.size


@dataclass
class Fp8Recorder:
    """Collects, during one traced step, each FP8 layer's figures: ``figures[layer][name] = value``."""

    figures: dict[str, dict[str, float]] = field(default_factory=dict)

    def record(self, layer: str, projection: str, operand: str, values: np.ndarray, scale: float, amax: float,
               format_name: str) -> None:
        """One cast of ``operand`` (``input``, ``weight`` or ``gradient``) of ``layer``'s matmul ``projection``
        ("" for a dense layer): the values before scaling, the scale and amax the backend used, its format."""
        if operand not in OPERANDS:
            raise ValueError(f"unknown FP8 operand {operand!r}; known: {', '.join(OPERANDS)}")
        saturated, flushed = cast_shares(values, scale, float_format(format_name))
        slot = self.figures.setdefault(layer, {})
        for figure, value in zip(FIGURES, (amax, scale, saturated, flushed), strict=True):
            slot[figure_name(projection, operand, figure)] = float(value)


class RecorderStack:
    """The recorders a framework's FP8 module hands its casts to: empty outside ``trace_step``.

    A plugin's FP8 module keeps one stack; ``trace_step`` enters
    :meth:`recording` around the traced step, and each cast calls
    :meth:`hand_over` (directly, or from a ``jax.debug.callback``) only while
    :attr:`active`, so an ordinary training step records nothing.
    """

    def __init__(self) -> None:
        self._recorders: list[Fp8Recorder] = []

    @property
    def active(self) -> bool:
        return bool(self._recorders)

    @contextmanager
    def recording(self, recorder: Fp8Recorder) -> Iterator[None]:
        """While inside, every FP8 cast of a labelled layer hands ``recorder`` its operands, scale and amax."""
        self._recorders.append(recorder)
        try:
            yield
        finally:
            self._recorders.remove(recorder)

    def hand_over(self, label: tuple[str, str], operand: str, format_name: str, values: Any, amax: Any,
                  scale: Any) -> None:
        """One cast of ``label`` = (layer, projection) to the innermost recorder, as float64 NumPy values."""
        if self._recorders:
            self._recorders[-1].record(label[0], label[1], operand, np.asarray(values, dtype=np.float64),
                                       float(scale), float(amax), format_name)
