"""A conformance kit for plugin authors: run a backend through the hooks and check the contract.

Importing this package imports no framework and no pytest.  The pieces:

* :func:`run_probe` runs one framework plugin through every per-run hook in a
  fresh process (one framework per process) and returns a :class:`ProbeResult`;
* the ``assert_*`` functions check one contract each and raise
  ``AssertionError`` with the numbers that failed;
* :mod:`amp_suite.testing.conformance` has :class:`BackendConformance`, a
  pytest test class that runs every check for a framework: subclass it with
  ``framework = "NAME"`` and pytest collects the whole suite;
* :func:`sample_results` and :func:`run_reporter` test a reporter plugin.

``docs/writing-a-plugin.md`` documents every name exported here; a test
checks the signatures against this module.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from amp_suite.records import CellResult, FrameworkInfo
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
    with the end of its error output.
    """
    folder = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="amp-suite-probe-"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "request.json").write_text(request.to_json())
    if server is not None and request.devices == 1:
        server.run(request.to_json(), folder, timeout)
        return load_probe(request, folder)
    command = ["-m", "amp_suite.testing.probe", str(folder / "request.json"), str(folder)]
    if request.devices > 1 and _launcher(request) == "torchrun":  # one process per device, PyTorch's launcher
        from amp_suite.launchers.torchrun import rendezvous_arguments
        from amp_suite.records import RunSpec

        one_node = RunSpec(framework=request.framework, workload=request.workload, precision=request.precision,
                           devices=request.devices, launcher="torchrun")
        command = ["-m", "torch.distributed.run", *rendezvous_arguments(one_node), *command]
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=timeout, cwd=folder)
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


def _launcher(request: ProbeRequest) -> str:
    """How ``request.framework`` starts a data-parallel cell (:attr:`FrameworkInfo.launcher`)."""
    from amp_suite.plugins.host import PluginHost

    info = PluginHost(extra_modules=request.plugin_modules).frameworks().get(request.framework)
    return "process" if info is None else info.launcher


# --- which frameworks are there -----------------------------------------------


def framework_installed(framework: str, plugin_modules: tuple[str, ...] = ()) -> bool:
    """Whether a plugin provides ``framework`` and every module it needs is installed (nothing imported)."""
    from amp_suite.plugins.host import PluginHost

    info = PluginHost(extra_modules=plugin_modules).frameworks().get(framework)
    return info is not None and not info.missing_modules()


def reference_framework(exclude: str = "", candidates: tuple[str, ...] = REFERENCE_FRAMEWORKS) -> str | None:
    """The first installed built-in framework other than ``exclude`` (torch, then jax, then keras)."""
    for name in candidates:
        if name != exclude and framework_installed(name):
            return name
    return None


def framework_info(framework: str, plugin_modules: tuple[str, ...] = ()) -> FrameworkInfo:
    """The :class:`~amp_suite.records.FrameworkInfo` a plugin gives for ``framework`` (nothing imported)."""
    from amp_suite.plugins.host import PluginHost

    frameworks = PluginHost(extra_modules=plugin_modules).frameworks()
    if framework not in frameworks:
        raise AssertionError(f"no plugin provides framework {framework!r}; loaded: {', '.join(frameworks) or 'none'}")
    return frameworks[framework]


def missing_layer_kinds(info: FrameworkInfo) -> list[str]:
    """The kinds of the layer vocabulary (``amp_suite.workloads.kinds.KINDS``) ``info`` does not declare.

    In vocabulary order; every kind when the backend declares none
    (``FrameworkInfo.layer_kinds`` empty).
    """
    from amp_suite.workloads.kinds import missing_kinds

    return missing_kinds(info.layer_kinds)


