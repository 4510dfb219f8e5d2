"""The layer kinds of the ImageNet backbones, translated by PyTorch, Keras and JAX alike (issue 20).

``mobilenet`` (zero_pad, depthwise_conv2d, relu6, dropout) and
``efficientnet_b0`` (depthwise_conv2d, zero_pad, swish, squeeze-and-excitation
``multiply`` with ``sigmoid``, per-sample dropout for stochastic depth, head
dropout) at 32x32x3, every layer and block of each but at about a quarter of
its width (``tests/helpers/narrow_backbones.py``; ``AMP_SUITE_FULL_SIZE=1``, set
by ``benchmarks/full_size_comparisons.py`` before a release, runs the full
networks), from the same canonical weights and the same host-drawn masks: fp32 logits in evaluation and training mode, the losses of 3 Adam steps
with dropout and stochastic depth active, and the change of every parameter
and BatchNorm statistic over those steps agree with PyTorch's.  Under amp_fp16
and amp_bf16 the new layers compute in the reduced dtype, BatchNorm keeps
float32, and the SE sigmoid computes where ``applied.notes`` and
``docs/workloads.md`` say: checked on EfficientNet-B0's stem, first three
blocks, top and head, which hold every new kind and nesting of it.

The float32 test's tolerances are the float32 arithmetic's own, measured: PyTorch in float32
against PyTorch in float64 on the same batches, masks and steps (first), on the full networks; the narrow ones
measure about the same round-off (figures beside ``TOLERANCES``), so one set of tolerances serves both.
Training-mode BatchNorm at init makes these networks ill-conditioned where
the suite's small models are not: MobileNet is a plain stack of 27 BatchNorm
layers (the gradient of an early BatchNorm parameter carries 2.6e-2 of
float32 round-off, training-mode logits 8.7e-5), and EfficientNet's project
BatchNorm offsets are nearly invisible to the loss (the next convolution's
BatchNorm removes a constant shift; stochastic depth alone keeps a trace), so
their gradient is mostly round-off.  Two choices keep the comparison
meaningful: Adam's epsilon is 1e-3, large beside these gradients, so an
update is a smooth function of its gradient (with 1e-8 an update is
``lr * sign(g)`` and a round-off gradient flips whole steps: 150% apart after
3 steps), and the *change* of each tensor over the 3 steps is compared, judged
against 1e-3 of the largest change of its group (parameters, running means,
running variances) where its own is smaller, as the kit's gradient check
does.  The kit's gradient oracle measures the same round-off (its step-0
gradients differ by 1.4e-4 on EfficientNet, 2.6e-3 on MobileNet) and costs a
second compiled model per step.

The literal check runs the same steps in float64 in all three frameworks
(precision ``fp64``: parameters, activations, BatchNorm statistics, optimizer
state, images and masks in float64, no AMP), where round-off no longer decides
a step: Adam's epsilon is an ordinary 1e-7, logits in both modes and the 3
losses agree to 1e-4, and so does the *value* of every parameter and running
statistic after the steps, relative L2 per tensor with no floor (measured:
1e-10 or better, and about 2e-8 for the offsets stochastic depth alone makes
visible).  The one exception is exact: 14 EfficientNet tensors whose value
stays 0 in exact arithmetic (see ``_exactly_zero``) hold nothing but float64
round-off, which no two implementations share, so the test asserts that
they are 0 to round-off in both frameworks instead.  Dtypes (and logits that
agree to 1e-10) make sure nothing ran in float32.

Each probe runs one framework in a process of its own (the kit's
:class:`~amp_suite.testing.ProbeServer`, one per framework for this module).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from amp_suite.testing import (
    ProbeRequest,
    ProbeResult,
    ProbeServer,
    assert_compiles_once,
    assert_training_predict_changes_nothing,
    framework_installed,
    relative_error,
    relative_l2_floored,
    session_probe_folder,
    shared_probe,
)
from narrow_backbones import NARROW  # registers the narrow architectures in this process too

# Every test here starts a real framework (slow on 2 cores): -m 'not slow' leaves them out.
pytestmark = pytest.mark.slow

slow = pytest.mark.slow
FRAMEWORKS = ("torch", "keras", "jax")
# Which networks the comparisons train.  By default every layer and block of MobileNet and EfficientNet-B0 at about
# a quarter of their width (tests/helpers/narrow_backbones.py: same builders, names, kinds and nesting), whose steps
# compile and run in seconds; with AMP_SUITE_FULL_SIZE=1 the full networks, whose 3 to 4 million parameters take
# Keras and XLA up to a minute a probe to compile: benchmarks/full_size_comparisons.py runs this module so before a
# release.
FULL_SIZE = os.environ.get("AMP_SUITE_FULL_SIZE", "") == "1"
ARCHITECTURE = {name: name if FULL_SIZE else narrow for name, narrow in NARROW.items()}
# The module the probes load to know the narrow architectures (a module without hooks is a harmless plugin).
ARCHITECTURE_MODULES = () if FULL_SIZE else ("narrow_backbones",)
# The article's backbones at a size that runs in seconds on a CPU (both reach 1x1 before their heads),
# Adam at the article's rate with a large epsilon (see the module's docstring).
TABLES: dict[str, dict[str, Any]] = {
    "mobilenet": {"model": ARCHITECTURE["mobilenet"], "input_size": 32, "channels": 3, "num_classes": 10,
                  "batch_size": 8, "optimizer": "adam", "learning_rate": 1e-4, "epsilon": 1e-3},
    "efficientnet_b0": {"model": ARCHITECTURE["efficientnet_b0"], "input_size": 32, "channels": 3, "num_classes": 10,
                        "batch_size": 8, "optimizer": "adam", "learning_rate": 1e-4, "epsilon": 1e-3,
                        "input_normalization": "imagenet"},
}
STEPS = 3
# The dtype checks' network: EfficientNet-B0 cut to three blocks (registered by a module the probe loads).
FEW_BLOCKS_TABLE = {**TABLES["efficientnet_b0"], "model": "few_blocks_efficientnet"}


@dataclass(frozen=True)
class Tolerance:
    """Relative tolerances of one architecture, about 3x the float32 round-off measured in the comments."""

    eval_logits: float = 1e-4
    train_logits: float = 1e-4
    losses: float = 1e-4
    parameters: float = 1e-4  # change over the steps, floored at 1e-3 of the largest change
    statistics: float = 1e-4  # likewise, running means and running variances each a group


TOLERANCES = {
    # PyTorch float32 vs float64: eval logits 8e-7, training logits 8.7e-5, losses 2.1e-4 (step 3), parameter
    # changes 3.5e-2 (conv_dw_2_bn/offset), running means 2.1e-4, variances 1.1e-3.  Keras / JAX vs PyTorch:
    # 2.0e-6 / 1.9e-6, 7.0e-5 (8.5e-5 in another run) / 7.0e-5, 1.7e-4 / 2.7e-4, 3.1e-2 / 5.8e-2, 1.7e-4 /
    # 2.0e-4, 9.0e-4 / 1.1e-3.
    "mobilenet": Tolerance(train_logits=3e-4, losses=1e-3, parameters=0.15, statistics=5e-3),
    # PyTorch float32 vs float64: eval logits 1.6e-6, training logits 2.2e-5, losses 2.4e-6, parameter changes
    # 1.1e-2 (block1a_project_bn/offset), running means 4.2e-4 (top_bn), variances 1.5e-5.  Keras / JAX vs
    # PyTorch: 2.3e-6 / 2.4e-6, 1.4e-5 / 1.5e-5, 8.1e-6 / 4.0e-6, 1.3e-2 / 1.2e-2, 6.2e-4 / 6.2e-4, 2.0e-5 / 1.7e-5.
    # The narrow network (width 0.3), same figures: PyTorch float32 vs float64 7.9e-7, 1.3e-5, 8.9e-6, 1.4e-2
    # (block2a_project_bn/offset), 3.1e-4 (top_bn), 1.2e-5; Keras / JAX vs PyTorch: 1.4e-6 / 1.0e-6, 9.6e-6 / 1.4e-5,
    # 2.9e-6 / 6.2e-6, 2.0e-2 / 1.5e-2, 4.3e-4 / 4.2e-4, 1.2e-5 / 1.1e-5.
    "efficientnet_b0": Tolerance(losses=3e-5, parameters=5e-2, statistics=2e-3),
}
# Where each framework computes the squeeze-and-excitation sigmoid under AMP (docs/workloads.md): all three
# leave it to the compute dtype (autocast has no float32 rule for sigmoid; Keras's Activation and jax.nn
# compute in the policy's compute dtype).
SE_SIGMOID = {"torch": "compute", "keras": "compute", "jax": "compute"}


def _installed(framework: str) -> Any:
    return pytest.param(framework, marks=pytest.mark.skipif(not framework_installed(framework),
                                                            reason=f"{framework} is not installed"))


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``probe(framework, model, precision="fp32", table=TABLES[model], **fields) -> ProbeResult``, cached for this
    module."""
    servers: dict[str, ProbeServer] = {}
    cache: dict[str, ProbeResult] = {}

    def get(framework: str, model: str, precision: str = "fp32", table: dict[str, Any] | None = None,
            **fields: Any) -> ProbeResult:
        table = TABLES[model] if table is None else table
        fields.setdefault("plugin_modules", ARCHITECTURE_MODULES)
        request = ProbeRequest(framework=framework, precision=precision, workload=model, table=table,
                               batch_size=table["batch_size"], **fields)
        key = request.to_json()
        if key not in cache:
            def server() -> ProbeServer:
                if framework not in servers:
                    servers[framework] = ProbeServer(tmp_path_factory.mktemp(f"server-{framework}"))
                return servers[framework]

            # The other xdist lane may need the same probe: it runs once, in the lane that asks first.
            cache[key] = shared_probe(request, session=session_probe_folder(tmp_path_factory), server=server,
                                      folder=lambda: tmp_path_factory.mktemp(f"{framework}-{model}-{precision}"))
        return cache[key]

    yield get
    for started in servers.values():
        started.close()


