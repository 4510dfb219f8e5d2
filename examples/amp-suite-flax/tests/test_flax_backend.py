"""The Flax backend holds amp-suite's contract, and matches the built-in haiku backend.

The whole contract is one class from the installed conformance kit; the rest
are this backend's own promises.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amp_suite.testing import WORKLOADS, ProbeRequest, framework_installed, jax_compiles_to_build, run_probe
from amp_suite.testing.conformance import BackendConformance
from amp_suite.workloads.kinds import TOKEN_KINDS

pytest.importorskip("flax", reason="flax is not installed (pip install -e examples/amp-suite-flax)")

# Loaded like `-p`: the tests also run before the package is installed.  Once it is,
# the entry point loads it and `-p` of the same module is silently ignored.
PLUGIN = ("amp_suite_flax.plugin",)
INSPECT = "amp_suite_flax.inspect_dtypes:layer_dtypes"


class TestFlaxConformance(BackendConformance):
    framework = "flax"
    reference = "jax"  # the built-in backend on the same XLA: agreement to float32 round-off
    plugin_modules = PLUGIN
    inspect = INSPECT
    param_count = 824_458  # the mnist_cnn of docs/workloads.md
    lacks_kinds = TOKEN_KINDS  # a CNN backend: no transformer kinds


needs_jax = pytest.mark.skipif(not framework_installed("jax"), reason="the built-in jax plugin is not installed")


@needs_jax
def test_flax_equals_the_haiku_backend_to_one_in_a_million(tmp_path):
    """Same XLA operations as the haiku plugin: fp32 logits and losses agree to 1e-6."""
    request = {"steps": 2, "batch_size": 16}
    flax = run_probe(ProbeRequest("flax", plugin_modules=PLUGIN, **request), tmp_path / "flax")
    jax = run_probe(ProbeRequest("jax", **request), tmp_path / "jax")
    assert flax.param_count == jax.param_count == 824_458
    assert np.abs(flax.logits_before - jax.logits_before).max() <= 1e-6
    np.testing.assert_allclose(flax.losses, jax.losses, rtol=1e-6)


CONFIG = """
[defaults]
dataset = "synthetic"

[workloads.mnist_cnn]
{table}
"""


@needs_jax
def test_a_sweep_beside_the_jax_backend(tmp_path):
    """`amp-suite run --frameworks jax,flax`: every cell ok, equal parameter counts, equal fp32 first losses."""
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in WORKLOADS["mnist_cnn"].items())
    config = tmp_path / "benchmarks.toml"
    config.write_text(CONFIG.format(table=table))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "amp_suite", "run", "--config", str(config), "-p", PLUGIN[0],
         "--frameworks", "jax,flax", "--workloads", "mnist_cnn", "--precisions", "fp32,amp_bf16",
         "--steps", "3", "--warmup", "1", "--batch-size", "16", "--out", str(out), "-q"],
        capture_output=True, text=True, timeout=900, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [line for line in done.stderr.splitlines() if "warning" in line and "flax" in line]  # -p is harmless
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["framework"], r["precision"], r["status"]) for r in rows) == [
        ("flax", "amp_bf16", "ok"), ("flax", "fp32", "ok"), ("jax", "amp_bf16", "ok"), ("jax", "fp32", "ok")]
    assert len({r["metrics"]["param_count"] for r in rows}) == 1
    fp32 = {r["framework"]: r["metrics"]["first_step_loss"] for r in rows if r["precision"] == "fp32"}
    assert abs(fp32["flax"] - fp32["jax"]) <= 1e-6 * abs(fp32["jax"])
    assert all(r["metrics"]["traces"] == 1 for r in rows if r["framework"] == "flax")  # EpochResult.extra
    report = (out / "report.md").read_text()
    assert "flax 0.12.8" in report
    try:
        importlib.metadata.version("amp-suite-flax")
    except importlib.metadata.PackageNotFoundError:
        return  # not installed: the distribution has no version to show
    assert "amp-suite-flax 0.1.0" in report


def test_the_entry_point_names_the_plugin_module():
    """What pip installs: pyproject's entry point in the amp_suite group names a module that exists."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["amp_suite"] == {"flax": PLUGIN[0]}


# --- every layer kind of the ImageNet backbones -------------------------------------------------------------

TESTS = Path(__file__).parent
# The probes' processes find new_kinds_net (loaded like a plugin: it registers the architecture) on PYTHONPATH.
NEW_KINDS_MODULE = "new_kinds_net"
# Tolerances about 3x this network's float32 round-off, measured as amp-suite's tests/test_new_layer_kinds.py
# measures it: this backend in float32 against itself in float64 (jax_enable_x64, every float32 of the plugin
# made float64), same weights, batches and masks.  Round-off (largest difference over the largest magnitude):
# evaluation logits 1.5e-7, training-mode logits 1.9e-7, evaluation logits after the 2 steps 3.3e-7, losses
# 2.3e-8 (a float32 loss's own rounding, half an ulp, is 6e-8: 3e-7 allows a few ulps).  Flax against the
# haiku backend, same XLA operations: 0 (bit-identical) in all four on a CPU.
NEW_KINDS_LOGITS_RTOL = 1e-6
NEW_KINDS_LOSS_RTOL = 3e-7


