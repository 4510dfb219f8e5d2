"""Datasets, prepared once by the host and identical for every framework."""

from amp_suite.datasets.base import DATASETS, Dataset, check_request, epoch_batches, fetch, load_dataset

__all__ = ["DATASETS", "Dataset", "check_request", "epoch_batches", "fetch", "load_dataset"]
