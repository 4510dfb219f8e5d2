"""A tiny numpy framework plugin with execution modes, for testing the mode and batch-size axes.

Framework ``modal`` declares modes ``eager`` and ``compiled`` on a CPU (its
default ``eager``), trains the same softmax regression as ``fakefw`` in both
(so their losses agree), runs out of memory building a model for a batch
above :data:`MAX_BATCH`, and reports the learning rate it was given as the
figure ``seen_learning_rate``.  ``MODALFW_HANG=PRECISION`` makes that
precision's training hang (a cell the sweep's timeout ends).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from amp_suite import hookimpl
from amp_suite.plugins.kit import timed_window
from amp_suite.records import DeviceInfo, EpochResult, FrameworkInfo, PrecisionApplied, RunSpec

NAME = "modal"
MAX_BATCH = 32  # a larger batch "does not fit"
DTYPES = {"fp32": np.float32, "amp_bf16": np.float32}


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(name=NAME, display_name="Modal (numpy)", modules=("numpy",), extra="test",
                         precisions={"cpu": tuple(DTYPES)}, distributions=("numpy",),
                         modes={"cpu": ("eager", "compiled")}, default_mode="eager")


@dataclass
class ModalModel:
    w: np.ndarray
    b: np.ndarray
    lr: float


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo | None:
    return DeviceInfo(kind="cpu", platform="cpu", name="modal cpu") if run.framework == NAME else None


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied | None:
    if run.framework != NAME:
        return None
    return PrecisionApplied(run.precision, "bfloat16" if run.precision == "amp_bf16" else "float32", "float32",
                            notes=(f"mode={run.mode or 'eager'}",))


@hookimpl
def build_model(run, workload, applied, device) -> ModalModel | None:
    if run.framework != NAME:
        return None
    if run.batch_size > MAX_BATCH:
        raise MemoryError(f"modal: a batch of {run.batch_size} does not fit")
    features = int(np.prod(workload.input_shape))
    return ModalModel(np.zeros((features, workload.num_classes), np.float32),
                      np.zeros(workload.num_classes, np.float32), float(workload.optimizer.learning_rate))


@hookimpl
def stage_batches(run, model, batches) -> list | None:
    return [(b.images.reshape(b.size, -1), b.labels) for b in batches] if run.framework == NAME else None


@hookimpl
def train_epoch(run, model, staged, epoch) -> EpochResult | None:
    if run.framework != NAME:
        return None
    if os.environ.get("MODALFW_HANG") == run.precision:
        time.sleep(3600)

    def step(batch) -> tuple[float, bool]:
        x, y = batch
        logits = x @ model.w + model.b
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        loss = float(-np.log(probs[np.arange(y.size), y] + 1e-12).mean())
        probs[np.arange(y.size), y] -= 1
        model.w -= model.lr * (x.T @ probs) / y.size
        model.b -= model.lr * probs.mean(axis=0)
        return loss, True

    return timed_window(staged, step)


@hookimpl
def predict(run, model, images) -> np.ndarray | None:
    return images.reshape(images.shape[0], -1) @ model.w + model.b if run.framework == NAME else None


@hookimpl
def measure(run, model) -> dict | None:
    if run.framework != NAME:
        return None
    return {"param_count": int(model.w.size + model.b.size), "framework_version": np.__version__,
            "seen_learning_rate": model.lr}
