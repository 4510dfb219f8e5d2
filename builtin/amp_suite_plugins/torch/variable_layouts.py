"""Where PyTorch keeps each canonical variable: a :class:`Leaf` per variable (its attribute, its layout both ways)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amp_suite.plugins.kit import chw_rows_to_hwc, hwc_rows_to_chw

FlatHwc = tuple[int, int, int] | None
# A canonical array to torch's layout of the same variable, or back; ``FlatHwc`` is the image a dense layer's
# input was flattened from, when its rows must be reordered (see amp_suite_plugins.torch.plugin).
Layout = Callable[[np.ndarray, FlatHwc], np.ndarray]


def _as_is(value: np.ndarray, flat_hwc: FlatHwc) -> np.ndarray:
    return value


@dataclass(frozen=True)
class Leaf:
    """Where one canonical variable (``NAME/leaf``) lives in its layer's module, and its layout there."""

    attribute: str  # a dotted path inside the layer's module
    to_torch: Layout = _as_is
    from_torch: Layout = _as_is


def _hwio_to_oihw(value: np.ndarray, flat_hwc: FlatHwc) -> np.ndarray:
    return value.transpose(3, 2, 0, 1)


def _oihw_to_hwio(value: np.ndarray, flat_hwc: FlatHwc) -> np.ndarray:
    return value.transpose(2, 3, 1, 0)


def _depthwise_layout(value: np.ndarray, flat_hwc: FlatHwc) -> np.ndarray:
    return value.transpose(2, 3, 0, 1)  # (k, k, c, 1) <-> (c, 1, k, k): groups=c, one filter each (its own inverse)


def _transposed(value: np.ndarray, flat_hwc: FlatHwc) -> np.ndarray:
    return value.T  # (in, out) <-> torch's (out, in)


def _dense_to_torch(value: np.ndarray, flat_hwc: FlatHwc) -> np.ndarray:
    if flat_hwc is not None:
        value = hwc_rows_to_chw(value, flat_hwc)  # torch flattens NCHW as (c, h, w)
    return value.T


def _dense_from_torch(value: np.ndarray, flat_hwc: FlatHwc) -> np.ndarray:
    return chw_rows_to_hwc(value.T, flat_hwc) if flat_hwc is not None else value.T


CONV_LEAVES = {"w": Leaf("weight", _hwio_to_oihw, _oihw_to_hwio), "b": Leaf("bias")}


DENSE_LEAVES = {"w": Leaf("weight", _dense_to_torch, _dense_from_torch), "b": Leaf("bias")}


NORM_LEAVES = {"scale": Leaf("weight"), "offset": Leaf("bias")}


BATCH_NORM_LEAVES = {**NORM_LEAVES, "mean": Leaf("running_mean"), "var": Leaf("running_var")}


ATTENTION_LEAVES = {"qkv_w": Leaf("qkv.weight", _transposed, _transposed), "qkv_b": Leaf("qkv.bias"),
                    "out_w": Leaf("out.weight", _transposed, _transposed), "out_b": Leaf("out.bias")}
