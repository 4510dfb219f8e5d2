"""Typed records that cross hook and process boundaries.

Everything here is plain data (numbers, strings, tuples, dicts of those, numpy
arrays inside a worker only), so a record can be turned into JSON with
:func:`dataclasses.asdict` and sent from a worker process to the host.
Framework objects never appear in these records.  :class:`FrameworkInfo` is
the one record each process asks its plugin for instead of receiving it, so
its options may hold schema fields (types).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from amp_suite.schema import Field

# Device kinds a plugin may declare precisions for.
DEVICE_KINDS = ("cpu", "gpu")


@dataclass(frozen=True)
class FrameworkOption:
    """One option a framework plugin reads from ``run.options``: a key of ``[frameworks.NAME]``.

    ``schema`` is its type and bounds (:class:`amp_suite.schema.Field`): the
    sweep checks the table against it before the first cell runs, refusing an
    unknown key with the closest declared name.  ``default`` is what the
    plugin uses when the key is absent; ``help`` says what it changes, in one
    line.
    """

    schema: Field
    default: Any
    help: str


@dataclass(frozen=True)
class FrameworkInfo:
    """How a framework plugin describes itself, without importing its framework.

    ``precisions`` maps a device kind (``"cpu"`` or ``"gpu"``) to the precision
    names the plugin can run there.  ``env`` holds environment variables the
    worker sets *before* the framework is imported (e.g. JAX's
    ``XLA_PYTHON_CLIENT_PREALLOCATE``).  ``extra`` names the ``pip install
    amp-suite[EXTRA]`` extra that installs the framework (built-in plugins);
    a third-party plugin leaves it empty and gives ``install_command``
    instead.  ``distributions`` are the package names whose installed
    versions are the framework's version (``amp-suite list``, report header).
    ``launcher`` says how a data-parallel cell is started (see
    :mod:`amp_suite.launchers`): ``"process"``, one worker per node driving
    every device of the node, or ``"torchrun"``, one worker per device; empty
    (the default) when the plugin has no data-parallel engine, and then its
    cells on several devices are ``unsupported``.
    ``launcher_program`` is the module that implements a multi-process
    launcher, run as ``python -m MODULE`` with the launcher's command line
    (the torch plugin's is ``torch.distributed.run`` for ``"torchrun"``): the
    plugin declares it, so no framework's module is named in ``amp_suite/``.
    A ``"torchrun"`` launcher without one fails its data-parallel cells with a
    line saying so.  ``sync_counter`` is the ``module:function`` that counts
    the framework's host synchronizations for the conformance kit
    (:attr:`amp_suite.testing.conformance.BackendConformance.sync_counter`,
    ``"auto"``); empty: the kit's test of it is skipped.

    ``options`` declares the plugin's own keys of ``[frameworks.NAME]`` (the
    loss-scaling keys every plugin reads are added by the host).
    ``modes`` maps a device kind to the execution modes the plugin can run
    there (:data:`amp_suite.modes.MODES`); ``default_mode`` is the one it runs
    when the sweep asks for none.  A plugin that declares none runs only its
    default, unnamed mode, and any mode asked of it is ``unsupported``.
    ``doctor_probe`` and ``calibration_probe`` name modules the host runs as
    ``python -m MODULE ...`` in a fresh process with ``env`` set, for
    ``amp-suite doctor`` and ``amp-suite calibrate`` (the protocols are in
    :mod:`amp_suite.doctor.probe_kit` and :mod:`amp_suite.calibration.kit`);
    empty: the command skips the framework.
    ``layer_kinds`` are the kinds of the layer vocabulary
    (:data:`amp_suite.workloads.kinds.KINDS`) the plugin builds; empty: not
    declared.  The host makes a cell of a workload with any other kind
    ``unsupported`` before it starts, naming the kinds missing.
    """

    name: str
    display_name: str
    modules: tuple[str, ...]
    extra: str
    precisions: dict[str, tuple[str, ...]]
    env: dict[str, str] = field(default_factory=dict)
    distributions: tuple[str, ...] = ()
    install_command: str = ""
    launcher: str = ""
    launcher_program: str = ""
    sync_counter: str = ""
    options: dict[str, FrameworkOption] = field(default_factory=dict)
    doctor_probe: str = ""
    calibration_probe: str = ""
    modes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    default_mode: str = ""
    layer_kinds: tuple[str, ...] = ()

    def install_hint(self) -> str:
        """The command that installs the framework: ``install_command``, the extra, or the distributions."""
        if self.install_command:
            return self.install_command
        if self.extra:
            return f"pip install 'amp-suite[{self.extra}]'"
        return "pip install " + " ".join(self.distributions or self.modules)

    def missing_modules(self) -> list[str]:
        """The :attr:`modules` that are not installed in this interpreter (found without importing them)."""
        import importlib.util

        missing = []
        for module in self.modules:
            try:
                if importlib.util.find_spec(module) is None:
                    missing.append(module)
            except (ImportError, ValueError):
                missing.append(module)
        return missing


@dataclass(frozen=True)
class DeviceInfo:
    """The device a run uses, as the framework sees it.

    ``kind`` is ``"cpu"`` or ``"gpu"``; ``platform`` is the framework's own
    name for it (``"cuda"``, ``"rocm"``, ``"cpu"``).  ``supports_tf32`` is true
    only on GPUs with TF32 tensor cores (compute capability 8.0 and newer).
    """

    kind: str
    platform: str
    name: str
    count: int = 1
    driver: str = ""
    compute_capability: str = ""
    memory_total_bytes: int | None = None
    supports_tf32: bool = False


@dataclass(frozen=True)
class LayerSpec:
    """One node of a framework-neutral model (see :mod:`amp_suite.workloads.layers` for the vocabulary).

    ``kind`` is one of :data:`amp_suite.workloads.layers.LAYER_KINDS`.  Each kind reads only
    the fields it needs:

    * ``conv2d``: ``name``, ``features`` (output channels), ``kernel_size``,
      ``stride``, ``padding`` (zero pixels added on every side), ``use_bias``;
    * ``depthwise_conv2d``: ``name``, ``kernel_size``, ``stride``, ``padding``,
      ``use_bias`` (depth multiplier 1: as many output channels as input ones);
    * ``zero_pad``: ``pads``, the zero pixels added (top, bottom, left, right);
    * ``batch_norm``: ``name``, ``momentum`` (PyTorch's convention: the weight of
      the new batch statistic, 0.1) and ``epsilon``;
    * ``max_pool`` / ``avg_pool``: ``window`` and ``stride`` (no padding);
    * ``global_avg_pool``: ``keepdims`` (output ``(1, 1, c)`` instead of ``(c,)``);
    * ``dense``: ``name``, ``features``, ``use_bias``;
    * ``dropout``: ``name`` (the key of its mask in :attr:`Batch.masks`), ``rate``
      and ``per_sample`` (one draw per example: stochastic depth);
    * ``residual``: ``body`` and ``shortcut`` (two layer sequences applied to the
      same input and added; an empty ``shortcut`` is the identity);
    * ``multiply``: ``body`` (a sequence giving ``(1, 1, c)`` from the input,
      multiplied into it: squeeze-and-excitation);
    * ``relu``, ``relu6``, ``swish``, ``sigmoid``, ``flatten``: nothing;
    * token kinds (activations ``(tokens, features)``; see ``docs/layers.md``):
      ``patch_embed``: ``name``, ``features``, ``kernel_size`` (the patch side,
      also its stride); ``class_token``, ``position_embedding``: ``name``;
      ``token_embedding``: ``name``, ``vocab_size``, ``features``;
      ``layer_norm``, ``rms_norm``: ``name``, ``epsilon``;
      ``multi_head_attention``: ``name``, ``heads``, ``causal``;
      ``gelu``, ``token_mean_pool``, ``class_token_pool``: nothing.
    """

    kind: str
    name: str = ""
    features: int = 0
    kernel_size: int = 0
    stride: int = 1
    padding: int = 0
    use_bias: bool = True
    window: int = 0
    momentum: float = 0.1
    epsilon: float = 1e-5
    body: tuple[LayerSpec, ...] = ()
    shortcut: tuple[LayerSpec, ...] = ()
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    keepdims: bool = False
    rate: float = 0.0
    per_sample: bool = False
    heads: int = 0
    causal: bool = False
    vocab_size: int = 0


@dataclass(frozen=True)
class VariableSpec:
    """One canonical model variable an architecture declares.

    ``name`` is ``LAYER/LEAF`` (``conv1/w``, ``bn1/scale``, ``bn1/mean``);
    ``init`` is ``he_uniform``, ``zeros``, ``ones`` or ``normal`` (mean 0,
    standard deviation 0.02: embeddings, class token, positions).  ``decay``
    says whether AdamW's decoupled weight decay applies to it (kernels: yes;
    biases, normalization scales and offsets, embeddings: no).  Trainable variables are
    parameters; the others are model state (BatchNorm running statistics).
    ``fan_in`` is the fan-in He-uniform draws with; 0 means the product of
    every dimension but the last (a depthwise kernel ``(k, k, c, 1)`` sees
    ``k * k`` inputs per output, not ``k * k * c``).
    """

    name: str
    shape: tuple[int, ...]
    init: str
    trainable: bool = True
    fan_in: int = 0
    decay: bool = False


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer, with one meaning in every framework (see ``docs/workloads.md``).

    ``name`` is ``sgd``, ``rmsprop``, ``adam`` or ``adamw``.  For the first
    three ``weight_decay`` is added to the gradient (``g + weight_decay * w``,
    as ``torch.optim`` does) before the optimizer's own arithmetic; ``adamw``
    decouples it (``w -= lr * weight_decay * w`` beside the Adam update) and
    applies it only to the variables whose :attr:`VariableSpec.decay` is set.
    ``schedule`` is ``constant``, ``cosine`` (decaying to 0 over
    ``decay_steps`` optimizer steps; the host fills ``decay_steps`` in from
    the run's steps and epochs) or ``warmup_cosine`` (a linear warm-up from 0
    over ``warmup_steps``, then the cosine over the rest).  ``clip_norm`` > 0
    clips the gradients by their global norm (after unscaling them under a
    loss scale, before weight decay and the optimizer); 0 clips nothing.
    """

    name: str
    learning_rate: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    rho: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    schedule: str = "constant"
    decay_steps: int = 0
    warmup_steps: int = 0
    clip_norm: float = 0.0