def _group(name: str) -> str:
    leaf = name.rsplit("/", 1)[1]
    return leaf if leaf in ("mean", "var") else "parameters"


def _change_errors(result: ProbeResult, reference: ProbeResult) -> dict[str, dict[str, float]]:
    """Per group (parameters, mean, var): each tensor's change over the steps against the reference's change."""
    changes = {name: np.asarray(result.variables[name], np.float64) - result.initial[name]
               for name in result.variables}
    reference_changes = {name: np.asarray(reference.variables[name], np.float64) - reference.initial[name]
                         for name in reference.variables}
    groups: dict[str, list[str]] = {}
    for name in reference_changes:
        groups.setdefault(_group(name), []).append(name)
    errors = {}
    for group, names in groups.items():
        floor = 1e-3 * max(float(np.linalg.norm(reference_changes[name])) for name in names)
        errors[group] = {name: relative_l2_floored(changes[name], reference_changes[name], floor) for name in names}
    return errors


def _worst(errors: dict[str, float]) -> str:
    return ", ".join(f"{name} {error:.1e}" for name, error in sorted(errors.items(), key=lambda kv: -kv[1])[:3])


def _no_dropout_loss(result: ProbeResult, model: str) -> float:
    """The first step's loss had no unit been dropped: cross-entropy of the training-mode logits (no masks)."""
    from amp_suite.datasets import input_pipeline, load_dataset
    from amp_suite.workloads.workload import workload_from_config

    workload = workload_from_config(model, TABLES[model])
    batch_size = TABLES[model]["batch_size"]
    data = load_dataset("synthetic", workload, steps=STEPS, batch_size=batch_size, seed=0)
    batch = input_pipeline(workload, data, batch_size=batch_size, steps=STEPS, seed=0).batches(0, 0, 1)[0]
    assert batch.masks, f"the host drew no dropout masks for {model}"
    logits = result.logits_before_train.astype(np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    log_softmax = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-log_softmax[np.arange(batch_size), batch.labels].mean())


