"""A seeded, learnable synthetic dataset in any workload's shape.

Each class has a fixed random prototype image; an example is its class
prototype blended with noise.  For a token workload, a stream drawn from a
seeded Markov chain (each token has two likely successors) is cut into
windows of the context, each labelled with the window shifted by one.  A model can learn it, so accuracy figures are
meaningful offline, and the same seed gives the same arrays on every machine.
"""

from __future__ import annotations

import numpy as np

from amp_suite.records import Workload


def make_synthetic(workload: Workload, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` NHWC float32 images in [0, 1] and their int32 labels (token windows for a token workload)."""
    rng = np.random.Generator(np.random.PCG64([seed, 0x5EED]))
    if workload.tokens:
        return _token_windows(workload, count, rng)
    h, w, c = workload.input_shape
    prototypes = rng.random((workload.num_classes, h, w, c), dtype=np.float32)
    labels = rng.integers(0, workload.num_classes, size=count, dtype=np.int64).astype(np.int32)
    images = rng.random((count, h, w, c), dtype=np.float32)
    images *= np.float32(0.5)
    images += np.float32(0.5) * prototypes[labels]
    return images, labels


def _token_windows(workload: Workload, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` int32 windows of ``context`` tokens from a Markov chain, and the next token at each position."""
    assert workload.transformer is not None
    vocab, context = workload.transformer.vocab_size, workload.transformer.context
    successors = rng.integers(0, vocab, size=(vocab, 2))
    stream = np.empty(count * context + 1, dtype=np.int32)
    stream[0] = rng.integers(0, vocab)
    choice = rng.integers(0, 2, size=stream.shape[0])
    noise = rng.random(stream.shape[0]) < 0.1
    random_tokens = rng.integers(0, vocab, size=stream.shape[0])
    for i in range(1, stream.shape[0]):
        stream[i] = random_tokens[i] if noise[i] else successors[stream[i - 1], choice[i]]
    inputs = stream[:-1].reshape(count, context)
    labels = stream[1:].reshape(count, context)
    return inputs, labels.astype(np.int32)