@dataclass(frozen=True)
class TransformerShape:
    """The sizes of a transformer workload (``[workloads.NAME]`` keys of the same names).

    ``width`` is the token features, ``depth`` the number of blocks, ``heads``
    the attention heads (``width`` splits evenly into them), ``mlp`` the hidden
    features of each block's MLP.  A ViT has a ``patch`` side; a language model
    a ``vocab_size`` and a ``context`` (tokens per example).
    """

    width: int
    depth: int
    heads: int
    mlp: int
    patch: int = 0
    vocab_size: int = 0
    context: int = 0


@dataclass(frozen=True)
class Workload:
    """A framework-neutral training workload: architecture, data shape, input pipeline and optimizer.

    ``augment`` turns on the host's random crop (4-pixel zero padding) and
    horizontal flip; ``normalize`` subtracts the training split's per-channel
    mean and divides by its standard deviation (training and validation
    images alike); ``input_normalization = "imagenet"`` does the same with
    ImageNet's fixed mean and standard deviation instead (the input layers of
    Keras's EfficientNet, done by the host).  All happen in the host, so every
    framework sees the same pixels.
    """

    name: str
    model: str
    input_size: int
    channels: int
    num_classes: int
    batch_size: int
    optimizer: OptimizerSpec
    layers: tuple[LayerSpec, ...]
    augment: bool = False
    normalize: bool = False
    input_normalization: str = "none"
    description: str = ""
    steps: int | None = None  # steps per epoch this workload trains unless --steps says otherwise
    target_accuracy: float | None = None  # time to target: validation accuracy to reach (None: not measured)
    eval_every: int = 0  # time to target: evaluate every this many steps (0: at each epoch's end)
    dataset: str = ""  # the dataset this workload trains on ("": the sweep's --dataset)
    transformer: TransformerShape | None = None  # the sizes of a transformer architecture

    @property
    def tokens(self) -> bool:
        """True for a workload whose inputs are token ids (a language model), not images."""
        return self.transformer is not None and self.transformer.vocab_size > 0

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Per-example shape: (height, width, channels), NHWC, or (context,) token ids."""
        if self.tokens:
            assert self.transformer is not None
            return (self.transformer.context,)
        return (self.input_size, self.input_size, self.channels)


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


# Status of a finished cell.  Only "ok" carries figures.
STATUSES = ("ok", "failed", "timeout", "oom", "diverged", "unavailable", "unsupported")
# Statuses that do not make the sweep's exit code 1: the cell was not
# measurable on this machine by design (e.g. tf32 on a CPU).
BENIGN_STATUSES = ("ok", "unsupported")


@dataclass
class CellResult:
    """One finished cell, as written to ``results.jsonl``.

    ``framework`` is the cell's label (:attr:`RunSpec.label`): an environment's
    name for a variant (``torch@2.12``), the plugin's otherwise; the plugin is
    ``config["framework"]``.  ``mode`` is the execution mode the cell ran in
    (the framework's default mode named, when the sweep asked for none; empty
    when not known: a record from before modes, or a framework that names
    none).  ``fingerprint`` is the short hash of ``definition``, everything
    that determines the cell's figures (:mod:`amp_suite.sweep.fingerprint`);
    both are empty in a result stored before fingerprints.
    """

    key: str
    framework: str
    workload: str
    precision: str
    repeat: int
    status: str
    error: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    applied: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_time_s: float = 0.0
    mode: str = ""
    fingerprint: str = ""
    definition: dict[str, Any] = field(default_factory=dict)


def run_from_dict(data: dict[str, Any]) -> RunSpec:
    """Rebuild a :class:`RunSpec` sent as JSON to a worker."""
    data = dict(data)
    data["plugin_modules"] = tuple(data.get("plugin_modules", ()))
    return RunSpec(**data)


def layer_from_dict(data: dict[str, Any]) -> LayerSpec:
    """Rebuild a :class:`LayerSpec` (and its nested sequences) from JSON."""
    data = dict(data)
    for key in ("body", "shortcut"):
        data[key] = tuple(layer_from_dict(layer) for layer in data.get(key, ()))
    if "pads" in data:
        data["pads"] = tuple(data["pads"])
    return LayerSpec(**data)


def workload_from_dict(data: dict[str, Any]) -> Workload:
    """Rebuild a :class:`Workload` sent as JSON to a worker."""
    data = dict(data)
    data["layers"] = tuple(layer_from_dict(layer) for layer in data["layers"])
    data["optimizer"] = OptimizerSpec(**data["optimizer"])
    if data.get("transformer") is not None:
        data["transformer"] = TransformerShape(**data["transformer"])
    return Workload(**data)


def cell_for_run(run: RunSpec, status: str, **fields: Any) -> CellResult:
    """A :class:`CellResult` for ``run`` with its identity and configuration filled in."""
    fields.setdefault("mode", run.mode)
    return CellResult(key=run.key, framework=run.label, workload=run.workload, precision=run.precision,
                      repeat=run.repeat, status=status, config=asdict(run), **fields)


def cell_from_dict(data: dict[str, Any]) -> CellResult:
    """Rebuild a :class:`CellResult` read from ``results.jsonl``."""
    known = set(CellResult.__dataclass_fields__)
    return CellResult(**{k: v for k, v in data.items() if k in known})


def to_plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars become numbers, non-finite floats stay readable."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return to_plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