@slow
@pytest.mark.parametrize("model", list(TABLES))
@pytest.mark.parametrize("framework", [_installed(f) for f in ("keras", "jax")])
def test_fp32_logits_and_three_adam_steps_with_dropout_agree_with_pytorch(probe: Any, framework: str,
                                                                          model: str) -> None:
    if not framework_installed("torch"):
        pytest.skip("torch (the reference) is not installed")
    tolerance = TOLERANCES[model]
    reference = probe("torch", model, steps=STEPS)
    result = probe(framework, model, steps=STEPS)
    assert result.param_count == reference.param_count, (result.param_count, reference.param_count)
    for mode, rtol in (("logits_before", tolerance.eval_logits), ("logits_before_train", tolerance.train_logits)):
        error = relative_error(getattr(result, mode), getattr(reference, mode))
        assert error <= rtol, f"{framework} {model} {mode}: {error:.2e} from PyTorch's (allowed {rtol:g})"
    # every step's loss: each step's own masks (dropout and stochastic depth) in all three
    np.testing.assert_allclose(result.losses, reference.losses, rtol=tolerance.losses,
                               err_msg=f"{framework} {model}: losses of the {STEPS} steps")
    assert set(result.variables) == set(reference.variables), \
        sorted(set(result.variables) ^ set(reference.variables))
    errors = _change_errors(result, reference)
    assert max(errors["parameters"].values()) <= tolerance.parameters, \
        f"{framework} {model}: parameter changes (allowed {tolerance.parameters:g}): {_worst(errors['parameters'])}"
    statistics = {**errors["mean"], **errors["var"]}
    assert max(statistics.values()) <= tolerance.statistics, \
        f"{framework} {model}: BatchNorm statistics' changes (allowed {tolerance.statistics:g}): {_worst(statistics)}"
    assert_training_predict_changes_nothing(result)
    assert_compiles_once(result)  # masks are inputs of the compiled step: no retrace from one step to the next


