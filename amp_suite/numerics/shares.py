"""What a number format does to one tensor, and how far a tensor is from its shadow.

:func:`value_shares` rounds a tensor's values (held in float32 or float64) to
a format and counts: the share of its nonzero values that round to zero
(underflow) and that land on a subnormal, and the share of its finite values
that overflow to inf or nan; plus its largest magnitude against the format's
largest finite value.  :func:`relative_error` is the L2 distance to a shadow
tensor relative to the shadow's norm.  These are the columns of the numerics
report, the same for every framework because the
host computes them from the arrays a backend hands over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from amp_suite.numerics.formats import FloatFormat, round_to


@dataclass(frozen=True)
class ValueShares:
    """Shares (0 to 1) of a tensor's values (``count`` of them).

    ``underflow``: of the nonzero values, those that round to zero;
    ``subnormal``: of the nonzero values, those that round to a nonzero
    subnormal; ``overflow``: of the finite values, those that round to inf or
    nan; ``nonfinite``: of all values, those already inf or nan.  ``max_abs`` is
    the largest finite magnitude, ``headroom`` ``max_abs / max_finite`` (above 1
    overflows).
    """

    format: str
    count: int
    underflow: float
    subnormal: float
    overflow: float
    nonfinite: float
    max_abs: float
    headroom: float


def value_shares(values: np.ndarray, fmt: FloatFormat) -> ValueShares:
    """Round ``values`` to ``fmt`` and count what is lost (see :class:`ValueShares`)."""
    x = np.asarray(values, dtype=np.float64).ravel()
    count = int(x.size)
    if count == 0:
        return ValueShares(fmt.name, 0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    finite = np.isfinite(x)
    nonzero = finite & (x != 0)
    rounded = round_to(x, fmt)
    underflow = int(np.count_nonzero(nonzero & (rounded == 0)))
    magnitude = np.abs(rounded)
    subnormal = int(np.count_nonzero(finite & (magnitude > 0) & (magnitude < fmt.smallest_normal)))
    overflow = int(np.count_nonzero(finite & ~np.isfinite(rounded)))
    max_abs = float(np.abs(x[finite]).max()) if finite.any() else math.nan

    def share(part: int, whole: int) -> float:
        return part / whole if whole else 0.0

    # a value that is zero cannot be lost to zero nor land on a subnormal: those are shares of the nonzero values
    # (a layer after a ReLU holds many exact zeros), overflow of the finite ones, nonfinite of them all
    nonzero_count, finite_count = int(np.count_nonzero(nonzero)), int(np.count_nonzero(finite))
    return ValueShares(fmt.name, count, share(underflow, nonzero_count), share(subnormal, nonzero_count),
                       share(overflow, finite_count), float(np.count_nonzero(~finite)) / count, max_abs,
                       max_abs / fmt.max_finite)


def relative_error(values: np.ndarray, shadow: np.ndarray, *, floor: float = 0.0) -> float:
    """``||values - shadow|| / max(||shadow||, floor)`` (L2, in float64); ``||values - shadow||`` itself where that
    denominator is 0.  ``floor`` judges a tensor whose true value is ~0 against a fixed norm (the kit's checks)."""
    a = np.asarray(values, dtype=np.float64)
    b = np.asarray(shadow, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"a tensor of shape {a.shape} cannot be compared with a shadow of shape {b.shape}")
    difference = float(np.linalg.norm((a - b).ravel()))
    denominator = max(float(np.linalg.norm(b.ravel())), floor)
    return difference / denominator if denominator > 0 else difference


def underflow_without_scale(scaled_gradients: np.ndarray, loss_scale: float, fmt: FloatFormat) -> float:
    """The share of nonzero gradient values that would round to zero in ``fmt`` had the loss not been scaled.

    ``scaled_gradients`` are the gradients of the scaled loss; divided by
    ``loss_scale`` (exactly, in float64) they are what an unscaled backward
    pass would have had to hold in ``fmt``.
    """
    unscaled = np.asarray(scaled_gradients, dtype=np.float64) / loss_scale
    return value_shares(unscaled, fmt).underflow
