"""The host's input pipeline: batch order, shaping, augmentation, normalization and dropout masks of one run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_suite.datasets.augment import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    augmentation_rng,
    channel_stats,
    normalize,
    random_crop_flip,
)
from amp_suite.datasets.base import Dataset, epoch_batches, epoch_order, load_dataset
from amp_suite.records import Batch, LayerSpec, RunSpec, Workload
from amp_suite.workloads.layers import draw_masks

# Pixel values (about 32 MB in float64) shaped at a time when the training split's statistics are computed.
STATS_CHUNK_VALUES = 1 << 22


@dataclass(frozen=True)
class InputPipeline:
    """Turns a dataset into the batches every framework trains on, identically.

    ``mean``/``std`` are what the images are normalized with: the training
    split's per-channel statistics (``normalize``) or ImageNet's
    (``input_normalization = "imagenet"``), else ``None``.  ``layers`` and
    ``input_shape`` are the model's, for the dropout masks of each step.
    """

    dataset: Dataset
    batch_size: int
    steps: int
    seed: int
    augment: bool
    mean: np.ndarray | None
    std: np.ndarray | None
    layers: tuple[LayerSpec, ...] = ()
    input_shape: tuple[int, ...] = (0, 0, 0)

    @property
    def steps_per_epoch(self) -> int:
        return min(self.steps, int(self.dataset.train_labels.shape[0]) // self.batch_size)

    def batches(self, epoch: int, start: int, stop: int) -> list[Batch]:
        """Batches ``start`` to ``stop`` of ``epoch``: host order, shaped, augmented, normalized, with masks.

        Only these batches are made (and only their images resized), so the
        host holds one window's batches at a time, however long the epoch and
        however large the images; any slicing gives the same pixels and masks.
        """
        labels = self.dataset.train_labels
        if int(labels.shape[0]) < self.batch_size:
            epoch_batches(self.dataset.train_images, labels, batch_size=self.batch_size, steps=1, seed=self.seed,
                          epoch=epoch)  # raises the one-line error for a split smaller than a batch
        order = epoch_order(int(labels.shape[0]), self.seed, epoch)
        out = []
        for step in range(start, min(stop, self.steps_per_epoch)):
            idx = order[step * self.batch_size:(step + 1) * self.batch_size]
            images = self.dataset.model_images(self.dataset.train_images[idx])
            if self.augment:
                images = random_crop_flip(images, augmentation_rng(self.seed, epoch, step))
            images = self._normalized(images)
            masks = draw_masks(self.layers, self.input_shape, self.batch_size, self.seed, epoch, step)
            dtype = np.int32 if np.issubdtype(images.dtype, np.integer) else np.float32  # token ids stay ids
            out.append(Batch(np.ascontiguousarray(images, dtype=dtype), np.ascontiguousarray(labels[idx]), masks))
        return out

    def epoch(self, epoch: int) -> list[Batch]:
        """Every batch of ``epoch``."""
        return self.batches(epoch, 0, self.steps_per_epoch)

    def eval_images(self, images: np.ndarray) -> np.ndarray:
        """A slice of the dataset's images as the model sees them: shaped, normalized, never augmented.

        Pass a slice (``dataset.val_images[start:stop]``): it is resized here.
        """
        return self._normalized(self.dataset.model_images(images))

    def _normalized(self, images: np.ndarray) -> np.ndarray:
        if self.mean is None:
            return images
        assert self.std is not None  # normalization() gives both or neither
        return normalize(images, self.mean, self.std)


def training_stats(dataset: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and standard deviation of the training images as the model sees them.

    Shaped images are summed a chunk of about :data:`STATS_CHUNK_VALUES`
    values at a time (float64), never resized all at once.
    """
    shaping = dataset.shaping
    if shaping is None:
        return channel_stats(dataset.train_images)
    chunk_images = max(1, STATS_CHUNK_VALUES // (shaping.size * shaping.size * shaping.channels))
    total: Any = 0.0  # then per-channel float64 sums
    total_sq: Any = 0.0
    count = 0
    for start in range(0, int(dataset.train_images.shape[0]), chunk_images):
        chunk = dataset.model_images(dataset.train_images[start:start + chunk_images]).astype(np.float64)
        flat = chunk.reshape(-1, chunk.shape[-1])
        total = total + flat.sum(axis=0)
        total_sq = total_sq + np.square(flat).sum(axis=0)
        count += flat.shape[0]
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - np.square(mean), 0.0))
    return mean.astype(np.float32), np.where(std > 0, std, 1.0).astype(np.float32)


def normalization(workload: Workload, dataset: Dataset) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The mean and std the workload's images are normalized with, or ``(None, None)``."""
    if workload.normalize:
        return training_stats(dataset)
    if workload.input_normalization == "imagenet":
        return IMAGENET_MEAN, IMAGENET_STD
    return None, None


def input_pipeline(workload: Workload, dataset: Dataset, *, batch_size: int, steps: int,
                   seed: int) -> InputPipeline:
    mean, std = normalization(workload, dataset)
    return InputPipeline(dataset, batch_size, steps, seed, workload.augment, mean, std, workload.layers,
                         workload.input_shape)


def run_pipeline(run: RunSpec, workload: Workload) -> InputPipeline:
    """The dataset and input pipeline of ``run``: the batches its worker trains on (``.dataset`` holds the data)."""
    data = load_dataset(run.dataset, workload, steps=run.steps, batch_size=run.batch_size, seed=run.seed,
                        train_split=run.train_split, val_split=run.val_split, data_dir=run.data_dir,
                        allow_download=run.download, synthetic_fallback=run.synthetic_fallback)
    return input_pipeline(workload, data, batch_size=run.batch_size, steps=run.steps, seed=run.seed)