@slow
@pytest.mark.parametrize("model", list(TABLES))
def test_training_steps_apply_the_host_masks_and_predict_does_not(probe: Any, model: str) -> None:
    # The training step's loss is not the loss of the same forward pass without dropout; the frameworks
    # agreeing on it (above) means they drop the same units.
    if not framework_installed("torch"):
        pytest.skip("torch is not installed")
    result = probe("torch", model, steps=STEPS)
    assert_training_predict_changes_nothing(result)
    undropped = _no_dropout_loss(result, model)
    assert abs(result.losses[0] - undropped) > 1e-3 * abs(undropped), \
        f"{model}: the first step's loss {result.losses[0]} equals the loss without dropout {undropped}"


# --- the same steps in float64: the literal 1e-4 check ------------------------------------------------------------

# Adam with an ordinary epsilon (Keras's default), the same in the three frameworks: in float64 round-off no longer
# decides a step, so no large epsilon, no comparison of changes and no floor are needed.
FP64_TABLES = {model: {**table, "epsilon": 1e-7} for model, table in TABLES.items()}
FP64_RTOL = 1e-4
# Evaluation logits agree far closer than 1e-4 when the arithmetic, not only the storage, is float64: measured
# 2.8e-15 at most, where PyTorch in float32 is 1.9e-6 from PyTorch in float64 (EfficientNet).
FP64_ARITHMETIC = 1e-10
# The tensors whose exact value is 0 (see _exactly_zero) hold float64 round-off only: at most this fraction of the
# largest tensor of their kind (offsets, running means).  Measured in all three: offsets 2.4e-9 or less (PyTorch's
# block1a_project_bn/offset), running means 3.8e-12 or less; PyTorch in float32 leaves 0.05 to 0.14 in those
# offsets and 7e-5 to 2e-4 in those means.
ZERO_TO_ROUND_OFF = 1e-7
# Worst errors measured against PyTorch, all in fp64 (relative; variables: relative L2 per tensor, no floor):
#                    eval logits  training logits  losses   parameters                        BatchNorm statistics
#   mobilenet
#     keras          1.8e-15      1.2e-13          1.3e-13  1.8e-12 conv_pw_12_bn/offset      1.1e-13 conv_pw_13_bn/mean
#     jax            2.3e-15      1.2e-13          3.8e-14  2.4e-12 conv_pw_12_bn/offset      7.8e-14 conv_pw_13_bn/mean
#   efficientnet_b0 (the 14 tensors of _exactly_zero aside: 0.8 to 1.7 apart, as two round-offs are)
#     keras          2.8e-15      3.6e-14          2.3e-13  2.1e-8 block2b_project_bn/offset  1.5e-10 block3a_expand_bn/mean
#     jax            2.3e-15      3.0e-14          6.5e-13  2.2e-8 block2b_project_bn/offset  1.6e-10 block3a_expand_bn/mean
# The worst EfficientNet parameters (block2b, block3b, block4c project_bn/offset: 2e-8 to 4e-9) are the offsets of
# residual blocks, which only stochastic depth makes visible to the loss: small gradients that mostly cancel.


