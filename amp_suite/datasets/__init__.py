"""Datasets, prepared once by the host and identical for every framework."""

from amp_suite.datasets.base import (
    DATASETS,
    DEFAULT_SPLITS,
    Dataset,
    check_request,
    epoch_batches,
    fetch,
    load_dataset,
)
from amp_suite.datasets.pipeline import InputPipeline, input_pipeline, run_pipeline

__all__ = ["DATASETS", "DEFAULT_SPLITS", "Dataset", "InputPipeline", "check_request", "epoch_batches", "fetch",
           "input_pipeline", "load_dataset", "run_pipeline"]