@pytest.fixture
def new_kinds(monkeypatch):
    """The network of new_kinds_net: its workload table and the modules a probe loads to know it."""
    monkeypatch.syspath_prepend(str(TESTS))
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    import new_kinds_net

    return new_kinds_net


@needs_jax
def test_every_new_layer_kind_trains_like_the_haiku_backend(tmp_path, new_kinds):
    """zero_pad, depthwise_conv2d, relu6, swish, sigmoid, an SE multiply and dropout (elementwise and per sample).

    2 fp32 Adam steps with the host's dropout masks: evaluation and training-mode logits before training, the
    losses of both steps and the evaluation logits after them agree with the built-in jax (haiku) backend to
    float32 round-off.
    """
    from amp_suite.plugin_api import iter_layers, workload_from_config
    from amp_suite.testing import assert_compiles_once, assert_training_predict_changes_nothing, relative_error

    workload = workload_from_config("new_kinds", new_kinds.TABLE)
    kinds = {spec.kind for spec in iter_layers(workload.layers)}
    assert set(new_kinds.NEW_KINDS) <= kinds, set(new_kinds.NEW_KINDS) - kinds
    request = {"workload": "new_kinds", "table": new_kinds.TABLE, "steps": 2, "batch_size": 8}
    flax = run_probe(ProbeRequest("flax", plugin_modules=(*PLUGIN, NEW_KINDS_MODULE), **request), tmp_path / "flax")
    jax = run_probe(ProbeRequest("jax", plugin_modules=(NEW_KINDS_MODULE,), **request), tmp_path / "jax")
    assert flax.param_count == jax.param_count
    assert set(flax.variables) == set(jax.variables)
    for mode in ("logits_before", "logits_before_train", "logits_after"):
        error = relative_error(getattr(flax, mode), getattr(jax, mode))
        assert error <= NEW_KINDS_LOGITS_RTOL, \
            f"{mode}: {error:.2e} from haiku's (allowed {NEW_KINDS_LOGITS_RTOL:g})"
    np.testing.assert_allclose(flax.losses, jax.losses, rtol=NEW_KINDS_LOSS_RTOL)
    assert flax.loss_scale_final is None  # fp32: no loss scaling, () crossed the jit boundary
    assert_training_predict_changes_nothing(flax)
    assert_compiles_once(flax)  # the masks are inputs of the compiled step: new masks do not retrace


def test_the_loss_scale_crosses_the_jit_boundary_as_arrays(monkeypatch):
    """amp_fp16: no jmp.DynamicLossScale is made on the host between steps.

    jmp 0.0.4's ``DynamicLossScale.__post_init__`` runs ``jax.eval_shape`` twice; with the jmp object as the
    step's argument and output it ran at every step's unflatten (0.5 ms a step on a CPU, 1.6 ms on an H100:
    amp_fp16 at 0.2x fp32).  In process: the model carries ``(scale, counter)`` arrays, and steps after the
    first (which traces) construct no jmp loss scale at all.
    """
    import jax
    import jmp

    from amp_suite.datasets import input_pipeline, load_dataset
    from amp_suite.plugin_api import RunSpec, init_variables, workload_from_config
    from amp_suite_flax import plugin

    # mnist_cnn at 8x8: the smallest model to compile in process
    workload = workload_from_config("small", {**WORKLOADS["mnist_cnn"], "input_size": 8, "batch_size": 8})
    run = RunSpec(framework="flax", workload="small", precision="amp_fp16", steps=4, warmup=0, batch_size=8,
                  device="cpu")
    device = plugin.select_device(run)
    applied = plugin.set_precision(run, device)
    weights, state = init_variables(workload, 0)
    model = plugin.build_model(run=run, workload=workload, initial_weights=weights, initial_state=state,
                               applied=applied, device=device)
    assert type(model.loss_scale) is tuple and len(model.loss_scale) == 2, model.loss_scale
    assert all(isinstance(a, jax.Array) for a in model.loss_scale), model.loss_scale
    data = load_dataset("synthetic", workload, steps=run.steps, batch_size=run.batch_size, seed=0)
    batches = input_pipeline(workload, data, batch_size=run.batch_size, steps=run.steps, seed=0).batches(0, 0, 4)
    staged = plugin.stage_batches(run, model, batches)
    plugin.train_epoch(run, model, staged[:1], 0)  # traces and compiles the step

    made = []
    original = jmp.DynamicLossScale.__post_init__
    monkeypatch.setattr(jmp.DynamicLossScale, "__post_init__", lambda self: (made.append(1), original(self))[1])
    jmp.DynamicLossScale(jax.numpy.float32(1.0))
    assert made == [1], "the counter does not see jmp.DynamicLossScale being made"
    made.clear()
    result = plugin.train_epoch(run, model, staged[1:], 0)
    assert made == [], f"{len(made)} jmp.DynamicLossScale made on the host in {len(staged) - 1} steps"
    assert type(model.loss_scale) is tuple and len(model.loss_scale) == 2, model.loss_scale
    assert result.loss_scale_final == applied.initial_loss_scale  # finite steps, far from the growth interval
    assert result.extra["traces"] == 1 and result.skipped_steps == 0