def _exactly_zero(model: str) -> set[str]:
    """The variables whose exact value stays 0 through the steps, so two correct float64 runs differ by 100% on them.

    A training-mode BatchNorm followed by a bias-free 1x1 convolution and another BatchNorm (EfficientNet's project
    BatchNorm of a block without a skip, then the next block's expand or the top convolution): a constant shift of
    the first one's output becomes a constant shift of the second's input, which its batch mean removes, and the
    identity shortcuts after it carry the shift only to further such BatchNorms.  So the first one's offset has a
    gradient of exactly 0 (it stays 0), and the second's batch mean, ``W @ offset``, is 0 (its running mean stays
    0).  What both hold after the steps is float64 round-off; MobileNet has no such pair.
    """
    from amp_suite.workloads.workload import workload_from_config

    layers = workload_from_config(model, TABLES[model]).layers
    zero: set[str] = set()
    for index, spec in enumerate(layers):
        after = layers[index + 1:index + 3]
        if after and after[0].kind == "residual":  # the first layers the value meets inside the next block
            after = after[0].body[:2]
        if (spec.kind == "batch_norm" and len(after) == 2 and after[0].kind == "conv2d" and after[0].kernel_size == 1
                and not after[0].use_bias and after[1].kind == "batch_norm"):
            zero |= {f"{spec.name}/offset", f"{after[1].name}/mean"}
    return zero


def _assert_float64(result: ProbeResult) -> None:
    """The probe ran in float64: what was applied, the logits and every variable, not float32 under another name."""
    name = result.request.framework
    applied = {key: result.applied[key] for key in ("compute_dtype", "param_dtype", "output_dtype")}
    assert set(applied.values()) == {"float64"}, f"{name}: applied {applied}"
    for mode in ("logits_before", "logits_before_train", "logits_after"):
        assert getattr(result, mode).dtype == np.float64, f"{name} {mode}: {getattr(result, mode).dtype}"
    dtypes = {str(value.dtype) for value in result.variables.values()}
    assert dtypes == {"float64"}, f"{name}: variables of dtypes {sorted(dtypes)}"


@slow
@pytest.mark.parametrize("model", list(TABLES))
@pytest.mark.parametrize("framework", [_installed(f) for f in ("keras", "jax")])
def test_fp64_logits_and_every_variable_after_three_adam_steps_agree_with_pytorch_to_1e_4(
        probe: Any, framework: str, model: str) -> None:
    if not framework_installed("torch"):
        pytest.skip("torch (the reference) is not installed")
    reference = probe("torch", model, "fp64", table=FP64_TABLES[model], steps=STEPS)
    result = probe(framework, model, "fp64", table=FP64_TABLES[model], steps=STEPS)
    _assert_float64(reference)
    _assert_float64(result)
    assert result.param_count == reference.param_count, (result.param_count, reference.param_count)
    for mode in ("logits_before", "logits_before_train"):
        error = relative_error(getattr(result, mode), getattr(reference, mode))
        assert error <= FP64_RTOL, f"{framework} {model} {mode}: {error:.2e} from PyTorch's (allowed {FP64_RTOL:g})"
    error = relative_error(result.logits_before, reference.logits_before)
    assert error <= FP64_ARITHMETIC, f"{framework} {model}: evaluation logits {error:.2e} apart: float32 arithmetic?"
    np.testing.assert_allclose(result.losses, reference.losses, rtol=FP64_RTOL,
                               err_msg=f"{framework} {model}: fp64 losses of the {STEPS} steps")
    assert set(result.variables) == set(reference.variables), \
        sorted(set(result.variables) ^ set(reference.variables))
    zero = _exactly_zero(model)
    # every other parameter and running statistic: its value after the steps, relative L2, no floor
    errors = {name: relative_l2_floored(result.variables[name], reference.variables[name], 0.0)
              for name in reference.variables if name not in zero}
    assert max(errors.values()) <= FP64_RTOL, \
        f"{framework} {model}: variables after {STEPS} fp64 steps (allowed {FP64_RTOL:g}): {_worst(errors)}"
    for name in sorted(zero):
        leaf = name.rsplit("/", 1)[1]
        scale = max(float(np.linalg.norm(value)) for other, value in reference.variables.items()
                    if other.endswith(f"/{leaf}") and other not in zero)
        for side in (result, reference):
            size = float(np.linalg.norm(side.variables[name])) / scale
            assert size <= ZERO_TO_ROUND_OFF, \
                f"{side.request.framework} {model}: {name} is {size:.1e} of its kind's largest, not 0 to round-off"
    assert_training_predict_changes_nothing(result)
    assert_compiles_once(result)


