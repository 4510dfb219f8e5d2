"""Preprocessing shared by every framework: scale to [0, 1], resize, copy grey to colour channels.

Resizing is bilinear with half-pixel centres (the convention of
``tf.image.resize`` and ``jax.image.resize`` without antialiasing),
implemented once here so every framework trains on the same float32 pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def to_unit_float(images: np.ndarray) -> np.ndarray:
    """uint8 -> float32 in [0, 1]."""
    return images.astype(np.float32) / np.float32(255.0)


def _bilinear_matrix(in_size: int, out_size: int) -> np.ndarray:
    """``(out_size, in_size)`` weights of 1-D bilinear interpolation, half-pixel centres."""
    scale = in_size / out_size
    centres = (np.arange(out_size) + 0.5) * scale - 0.5
    centres = np.clip(centres, 0, in_size - 1)
    low = np.floor(centres).astype(int)
    high = np.minimum(low + 1, in_size - 1)
    frac = centres - low
    weights = np.zeros((out_size, in_size), dtype=np.float64)
    weights[np.arange(out_size), low] += 1 - frac
    weights[np.arange(out_size), high] += frac
    return weights.astype(np.float32)


def resize_bilinear(images: np.ndarray, size: int, *, chunk: int = 1024) -> np.ndarray:
    """Resize NHWC float32 images to ``size`` x ``size``."""
    n, h, w, c = images.shape
    if (h, w) == (size, size):
        return images
    rows, cols = _bilinear_matrix(h, size), _bilinear_matrix(w, size)
    out = np.empty((n, size, size, c), dtype=np.float32)
    for start in range(0, n, chunk):
        block = images[start:start + chunk]
        out[start:start + chunk] = np.einsum("oh,nhwc,pw->nopc", rows, block, cols, optimize=True)
    return out


@dataclass(frozen=True)
class ImageShaping:
    """How stored images become the model's input: resized to ``size`` x ``size``, grey copied to ``channels``.

    A dataset keeps its images as stored (28x28 grey for MNIST) and the
    pipeline shapes only the batch it is making, so a split resized to 456²
    in three channels (2.5 GB for 1,000 images) is never held whole.
    """

    size: int
    channels: int

    def apply(self, images: np.ndarray) -> np.ndarray:
        """NHWC float32 images, resized bilinearly, then the grey channel repeated ``channels`` times."""
        shaped = resize_bilinear(images, self.size)
        if shaped.shape[-1] != self.channels:
            shaped = np.repeat(shaped, self.channels, axis=-1)
        return shaped
