"""The host's input pipeline: batch order, augmentation and normalization of one run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amp_suite.datasets.augment import augmentation_rng, channel_stats, normalize, random_crop_flip
from amp_suite.datasets.base import Dataset, epoch_batches, epoch_order, load_dataset
from amp_suite.records import Batch, RunSpec, Workload


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

    def batches(self, epoch: int, start: int, stop: int) -> list[Batch]:
        """Batches ``start`` to ``stop`` of ``epoch``, in the host's order, augmented and normalized.

        Only these batches are made, so the host holds one window's batches at
        a time, however long the epoch; any slicing gives the same pixels.
        """
        labels = self.dataset.train_labels
        if int(labels.shape[0]) < self.batch_size:
            epoch_batches(self.dataset.train_images, labels, batch_size=self.batch_size, steps=1, seed=self.seed,
                          epoch=epoch)  # raises the one-line error for a split smaller than a batch
        order = epoch_order(int(labels.shape[0]), self.seed, epoch)
        out = []
        for step in range(start, min(stop, self.steps_per_epoch)):
            idx = order[step * self.batch_size:(step + 1) * self.batch_size]
            images = self.dataset.train_images[idx]
            if self.augment:
                images = random_crop_flip(images, augmentation_rng(self.seed, epoch, step))
            if self.mean is not None:
                images = normalize(images, self.mean, self.std)
            out.append(Batch(np.ascontiguousarray(images, dtype=np.float32), np.ascontiguousarray(labels[idx])))
        return out

    def epoch(self, epoch: int) -> list[Batch]:
        """Every batch of ``epoch``."""
        return self.batches(epoch, 0, self.steps_per_epoch)

    def eval_images(self, images: np.ndarray) -> np.ndarray:
        """Validation images as the model sees them (normalized, never augmented)."""
        return images if self.mean is None else normalize(images, self.mean, self.std)


def input_pipeline(workload: Workload, dataset: Dataset, *, batch_size: int, steps: int,
                   seed: int) -> InputPipeline:
    mean, std = channel_stats(dataset.train_images) if workload.normalize else (None, None)
    return InputPipeline(dataset, batch_size, steps, seed, workload.augment, mean, std)


def run_pipeline(run: RunSpec, workload: Workload) -> InputPipeline:
    """The dataset and input pipeline of ``run``: the batches its worker trains on (``.dataset`` holds the data)."""
    data = load_dataset(run.dataset, workload, steps=run.steps, batch_size=run.batch_size, seed=run.seed,
                        train_split=run.train_split, val_split=run.val_split, data_dir=run.data_dir,
                        allow_download=run.download, synthetic_fallback=run.synthetic_fallback)
    return input_pipeline(workload, data, batch_size=run.batch_size, steps=run.steps, seed=run.seed)
