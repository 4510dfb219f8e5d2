"""One run inside a worker: its settings (:class:`RunSpec`), the precision applied, a batch, an epoch's window."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RunSpec:
    """One cell of a sweep: framework x workload x precision x devices x repeat.

    ``devices`` is the number of data-parallel replicas of the cell, on all
    its nodes together; the workload's global batch (``batch_size``) is split
    evenly over them.  ``sync_batch_norm`` asks for BatchNorm statistics
    synchronized over the replicas where the framework has them.  ``nnodes``,
    ``node_rank`` and ``coordinator`` (``HOST:PORT`` of node 0; empty on one
    node) describe a cell run as cooperating processes on several machines
    (see ``docs/distributed.md``); ``launcher`` is the framework's
    :attr:`FrameworkInfo.launcher` and ``launcher_program`` its
    :attr:`FrameworkInfo.launcher_program` (a data-parallel cell's only).

    ``mode`` is the execution mode (:data:`amp_suite.modes.MODES`); empty: the
    framework's default mode, and the key names none.  ``batch_axis`` says the
    sweep has a batch-size axis (``--batch-sizes``): the key then names the
    batch size.  ``learning_rate_rule`` is how the workload's learning rate
    was scaled to ``batch_size`` (:data:`amp_suite.modes.LEARNING_RATE_RULES`;
    the host scales it before the cell starts).  ``seed_axis`` says the sweep
    has a seed axis (``--seeds``): the key then names the seed.
    """

    framework: str
    workload: str
    precision: str
    repeat: int = 0
    steps: int = 50
    epochs: int = 1
    warmup: int = 5
    window_steps: int = 32
    latency_steps: int = 10
    window_seconds: float = 0.0  # > 0: windows sized from the measured step time to last this long
    settle_warmup: bool = False  # warm up beyond ``warmup`` until the step time settles
    min_timed_steps: int = 8  # fewer timed steps: the cell's timing is flagged
    min_timed_seconds: float = 0.02  # shorter timed windows in all: flagged
    extend_timing: bool = False  # short of the bounds: time windows of further training after validation
    batch_size: int = 128
    seed: int = 0
    dataset: str = "synthetic"
    train_split: str = "train"
    val_split: str = "test"
    data_dir: str | None = None
    download: bool = True
    synthetic_fallback: bool = False
    device: str = "auto"
    timeout_s: float = 900.0
    options: dict[str, Any] = field(default_factory=dict)
    plugin_modules: tuple[str, ...] = ()
    devices: int = 1
    sync_batch_norm: bool = False
    nnodes: int = 1
    node_rank: int = 0
    coordinator: str = ""
    launcher: str = "process"
    launcher_program: str = ""  # the module a multi-process launcher runs (FrameworkInfo.launcher_program)
    # The name the sweep asked for when it is an environment's (torch@2.12): it labels the cell.
    variant: str = ""
    # The environment whose interpreter runs the worker ("" and "": this one, the host's).
    environment: str = ""
    python: str = ""
    # The cluster's device pool the cell runs on ([pools.NAME]); "": wherever its executor runs cells.
    pool: str = ""
    mode: str = ""
    batch_axis: bool = False
    learning_rate_rule: str = "unchanged"
    seed_axis: bool = False
    curve_every: int | None = None  # learning-curve points every this many steps (0: each epoch's end); None: none

    @property
    def label(self) -> str:
        """The cell's framework as tables show it: the variant's name, else the framework's."""
        return self.variant or self.framework

    @property
    def key(self) -> str:
        """Identifies the cell in ``results.jsonl`` (used by ``--resume``).

        One-device cells keep the key they always had; a data-parallel cell
        adds its device count (``torch/mnist_cnn/fp32/d2/r0``), a cell of a
        mode sweep its mode, one of a batch-size sweep its batch
        (``torch/mnist_cnn/fp32/compiled/b512/r0``) and one of a seed sweep its
        seed (``torch/mnist_cnn/fp32/s3/r0``).
        """
        mode = f"{self.mode}/" if self.mode else ""
        batch = f"b{self.batch_size}/" if self.batch_axis else ""
        devices = f"d{self.devices}/" if self.devices != 1 else ""
        pool = f"pool-{self.pool}/" if self.pool else ""
        seed = f"s{self.seed}/" if self.seed_axis else ""
        return f"{self.label}/{self.workload}/{self.precision}/{mode}{batch}{devices}{pool}{seed}r{self.repeat}"

    @property
    def distributed(self) -> bool:
        """True for a data-parallel cell (more than one replica)."""
        return self.devices > 1

    @property
    def local_devices(self) -> int:
        """Replicas on this node."""
        return self.devices // self.nnodes

    @property
    def shard_size(self) -> int:
        """Examples of each global batch one replica trains on."""
        return self.batch_size // self.devices


@dataclass(frozen=True)
class PrecisionApplied:
    """What ``set_precision`` really applied.

    ``loss_scaling`` is ``"none"``, ``"dynamic"`` or ``"static"``
    (:data:`amp_suite.precision.LOSS_SCALINGS`); ``initial_loss_scale`` is
    ``None`` without loss scaling (the fixed scale under ``static``).
    ``keep_fp32`` lists the layer names and kinds kept in float32 under AMP
    (the framework option, :mod:`amp_suite.workloads.kept`; empty where it
    changes nothing).  ``notes`` records switches that change results (TF32
    matmul flags, channels-last, XLA).  Under ``fp8``, ``fp8_recipe`` describes the
    recipe (formats, scaling, layers) and ``fp8_matmul`` says how its matmuls
    ran: ``"native"`` (FP8 tensor cores) or ``"emulated"`` (a
    quantize-dequantize around a wider matmul: real FP8 numerics, no FP8
    speed); both are empty otherwise.
    """

    precision: str
    compute_dtype: str
    param_dtype: str
    output_dtype: str = "float32"
    loss_scaling: str = "none"
    initial_loss_scale: float | None = None
    notes: tuple[str, ...] = ()
    keep_fp32: tuple[str, ...] = ()
    fp8_recipe: str = ""
    fp8_matmul: str = ""


@dataclass(frozen=True)
class Batch:
    """One training batch: NHWC float32 images, int32 labels and the dropout masks of its step.

    For a token workload (:attr:`Workload.tokens`) ``images`` holds int32 token
    ids ``(batch, context)`` and ``labels`` the int32 next tokens, the same shape.

    ``masks`` maps each ``dropout`` layer's name to its float32 mask, already
    scaled (0 or ``1 / (1 - rate)``): shape ``(batch, *activation_shape)``, or
    ``(batch,)`` for a per-sample dropout.  Empty for a model without dropout.
    """

    images: np.ndarray
    labels: np.ndarray
    masks: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return int(self.labels.shape[0])

    def rows(self, start: int, stop: int) -> Batch:
        """Examples ``start`` to ``stop`` (a data-parallel shard): images, labels and masks alike."""
        return Batch(self.images[start:stop], self.labels[start:stop],
                     {name: mask[start:stop] for name, mask in self.masks.items()})

    def astype(self, dtype: Any) -> Batch:
        """Images and masks in ``dtype`` (float64 under ``fp64``), labels and token ids as they are."""
        images = self.images if np.issubdtype(self.images.dtype, np.integer) else np.asarray(self.images, dtype)
        return Batch(images, self.labels,
                     {name: np.asarray(mask, dtype) for name, mask in self.masks.items()})


@dataclass
class EpochResult:
    """What ``train_epoch`` returns for the staged batches it was given: one window of an epoch.

    The steps of a window are dispatched back to back and the device is
    waited for once, at the end: ``window_time_s`` runs from the first
    dispatch to the end of that wait.  ``step_losses`` (unscaled float32, one
    per step) are fetched from the device after the wait.  ``step_times_s``
    holds per-step durations measured *inside* the window by device events
    (CUDA events), or is empty where the framework has none.  Loss-scale
    figures are ``None`` when the run does not scale its loss.  ``extra``
    holds JSON-able figures the host promotes into the result's metrics.
    """

    step_losses: list[float]
    samples: int
    window_time_s: float
    step_times_s: list[float] = field(default_factory=list)
    loss_scale_final: float | None = None
    skipped_steps: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.step_losses)

    @property
    def mean_loss(self) -> float:
        return float(np.mean(self.step_losses)) if self.step_losses else float("nan")


def run_from_dict(data: dict[str, Any]) -> RunSpec:
    """Rebuild a :class:`RunSpec` sent as JSON to a worker."""
    data = dict(data)
    data["plugin_modules"] = tuple(data.get("plugin_modules", ()))
    return RunSpec(**data)