def assert_declares_layer_kinds(info: FrameworkInfo, *, lacks: tuple[str, ...] = ()) -> None:
    """``info`` declares every kind of the vocabulary but ``lacks``, and no kind the vocabulary does not have.

    A backend that declares nothing is told to declare (a sweep cannot then
    tell which workloads it builds); one that lacks kinds gets them listed, so
    a new kind of the vocabulary shows up here as the one entry to add.
    ``lacks`` names kinds a backend leaves out on purpose (a CNN-only backend:
    the token kinds).
    """
    from amp_suite.workloads.kinds import KINDS

    if not info.layer_kinds:
        raise AssertionError(f"framework {info.name!r} declares no layer kinds: set FrameworkInfo.layer_kinds to the "
                             f"kinds its plugin builds (the vocabulary: {', '.join(KINDS)})")
    unknown = [kind for kind in info.layer_kinds if kind not in KINDS]
    if unknown:
        raise AssertionError(f"framework {info.name!r} declares kinds the vocabulary does not have: "
                             f"{', '.join(unknown)} (the vocabulary: {', '.join(KINDS)})")
    missing = [kind for kind in missing_layer_kinds(info) if kind not in lacks]
    if missing:
        raise AssertionError(f"framework {info.name!r} lacks {len(missing)} layer kind(s) of the vocabulary: "
                             f"{', '.join(missing)} (docs/layers.md defines each; add one entry per kind to the "
                             "plugin's table and to FrameworkInfo.layer_kinds)")
    built = [kind for kind in lacks if kind in info.layer_kinds]
    if built:
        raise AssertionError(f"framework {info.name!r} declares {', '.join(built)}, which the test says it lacks: "
                             "take them out of lacks_kinds")


def jax_compiles_to_build(framework: str, workload: str, table: dict[str, Any], *, precision: str = "fp32",
                          plugin_modules: tuple[str, ...] = (), timeout: float = PROBE_TIMEOUT_S) -> int:
    """How many XLA programs a JAX-based backend compiles in ``build_model``, for ``workload`` built from its
    ``[workloads]`` ``table``: counted in a fresh process without a compilation cache (a program read from a
    cache would go uncounted).

    Run eagerly, every initializer and each of the optimizer's ``zeros`` compiles a program of its own (450
    for an EfficientNet-B0); traced for shapes (``jax.eval_shape``, ``nnx.eval_shape``) with the optimizer's
    init jitted, a build compiles a few.
    """
    request = {"framework": framework, "workload": workload, "table": table, "precision": precision,
               "plugin_modules": list(plugin_modules)}
    env = {name: value for name, value in os.environ.items() if name != "JAX_COMPILATION_CACHE_DIR"}
    with tempfile.TemporaryDirectory(prefix="amp-suite-build-compiles-") as folder:
        path = Path(folder) / "request.json"
        path.write_text(json.dumps(request))
        done = subprocess.run([sys.executable, "-m", "amp_suite_plugins.jax.build_compiles", str(path)],
                              capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise AssertionError(f"building {workload} in {framework} failed (exit {done.returncode}):\n"
                             f"{done.stderr[-3000:]}")
    return int(json.loads(done.stdout.splitlines()[-1])["compiles"])


# --- checks -----------------------------------------------------------------


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    """Largest absolute difference over the largest magnitude of ``b``."""
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


def relative_l2(a: np.ndarray, b: np.ndarray) -> float:
    """``|a - b| / |b|`` in the L2 norm."""
    return relative_l2_floored(a, b, 1e-12)


def assert_matches_reference(result: ProbeResult, reference: ProbeResult, *, rtol: float = 1e-4,
                             param_count: int | None = None) -> None:
    """fp32 evaluation logits from the canonical weights, parameter count and first-step loss agree."""
    error = relative_error(result.logits_before, reference.logits_before)
    assert error <= rtol, f"logits differ from {reference.request.framework}'s by {error:.2e} (allowed {rtol:g})"
    assert result.param_count == reference.param_count, \
        f"param_count {result.param_count} != {reference.request.framework}'s {reference.param_count}"
    if param_count is not None:
        assert result.param_count == param_count, f"param_count {result.param_count} != {param_count}"
    loss, ref = result.losses[0], reference.losses[0]
    assert abs(loss - ref) / abs(ref) <= rtol, \
        f"first-step loss {loss!r} != {reference.request.framework}'s {ref!r} (allowed {rtol:g} relative)"


def assert_trains_like_reference(result: ProbeResult, reference: ProbeResult, *, rtol: float = 1e-4) -> None:
    """Same logits in both modes, same losses, and every variable equal after the steps (relative L2)."""
    assert result.param_count == reference.param_count, \
        f"param_count {result.param_count} != {reference.request.framework}'s {reference.param_count}"
    for mode in ("logits_before", "logits_before_train"):
        error = relative_l2(getattr(result, mode), getattr(reference, mode))
        assert error <= rtol, f"{mode}: relative L2 {error:.2e} > {rtol:g}"
    np.testing.assert_allclose(result.losses, reference.losses, rtol=rtol)
    assert set(result.variables) == set(reference.variables), \
        f"variable names differ: {sorted(set(result.variables) ^ set(reference.variables))}"
    errors = {name: relative_l2(result.variables[name], reference.variables[name]) for name in reference.variables}
    worst = sorted(errors.items(), key=lambda kv: -kv[1])[:3]
    assert max(errors.values()) <= rtol, f"variables differ after training (relative L2): {worst}"


def relative_l2_floored(a: np.ndarray, b: np.ndarray, floor: float) -> float:
    """``|a - b| / max(|b|, floor)`` in the L2 norm: a tensor whose true value is ~0 is judged against ``floor``."""
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / max(float(np.linalg.norm(b)), floor, 1e-30))


