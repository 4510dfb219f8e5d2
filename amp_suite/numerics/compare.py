"""A traced step set beside its shadow, layer by layer: the rows of the numerics report.

:func:`compare_steps` takes a run's :class:`~amp_suite.numerics.records.StepTrace`
and the shadow's trace of the same step (same weights, same batch, float32
or float64) and gives one :class:`~amp_suite.numerics.records.LayerNumerics`
per named layer for its activation and one for its weight gradients (every
variable of the layer concatenated); ``shadow.bisect.worst_layer`` ranks them.  Pure
NumPy: what the rows say is computed here, from the arrays, the same for
every framework.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from amp_suite.numerics.formats import FLOAT32, FORMATS, FloatFormat
from amp_suite.numerics.records import LayerNumerics, StepTrace, TensorTrace
from amp_suite.numerics.shares import relative_error, value_shares


def format_of(dtype: str) -> FloatFormat | None:
    """The number format a dtype name stands for (``float16``, ``bfloat16``, ``float32``, the FP8 ones);
    ``None`` for float64 (nothing is lost that a float64 shadow would show) and unknown names."""
    return FORMATS.get(dtype)


def layer_of(variable: str) -> str:
    """The layer a canonical variable name belongs to: ``conv1/w`` -> ``conv1``."""
    return variable.rsplit("/", 1)[0]


def gradients_by_layer(trace: StepTrace) -> dict[str, list[tuple[str, TensorTrace]]]:
    """The trace's gradients grouped by layer, in the trace's order, each list sorted by variable name."""
    grouped: dict[str, list[tuple[str, TensorTrace]]] = {}
    for name, tensor in trace.gradients.items():
        grouped.setdefault(layer_of(name), []).append((name, tensor))
    return {layer: sorted(items) for layer, items in grouped.items()}


def _joined(items: list[tuple[str, TensorTrace]]) -> np.ndarray:
    return np.concatenate([np.asarray(t.values, dtype=np.float64).ravel() for _, t in items]) if items \
        else np.zeros(0)


def _nonfinite(values: np.ndarray) -> float:
    return float(np.count_nonzero(~np.isfinite(values))) / values.size if values.size else 0.0


def _row(*, framework: str, workload: str, precision: str, shadow: str, step: int, layer: str, tensor: str,
         dtype: str, values: np.ndarray, shadow_values: np.ndarray, loss_scale: float | None,
         extra: dict[str, float]) -> LayerNumerics:
    if values.shape != shadow_values.shape:
        raise ValueError(f"layer {layer!r}: the {tensor} of shape {values.shape} cannot be set beside the "
                         f"shadow's of shape {shadow_values.shape}")
    fmt = format_of(dtype) or FLOAT32
    held = shadow_values
    without_scale = None
    if tensor == "gradient" and loss_scale is not None:
        held = shadow_values * loss_scale  # what the scaled backward pass had to hold
        without_scale = value_shares(shadow_values, fmt).underflow
    shares = value_shares(held, fmt)
    max_abs = float(np.abs(shadow_values[np.isfinite(shadow_values)]).max()) if np.isfinite(shadow_values).any() \
        else math.nan
    return LayerNumerics(
        framework=framework, workload=workload, precision=precision, shadow=shadow, step=step, layer=layer,
        tensor=tensor, dtype=dtype, format=fmt.name, count=int(values.size),
        relative_error=relative_error(values, shadow_values), underflow=shares.underflow,
        subnormal=shares.subnormal, overflow=shares.overflow, nonfinite=_nonfinite(values),
        max_abs=max_abs, headroom=max_abs / fmt.max_finite, loss_scale=loss_scale,
        underflow_without_scale=without_scale, extra=dict(extra))


def compare_steps(run: StepTrace, shadow: StepTrace, *, framework: str, workload: str, precision: str,
                  shadow_precision: str, step: int) -> list[LayerNumerics]:
    """Every layer of ``run`` beside ``shadow``: its activation, then its weight gradients (layers without
    variables have no gradient row).

    A layer or variable the shadow lacks, or one of another shape, is a
    ``ValueError`` naming it: two traces of one workload have the same names.
    """
    missing = sorted(set(run.activations) ^ set(shadow.activations))
    missing += sorted(set(run.gradients) ^ set(shadow.gradients))
    if missing:
        raise ValueError(f"the traces of {precision} and its {shadow_precision} shadow name different layers or "
                         f"variables: {', '.join(missing[:8])}")
    rows: list[LayerNumerics] = []
    common: dict[str, Any] = dict(framework=framework, workload=workload, precision=precision,
                                  shadow=shadow_precision, step=step)
    gradients = gradients_by_layer(run)
    shadow_gradients = gradients_by_layer(shadow)
    arrived = 0.0  # the relative error of the previous named layer's output
    for layer, tensor in run.activations.items():
        row = _row(**common, layer=layer, tensor="activation", dtype=tensor.dtype,
                   values=np.asarray(tensor.values, dtype=np.float64),
                   shadow_values=np.asarray(shadow.activations[layer].values, dtype=np.float64),
                   loss_scale=run.loss_scale, extra=run.extra.get(layer, {}))
        added = max(row.relative_error - arrived, 0.0) if math.isfinite(row.relative_error) else row.relative_error
        rows.append(replace(row, error_added=added))
        arrived = row.relative_error
        if layer in gradients:
            items = gradients[layer]
            rows.append(_row(**common, layer=layer, tensor="gradient", dtype=_narrowest(t.dtype for _, t in items),
                             values=_joined(items), shadow_values=_joined(shadow_gradients[layer]),
                             loss_scale=run.loss_scale, extra=run.extra.get(layer, {})))
    for layer in gradients.keys() - run.activations.keys():  # variables of a layer that gave no activation
        rows.append(_row(**common, layer=layer, tensor="gradient",
                         dtype=_narrowest(t.dtype for _, t in gradients[layer]), values=_joined(gradients[layer]),
                         shadow_values=_joined(shadow_gradients[layer]), loss_scale=run.loss_scale,
                         extra=run.extra.get(layer, {})))
    return rows


def _narrowest(dtypes: object) -> str:
    """Of a layer's gradient dtypes, the one with the fewest mantissa bits (float64 and unknown names last)."""
    names = list(dtypes)  # type: ignore[call-overload]
    known = [name for name in names if name in FORMATS]
    if not known:
        return names[0] if names else "float64"
    return min(known, key=lambda name: (FORMATS[name].mantissa_bits, FORMATS[name].exponent_bits))
