"""Running a probe: what it runs (:class:`ProbeRequest`), what it answers (:class:`ProbeResult`), the process.

:func:`run_probe` runs one framework plugin through every per-run hook in a
fresh process (one framework per process, :mod:`amp_suite.testing.probe`)
and :func:`load_probe` reads back what it wrote.  The workload and optimizer
tables the kit's checks use are here too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from amp_suite.testing.server import ProbeServer

# Built-in frameworks a backend can be compared with, in order of preference.
REFERENCE_FRAMEWORKS = ("torch", "jax", "keras")

# Workload tables the checks use (the keys of a ``[workloads.NAME]`` table).
# ``mnist_cnn`` is benchmarks.toml's; the two small ones keep every layer kind
# and BatchNorm state while running in seconds on a CPU.
WORKLOADS: dict[str, dict[str, Any]] = {
    "mnist_cnn": {"model": "mnist_cnn", "input_size": 28, "channels": 1, "num_classes": 10, "batch_size": 128,
                  "optimizer": "adam", "learning_rate": 1e-3},
    # resnet8 at 16x16x3 keeps every stage (16 -> 8 -> 4) and its projection shortcuts
    "resnet8": {"model": "resnet8", "input_size": 16, "channels": 3, "num_classes": 10, "batch_size": 8,
                "normalize": True, "augment": True},
    "deep_cnn": {"model": "deep_cnn", "input_size": 28, "channels": 1, "num_classes": 10, "batch_size": 8},
}
OPTIMIZERS: dict[str, dict[str, Any]] = {
    "sgd": {"optimizer": "sgd", "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    # RMSprop's first steps move a weight by about lr * sqrt(10) * sign(g): a near-zero gradient whose
    # rounding differs flips a whole step, and a BatchNorm offset (64 entries, starting at 0) is all
    # such steps.  epsilon = 1e-3 damps steps of gradients below ~1e-3, and being far from 0 it also
    # makes the check sharper on where epsilon goes (outside the square root in every framework).
    "rmsprop": {"optimizer": "rmsprop", "learning_rate": 1e-3, "weight_decay": 5e-4, "epsilon": 1e-3},
    "adam": {"optimizer": "adam", "learning_rate": 1e-3},
}
# The optimizers of the arithmetic check, each with every hyper-parameter away from any framework's default
# (a backend that ignores one, or hard-codes it, fails), a cosine schedule and coupled weight decay.  The
# epsilons are large beside the gradients so that an update is a smooth function of its gradient: a gradient
# near zero cannot flip a whole step on round-off.
OPTIMIZER_CHECKS: dict[str, dict[str, Any]] = {
    "sgd": {"optimizer": "sgd", "learning_rate": 0.5, "momentum": 0.8, "weight_decay": 1e-2,
            "schedule": "cosine"},
    "rmsprop": {"optimizer": "rmsprop", "learning_rate": 5e-2, "rho": 0.8, "epsilon": 1e-3, "weight_decay": 1e-2,
                "schedule": "cosine"},
    "adam": {"optimizer": "adam", "learning_rate": 5e-2, "beta1": 0.85, "beta2": 0.995, "epsilon": 1e-3,
             "weight_decay": 1e-2, "schedule": "cosine"},
}
# ``framework_version``: "NAME VERSION" pairs joined by ", ", the framework first.
FRAMEWORK_VERSION_PATTERN = re.compile(r"^[\w.\-]+ [^\s,]+(, [\w.\-]+ [^\s,]+)*$")
# Seconds one probe may take.
PROBE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class ProbeRequest:
    """What one probe runs: a framework, a workload table, a precision and a few steps.

    ``table`` is a ``[workloads.NAME]`` table (default: ``WORKLOADS[workload]``);
    ``options`` is the framework's ``[frameworks.NAME]`` table (e.g.
    ``initial_loss_scale``); ``inspect`` names a ``module:function`` called as
    ``function(model, images)`` in the probe process that returns
    ``{"conv_output": [dtypes], "dense_output": [...], "bn_variable": [...]}``
    from inside the framework's model; ``cell`` also runs one whole cell
    through the worker's code path; ``plugin_modules`` are loaded like ``-p``.
    ``count_syncs`` lists window lengths: for each, one ``train_epoch`` call of
    that many steps runs inside ``sync_counter`` (a ``module:function`` called
    as ``function(model)`` that returns a context manager yielding a counter
    of host synchronizations, ``counter()`` -> int), and the counts are kept.
    ``devices`` > 1 runs the framework's data-parallel engine on that many
    devices (``sync_batch_norm`` as ``--sync-batch-norm``), started the way
    a sweep starts it (under torchrun for a ``torchrun`` launcher);
    ``shard = (i, n)`` instead trains one device on the contiguous slice
    ``i`` of ``n`` of every batch: the computation one replica of an
    ``n``-device step does.
    ``gradient_oracle`` runs ``steps`` optimizer steps, each an epoch of one
    batch, and before each measures the backend's own gradient at the
    current variables: a second model of the backend is built from them
    with plain SGD at rate :data:`amp_suite.testing.probe.ORACLE_LEARNING_RATE` and trained one step
    on the same batch (see :class:`GradientStep`).
    ``integer_stem`` trains on images of integers in [-2, 2] with the first
    convolution's kernel made of -1, 0 and 1, so that convolution is exact in
    every dtype and the first BatchNorm sees the same inputs in every
    precision.
    ``again`` > 0 runs the same probe once more (the probe itself ignores it;
    it only makes a request of its own, not served from the cache): the
    determinism check compares two runs of one request.
    """

    framework: str
    precision: str = "fp32"
    workload: str = "mnist_cnn"
    table: dict[str, Any] | None = None
    steps: int = 1
    epochs: int = 1
    batch_size: int = 16
    options: dict[str, Any] = field(default_factory=dict)
    inspect: str | None = None
    cell: bool = False
    plugin_modules: tuple[str, ...] = ()
    count_syncs: tuple[int, ...] = ()
    sync_counter: str | None = None
    devices: int = 1
    sync_batch_norm: bool = False
    shard: tuple[int, int] | None = None
    gradient_oracle: bool = False
    integer_stem: bool = False
    again: int = 0

    def to_json(self) -> str:
        data = asdict(self)
        data["table"] = self.table if self.table is not None else WORKLOADS[self.workload]
        data["plugin_modules"] = list(self.plugin_modules)
        data["count_syncs"] = list(self.count_syncs)
        data["shard"] = None if self.shard is None else list(self.shard)
        return json.dumps(data, sort_keys=True)


@dataclass
class ProbeResult:
    """What a probe saw; arrays are float32 numpy (float64 under ``fp64``), ``variables`` use the canonical names."""

    request: ProbeRequest
    logits_before: np.ndarray
    logits_before_train: np.ndarray
    logits_after: np.ndarray
    losses: list[float]
    skipped: int
    loss_scale_final: float | None
    traces: list[Any]
    param_count: int | None
    applied: dict[str, Any]
    measured: dict[str, Any]
    dtypes: dict[str, list[str]]
    initial: dict[str, np.ndarray]
    variables: dict[str, np.ndarray]
    moved_by_training_predict: list[str]
    cell: dict[str, Any] | None
    syncs: list[int] = field(default_factory=list)
    gradient_steps: list[GradientStep] = field(default_factory=list)
    optimizer: dict[str, Any] = field(default_factory=dict)
    inputs: np.ndarray | None = None  # the first batch's images or token ids (what logits_before came from)


@dataclass
class GradientStep:
    """One optimizer step of a ``gradient_oracle`` probe, in canonical names.

    ``before`` holds every variable when the step began; ``gradients`` the
    backend's gradient there (parameters only, float64, measured by the
    oracle); ``oracle_state`` the BatchNorm statistics after the oracle's
    forward pass and ``oracle_loss`` its loss; ``after`` every variable after
    the backend's own optimizer step, whose loss was ``loss``.
    """

    before: dict[str, np.ndarray]
    gradients: dict[str, np.ndarray]
    oracle_state: dict[str, np.ndarray]
    oracle_loss: float
    after: dict[str, np.ndarray]
    loss: float


def run_probe(request: ProbeRequest, out_dir: Path | str | None = None, *,
              timeout: float = PROBE_TIMEOUT_S, server: ProbeServer | None = None) -> ProbeResult:
    """Run ``request`` in a fresh Python process, or in ``server``'s, and load what it saw.

    The process inherits the environment (so ``PYTHONPATH`` and installed
    entry points apply).  A ``server`` (:class:`ProbeServer`) keeps one
    process for many requests of its framework; a request of several devices
    always gets a fresh process.  A failing probe raises ``AssertionError``
    with the end of its error output.  The probe's files stay in ``out_dir``;
    without one they go to a temporary folder, removed once the result is
    loaded (or the probe has failed).
    """
    if out_dir is not None:
        return _probe_into(request, Path(out_dir), timeout, server)
    with tempfile.TemporaryDirectory(prefix="amp-suite-probe-") as folder:
        return _probe_into(request, Path(folder), timeout, server)


def _probe_into(request: ProbeRequest, folder: Path, timeout: float, server: ProbeServer | None) -> ProbeResult:
    """:func:`run_probe` with its files in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "request.json").write_text(request.to_json())
    if server is not None and request.devices == 1:
        server.run(request.to_json(), folder, timeout)
        return load_probe(request, folder)
    command = ["-m", "amp_suite.testing.probe", str(folder / "request.json"), str(folder)]
    launcher, program = _launcher(request) if request.devices > 1 else ("process", "")
    env = None
    if launcher == "torchrun":  # one process per device, the program the plugin declares
        from amp_suite.launchers.torchrun import LOG_DIR_ENV, rendezvous_arguments
        from amp_suite.records import RunSpec

        one_node = RunSpec(framework=request.framework, workload=request.workload, precision=request.precision,
                           devices=request.devices, launcher="torchrun", launcher_program=program)
        command = ["-m", program, *rendezvous_arguments(one_node), *command]
        # torchrun's log folder with the probe's files, not a /tmp/torchelastic_* nothing removes (as the launcher)
        env = {**os.environ, LOG_DIR_ENV: str(folder / "torchrun-logs")}
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=timeout, cwd=folder,
                          env=env)
    if done.returncode != 0:
        raise AssertionError(f"probe of {request.framework} {request.precision} failed "
                             f"(exit {done.returncode}):\n{done.stderr[-3000:]}")
    return load_probe(request, folder)


