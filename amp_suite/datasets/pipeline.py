"""The host's input pipeline: batch order, augmentation and normalization of one run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_suite.datasets.augment import augmentation_rng, channel_stats, normalize, random_crop_flip
from amp_suite.datasets.base import Dataset, epoch_batches
from amp_suite.records import Batch, Workload


@dataclass(frozen=True)
class InputPipeline:
    """Turns a dataset into the batches every framework trains on, identically.

    ``mean``/``std`` are the training split's per-channel statistics when the
    workload normalizes its inputs, else ``None``.
    """

    dataset: Dataset
    batch_size: int
    steps: int
    seed: int
    augment: bool
    mean: np.ndarray | None
    std: np.ndarray | None

    @property
    def steps_per_epoch(self) -> int:
        return min(self.steps, int(self.dataset.train_labels.shape[0]) // self.batch_size)

    def epoch(self, epoch: int) -> list[Batch]:
        """The batches of ``epoch`` in the host's order, augmented and normalized."""
        batches = epoch_batches(self.dataset.train_images, self.dataset.train_labels,
                                batch_size=self.batch_size, steps=self.steps, seed=self.seed, epoch=epoch)
        if not (self.augment or self.mean is not None):
            return batches
        rng = augmentation_rng(self.seed, epoch)
        out = []
        for batch in batches:
            images = random_crop_flip(batch.images, rng) if self.augment else batch.images
            if self.mean is not None:
                images = normalize(images, self.mean, self.std)
            out.append(Batch(images, batch.labels))
        return out

    def eval_images(self, images: np.ndarray) -> np.ndarray:
        """Validation images as the model sees them (normalized, never augmented)."""
        return images if self.mean is None else normalize(images, self.mean, self.std)


def input_pipeline(workload: Workload, dataset: Dataset, *, batch_size: int, steps: int,
                   seed: int) -> InputPipeline:
    mean, std = channel_stats(dataset.train_images) if workload.normalize else (None, None)
    return InputPipeline(dataset, batch_size, steps, seed, workload.augment, mean, std)
