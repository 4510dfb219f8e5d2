"""The three framework plugins run the same workload identically, and their AMP paths work.

Each probe runs one framework in its own process (tests/helpers/framework_probe.py).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from amp_suite.records import RunSpec
from conftest import HELPERS, REPO

MODULES = {"torch": ("torch",), "keras": ("tensorflow", "keras"), "jax": ("jax", "haiku", "jmp", "optax")}
FRAMEWORKS = [pytest.param(name, marks=pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in mods), reason=f"{name} is not installed"))
    for name, mods in MODULES.items()]


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def probe(tmp_path_factory, framework: str, precision: str, *, steps: int = 1, batch_size: int = 16,
          epochs: int = 1, options: dict | None = None, extra: dict | None = None) -> dict:
    folder = tmp_path_factory.mktemp(f"{framework}-{precision}")
    request = folder / "request.json"
    request.write_text(json.dumps({"framework": framework, "precision": precision, "steps": steps,
                                   "batch_size": batch_size, "epochs": epochs, "options": options or {},
                                   **(extra or {})}))
    out = folder / "probe.npz"
    done = subprocess.run([sys.executable, str(HELPERS / "framework_probe.py"), str(request), str(out)],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def fp32_probes(tmp_path_factory):
    cache: dict[str, dict] = {}

    def get(framework: str) -> dict:
        if framework not in cache:
            cache[framework] = probe(tmp_path_factory, framework, "fp32")
        return cache[framework]

    return get


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f.values[0] != "torch"])
def test_fp32_logits_params_and_first_loss_match_pytorch(fp32_probes, framework):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    ref, other = fp32_probes("torch"), fp32_probes(framework)
    assert relative_error(other["logits_before"], ref["logits_before"]) <= 1e-4
    assert int(other["param_count"]) == int(ref["param_count"]) == 824_458
    assert abs(other["losses"][0] - ref["losses"][0]) / abs(ref["losses"][0]) <= 1e-4


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bf16_really_computes_in_bfloat16(fp32_probes, tmp_path_factory, framework):
    bf16 = probe(tmp_path_factory, framework, "amp_bf16")
    fp32 = fp32_probes(framework)
    error = relative_error(bf16["logits_before"], fp32["logits_before"])
    assert 1e-4 < error < 0.1  # rounded like bfloat16 (8-bit mantissa), not garbage
    assert bf16["logits_before"].dtype == np.float32
    applied = json.loads(str(bf16["applied"]))
    assert applied["compute_dtype"] == "bfloat16" and applied["loss_scaling"] == "none"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_fp16_overflowing_step_is_skipped_and_the_scale_halves(tmp_path_factory, framework):
    # A loss scale of 2**100 makes the float16 gradients overflow on the first step.
    result = probe(tmp_path_factory, framework, "amp_fp16", options={"initial_loss_scale": 2.0 ** 100})
    assert int(result["skipped"]) == 1
    assert float(result["loss_scale_final"]) == 2.0 ** 99
    np.testing.assert_array_equal(result["logits_after"], result["logits_before"])  # parameters unchanged
    assert np.isfinite(result["losses"]).all()  # the reported loss is the unscaled one


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_fp16_finite_steps_apply_and_the_scale_grows(tmp_path_factory, framework):
    result = probe(tmp_path_factory, framework, "amp_fp16", steps=4,
                   options={"initial_loss_scale": 2.0 ** 10, "loss_scale_growth_interval": 2})
    assert int(result["skipped"]) == 0
    assert float(result["loss_scale_final"]) == 2.0 ** 12  # doubled after steps 2 and 4
    assert not np.array_equal(result["logits_after"], result["logits_before"])
    applied = json.loads(str(result["applied"]))
    assert applied["loss_scaling"] == "dynamic" and applied["initial_loss_scale"] == 2.0 ** 10


@pytest.mark.parametrize("precision", ["fp32", "amp_fp16"])
@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f.values[0] != "torch"])
def test_train_step_compiles_once_across_epochs(tmp_path_factory, framework, precision):
    # amp_fp16 carries a loss-scale state through every step: it must not retrace either
    result = probe(tmp_path_factory, framework, precision, steps=3, epochs=2)
    assert result["traces"].tolist() == [1, 1]


@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f.values[0] != "torch"])
def test_a_step_carrying_batch_norm_state_compiles_once(tmp_path_factory, framework):
    # resnet8 threads its running statistics (and the augmented batches) through every step
    table = {**TINY_TABLES["resnet8"], **OPTIMIZER_TABLES["sgd"]}
    result = probe(tmp_path_factory, framework, "fp32", steps=3, epochs=2, batch_size=8,
                   extra={"workload": "resnet8", "table": table})
    assert result["traces"].tolist() == [1, 1]


# --- stateful architectures: same weights, same steps, same BatchNorm statistics ---

TINY_TABLES = {
    # resnet8 at 16x16x3 keeps every stage (16 -> 8 -> 4) and its projection shortcuts
    "resnet8": {"model": "resnet8", "input_size": 16, "channels": 3, "num_classes": 10, "batch_size": 8,
                "normalize": True, "augment": True},
    "deep_cnn": {"model": "deep_cnn", "input_size": 28, "channels": 1, "num_classes": 10, "batch_size": 8},
}
OPTIMIZER_TABLES = {
    "sgd": {"optimizer": "sgd", "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    # RMSprop's first steps move a weight by about lr * sqrt(10) * sign(g): a near-zero gradient whose
    # rounding differs flips a whole step, and a BatchNorm offset (64 entries, starting at 0) is all
    # such steps.  epsilon = 1e-3 damps steps of gradients below ~1e-3, and being far from 0 it also
    # makes the check sharper on where epsilon goes (outside the square root in every framework).
    "rmsprop": {"optimizer": "rmsprop", "learning_rate": 1e-3, "weight_decay": 5e-4, "epsilon": 1e-3},
}


def relative_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12))


@pytest.fixture(scope="module")
def table_probes(tmp_path_factory):
    cache: dict[tuple, dict] = {}

    def get(framework: str, model: str, optimizer: str, precision: str = "fp32", dtypes: bool = False) -> dict:
        key = (framework, model, optimizer, precision, dtypes)
        if key not in cache:
            table = {**TINY_TABLES[model], **OPTIMIZER_TABLES[optimizer]}
            cache[key] = probe(tmp_path_factory, framework, precision, steps=3, batch_size=8,
                               extra={"workload": model, "table": table, "dtypes": dtypes})
        return cache[key]

    return get


def variables_of(result: dict, prefix: str = "var:") -> dict[str, np.ndarray]:
    return {k[len(prefix):]: v for k, v in result.items() if k.startswith(prefix)}


@pytest.mark.parametrize("optimizer", ["sgd", "rmsprop"])
@pytest.mark.parametrize("model", ["resnet8", "deep_cnn"])
@pytest.mark.parametrize("framework", [f for f in FRAMEWORKS if f.values[0] != "torch"])
def test_stateful_architectures_train_identically_to_pytorch(table_probes, framework, model, optimizer):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    ref, other = table_probes("torch", model, optimizer), table_probes(framework, model, optimizer)
    assert int(other["param_count"]) == int(ref["param_count"])
    assert relative_l2(other["logits_before"], ref["logits_before"]) <= 1e-4  # eval mode
    assert relative_l2(other["logits_before_train"], ref["logits_before_train"]) <= 1e-4  # batch statistics
    np.testing.assert_allclose(other["losses"], ref["losses"], rtol=1e-4)
    ours, theirs = variables_of(other), variables_of(ref)
    assert set(ours) == set(theirs)
    errors = {name: relative_l2(ours[name], theirs[name]) for name in theirs}
    assert max(errors.values()) <= 1e-4, sorted(errors.items(), key=lambda kv: -kv[1])[:3]
    if model == "resnet8":  # the running statistics moved, identically, and a training-mode predict moved nothing
        assert not np.allclose(theirs["bn1/mean"], 0) and not np.allclose(theirs["bn1/var"], 1)
        for result in (ref, other):
            initial = variables_of(result, "init:")
            assert np.all(initial["bn1/mean"] == 0) and np.all(initial["bn1/var"] == 1)


@pytest.mark.parametrize("precision", ["amp_bf16", "amp_fp16"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_batch_norm_stays_float32_while_convolutions_compute_in_the_reduced_dtype(
        table_probes, framework, precision):
    result = table_probes(framework, "resnet8", "sgd", precision, dtypes=True)
    dtypes = json.loads(str(result["dtypes"]))
    reduced = "bfloat16" if precision == "amp_bf16" else "float16"
    assert dtypes["conv_output"] == [reduced]
    assert dtypes["bn_variable"] == ["float32"]
    assert result["logits_before"].dtype == np.float32
    notes = " ".join(json.loads(str(result["applied"]))["notes"])
    assert "batch_norm=float32" in notes or "compute=float32" in notes
    assert all(v.dtype == np.float32 for v in variables_of(result).values())


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_window_waits_once_however_many_steps_it_holds(tmp_path_factory, framework, precision):
    # The same number of host synchronizations for a window of 2 steps and one of 6: none per step.
    result = probe(tmp_path_factory, framework, precision, steps=6, batch_size=8,
                   extra={"count_syncs": [2, 6]})
    short, long = result["syncs"].tolist()
    assert short == long, (short, long)
    assert 1 <= long <= 4  # the one wait and the one fetch of losses (and flags)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_compile_is_an_option_compiled_in_warm_up(tmp_path):
    from amp_suite.runner import Cell, run_in_worker
    from amp_suite.workloads import workload_from_config

    workload = workload_from_config("tiny", {"model": "mnist_cnn", "input_size": 8, "batch_size": 8})
    results = {}
    for compiled in (False, True):
        run = RunSpec(framework="torch", workload="tiny", precision="fp32", steps=6, warmup=2, batch_size=8,
                      window_steps=2, latency_steps=1, options={"compile": compiled}, timeout_s=900)
        results[compiled] = run_in_worker(Cell(run, workload), log_path=tmp_path / f"{compiled}.log")
        assert results[compiled].status == "ok", results[compiled].error
    eager, compiled = results[False].metrics, results[True].metrics
    assert eager["compilation"] == "eager" and compiled["compilation"] == "torch.compile (inductor)"
    assert any("torch.compile" in note for note in results[True].applied["notes"])
    assert compiled["first_step_time_s"] > compiled["step_time_median_s"]  # compilation sits in warm-up
    np.testing.assert_allclose(compiled["step_losses"][0], eager["step_losses"][0], rtol=1e-4)
