"""Datasets, prepared once by the host and identical for every framework."""

from amp_suite.datasets.base import Dataset, epoch_batches, load_dataset, DATASETS

__all__ = ["Dataset", "epoch_batches", "load_dataset", "DATASETS"]