def load_probe(request: ProbeRequest, folder: Path | str) -> ProbeResult:
    """The :class:`ProbeResult` a probe of ``request`` wrote into ``folder``."""
    folder = Path(folder)
    meta = json.loads((folder / "probe.json").read_text())
    with np.load(folder / "probe.npz") as data:
        arrays = {k: data[k] for k in data.files}
    param_count = meta["measured"].get("param_count")
    return ProbeResult(
        request=request, logits_before=arrays["logits_before"], logits_before_train=arrays["logits_before_train"],
        logits_after=arrays["logits_after"], losses=[float(x) for x in meta["losses"]], skipped=meta["skipped"],
        loss_scale_final=meta["loss_scale_final"], traces=meta["traces"],
        param_count=None if param_count is None else int(param_count), applied=meta["applied"],
        measured=meta["measured"], dtypes=meta["dtypes"],
        initial={k[5:]: v for k, v in arrays.items() if k.startswith("init:")},
        variables={k[4:]: v for k, v in arrays.items() if k.startswith("var:")},
        moved_by_training_predict=meta["moved_by_training_predict"], cell=meta["cell"],
        syncs=[int(n) for n in meta.get("syncs", [])],
        gradient_steps=_gradient_steps(arrays, meta), optimizer=meta.get("optimizer", {}),
        inputs=arrays.get("inputs"),
    )


def _gradient_steps(arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> list[GradientStep]:
    """The ``step{N}:{part}:{name}`` arrays of a gradient-oracle probe, step by step."""
    steps = []
    for n, oracle_loss in enumerate(meta.get("oracle_losses", [])):
        parts: dict[str, dict[str, np.ndarray]] = {"before": {}, "grad": {}, "oracle": {}, "after": {}}
        for key, value in arrays.items():
            step, _, rest = key.partition(":")
            if step == f"step{n}":
                part, _, name = rest.partition(":")
                parts[part][name] = value
        steps.append(GradientStep(before=parts["before"], gradients=parts["grad"], oracle_state=parts["oracle"],
                                  oracle_loss=float(oracle_loss), after=parts["after"],
                                  loss=float(meta["losses"][n])))
    return steps


def _launcher(request: ProbeRequest) -> tuple[str, str]:
    """How ``request.framework`` starts a data-parallel cell, and the program that does it
    (:attr:`FrameworkInfo.launcher`, :attr:`FrameworkInfo.launcher_program`)."""
    from amp_suite.plugins.host import PluginHost

    info = PluginHost(extra_modules=request.plugin_modules).frameworks().get(request.framework)
    return ("process", "") if info is None else (info.launcher, info.launcher_program)
