"""Transformers on the three Keras backends (keras, keras@jax, keras@torch): issue 40's Keras part.

Each backend runs every check in one process of its own
(``tests/helpers/keras_transformer_checks.py``, through the plugin's hooks as a
worker calls them), once per session; the tests below judge what it measured:

* each token kind, isolated in a tiny model, gives the NumPy float64
  reference's logits at fp64 (``amp_suite.workloads.reference.forward``);
* the reference attention equals the NumPy reference at fp64, and the fused one
  (``keras.ops.dot_product_attention``) agrees with it: to float64 round-off on
  TensorFlow, to float32 round-off on JAX and PyTorch, where Keras computes the
  fused op of float64 inputs in float32 (see ``docs/layers.md``);
* ViT and GPT parameter counts equal the neutral walk's;
* amp_bf16 and amp_fp16 train a tiny ViT and GPT with finite losses, and the
  LayerNorm keeps float32 variables and statistics (its output, in the compute
  dtype, is the float64 LayerNorm of its input to the compute dtype's rounding);
* a loss scale of 2**15 leaves the clipped amp_fp16 update unchanged, the clip
  binds (the update's norm is ``lr * clip_norm``, not ``lr * clip_norm / 2**15``);
* AdamW decays exactly the variables declared ``decay`` (decoupled:
  ``-lr * weight_decay * w``); warmup_cosine is ``learning_rate_at``;
* three fp64 AdamW steps with warm-up, cosine and a binding clip, applied to
  the backend's own gradients (the kit's gradient oracle, one probe per
  backend), are that arithmetic computed in NumPy (``adamw_reference``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amp_suite.records import OptimizerSpec
from amp_suite.testing import framework_installed, session_probe_folder, shared_folder
from amp_suite.workloads.kinds import KINDS, TOKEN_KINDS
from amp_suite.workloads.workload import learning_rate_at, variable_specs, workload_from_config

pytestmark = pytest.mark.slow

FRAMEWORKS = ("keras", "keras@jax", "keras@torch")
# The lanes take the backends in turn, so they measure two backends side by side instead of one waiting on the
# other's lock (tests/conftest.py).
INTERLEAVE_BY = "checks"
HELPERS = Path(__file__).parent / "helpers"
# fp64: float64 round-off of these tiny models (measured: 1e-15 or better).
FLOAT64_RTOL = 1e-9
# The fused op where Keras computes float64 inputs in float32 (measured: 1e-7 to 3e-7).
FUSED_FLOAT32_RTOL = 2e-6


@pytest.fixture(scope="module", params=FRAMEWORKS)
def checks(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The measurements of one backend, from one process (``keras_transformer_checks``) per test session.

    The tests of one backend may land on both xdist lanes, and each lane would
    run this module-scoped fixture: the first lane measures under a lock, the
    other reads its file (a backend's checks cost one to two minutes of CPU).
    """
    framework = request.param
    if not framework_installed(framework):
        pytest.skip(f"{framework} is not installed")

    def measure(folder: Path) -> None:
        done = subprocess.run([sys.executable, "-m", "keras_transformer_checks", framework, str(folder / "checks.json")],
                              capture_output=True, text=True, timeout=1500, env={**os.environ}, cwd=HELPERS)
        assert done.returncode == 0, done.stderr[-4000:]

    # The folder the session's lanes share their probes in (this process's own base folder without xdist); the run's
    # id in the key, as a folder named in AMP_SUITE_PROBE_CACHE may outlive the run.
    session = session_probe_folder(tmp_path_factory) or tmp_path_factory.getbasetemp()
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", "single")
    out = shared_folder(session, f"keras-transformers-{run_id}-{framework.replace('@', '-')}", measure) / "checks.json"
    found: dict[str, Any] = json.loads(out.read_text())
    found["framework"] = framework
    return found


def fused_rtol(framework: str) -> float:
    """How close the fused attention comes to float64 on this backend (see the module's docstring)."""
    return FLOAT64_RTOL if framework == "keras" else FUSED_FLOAT32_RTOL


def test_the_table_builds_every_kind_of_the_vocabulary(checks: dict[str, Any]) -> None:
    assert set(checks["layer_kinds"]) == set(KINDS)


def test_each_token_kind_gives_the_float64_reference(checks: dict[str, Any]) -> None:
    kinds = checks["kinds"]
    covered = {name.split(":")[0].removesuffix("_causal") for name in kinds}
    assert set(TOKEN_KINDS) <= covered | {"multi_head_attention"}
    for name, found in kinds.items():
        assert found["dtype"] == "float64", name
        rtol = fused_rtol(checks["framework"]) if name.endswith(":fused") and "attention" in name else FLOAT64_RTOL
        assert found["error"] <= rtol, f"{name}: relative error {found['error']:.3g} > {rtol:g}"
    assert kinds["token_embedding:fused"]["shape"] == [4, 6, 7]