@slow
@pytest.mark.parametrize("precision", ["amp_fp16", "amp_bf16"])
@pytest.mark.parametrize("framework", [_installed(f) for f in FRAMEWORKS])
def test_new_layers_compute_in_the_reduced_dtype_batch_norm_in_float32(probe: Any, framework: str,
                                                                       precision: str) -> None:
    from amp_suite.workloads.backbones import efficientnet_b0
    from amp_suite.workloads.layers import iter_layers
    from few_blocks_efficientnet import few_blocks_efficientnet

    kinds = {spec.kind for spec in iter_layers(few_blocks_efficientnet(10, 32))}
    assert kinds == {spec.kind for spec in iter_layers(efficientnet_b0(10, 32))}, kinds
    compute = {"amp_fp16": "float16", "amp_bf16": "bfloat16"}[precision]
    # EfficientNet-B0's stem, first three blocks, top and head (tests/helpers/few_blocks_efficientnet.py): every
    # new kind and nesting of the whole network, from the same builders, without its minute-long compile.
    result = probe(framework, "few_blocks_efficientnet", precision, table=FEW_BLOCKS_TABLE, steps=1,
                   inspect=f"layer_dtypes:of_{framework}", plugin_modules=("few_blocks_efficientnet",))
    dtypes = result.dtypes
    for kind in ("conv_output", "depthwise_output", "dense_output"):
        assert dtypes[kind] == [compute], f"{framework} {precision}: {kind} {dtypes[kind]}, expected {compute}"
    assert dtypes["bn_variable"] == ["float32"], dtypes
    se = compute if SE_SIGMOID[framework] == "compute" else "float32"
    assert dtypes["sigmoid_output"] == [se], f"{framework} {precision}: SE sigmoid {dtypes['sigmoid_output']}"
    notes = result.applied["notes"]
    assert any(note.startswith(f"sigmoid={se}") for note in notes), \
        f"applied.notes do not say where the SE sigmoid computes: {notes}"
    assert any(note.startswith("batch_norm=") and "float32" in note for note in notes), notes
    assert all(np.isfinite(result.losses)), result.losses
    assert result.logits_before.dtype == np.float32


def test_the_flax_example_refuses_a_kind_it_does_not_build_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # A third-party backend need not build every kind, but must say which one it lacks (an unsupported cell),
    # before it imports its framework.  The example builds them all now: take zero_pad away from it.
    from amp_suite.errors import UnsupportedError
    from amp_suite.workloads.workload import workload_from_config
    from suite_cli import REPO

    monkeypatch.syspath_prepend(str(REPO / "examples" / "amp-suite-flax"))
    from amp_suite_flax import net, plugin

    monkeypatch.setattr(net, "KINDS", tuple(kind for kind in net.KINDS if kind != "zero_pad"))
    workload = workload_from_config("mobilenet", TABLES["mobilenet"])
    with pytest.raises(UnsupportedError) as refused:
        plugin.build_model(run=None, workload=workload, initial_weights={}, initial_state={}, applied=None,
                           device=None)
    message = str(refused.value)
    assert "\n" not in message and "layer kind 'zero_pad'" in message, message  # MobileNet's first new kind
