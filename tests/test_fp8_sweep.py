"""The fp8 precision in a sweep: the same first loss in every framework on a tiny ViT (same weights, same batch),
``unsupported`` rows with their reason for a workload without FP8 layers and for a plugin that does not declare
fp8, and a report that marks every fp8 speed figure emulated and never calls it a speed-up."""

from __future__ import annotations

import importlib.util
import json

import pytest

from amp_suite.records import CellResult
from amp_suite.report.normalize import render_markdown, results_frame, summary_frame
from amp_suite.report.verdict import build_verdict
from suite_cli import run_cli

INSTALLED = [name for name, module in (("torch", "torch"), ("jax", "haiku"), ("keras", "tensorflow"))
             if importlib.util.find_spec(module) is not None]

CONFIG = """
[defaults]
steps = 2
warmup = 1
epochs = 1
repeats = 1
timeout = 300
out = "{out}"

[workloads.fp8_vit]
model = "vit"
input_size = 8
channels = 1
num_classes = 3
batch_size = 8
width = 8
depth = 1
heads = 2
mlp = 16
patch = 4
optimizer = "adamw"
learning_rate = 1e-2

# convolutions, a pool and the head: nothing the fp8 recipe applies to
[workloads.conv_only]
model = "resnet8"
input_size = 8
channels = 1
num_classes = 3
batch_size = 8
"""


def _rows(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "results.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_every_framework_trains_fp8_from_the_same_first_loss_and_a_conv_only_workload_is_unsupported(tmp_path):
    if len(INSTALLED) < 2:
        pytest.skip("needs two frameworks")
    config = tmp_path / "benchmarks.toml"
    config.write_text(CONFIG.format(out=(tmp_path / "out").as_posix()))
    done = run_cli("run", "--config", str(config), "--frameworks", ",".join(INSTALLED), "--workloads",
                   "fp8_vit,conv_only", "--precisions", "fp8", "--dataset", "synthetic", "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = _rows(tmp_path / "out")
    vit = {r["framework"]: r for r in rows if r["workload"] == "fp8_vit"}
    assert set(vit) == set(INSTALLED) and all(r["status"] == "ok" for r in vit.values()), \
        [(r["framework"], r["error"]) for r in vit.values()]
    for r in vit.values():
        assert r["applied"]["fp8_matmul"] == "emulated" and "float8_e5m2 gradients" in r["applied"]["fp8_recipe"]
    first = [r["metrics"]["first_step_loss"] for r in vit.values()]
    # bfloat16 activations round differently in each framework's kernels (as under amp_bf16): not bit-equal
    assert max(first) - min(first) < 1e-2 * max(first), first
    conv = [r for r in rows if r["workload"] == "conv_only"]
    assert len(conv) == len(INSTALLED) and {r["status"] for r in conv} == {"unsupported"}
    assert all("'linear', is the head" in r["error"] and "run it with amp_bf16" in r["error"] for r in conv)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "emulated" in report and "fp8 is emulated here" in report


def test_a_plugin_that_does_not_declare_fp8_gives_unsupported_rows_naming_what_it_declares(tmp_path):
    config = tmp_path / "benchmarks.toml"
    config.write_text(CONFIG.format(out=(tmp_path / "out").as_posix()).replace(
        "[workloads.fp8_vit]", "[workloads.fp8_cnn]\nmodel = \"mnist_cnn\"\ninput_size = 8\nchannels = 1\n"
                               "num_classes = 3\nbatch_size = 8\n\n[workloads.fp8_vit]"))
    done = run_cli("run", "--config", str(config), "-p", "fakefw", "--frameworks", "fake", "--workloads", "fp8_cnn",
                   "--precisions", "fp32,fp8", "--dataset", "synthetic", "-q")
    assert done.returncode == 0, done.stderr[-3000:]
    status = {r["precision"]: (r["status"], r["error"]) for r in _rows(tmp_path / "out")}
    assert status["fp32"][0] == "ok"
    assert status["fp8"][0] == "unsupported" and "does not run precision 'fp8'" in status["fp8"][1]
    assert "declares fp32, amp_fp16, amp_bf16" in status["fp8"][1]


def _cell(precision: str, throughput: float, repeat: int, matmul: str = "") -> CellResult:
    return CellResult(
        key=f"torch/w/{precision}/r{repeat}", framework="torch", workload="w", precision=precision, repeat=repeat, status="ok",
        config={"framework": "torch", "batch_size": 8, "seed": 0},
        device={"kind": "cpu", "name": "cpu"},
        applied={"compute_dtype": "bfloat16" if precision != "fp32" else "float32", "fp8_matmul": matmul},
        metrics={"throughput": throughput, "val_accuracy": 0.9, "final_loss": 0.5, "peak_rss_bytes": 1 << 20})


def test_an_emulated_fp8_figure_is_marked_and_never_a_speed_up_while_amp_bf16_keeps_its_own() -> None:
    # fp8 "faster" than fp32 here (a made-up figure): still no speed-up, no best precision, no best configuration
    results = [_cell(p, t, r, "emulated" if p == "fp8" else "") for r in range(2)
               for p, t in (("fp32", 100.0), ("amp_bf16", 150.0 + r), ("fp8", 400.0 + r))]
    summary = summary_frame(results)
    fp8 = summary[summary["precision"] == "fp8"].iloc[0]
    bf16 = summary[summary["precision"] == "amp_bf16"].iloc[0]
    assert bool(fp8["emulated"]) and fp8["throughput"] == pytest.approx(400.5)
    assert fp8["speedup"] != fp8["speedup"] and fp8["speedup_low"] != fp8["speedup_low"]  # NaN: no ratio
    assert bf16["speedup"] == pytest.approx(1.505, rel=1e-3) and not bool(bf16["emulated"])
    verdict = build_verdict(summary, results_frame(results))
    (sentence,) = verdict.frameworks
    assert sentence.best == "amp_bf16" and "fp8 is emulated here" in sentence.sentence
    line = next(line for line in verdict.lines if line.precision == "fp8")
    assert line.emulated and line.speedup is None
    report = render_markdown(results, {})
    throughput_row = next(row for row in report.splitlines() if row.startswith("| w ") and "emulated" in row)
    assert "not a speed-up" in throughput_row and "4.00x" not in report and "fp8: 400" not in report