# --- amp-suite doctor and amp-suite calibrate, through the modules framework_info names ---

EXAMPLE = Path(__file__).resolve().parents[1]


def _suite(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``amp-suite ARGS -p amp_suite_flax.plugin`` in a fresh process, on a machine without a GPU.

    The example's folder ends PYTHONPATH, so the probe processes (whose import
    path drops the current directory) find the package before it is installed.
    """
    path = [p for p in (os.environ.get("PYTHONPATH", ""), str(EXAMPLE)) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "AMP_SUITE_CACHE": str(tmp_path / "cache"),
           "AMP_SUITE_FAKE_NVIDIA_SMI": "none"}
    return subprocess.run([sys.executable, "-m", "amp_suite", *args, "-p", PLUGIN[0]], capture_output=True,
                          text=True, timeout=900, env=env, cwd=tmp_path)


def test_the_doctor_checks_flax_through_its_own_probe(tmp_path):
    """`amp-suite doctor --frameworks flax`: amp_suite_flax.doctor measures, and every CPU check passes."""
    done = _suite("doctor", "--frameworks", "flax", "--device", "cpu", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("flax")]
    checks = " ".join(rows)
    for check in ("sees the expected device", "fp32 matmul is fp32", "fp32 conv is fp32",
                  "amp_fp16 computes in float16", "amp_bf16 computes in bfloat16", "fp16 loss scale skips and grows",
                  "step time covers device work", "peak-memory API answers", "GPU preallocation off"):
        assert check in checks, (check, rows)
    assert not any(" failed " in row for row in rows), rows
    passed = [row for row in rows if " passed " in row]
    assert len(passed) >= 7, rows  # on a CPU: TF32 and the allocator peak are skipped (and a timing miss on a busy one)


def test_calibrate_measures_flax_through_its_own_probe(tmp_path):
    """`amp-suite calibrate --frameworks flax`: amp_suite_flax.calibration's peaks are printed and cached."""
    done = _suite("calibrate", "--frameworks", "flax", "--device", "cpu", "--budget", "0.2", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    version = importlib.metadata.version("flax")
    assert f"flax {version} on cpu" in done.stdout and "fp32 matmul" in done.stdout, done.stdout
    (cache,) = (tmp_path / "cache" / "calibration").glob("*.json")
    figures = json.loads(cache.read_text())["frameworks"]["flax"]["cpu"]
    assert figures["kind"] == "cpu" and figures["version"] == version
    assert figures["matmul"]["fp32"] > 0 and figures["conv"]["fp32"] > 0





def test_build_model_traces_the_initializers_instead_of_compiling_each():
    """nnx's initializers and optax's init, run eagerly, compile one small program each (resnet8: 40, 3 s)."""
    compiles = jax_compiles_to_build("flax", "resnet8", {"model": "resnet8"}, plugin_modules=PLUGIN)
    assert compiles <= 3, f"{compiles} XLA programs compiled to build the model"


def test_a_parameter_without_a_canonical_value_is_an_error_not_a_placeholder():
    import jax
    from flax import nnx

    from amp_suite.plugin_api import init_variables, workload_from_config
    from amp_suite_flax.canonical import load_canonical
    from amp_suite_flax.net import build_net

    workload = workload_from_config("mnist_cnn", dict(WORKLOADS["mnist_cnn"]))
    weights, state = init_variables(workload, 0)
    net = nnx.eval_shape(lambda: build_net(workload, "float32", 0))
    missing = sorted(weights)[0]
    with pytest.raises(ValueError, match=f"no canonical value for {missing}$"):
        load_canonical(net, workload.layers, {k: v for k, v in weights.items() if k != missing}, state)
    stats = load_canonical(net, workload.layers, weights, state)  # every one named: concrete arrays throughout
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(nnx.state(net, nnx.Param)))
    assert set(stats) == {key.rpartition("/")[0] for key in state}
