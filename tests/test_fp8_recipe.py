"""The FP8 recipe's NumPy reference: scales, saturation, e4m3/e5m2 rounding and one dense layer."""

from __future__ import annotations

import numpy as np
import pytest

from amp_suite.numerics.formats import BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2, round_to
from amp_suite.numerics.fp8 import RECIPE, dense_backward, dense_forward, fake_quantize, quantize, tensor_scale


def test_the_scale_puts_the_largest_value_on_the_formats_largest_finite_one() -> None:
    x = np.array([0.5, -3.0, 1.0])
    q, scale = quantize(x, FLOAT8_E4M3)
    assert scale == 448.0 / 3.0 and q[1] == -448.0
    assert np.abs(q).max() <= FLOAT8_E4M3.max_finite
    assert tensor_scale(np.zeros(3), FLOAT8_E4M3) == 1.0
    assert tensor_scale(np.array([np.inf, 2.0]), FLOAT8_E5M2) == 57344.0 / 2.0


def test_fake_quantize_keeps_e4m3s_three_mantissa_bits_relative_to_the_amax() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=1000)
    back = fake_quantize(x, FLOAT8_E4M3)
    normal = np.abs(x * tensor_scale(x, FLOAT8_E4M3)) >= FLOAT8_E4M3.smallest_normal
    # in the normal range a round-to-nearest with 3 stored bits errs by at most 2**-4 of the value
    assert np.all(np.abs(back - x)[normal] <= np.abs(x)[normal] * 2.0 ** -4 + 1e-15)
    assert np.max(np.abs(back - x)) > 0  # it does round


def test_dense_forward_against_an_explicit_loop_of_the_recipe() -> None:
    rng = np.random.default_rng(1)
    x, w, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=2)
    sx, sw = 448.0 / np.abs(x).max(), 448.0 / np.abs(w).max()
    xq = round_to(np.clip(x * sx, -448, 448), FLOAT8_E4M3) / sx
    wq = round_to(np.clip(w * sw, -448, 448), FLOAT8_E4M3) / sw
    expected = np.empty((3, 2))
    for i in range(3):
        for j in range(2):
            acc = round_to(np.array([sum(xq[i, k] * wq[k, j] for k in range(4))]), BFLOAT16)[0]
            expected[i, j] = round_to(np.array([acc + round_to(np.array([b[j]]), BFLOAT16)[0]]), BFLOAT16)[0]
    np.testing.assert_allclose(dense_forward(x, w, b), expected, rtol=0, atol=0)
    exact = x @ w + b
    assert np.max(np.abs(dense_forward(x, w, b) - exact)) < 0.25 * np.max(np.abs(exact))


def test_dense_backward_casts_the_gradient_to_e5m2_with_its_own_scale() -> None:
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=(5, 4)), rng.normal(size=(4, 3))
    grad = rng.normal(scale=1e-6, size=(5, 3))  # tiny gradients: the scale lifts them into e5m2's range
    grad_x, grad_w = dense_backward(x, w, grad)
    exact_x, exact_w = grad @ w.T, x.T @ grad
    assert np.linalg.norm(grad_x - exact_x) / np.linalg.norm(exact_x) < 0.15
    assert np.linalg.norm(grad_w - exact_w) / np.linalg.norm(exact_w) < 0.15
    g = fake_quantize(grad, FLOAT8_E5M2)
    np.testing.assert_array_equal(grad_w, round_to(fake_quantize(x, FLOAT8_E4M3).T @ g, BFLOAT16))
    # without a scale, e5m2 would flush most of these gradients to zero
    assert np.mean(round_to(grad, FLOAT8_E5M2) == 0) > 0.5 and np.mean(g == 0) == 0


def test_the_recipe_describes_itself() -> None:
    text = RECIPE.describe()
    assert "float8_e4m3fn forward operands" in text and "float8_e5m2 gradients" in text
    assert "current amax" in text
    with pytest.raises(AttributeError):
        RECIPE.scaling = "delayed"  # type: ignore[misc]
