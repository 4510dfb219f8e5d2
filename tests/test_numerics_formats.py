"""Rounding to float16, bfloat16 and the FP8 formats in NumPy, and the shares the numerics report counts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from amp_suite.numerics.formats import (
    BFLOAT16,
    FLOAT8_E4M3,
    FLOAT8_E5M2,
    FLOAT16,
    FLOAT32,
    float_format,
    round_to,
    saturate,
)
from amp_suite.numerics.shares import relative_error, underflow_without_scale, value_shares


def _probe_values() -> np.ndarray:
    """Values across every range a format has: tiny, subnormal, normal, near the top, beyond it, ties."""
    rng = np.random.default_rng(0)
    magnitudes = np.exp2(rng.uniform(-150, 130, size=20_000))
    signs = rng.choice([-1.0, 1.0], size=magnitudes.shape)
    ties = np.array([1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 2.0 ** -24 * 1.5, 65519.0, 65520.0, 464.0, 0.0, -0.0])
    return np.concatenate([signs * magnitudes, ties])


def test_float16_rounding_is_numpys_cast_bit_for_bit() -> None:
    x = _probe_values()
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(round_to(x, FLOAT16), expected)


def test_float32_rounding_is_numpys_cast() -> None:
    x = _probe_values()
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(round_to(x, FLOAT32), x.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize(("fmt", "dtype_name"), [(BFLOAT16, "bfloat16"), (FLOAT8_E4M3, "float8_e4m3fn"),
                                                 (FLOAT8_E5M2, "float8_e5m2")])
def test_bfloat16_and_fp8_rounding_match_ml_dtypes(fmt, dtype_name) -> None:  # type: ignore[no-untyped-def]
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes comes with JAX and TensorFlow")
    # float32 values, what a framework casts: ml_dtypes rounds a float64 through float32 first (twice)
    with np.errstate(over="ignore"):
        x = _probe_values().astype(np.float32).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = x.astype(getattr(ml_dtypes, dtype_name)).astype(np.float64)
    np.testing.assert_array_equal(round_to(x, fmt), expected)


def test_the_formats_have_their_published_limits() -> None:
    assert FLOAT16.smallest_normal == 2.0 ** -14 and FLOAT16.smallest_subnormal == 2.0 ** -24
    assert BFLOAT16.smallest_normal == 2.0 ** -126 and BFLOAT16.max_finite == pytest.approx(3.3895e38, rel=1e-4)
    assert FLOAT8_E4M3.smallest_subnormal == 2.0 ** -9 and FLOAT8_E5M2.smallest_subnormal == 2.0 ** -16
    assert math.isnan(round_to(np.array([480.0]), FLOAT8_E4M3)[0])
    assert saturate(np.array([1e6, -1e6]), FLOAT8_E4M3).tolist() == [448.0, -448.0]
    with pytest.raises(ValueError, match="unknown number format 'fp7'; known: float32, float16"):
        float_format("fp7")


def test_value_shares_count_underflow_subnormals_and_overflow_like_a_numpy_cast() -> None:
    x = np.array([0.0, 1e-9, -1e-9, 3e-6, 1.0, 7e4, -1e5, np.inf, np.nan, 2.0 ** -14])
    shares = value_shares(x, FLOAT16)
    cast = x.astype(np.float32)
    with np.errstate(over="ignore"):
        half = cast.astype(np.float16)
    finite = np.isfinite(cast)
    nonzero, finites = np.count_nonzero(finite & (cast != 0)), np.count_nonzero(finite)  # 7 and 8 of the 10
    # underflow and subnormal are shares of the nonzero values (a zero is lost to nothing), overflow of the finite
    assert shares.underflow == np.count_nonzero(finite & (cast != 0) & (half == 0)) / nonzero == 2 / 7
    assert shares.subnormal == np.count_nonzero(finite & (half != 0) & (np.abs(half) < 2.0 ** -14)) / nonzero == 1 / 7
    assert shares.overflow == np.count_nonzero(finite & ~np.isfinite(half)) / finites == 2 / 8
    assert value_shares(np.zeros(4), FLOAT16).underflow == 0.0  # no nonzero value: nothing lost
    assert shares.nonfinite == 0.2 and shares.max_abs == 1e5 and shares.headroom == pytest.approx(1e5 / 65504)


def test_a_loss_scale_keeps_small_gradients_from_underflowing() -> None:
    rng = np.random.default_rng(1)
    gradients = rng.normal(scale=1e-7, size=10_000)  # most below float16's smallest subnormal (6e-8) in part
    scale = 2.0 ** 15
    scaled = round_to(gradients * scale, FLOAT16)
    assert value_shares(scaled, FLOAT16).underflow == 0.0
    lost = underflow_without_scale(scaled, scale, FLOAT16)
    # the same share as the unscaled gradients', within the few ties the float16 rounding of the scaled ones moves
    assert lost == pytest.approx(value_shares(gradients, FLOAT16).underflow, abs=1e-3) and lost > 0.2


def test_relative_error_is_the_l2_distance_over_the_shadows_norm() -> None:
    shadow = np.array([3.0, 4.0])
    assert relative_error(shadow + np.array([0.3, 0.4]), shadow) == pytest.approx(0.1)
    assert relative_error(np.array([0.5, 0.0]), np.zeros(2)) == 0.5
    with pytest.raises(ValueError, match="shape"):
        relative_error(np.zeros(3), np.zeros(2))
