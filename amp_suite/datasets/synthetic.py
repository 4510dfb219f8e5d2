"""A seeded, learnable synthetic dataset in any workload's shape.

Each class has a fixed random prototype image; an example is its class
prototype blended with noise.  A model can learn it, so accuracy figures are
meaningful offline, and the same seed gives the same arrays on every machine.
"""

from __future__ import annotations

import numpy as np

from amp_suite.records import Workload


def make_synthetic(workload: Workload, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` NHWC float32 images in [0, 1] and their int32 labels."""
    rng = np.random.Generator(np.random.PCG64([seed, 0x5EED]))
    h, w, c = workload.input_shape
    prototypes = rng.random((workload.num_classes, h, w, c), dtype=np.float32)
    labels = rng.integers(0, workload.num_classes, size=count, dtype=np.int64).astype(np.int32)
    images = rng.random((count, h, w, c), dtype=np.float32)
    images *= np.float32(0.5)
    images += np.float32(0.5) * prototypes[labels]
    return images, labels
