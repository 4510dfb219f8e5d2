"""The FP8 layers' scales and amax in the numerics report: each framework's ``trace_step`` under ``fp8`` records,
per FP8 layer, the amax and scale of every cast (input, weight, gradient), and the shares it saturates and
flushes; the amax of an input is the NumPy max-abs of the traced activation that enters the layer.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from amp_suite.numerics.formats import BFLOAT16, FLOAT8_E4M3, FLOAT8_E5M2, round_to
from amp_suite.numerics.fp8_scales import Fp8Recorder, cast_shares
from amp_suite.shadow.report import fp8_tables
from amp_suite.testing import framework_installed
from suite_cli import REPO

VIT = {"model": "vit", "input_size": 8, "channels": 1, "num_classes": 3, "width": 8, "depth": 1, "heads": 2,
       "mlp": 16, "patch": 4, "batch_size": 4, "optimizer": "adamw", "learning_rate": 1e-2}

SCRIPT = """
import json, sys
import numpy as np
from amp_suite.plugins.host import PluginHost
from amp_suite.records import RunSpec
from amp_suite.shadow.worker import trace_steps
from amp_suite.workloads.fp8_layers import fp8_layer_names
from amp_suite.workloads.workload import init_variables, workload_from_config

framework, table = sys.argv[1], json.loads(sys.argv[2])
compiles = []
if framework in ("jax", "keras@jax"):  # XLA's compiles (none read from the session's cache)
    import jax
    jax.config.update("jax_enable_compilation_cache", False)
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, seconds, **labels: compiles.append(labels.get("fun_name"))
        if event == "/jax/core/compile/backend_compile_duration" else None)
workload = workload_from_config("tiny", table)
run = RunSpec(framework=framework, workload="tiny", precision="fp8", steps=1, warmup=0, batch_size=4,
              dataset="synthetic", device="cpu")
trace = trace_steps(run, workload, PluginHost(framework=framework))[0][0]
weights, _ = init_variables(workload, 0)
print(json.dumps({
    "fp8_layers": list(fp8_layer_names(workload.layers)), "extra": trace.extra,
    "activation_amax": {name: float(np.abs(t.values).max()) for name, t in trace.activations.items()},
    "weight_amax": {name: float(np.abs(np.asarray(value)).max()) for name, value in weights.items()},
    "compiles": len(compiles),
}))
"""


def test_cast_shares_count_the_values_a_scaled_cast_saturates_and_flushes() -> None:
    values = np.array([448.0, -1000.0, 1.0, 1e-6, 0.0, np.nan, 2.0**-10, -3.0])
    saturated, flushed = cast_shares(values, 1.0, FLOAT8_E4M3)
    # e4m3: 448 is the largest finite value (-1000 saturates onto -448); its smallest subnormal is 2**-9, so 1e-6
    # and 2**-10 (a tie, to even: zero) flush; the zero and the NaN are neither
    assert (saturated, flushed) == (2 / 8, 2 / 8)
    assert cast_shares(values, 256.0, FLOAT8_E4M3) == (3 / 8, 1 / 8)  # -3 saturates too; 1e-6 * 256 still flushes
    recorder = Fp8Recorder()
    recorder.record("attn", "qkv", "gradient", values, 2.0, 1000.0, FLOAT8_E5M2.name)
    assert recorder.figures == {"attn": {"qkv.gradient_amax": 1000.0, "qkv.gradient_scale": 2.0,
                                         "qkv.gradient_saturated": 0.0,
                                         "qkv.gradient_flushed": pytest.approx(1 / 8)}}
    with pytest.raises(ValueError, match="unknown FP8 operand 'output'"):
        recorder.record("attn", "", "output", values, 1.0, 1.0, FLOAT8_E5M2.name)


def test_the_report_tables_every_fp8_layers_figures() -> None:
    from amp_suite.numerics.records import LayerNumerics

    def row(layer: str, extra: dict[str, float]) -> LayerNumerics:
        return LayerNumerics("torch", "tiny", "fp8", "fp32", 0, layer, "activation", "bfloat16", "bfloat16", 4,
                             0.01, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, extra=extra)

    figures = {f"{operand}_{figure}": value for operand in ("input", "weight", "gradient")
               for figure, value in (("amax", 3.5), ("scale", 128.0), ("saturated", 0.25), ("flushed", 0.0))}
    text = "\n".join(fp8_tables([row("mlp1", figures), row("ln", {})]))
    assert "## FP8 scales: torch / tiny / fp8" in text
    assert "| mlp1 | input | float8_e4m3fn | 3.50e+00 | 1.28e+02 | 25% | 0 |" in text
    assert "| mlp1 | gradient | float8_e5m2 |" in text and "| ln |" not in text


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "jax", "keras", "keras@jax", "keras@torch"])
def test_every_fp8_layer_of_a_tiny_vit_has_its_scales_and_its_input_amax_is_the_traced_input(framework: str) -> None:
    if not framework_installed(framework):
        pytest.skip(f"{framework} is not installed")
    done = subprocess.run([sys.executable, "-c", SCRIPT, framework, json.dumps(VIT)], capture_output=True,
                          text=True, timeout=900, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    extra, amax = found["extra"], found["activation_amax"]
    assert set(extra) == set(found["fp8_layers"]) == {"block1_attn", "block1_mlp1", "block1_mlp2"}
    for layer, figures in extra.items():
        projections = ("qkv.", "out.") if layer.endswith("attn") else ("",)
        for projection in projections:
            for operand, fmt in (("input", FLOAT8_E4M3), ("weight", FLOAT8_E4M3), ("gradient", FLOAT8_E5M2)):
                name = f"{projection}{operand}_"
                assert figures[name + "amax"] > 0, (layer, name, figures)
                assert figures[name + "scale"] == pytest.approx(fmt.max_finite / figures[name + "amax"], rel=1e-6)
                assert 0 < figures[name + "saturated"] <= 1 and 0 <= figures[name + "flushed"] < 1
    # what enters the attention's q/k/v projection and the first MLP layer is the layer norm before it, in
    # bfloat16 (a backend that traces the float32 normalization's output before its cast: that rounded)
    for layer, name, before in (("block1_attn", "qkv.input_amax", "block1_ln1"),
                                ("block1_mlp1", "input_amax", "block1_ln2")):
        traced = amax[before]
        assert extra[layer][name] in (pytest.approx(traced, rel=1e-6),
                                      pytest.approx(float(round_to(np.array([traced]), BFLOAT16)[0]), rel=1e-6)), \
            (layer, extra[layer][name], traced)
    # the weight cast comes from the float32 master weights: at the first step, the initial ones
    assert extra["block1_mlp1"]["weight_amax"] == pytest.approx(found["weight_amax"]["block1_mlp1/w"], rel=1e-6)
    # on JAX the traced step is one compiled program, as the train step is: building the model, staging the batch
    # and tracing the step compiled 4 programs (jax) and 18 (keras@jax; op by op its traced step compiled 433)
    assert found["compiles"] <= 40, f"{found['compiles']} XLA programs compiled to trace one step"
