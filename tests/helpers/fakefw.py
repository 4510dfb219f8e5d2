"""A tiny numpy "framework" plugin for testing the host, runner and report.

It trains a real softmax regression with SGD, so its losses and accuracy are
real numbers.  Environment variables make one precision misbehave, so the
runner's failure statuses can be produced on purpose:

- ``FAKEFW_MODE``: raise | deep | crash | hang | oom | nan | slow | gate
  (``deep``: ``train_epoch`` raises from :data:`DEEP_FRAMES` frames down)
- ``FAKEFW_TARGET``: the precision that misbehaves (default: every one)
- ``FAKEFW_PIDFILE``: where a ``hang``/``slow``/``gate`` worker writes its pid
- ``FAKEFW_GATE``: a ``gate`` worker waits until this file exists, then trains
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from amp_suite import hookimpl
from amp_suite.errors import UnsupportedError
from amp_suite.plugins.kit import timed_window
from amp_suite.records import DeviceInfo, EpochResult, FrameworkInfo, PrecisionApplied, RunSpec

NAME = "fake"
# Frames between train_epoch and the raise of a ``deep`` failure.
DEEP_FRAMES = 30
DTYPES = {"fp32": np.float32, "amp_fp16": np.float16, "amp_bf16": np.float32}


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(name=NAME, display_name="Fake (numpy)", modules=("numpy",), extra="test",
                         precisions={"cpu": tuple(DTYPES)}, distributions=("numpy",))


def _misbehave(run: RunSpec, where: str) -> None:
    mode = os.environ.get("FAKEFW_MODE", "")
    target = os.environ.get("FAKEFW_TARGET", "")
    if not mode or (target and target != run.precision):
        return
    if mode in ("hang", "slow", "gate") and where == "train":
        pidfile = os.environ.get("FAKEFW_PIDFILE")
        if pidfile:
            with open(pidfile, "w") as fh:
                fh.write(str(os.getpid()))
        if mode == "gate":
            while not os.path.exists(os.environ["FAKEFW_GATE"]):
                time.sleep(0.05)
        else:
            time.sleep(3600 if mode == "hang" else 2)
    elif mode == "raise" and where == "build":
        raise RuntimeError("fake framework exploded")
    elif mode == "deep" and where == "train":
        _dig(DEEP_FRAMES)
    elif mode == "crash" and where == "build":
        os._exit(3)
    elif mode == "oom" and where == "train":
        raise MemoryError("fake allocation of 1 TiB failed")


def _dig(frames: int) -> None:
    if frames:
        _dig(frames - 1)
    else:
        _deepest_frame()


def _deepest_frame() -> None:
    raise ValueError("fake failure deep inside the framework")


@dataclass
class FakeModel:
    w: np.ndarray
    b: np.ndarray
    lr: float
    dtype: Any


@hookimpl
def select_device(run: RunSpec) -> DeviceInfo | None:
    if run.framework != NAME:
        return None
    return DeviceInfo(kind="cpu", platform="cpu", name="fake cpu")


@hookimpl
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied | None:
    if run.framework != NAME:
        return None
    if run.precision not in DTYPES:
        raise UnsupportedError(f"fake framework has no {run.precision}")
    # amp_bf16 computes in float32 here (numpy has no bfloat16): a fake, named as the precision means
    return PrecisionApplied(run.precision, {"amp_bf16": "bfloat16"}.get(run.precision, np.dtype(DTYPES[run.precision]).name),
                            "float32")


@hookimpl
def build_model(run, workload, initial_weights, applied, device) -> FakeModel | None:
    if run.framework != NAME:
        return None
    _misbehave(run, "build")
    features = int(np.prod(workload.input_shape))
    return FakeModel(np.zeros((features, workload.num_classes), np.float32),
                     np.zeros(workload.num_classes, np.float32), 0.05, DTYPES[run.precision])


@hookimpl
def stage_batches(run, model, batches) -> list | None:
    if run.framework != NAME:
        return None
    return [(b.images.reshape(b.size, -1), b.labels) for b in batches]


def _logits(model: FakeModel, x: np.ndarray) -> np.ndarray:
    return (x.astype(model.dtype) @ model.w.astype(model.dtype)).astype(np.float32) + model.b


@hookimpl
def train_epoch(run, model, staged, epoch) -> EpochResult | None:
    if run.framework != NAME:
        return None
    _misbehave(run, "train")
    nan = os.environ.get("FAKEFW_MODE") == "nan" and os.environ.get("FAKEFW_TARGET", run.precision) == run.precision

    def step(batch) -> tuple[float, bool]:
        x, y = batch
        logits = _logits(model, x)
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        loss = float(-np.log(probs[np.arange(y.size), y] + 1e-12).mean())
        probs[np.arange(y.size), y] -= 1
        model.w -= model.lr * (x.T @ probs) / y.size
        model.b -= model.lr * probs.mean(axis=0)
        return (float("nan") if nan else loss), True

    return timed_window(staged, step)


@hookimpl
def predict(run, model, images) -> np.ndarray | None:
    if run.framework != NAME:
        return None
    return _logits(model, images.reshape(images.shape[0], -1))


@hookimpl
def measure(run, model) -> dict | None:
    if run.framework != NAME:
        return None
    # fake_kernel: a figure of the plugin's own, which the report, results.csv and load() carry (tests/test_api.py)
    return {"param_count": int(model.w.size + model.b.size), "framework_version": np.__version__,
            "fake_kernel": "numpy matmul"}
