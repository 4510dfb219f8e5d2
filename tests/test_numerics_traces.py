"""Every built-in framework's ``trace_step`` on a tiny CNN and a tiny ViT, and the kit's check of it.

Each case runs in a fresh process (one framework per process, as a worker
does): one float32 step traced twice and one ``amp_bf16`` step, all from the
same weights and batch.  The traces must name every named layer and every
trainable variable of the workload, the two float32 traces must agree
exactly, and ``amp_bf16`` must differ from float32 by bfloat16's round-off:
more than nothing, less than a loose bound.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amp_suite.testing import check_trace_step, framework_installed
from suite_cli import REPO

pytestmark = pytest.mark.slow  # real frameworks on 2 cores

CNN = {"model": "mnist_cnn", "input_size": 8, "channels": 1, "num_classes": 3, "batch_size": 4, "optimizer": "adam",
       "learning_rate": 1e-3}
VIT = {"model": "vit", "input_size": 8, "channels": 1, "num_classes": 3, "width": 8, "depth": 1, "heads": 2,
       "mlp": 16, "patch": 4, "batch_size": 4, "optimizer": "adamw", "learning_rate": 1e-3, "weight_decay": 0.1}
# bfloat16 keeps 8 significant bits (relative round-off 2**-9): a layer's output is off by parts in a thousand,
# a weight gradient of a 4-example batch (sums that cancel) by up to tens of percent.
ACTIVATION_BOUND = 0.05
GRADIENT_BOUND = 0.6

SCRIPT = """
import json, sys
from amp_suite.numerics.compare import compare_steps
from amp_suite.plugins.host import PluginHost
from amp_suite.records import RunSpec
from amp_suite.shadow.worker import trace_steps
from amp_suite.workloads.layers import walk
from amp_suite.workloads.workload import variable_specs, workload_from_config

framework, table, kept = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
workload = workload_from_config("tiny", table)
host = PluginHost(framework=framework)

def trace(precision, options=None):
    run = RunSpec(framework=framework, workload="tiny", precision=precision, steps=1, warmup=0, batch_size=4,
                  dataset="synthetic", device="cpu", options=options or {})
    return trace_steps(run, workload, host)[0][0]

first, second, amp = trace("fp32"), trace("fp32"), trace("amp_bf16")
same = compare_steps(second, first, framework=framework, workload="tiny", precision="fp32", shadow_precision="fp32",
                     step=0)
rows = compare_steps(amp, first, framework=framework, workload="tiny", precision="amp_bf16", shadow_precision="fp32",
                     step=0)
print(json.dumps({
    "named": [item.layer.name for item in walk(workload.layers, workload.input_shape) if item.layer.name],
    "trainable": sorted(spec.name for spec in variable_specs(workload) if spec.trainable),
    "activations": list(first.activations), "gradients": sorted(first.gradients),
    "amp_dtypes": sorted({t.dtype for t in amp.activations.values()}),
    "same": max(r.relative_error for r in same),
    "amp": [[r.layer, r.tensor, r.relative_error] for r in rows],
    "kept": {} if not kept else (lambda t: {
        "activation": t.activations[kept].dtype,
        "gradients": sorted({g.dtype for name, g in t.gradients.items() if name.startswith(kept + "/")}),
        "other": sorted({a.dtype for name, a in t.activations.items() if name != kept})})(
        trace("amp_bf16", {"keep_fp32": [kept]})),
}))
"""


def _trace_case(framework: str, table: dict, kept: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", SCRIPT, framework, json.dumps(table), kept], capture_output=True,
                          text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


CASES = [("torch", "cnn"), ("torch", "vit"), ("jax", "cnn"), ("jax", "vit"), ("keras", "cnn"), ("keras", "vit"),
         ("keras@torch", "vit"), ("keras@jax", "vit")]


@pytest.mark.parametrize(("framework", "model"), CASES, ids=[f"{f}-{m}" for f, m in CASES])
def test_a_traced_step_names_every_layer_repeats_exactly_and_differs_by_bfloat16_round_off(framework: str,
                                                                                          model: str) -> None:
    if not framework_installed(framework):
        pytest.skip(f"{framework} is not installed")
    # the CNN cases also trace a step with the logits layer kept in float32: it reads float32 in every framework
    seen = _trace_case(framework, CNN if model == "cnn" else VIT, "logits" if model == "cnn" else "")
    assert seen["activations"] == seen["named"]  # every named layer, in the order of the forward pass
    assert seen["gradients"] == seen["trainable"]
    assert seen["same"] == 0.0
    assert seen["amp_dtypes"] == ["bfloat16"] or "bfloat16" in seen["amp_dtypes"]
    for layer, tensor, error in seen["amp"]:
        bound = ACTIVATION_BOUND if tensor == "activation" else GRADIENT_BOUND
        assert 0 < error < bound, f"{framework} {model}: {layer} {tensor} is {error:.3g} off float32"
    if seen["kept"]:  # numerics counts a kept layer's losses in float32 in every framework (PyTorch had said bf16)
        assert seen["kept"] == {"activation": "float32", "gradients": ["float32"], "other": ["bfloat16"]}, seen


def test_the_kits_trace_check_passes_for_torch() -> None:
    if not framework_installed("torch"):
        pytest.skip("torch is not installed")
    check_trace_step("torch", "deep_cnn")
