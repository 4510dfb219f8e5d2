"""A tiny numpy "framework" for token workloads: a bigram language model trained with SGD.

Its logits for token id ``i`` are row ``i`` of a ``(vocab, vocab)`` table, at
every position: ``(batch, context)`` int32 ids give ``(batch, context,
vocab)`` logits, the shape the host validates token workloads with.  It
learns real character statistics, so its validation bits per character
fall below the text's unigram baseline after a few steps.  An image
workload is unsupported.  ``BIGRAMFW_KINDS`` (comma-separated) makes it
declare those layer kinds (``FrameworkInfo.layer_kinds``); unset, it declares
none.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from amp_suite import hookimpl
from amp_suite.errors import UnsupportedError
from amp_suite.plugins.kit import timed_window
from amp_suite.records import DeviceInfo, EpochResult, FrameworkInfo, PrecisionApplied, RunSpec

NAME = "bigram"
PRECISIONS = ("fp32", "amp_bf16")


@dataclass
class BigramModel:
    table: np.ndarray  # (vocab, vocab) logits of the next token given this one
    lr: float


@hookimpl
def framework_info() -> FrameworkInfo:
    kinds = tuple(k.strip() for k in os.environ.get("BIGRAMFW_KINDS", "").split(",") if k.strip())
    return FrameworkInfo(name=NAME, display_name="Bigram (numpy)", modules=("numpy",), extra="test",
                         precisions={"cpu": PRECISIONS}, distributions=("numpy",), layer_kinds=kinds)


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo | None:
    if run.framework != NAME:
        return None
    return DeviceInfo(kind="cpu", platform="cpu", name="bigram cpu")


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied | None:
    if run.framework != NAME:
        return None
    return PrecisionApplied(run.precision, "bfloat16" if run.precision == "amp_bf16" else "float32", "float32")


@hookimpl
def build_model(run, workload, initial_weights, applied, device) -> BigramModel | None:
    if run.framework != NAME:
        return None
    if not workload.tokens:
        raise UnsupportedError("the bigram framework trains token workloads only")
    vocab = workload.transformer.vocab_size
    return BigramModel(np.zeros((vocab, vocab), np.float64), 1.0)


@hookimpl
def stage_batches(run, model, batches) -> list | None:
    if run.framework != NAME:
        return None
    return [(b.images, b.labels) for b in batches]


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


@hookimpl
def train_epoch(run, model, staged, epoch) -> EpochResult | None:
    if run.framework != NAME:
        return None

    def step(batch) -> tuple[float, bool]:
        ids, labels = batch
        assert ids.dtype == np.int32, ids.dtype  # the host never casts token ids
        probs = _softmax(model.table[ids])
        flat_labels = labels.reshape(-1)
        flat = probs.reshape(-1, probs.shape[-1])
        loss = float(-np.log(flat[np.arange(flat_labels.size), flat_labels] + 1e-12).mean())
        flat[np.arange(flat_labels.size), flat_labels] -= 1
        grad = np.zeros_like(model.table)
        np.add.at(grad, ids.reshape(-1), flat)
        model.table -= model.lr * grad / flat_labels.size * model.table.shape[0]
        return loss, True

    return timed_window(staged, step)


@hookimpl
def predict(run, model, images) -> np.ndarray | None:
    if run.framework != NAME:
        return None
    assert images.dtype == np.int32, images.dtype
    return model.table[images].astype(np.float32)


@hookimpl
def measure(run, model) -> dict | None:
    if run.framework != NAME:
        return None
    return {"param_count": int(model.table.size), "framework_version": np.__version__}
