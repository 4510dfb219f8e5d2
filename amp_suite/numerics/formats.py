"""Floating-point formats, and rounding float64 values to them with NumPy alone.

A :class:`FloatFormat` is described by its exponent and mantissa bits, its
largest finite value and whether it has infinities.  :func:`round_to` rounds
to the nearest representable value, ties to even (IEEE 754's default and what
a cast does on every framework here), subnormals included; a value beyond
the largest finite one becomes ``inf`` (formats with infinities) or ``nan``
(``float8_e4m3fn``, which has none: OCP's FP8 specification, the format of
``torch.float8_e4m3fn``, ``jnp.float8_e4m3fn`` and ``ml_dtypes``).  Saturating
casts, as FP8 recipes use, are :func:`saturate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: ``1`` sign bit, ``exponent_bits``, ``mantissa_bits`` stored bits.

    ``max_finite`` is the largest finite magnitude; ``smallest_normal`` is
    ``2 ** (1 - bias)``; the smallest subnormal is ``smallest_normal *
    2 ** -mantissa_bits``.
    """

    name: str
    exponent_bits: int
    mantissa_bits: int
    max_finite: float
    has_inf: bool = True

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def min_exponent(self) -> int:
        """The exponent of the smallest normal number."""
        return 1 - self.bias

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, self.min_exponent)

    @property
    def smallest_subnormal(self) -> float:
        return math.ldexp(1.0, self.min_exponent - self.mantissa_bits)


FLOAT32 = FloatFormat("float32", 8, 23, float(np.finfo(np.float32).max))
FLOAT16 = FloatFormat("float16", 5, 10, 65504.0)
BFLOAT16 = FloatFormat("bfloat16", 8, 7, float.fromhex("0x1.fep127"))
FLOAT8_E4M3 = FloatFormat("float8_e4m3fn", 4, 3, 448.0, has_inf=False)
FLOAT8_E5M2 = FloatFormat("float8_e5m2", 5, 2, 57344.0)
FORMATS = {f.name: f for f in (FLOAT32, FLOAT16, BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2)}


def float_format(name: str) -> FloatFormat:
    """The format called ``name``; a one-line ``ValueError`` naming the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown number format {name!r}; known: {', '.join(FORMATS)}") from None


def round_to(values: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """``values`` rounded to ``fmt`` (nearest, ties to even), as float64; overflow gives inf or nan.

    Exact: scaling by powers of two and ``np.rint`` are exact in float64 for
    every format narrower than it.
    """
    x = np.asarray(values, dtype=np.float64)
    out = x.copy()
    finite = np.isfinite(x) & (x != 0)
    v = x[finite]
    _, exponent = np.frexp(v)  # v = f * 2**exponent, 0.5 <= |f| < 1: the leading bit is 2**(exponent - 1)
    quantum_exponent = np.maximum(exponent - 1, fmt.min_exponent) - fmt.mantissa_bits
    rounded = np.ldexp(np.rint(np.ldexp(v, -quantum_exponent)), quantum_exponent)
    overflow = np.abs(rounded) > fmt.max_finite
    rounded[overflow] = np.copysign(np.inf, v[overflow]) if fmt.has_inf else np.nan
    out[finite] = rounded
    if not fmt.has_inf:
        out[np.isinf(x)] = np.nan  # no infinities to keep
    return out


def saturate(values: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """``values`` clipped to ``±fmt.max_finite`` then rounded: the saturating cast of FP8 recipes."""
    x = np.asarray(values, dtype=np.float64)
    return round_to(np.clip(x, -fmt.max_finite, fmt.max_finite), fmt)