def test_fused_and_reference_attention_agree_at_float64(checks: dict[str, Any]) -> None:
    kinds, models = checks["kinds"], checks["models"]
    for name in ("multi_head_attention", "multi_head_attention_causal"):
        assert kinds[f"{name}:reference"]["error"] <= FLOAT64_RTOL
        assert kinds[f"{name}:fused"]["error"] <= fused_rtol(checks["framework"])
    for model in ("vit", "gpt"):
        assert models[f"{model}:fp64:reference"]["error"] <= FLOAT64_RTOL, model
        assert models[f"{model}:fused_vs_reference"] <= fused_rtol(checks["framework"]), model
        notes = {implementation: " ".join(models[f"{model}:fp64:{implementation}"]["notes"])
                 for implementation in ("fused", "reference")}
        assert "attention=fused (keras.ops.dot_product_attention" in notes["fused"]
        assert "attention=reference" in notes["reference"]
    assert models["gpt:fp64:fused"]["shape"] == [4, 6, 7]  # (batch, context, vocab) logits


def test_parameter_counts_equal_the_neutral_walk(checks: dict[str, Any]) -> None:
    for model in ("vit", "gpt"):
        counts = checks["models"][f"{model}:param_count"]
        assert counts["keras"] == counts["neutral"], model


@pytest.mark.parametrize("precision, compute_dtype", [("amp_bf16", "bfloat16"), ("amp_fp16", "float16")])
def test_amp_trains_vit_and_gpt_with_layer_norm_in_float32(checks: dict[str, Any], precision: str,
                                                           compute_dtype: str) -> None:
    for model in ("vit", "gpt"):
        found = checks["models"][f"{model}:{precision}"]
        assert len(found["losses"]) == 3 and np.isfinite(found["losses"]).all(), found["losses"]
        assert found["skipped"] < 3, "every step skipped: nothing trained"
        norm = found["layer_norm"]
        assert norm["variables"] == ["float32"] and norm["output"] == compute_dtype
        assert not norm["autocast"] and norm["compute_dtype"] == compute_dtype
        # float32 statistics: the output is the exact LayerNorm of its input, rounded once to the compute dtype
        # (statistics in bfloat16 or float16 would be off by several of its epsilons).
        assert norm["error_in_eps"] <= 1.0, norm
        notes = " ".join(found["notes"])
        assert "layer_norm, rms_norm=float32" in notes and "logits cast to float32" in notes


def _flat(deltas: dict[str, list[float]]) -> np.ndarray:
    return np.concatenate([np.asarray(values, np.float64) for _, values in sorted(deltas.items())])


def test_a_loss_scale_of_2_15_does_not_change_the_clipped_update(checks: dict[str, Any]) -> None:
    clip = checks["clip"]
    bound = clip["learning_rate"] * clip["clip_norm"]
    for label in ("scale_1", "scale_32768", "unclipped"):
        assert clip[label]["skipped"] == 0, f"{label}: the step was skipped"
    # The clip binds: without it the update is hundreds of times longer.
    assert clip["unclipped"]["norm"] > 100 * bound
    # On the unscaled gradients: the update's norm is lr * clip_norm under either scale (clipping the scaled
    # gradients would give lr * clip_norm / 2**15 under 2**15).
    for label in ("scale_1", "scale_32768"):
        assert clip[label]["norm"] == pytest.approx(bound, rel=1e-3), label
    one, scaled = _flat(clip["scale_1"]["deltas"]), _flat(clip["scale_32768"]["deltas"])
    assert np.linalg.norm(one - scaled) <= 1e-2 * np.linalg.norm(one)


def test_adamw_decays_exactly_the_declared_variables(checks: dict[str, Any]) -> None:
    adamw = checks["adamw"]
    workload = workload_from_config("adamw", {"model": "vit", "input_size": 8, "channels": 1, "num_classes": 3,
                                              "width": 8, "depth": 1, "heads": 2, "mlp": 16, "patch": 4})
    decayed = {spec.name for spec in variable_specs(workload) if spec.decay}
    assert decayed and set(adamw["difference"]) - decayed
    learning_rate, weight_decay = 2.0 ** -7, 0.5  # keras_transformer_checks.adamw_decay's
    for name, difference in adamw["difference"].items():
        expected = -learning_rate * weight_decay * np.asarray(adamw["before"][name]) if name in decayed else 0.0
        np.testing.assert_allclose(difference, expected, rtol=1e-9, atol=1e-15, err_msg=name)