def _worst(errors: dict[str, float], n: int = 3) -> str:
    return ", ".join(f"{name} {error:.2e}" for name, error in sorted(errors.items(), key=lambda kv: -kv[1])[:n])


def _state_deltas(after: dict[str, np.ndarray], before: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """How far one forward pass moved each BatchNorm statistic (the change, not the value, is compared)."""
    return {name: np.asarray(after[name], np.float64) - before[name] for name in after}


def assert_gradients_match_reference(result: ProbeResult, reference: ProbeResult, *, rtol: float = 1e-4,
                                     floor: float = 1e-3) -> None:
    """The first step's loss, gradients and BatchNorm statistics equal the reference framework's.

    Both probes ran with ``gradient_oracle``: at the canonical variables and
    on the same batch, each parameter's gradient agrees in relative L2, judged
    against ``floor`` times the largest gradient norm where its own norm is
    smaller (a bias in front of BatchNorm has a gradient of round-off alone);
    each running statistic's change agrees likewise.  Nothing is trained
    further, so no difference is amplified.
    """
    name = reference.request.framework
    assert result.gradient_steps and reference.gradient_steps, "probes need ProbeRequest(gradient_oracle=True)"
    ours, theirs = result.gradient_steps[0], reference.gradient_steps[0]
    assert abs(ours.oracle_loss - theirs.oracle_loss) <= rtol * abs(theirs.oracle_loss), \
        f"loss at the canonical variables {ours.oracle_loss!r} != {name}'s {theirs.oracle_loss!r}"
    missing = sorted(set(theirs.gradients) ^ set(ours.gradients))
    assert not missing, f"parameter names differ from {name}'s: {missing}"
    scale = floor * max(float(np.linalg.norm(g)) for g in theirs.gradients.values())
    errors = {k: relative_l2_floored(ours.gradients[k], g, scale) for k, g in theirs.gradients.items()}
    assert max(errors.values()) <= rtol, \
        f"gradients differ from {name}'s (relative L2, allowed {rtol:g}): {_worst(errors)}"
    deltas, ref_deltas = (_state_deltas(s.oracle_state, s.before) for s in (ours, theirs))
    if ref_deltas:
        assert set(deltas) == set(ref_deltas), f"state names differ from {name}'s: {sorted(set(deltas) ^ set(ref_deltas))}"
        errors = {k: relative_l2(deltas[k], d) for k, d in ref_deltas.items()}
        assert max(errors.values()) <= rtol, \
            f"BatchNorm statistics after one step differ from {name}'s (relative L2 of the change, allowed " \
            f"{rtol:g}): {_worst(errors)}"


def assert_optimizer_arithmetic(result: ProbeResult, *, rtol: float = 5e-5) -> None:
    """Every step applied the suite's optimizer to the backend's own gradients, at the scheduled rate.

    ``result`` is a ``gradient_oracle`` probe: for each step the change of
    every parameter must equal what :class:`ReferenceOptimizer` computes in
    float64 from the step's variables and measured gradients (relative L2 of
    the change, per tensor), the BatchNorm statistics must be the ones the
    oracle's forward pass gave, and the step's loss the oracle's.  A wrong
    hyper-parameter (momentum, ``rho``, ``beta1``, ``beta2``, ``epsilon``,
    weight decay) or an ignored schedule changes the updates by far more.
    """
    from amp_suite.testing.optimizer_reference import ReferenceOptimizer, describe
    from amp_suite.workloads.workload import learning_rate_at

    assert result.gradient_steps, "probe with ProbeRequest(gradient_oracle=True)"
    optimizer = ReferenceOptimizer(result.optimizer, decayed=_decayed_variables(result.request))
    what = describe(optimizer.spec)
    for n, step in enumerate(result.gradient_steps):
        assert abs(step.loss - step.oracle_loss) <= 1e-5 * abs(step.oracle_loss), \
            f"step {n}: the backend's loss {step.loss!r} != {step.oracle_loss!r} at the same variables and batch"
        rate = learning_rate_at(optimizer.spec, n)
        expected = optimizer.update(step.before, step.gradients)
        moved = {k: np.asarray(step.after[k], np.float64) - step.before[k] for k in expected}
        errors = {k: relative_l2(moved[k], d) for k, d in expected.items()}
        assert max(errors.values()) <= rtol, \
            f"step {n}: parameter updates are not {what} applied to the backend's own gradients " \
            f"(relative L2 of the change, allowed {rtol:g}): {_worst(errors)}{_rate_hint(moved, expected, rate)}"
        if step.oracle_state:
            moved = _state_deltas({k: step.after[k] for k in step.oracle_state}, step.before)
            errors = {k: relative_l2(moved[k], d) for k, d in _state_deltas(step.oracle_state, step.before).items()}
            assert max(errors.values()) <= rtol, \
                f"step {n}: BatchNorm statistics differ from the same forward pass's (allowed {rtol:g}): " \
                f"{_worst(errors)}"


def _decayed_variables(request: ProbeRequest) -> set[str]:
    """The variables of the request's workload declared ``decay`` (those AdamW's decoupled decay applies to)."""
    from amp_suite.workloads.workload import variable_specs, workload_from_config

    table = request.table if request.table is not None else WORKLOADS[request.workload]
    return {spec.name for spec in variable_specs(workload_from_config(request.workload, table)) if spec.decay}


def _rate_hint(moved: dict[str, np.ndarray], expected: dict[str, np.ndarray], rate: float) -> str:
    """Where every change is the expected one times one factor, the learning rate the backend applied."""
    flat_moved = np.concatenate([moved[k].ravel() for k in expected])
    flat_expected = np.concatenate([d.ravel() for d in expected.values()])
    factor = float(flat_moved @ flat_expected / max(float(flat_expected @ flat_expected), 1e-300))
    if relative_l2(flat_moved, factor * flat_expected) > 1e-3:
        return ""
    return f"; every change is {factor:.4g}x the expected one: a learning rate of {factor * rate:.4g} where " \
           f"the schedule gives {rate:.4g} at this step"


def assert_batch_norm_in_float32(result: ProbeResult, fp32: ProbeResult, *, rtol: float = 1e-5) -> None:
    """The first BatchNorm's statistics under AMP equal fp32's: its arithmetic is float32, as documented.

    Both probes ran with ``integer_stem``: the convolution in front of that
    BatchNorm is exact in every dtype, so its inputs are identical in both
    precisions, and statistics computed in float32 agree to round-off, while
    any step of BatchNorm done in bfloat16 or float16 moves them by 1e-3 or more.
    """
    from amp_suite.testing.probe import first_layer

    workload = result.request.table or WORKLOADS[result.request.workload]
    from amp_suite.workloads.workload import workload_from_config

    layer = first_layer(workload_from_config(result.request.workload, workload).layers, "batch_norm")
    errors = {}
    for leaf in ("mean", "var"):
        name = f"{layer}/{leaf}"
        errors[name] = relative_l2(np.asarray(result.variables[name], np.float64) - result.initial[name],
                                   np.asarray(fp32.variables[name], np.float64) - fp32.initial[name])
    precision = result.request.precision
    notes = " ".join(result.applied.get("notes", ()))
    assert max(errors.values()) <= rtol, \
        f"{precision}: BatchNorm statistics differ from fp32's on identical inputs ({_worst(errors)}; allowed " \
        f"{rtol:g}): BatchNorm arithmetic is not float32" + (f", though applied.notes say {notes!r}" if notes else "")


def assert_training_predict_changes_nothing(result: ProbeResult) -> None:
    """``predict(training=True)`` left every variable and running statistic at its canonical value."""
    assert not result.moved_by_training_predict, \
        f"a training-mode predict changed (or dropped) {result.moved_by_training_predict[:5]}"


def assert_reduced_precision(result: ProbeResult, fp32: ProbeResult, compute_dtype: str) -> None:
    """Logits rounded like ``compute_dtype`` (not fp32, not garbage), float32 out, and the record says so."""
    error = relative_error(result.logits_before, fp32.logits_before)
    assert 1e-4 < error < 0.1, f"logits differ from fp32 by {error:.2e}: expected 1e-4 < error < 0.1"
    assert result.logits_before.dtype == np.float32, f"logits are {result.logits_before.dtype}, not float32"
    assert result.applied["compute_dtype"] == compute_dtype, result.applied
    expected_scaling = "dynamic" if compute_dtype == "float16" else "none"
    assert result.applied["loss_scaling"] == expected_scaling, result.applied


def assert_overflow_skipped(result: ProbeResult, initial_scale: float) -> None:
    """An overflowing fp16 step changed no parameter, counted as skipped, and halved the loss scale."""
    assert result.skipped == 1, f"skipped_steps {result.skipped}, expected 1"
    assert result.loss_scale_final == initial_scale / 2, \
        f"loss_scale_final {result.loss_scale_final}, expected {initial_scale / 2}"
    np.testing.assert_array_equal(result.logits_after, result.logits_before, err_msg="parameters moved")
    assert all(math.isfinite(x) for x in result.losses), f"reported losses {result.losses} must be unscaled"


def assert_scale_grows(result: ProbeResult, initial_scale: float, growth_interval: int) -> None:
    """Finite fp16 steps are applied and the scale doubles every ``growth_interval`` steps."""
    steps = len(result.losses)
    assert result.skipped == 0, f"skipped_steps {result.skipped}, expected 0"
    expected = initial_scale * 2 ** (steps // growth_interval)
    assert result.loss_scale_final == expected, f"loss_scale_final {result.loss_scale_final}, expected {expected}"
    assert not np.array_equal(result.logits_after, result.logits_before), "no parameter moved"
    assert result.applied["loss_scaling"] == "dynamic" and result.applied["initial_loss_scale"] == initial_scale


def assert_no_loss_scaling(result: ProbeResult) -> None:
    """``loss_scaling = "none"`` under amp_fp16: no scale recorded, every step applied, parameters moved.

    Probe it with ``initial_loss_scale = 2**100``: a backend that scaled the
    loss anyway would overflow and skip the step (or report a scale).
    """
    assert result.applied["loss_scaling"] == "none" and result.applied["initial_loss_scale"] is None, \
        f"applied {result.applied['loss_scaling']!r} from {result.applied['initial_loss_scale']}, expected none"
    assert result.skipped == 0, f"skipped_steps {result.skipped}: without loss scaling no step is checked or skipped"
    assert result.loss_scale_final is None, f"loss_scale_final {result.loss_scale_final}, expected None"
    assert not np.array_equal(result.logits_after, result.logits_before), "no parameter moved"
    assert all(math.isfinite(x) for x in result.losses), f"losses {result.losses}"


def assert_static_scale(result: ProbeResult, initial_scale: float) -> None:
    """``loss_scaling = "static"`` with an overflowing scale: every step skipped, the scale never moved.

    A dynamic scaler would have halved its scale at each skipped step.
    """
    assert result.applied["loss_scaling"] == "static" and result.applied["initial_loss_scale"] == initial_scale, \
        result.applied
    steps = len(result.losses)
    assert result.skipped == steps, f"skipped_steps {result.skipped}, expected {steps} (each step overflows)"
    assert result.loss_scale_final == initial_scale, \
        f"loss_scale_final {result.loss_scale_final}, expected {initial_scale}: a static scale does not move"
    np.testing.assert_array_equal(result.logits_after, result.logits_before, err_msg="parameters moved")


def assert_trajectory_halves(result: ProbeResult, initial_scale: float) -> None:
    """The cell's stored loss-scale trajectory (``ProbeRequest(cell=True)``) halves at every skipped step."""
    assert result.cell is not None and result.cell["status"] == "ok", result.cell
    metrics = result.cell["metrics"]
    points, skipped = metrics.get("loss_scale_trajectory"), metrics.get("skipped_steps")
    assert points and points[0] == [0, initial_scale], f"loss_scale_trajectory {points}, expected to start at " \
        f"[0, {initial_scale}]"
    assert skipped and metrics["loss_scale_backoffs"] == skipped, \
        f"{metrics.get('loss_scale_backoffs')} backoffs for {skipped} skipped steps"
    expected = initial_scale / 2 ** skipped
    assert points[-1][1] == metrics["loss_scale_final"] == metrics["loss_scale_min"] == expected, \
        f"trajectory {points}, final {metrics['loss_scale_final']}: expected {initial_scale} halved {skipped} times"
    assert all(b[0] > a[0] and b[1] < a[1] for a, b in zip(points, points[1:], strict=False)), f"trajectory {points}"


def assert_kept_in_float32(result: ProbeResult, compute_dtype: str) -> None:
    """``keep_fp32 = ["conv2d", "logits"]`` on mnist_cnn: convolutions and the logits layer compute in float32,
    the other dense layer in ``compute_dtype``, and the record names what was kept."""
    assert result.dtypes, "the probe had no inspect function"
    assert result.dtypes["conv_output"] == ["float32"], f"kept convolutions computed in {result.dtypes['conv_output']}"
    assert result.dtypes["dense_output"] == sorted([compute_dtype, "float32"]), \
        f"dense outputs {result.dtypes['dense_output']}: expected dense1 in {compute_dtype}, logits in float32"
    assert list(result.applied.get("keep_fp32", [])) == ["conv2d", "logits"], result.applied
    assert result.logits_before.dtype == np.float32


def assert_compiles_once(result: ProbeResult) -> None:
    """``EpochResult.extra["traces"]`` (times the step was traced so far) is 1 after every epoch."""
    assert result.traces == [1] * len(result.traces), f"traces per epoch {result.traces}, expected all 1"


def assert_one_wait_per_window(result: ProbeResult) -> None:
    """Host synchronizations of a window do not grow with its steps: none happens between steps."""
    assert len(result.syncs) >= 2, "probe with count_syncs=(2, 6) and a sync_counter"
    lengths = result.request.count_syncs
    if len(set(result.syncs)) != 1:
        extra = (result.syncs[-1] - result.syncs[0]) / max(lengths[-1] - lengths[0], 1)
        raise AssertionError(
            f"synchronizations per window of {lengths} steps: {result.syncs}, {extra:g} more per step: something "
            "waits for the device or reads a value back inside every step (a float(loss), an .item(), a "
            "block_until_ready on the loss); wait once after the window's last step instead (timed_window's wait)")
    assert 1 <= result.syncs[0] <= 4, f"{result.syncs[0]} synchronizations: expected the one wait and one fetch"


def assert_layer_dtypes(result: ProbeResult, compute_dtype: str) -> None:
    """Convolutions compute in ``compute_dtype``, BatchNorm keeps float32 variables, the record says so."""
    assert result.dtypes, "the probe had no inspect function"
    assert result.dtypes["conv_output"] == [compute_dtype], result.dtypes
    if result.dtypes.get("bn_variable"):
        assert result.dtypes["bn_variable"] == ["float32"], result.dtypes
        notes = " ".join(result.applied["notes"])
        assert "batch_norm=float32" in notes or "compute=float32" in notes, \
            f"applied.notes {result.applied['notes']} do not say BatchNorm runs in float32"
    assert result.logits_before.dtype == np.float32
    assert all(v.dtype == np.float32 for v in result.variables.values()), "get_variables must give float32"


def assert_cell_ok(result: ProbeResult, *, check_version_format: bool = True) -> None:
    """A whole cell ran through the worker: measure keys did not clash, every answer had its type."""
    assert result.cell is not None, "the probe ran no cell (ProbeRequest(cell=True))"
    assert result.cell["status"] == "ok", f"cell {result.cell['status']}: {result.cell['error']}"
    metrics = result.cell["metrics"]
    assert isinstance(metrics.get("param_count"), int), "measure must give param_count"
    version = metrics.get("framework_version", "")
    assert version, "measure must give framework_version"
    assert not check_version_format or FRAMEWORK_VERSION_PATTERN.match(version), \
        f"framework_version {version!r} is not 'NAME VERSION[, NAME VERSION ...]'"


# --- reporters ----------------------------------------------------------------


def sample_results() -> list[CellResult]:
    """Three cells as a reporter receives them: two ``ok`` (fp32 and amp_bf16) and one ``failed``."""
    def cell(precision: str, status: str, throughput: float | None, error: str = "") -> CellResult:
        metrics = {} if throughput is None else {
            "throughput": throughput, "step_time_median_s": 128 / throughput, "first_step_loss": 2.30,
            "final_loss": 2.1, "val_accuracy": 0.2, "val_loss": 2.2, "param_count": 824_458,
            "peak_rss_bytes": 900 * 2 ** 20, "framework_version": "numpy 2.0"}
        return CellResult(key=f"fake/mnist_cnn/{precision}/r0", framework="fake", workload="mnist_cnn",
                          precision=precision, repeat=0, status=status, error=error,
                          config={"batch_size": 128, "steps": 20, "epochs": 1, "warmup": 5, "dataset": "synthetic"},
                          applied={"compute_dtype": "float32" if precision == "fp32" else "bfloat16",
                                   "loss_scaling": "none"}, metrics=metrics)

    return [cell("fp32", "ok", 1000.0), cell("amp_bf16", "ok", 1500.0),
            cell("amp_fp16", "failed", None, "RuntimeError: example failure")]


def run_reporter(module: str, out_dir: Path | str, results: list[CellResult] | None = None,
                 environment: dict[str, Any] | None = None) -> list[Path]:
    """Load reporter ``module`` (no entry points), call ``write_report`` and check the answer.

    Returns the paths it wrote; raises ``AssertionError`` if the plugin failed
    to load, raised, returned the wrong type, or named a file that does not exist.
    """
    from amp_suite.machine.environment import host_environment
    from amp_suite.plugins.host import PluginHost

    host = PluginHost(extra_modules=(module,), autoload=False)
    assert not host.failures, f"{module} failed to load: {host.failures}"
    out = Path(out_dir)
    outcome = host.write_report(sample_results() if results is None else results, out,
                                host_environment() if environment is None else environment)
    assert not outcome.failures, f"reporter failed: {outcome.failures}"
    missing = [p for p in outcome.written if not Path(p).is_file()]
    assert not missing, f"reported paths that do not exist: {missing}"
    return list(outcome.written)
