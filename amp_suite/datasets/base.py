"""The dataset record, dataset lookup, and the host's batch order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_suite.errors import UsageError
from amp_suite.records import Batch, Workload

DATASETS = ("synthetic",)
# Validation examples of the synthetic dataset.
SYNTHETIC_VAL_COUNT = 512


@dataclass(frozen=True)
class Dataset:
    """Training and validation arrays: NHWC float32 in [0, 1], int32 labels."""

    name: str
    train_images: np.ndarray
    train_labels: np.ndarray
    val_images: np.ndarray
    val_labels: np.ndarray
    note: str = ""


def load_dataset(name: str, workload: Workload, *, steps: int, batch_size: int, seed: int) -> Dataset:
    """Prepare the named dataset in ``workload``'s input shape."""
    if name == "synthetic":
        from amp_suite.datasets.synthetic import make_synthetic

        images, labels = make_synthetic(workload, steps * batch_size + SYNTHETIC_VAL_COUNT, seed)
        cut = steps * batch_size
        return Dataset(
            name, images[:cut], labels[:cut], images[cut:], labels[cut:],
            note=f"synthetic, seed {seed}",
        )
    raise UsageError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")


def epoch_batches(
    images: np.ndarray, labels: np.ndarray, *, batch_size: int, steps: int, seed: int, epoch: int
) -> list[Batch]:
    """The batches of one epoch, in the order every framework sees them.

    The order is a seeded permutation of the training set, reshuffled each
    epoch; a last partial batch is dropped.  At most ``steps`` batches.
    """
    count = int(labels.shape[0])
    if count < batch_size:
        raise UsageError(f"the training split has {count} examples, fewer than one batch of {batch_size}")
    order = np.random.Generator(np.random.PCG64([seed, epoch, 0xBA7C])).permutation(count)
    n_steps = min(steps, count // batch_size)
    batches = []
    for step in range(n_steps):
        idx = order[step * batch_size:(step + 1) * batch_size]
        batches.append(Batch(np.ascontiguousarray(images[idx]), np.ascontiguousarray(labels[idx])))
    return batches