def test_warmup_cosine_is_learning_rate_at(checks: dict[str, Any]) -> None:
    spec = OptimizerSpec(name="adamw", learning_rate=1e-2, schedule="warmup_cosine", warmup_steps=2, decay_steps=5)
    expected = [learning_rate_at(spec, step) for step in range(6)]
    np.testing.assert_allclose(checks["schedule"], expected, rtol=1e-6, atol=1e-12)


# AdamW with every hyper-parameter away from a default, a warm-up of one step, a cosine over the other two
# and a clip norm below the gradient's (so it binds); epsilon large beside the gradients, as in the kit's
# arithmetic check, so that an update is a smooth function of its gradient.
ADAMW_VIT = {"model": "vit", "input_size": 8, "channels": 1, "num_classes": 3, "width": 8, "depth": 1, "heads": 2,
             "mlp": 16, "patch": 4, "batch_size": 4, "optimizer": "adamw", "learning_rate": 5e-2, "beta1": 0.85,
             "beta2": 0.995, "epsilon": 1e-3, "weight_decay": 0.1, "schedule": "warmup_cosine", "warmup_steps": 1,
             "clip_norm": 0.05}


def adamw_reference(spec: OptimizerSpec, decayed: set[str], steps: list[Any]) -> list[dict[str, np.ndarray]]:
    """The change of every parameter at each step, in float64: the gradients clipped to ``clip_norm`` by
    their global norm, Adam (epsilon on the bias-corrected root) and decoupled decay of ``decayed``."""
    first: dict[str, np.ndarray] = {}
    second: dict[str, np.ndarray] = {}
    changes = []
    for n, step in enumerate(steps):
        norm = float(np.sqrt(sum(float((g ** 2).sum()) for g in step.gradients.values())))
        factor = min(1.0, spec.clip_norm / norm) if spec.clip_norm > 0 else 1.0
        rate, t = learning_rate_at(spec, n), n + 1
        change = {}
        for name, raw in step.gradients.items():
            g = raw * factor
            first[name] = spec.beta1 * first.get(name, 0.0) + (1 - spec.beta1) * g
            second[name] = spec.beta2 * second.get(name, 0.0) + (1 - spec.beta2) * g * g
            m_hat, v_hat = first[name] / (1 - spec.beta1 ** t), second[name] / (1 - spec.beta2 ** t)
            decay = spec.weight_decay * np.asarray(step.before[name], np.float64) if name in decayed else 0.0
            change[name] = -rate * (m_hat / (np.sqrt(v_hat) + spec.epsilon) + decay)
        changes.append(change)
    return changes


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_adamw_warmup_cosine_and_clipping_are_the_declared_arithmetic(framework: str, tmp_path: Path) -> None:
    """Three fp64 steps of the backend's optimizer on its own gradients (the kit's gradient oracle) equal
    AdamW with warm-up, cosine and global-norm clipping computed in NumPy."""
    from amp_suite.testing import ProbeRequest, assert_optimizer_arithmetic, relative_l2, run_probe

    if not framework_installed(framework):
        pytest.skip(f"{framework} is not installed")
    result = run_probe(ProbeRequest(framework=framework, precision="fp64", workload="vit", table=ADAMW_VIT,
                                    steps=3, batch_size=4, gradient_oracle=True), tmp_path)
    spec = OptimizerSpec(**result.optimizer)
    assert spec.name == "adamw" and spec.decay_steps == 3
    workload = workload_from_config("vit", ADAMW_VIT)
    decayed = {variable.name for variable in variable_specs(workload) if variable.decay}
    first_norm = float(np.sqrt(sum(float((g ** 2).sum()) for g in result.gradient_steps[0].gradients.values())))
    assert first_norm > 2 * spec.clip_norm, "the clip must bind for the check to see it"
    expected = adamw_reference(spec, decayed, result.gradient_steps)
    for n, (step, change) in enumerate(zip(result.gradient_steps, expected, strict=True)):
        moved = {k: np.asarray(step.after[k], np.float64) - step.before[k] for k in change}
        if n == 0:  # the warm-up's first rate is 0: nothing moves
            assert all(not np.any(d) for d in moved.values())
            continue
        errors = {k: relative_l2(moved[k], d) for k, d in change.items()}
        worst = max(errors, key=errors.__getitem__)
        assert errors[worst] <= 1e-6, f"step {n}: {worst} moved {errors[worst]:.3g} away from AdamW's arithmetic"
    assert_optimizer_arithmetic(result, rtol=1e-6)  # and the kit's own float64 check, as for the other frameworks
