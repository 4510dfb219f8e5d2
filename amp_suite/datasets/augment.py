"""CIFAR-style augmentation and per-channel normalization, done once by the host.

Normalization uses the training split's statistics (``normalize``) or
ImageNet's fixed ones (``input_normalization = "imagenet"``: the mean and
standard deviation Keras's EfficientNet normalizes its rescaled input with).

The random crop pads each image with ``pad`` zero pixels on every side and cuts
a window of the original size at a random offset; the flip mirrors half the
images left to right.  Both are drawn from a generator seeded by the run's
seed and the epoch, so every framework trains on the same augmented pixels and
each epoch differs.  Cropping and flipping work on [0, 1] pixels, before
normalization, as torchvision's ``RandomCrop(padding=4)`` + ``RandomHorizontalFlip``
followed by ``Normalize`` does.
"""

from __future__ import annotations

import numpy as np

CROP_PADDING = 4
# ImageNet's per-channel (RGB) mean and standard deviation of [0, 1] pixels
# (keras/src/applications/efficientnet.py: IMAGENET_STDDEV_RGB; the mean of its Normalization weights).
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def augmentation_rng(seed: int, epoch: int, step: int) -> np.random.Generator:
    """The generator of one batch's crops and flips: any slice of an epoch gives the same pixels."""
    return np.random.Generator(np.random.PCG64([seed, epoch, step, 0xA06]))


def random_crop_flip(images: np.ndarray, rng: np.random.Generator, pad: int = CROP_PADDING) -> np.ndarray:
    """NHWC images randomly cropped after zero padding and flipped horizontally."""
    n, h, w, _ = images.shape
    padded = np.pad(images, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    top = rng.integers(0, 2 * pad + 1, size=(n,))
    left = rng.integers(0, 2 * pad + 1, size=(n,))
    flip = rng.random((n,)) < 0.5
    out = np.empty_like(images)
    for i in range(n):
        crop = padded[i, top[i]:top[i] + h, left[i]:left[i] + w]
        out[i] = crop[:, ::-1] if flip[i] else crop
    return out


def channel_stats(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation of NHWC images (float32)."""
    flat = images.reshape(-1, images.shape[-1]).astype(np.float64)
    std = flat.std(axis=0)
    return flat.mean(axis=0).astype(np.float32), np.where(std > 0, std, 1.0).astype(np.float32)


def normalize(images: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    return ((images - mean) / std).astype(np.float32)
