"""Execution mode and batch size as sweep axes: flags, plan, keys, unsupported modes, out of memory, the
learning-rate rule, the report's tables by mode and batch, and the chart by batch size."""

from __future__ import annotations

import json
import math

import pytest

from amp_suite.config.catalog import load_config, with_overrides
from amp_suite.config.settings import SweepSettings
from amp_suite.modes import MODES, base_mode, mode_order, scaled_learning_rate
from amp_suite.records import CellResult, RunSpec
from amp_suite.report.normalize import comparison_tables, render_markdown, summary_frame
from amp_suite.sweep.cells import plan_cells
from suite_cli import one_line_error, run_cli, tiny_config_file

THROUGHPUT_TITLE_START = "Throughput"


def test_the_key_names_mode_and_batch_only_when_the_sweep_has_those_axes():
    assert RunSpec("torch", "w", "fp32").key == "torch/w/fp32/r0"  # as it always was
    assert RunSpec("torch", "w", "fp32", mode="compiled").key == "torch/w/fp32/compiled/r0"
    run = RunSpec("torch", "w", "amp_bf16", mode="cudagraphs", batch_size=512, batch_axis=True, repeat=1)
    assert run.key == "torch/w/amp_bf16/cudagraphs/b512/r1"


def test_plan_cells_crosses_modes_and_batch_sizes():
    config = load_config(None)
    settings = with_overrides(config.settings, frameworks=("torch", "jax"), workloads=("mnist_cnn",),
                              precisions=("fp32", "amp_bf16"), modes=("eager", "compiled"),
                              batch_sizes=(64, 256), repeats=1, steps=4, warmup=1)
    cells = plan_cells(config, settings, explicit_steps=4)
    assert len(cells) == 2 * 2 * 2 * 2
    keys = {cell.run.key for cell in cells}
    assert len(keys) == len(cells)
    assert "jax/mnist_cnn/amp_bf16/eager/b256/r0" in keys
    assert {cell.run.batch_size for cell in cells} == {64, 256}
    assert all(cell.run.batch_axis for cell in cells)


def test_without_the_axes_a_cell_runs_the_default_mode_at_the_workloads_batch():
    config = load_config(None)
    settings = with_overrides(config.settings, frameworks=("torch",), workloads=("mnist_cnn",),
                              precisions=("fp32",), repeats=1, steps=4, warmup=1)
    (cell,) = plan_cells(config, settings, explicit_steps=4)
    assert cell.run.mode == "" and not cell.run.batch_axis
    assert cell.run.batch_size == config.workloads["mnist_cnn"].batch_size


@pytest.mark.parametrize(("values", "message"), [
    ({"modes": ("eager", "jitted")}, "unknown mode 'jitted'; allowed: eager, graph, compiled, cudagraphs"),
    ({"modes": ("eager", "eager")}, "modes lists 'eager' more than once"),
    ({"batch_sizes": (128, 0)}, "batch_sizes"),
    ({"batch_sizes": (128, 128)}, "batch_sizes lists 128 more than once"),
    ({"learning_rate_rule": "sqrt"}, "learning_rate_rule"),
])
def test_bad_axis_values_are_one_line_errors(values, message):
    settings = with_overrides(SweepSettings(), **values)
    assert message in one_line_error(settings.check)


def test_mode_order_and_base_mode():
    assert list(MODES) == ["eager", "graph", "compiled", "cudagraphs"]
    assert mode_order(["cudagraphs", "eager", "compiled"]) == ["eager", "compiled", "cudagraphs"]
    assert base_mode(["compiled", "graph"]) == "graph"


def test_learning_rate_rules():
    assert scaled_learning_rate("unchanged", 0.1, 512, 128) == 0.1
    assert scaled_learning_rate("linear", 0.1, 512, 128) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="unknown learning-rate rule 'cubic'"):
        scaled_learning_rate("cubic", 0.1, 512, 128)


def test_a_cell_the_sweep_ends_keeps_the_mode_it_would_have_run_in(tmp_path):
    """A trial's torch amp_bf16 cell timed out and was stored without a mode: the report made it a row of its
    own and said the fp32 baseline "did not run".  A result the sweep makes itself is in the framework's
    default mode, beside the cells that ran."""
    config = tiny_config_file(tmp_path)
    out = tmp_path / "out"
    done = run_cli("run", "--config", str(config), "-p", "modalfw", "--frameworks", "modal", "--precisions",
                   "fp32,amp_bf16", "--timeout", "10", "-q", env={"MODALFW_HANG": "amp_bf16"})
    assert done.returncode == 1, done.stderr
    rows = {r["precision"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert (rows["fp32"]["status"], rows["amp_bf16"]["status"]) == ("ok", "timeout")
    assert rows["fp32"]["mode"] == rows["amp_bf16"]["mode"] == "eager"
    report = (out / "report.md").read_text()
    assert "fp32 baseline did not run" not in report and "| – |" not in report


def test_a_sweep_over_modes_and_batches_keeps_going_past_unsupported_modes_and_out_of_memory(tmp_path):
    """modal has eager and compiled on a CPU; fake declares no modes; a batch of 64 does not fit modal."""
    config = tiny_config_file(tmp_path)
    out = tmp_path / "out"
    args = ("run", "--config", str(config), "-p", "fakefw", "-p", "modalfw", "--frameworks", "modal,fake",
            "--modes", "eager,compiled,cudagraphs", "--batch-sizes", "8,16,64", "--learning-rate-rule", "linear",
            "--precisions", "fp32,amp_bf16", "--inline", "-q")
    done = run_cli(*args)
    assert done.returncode == 1, done.stderr  # the out-of-memory cells are failures, the sweep finished
    results = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(results) == 2 * 3 * 3 * 2
    by_key = {r["key"]: r for r in results}
    fake = [r for r in results if r["framework"] == "fake"]
    assert {r["status"] for r in fake} == {"unsupported"}
    assert "FrameworkInfo.modes" in fake[0]["error"]
    cudagraphs = by_key["modal/tiny/fp32/cudagraphs/b8/r0"]
    assert cudagraphs["status"] == "unsupported" and "no mode 'cudagraphs' on a cpu" in cudagraphs["error"]
    oom = by_key["modal/tiny/amp_bf16/compiled/b64/r0"]
    assert oom["status"] == "oom" and "batch of 64" in oom["error"]
    eager8, eager16 = by_key["modal/tiny/fp32/eager/b8/r0"], by_key["modal/tiny/fp32/eager/b16/r0"]
    compiled8 = by_key["modal/tiny/fp32/compiled/b8/r0"]
    assert eager8["status"] == eager16["status"] == compiled8["status"] == "ok"
    assert (eager8["mode"], compiled8["mode"]) == ("eager", "compiled")
    # The workload's own batch is 8: linear scaling doubles the learning rate at 16, and the plugin saw it.
    assert eager16["metrics"]["learning_rate"] == pytest.approx(2 * eager8["metrics"]["learning_rate"])
    assert eager16["metrics"]["seen_learning_rate"] == pytest.approx(eager16["metrics"]["learning_rate"])
    assert eager16["metrics"]["learning_rate_rule"] == "linear"
    assert compiled8["metrics"]["first_step_loss"] == eager8["metrics"]["first_step_loss"]
    assert compiled8["metrics"]["compile_time_s"] >= 0.0
    report = (out / "report.md").read_text()
    assert "oom at batch 64" in report
    assert "| mode " in report and "| batch " in report
    assert "Best configuration per framework" in report and "modal on tiny (cpu): best configuration found" in report

    resumed = run_cli(*args, "--resume")  # every ok cell kept (the keys name mode and batch); the others run again
    assert resumed.returncode == 1, resumed.stderr
    again = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ok = sum(r["status"] == "ok" for r in results)
    assert ok == 2 * 2 * 2  # modal: eager and compiled, batches 8 and 16, fp32 and amp_bf16
    assert len(again) == 2 * len(results) - ok


def _cell(framework, precision, mode, batch, throughput, memory_mib, busy=None, status="ok", kind="gpu"):
    metrics = {"throughput": throughput, "device_peak_memory_bytes": memory_mib * 2**20}
    if busy is not None:
        metrics["gpu_utilization_pct_mean"] = busy
    return CellResult(key=f"{framework}/w/{precision}/{mode}/b{batch}/r0", framework=framework, workload="w",
                      precision=precision, repeat=0, status=status if status else "ok",
                      metrics=metrics if status == "ok" else {}, device={"kind": kind, "name": "H100"},
                      config={"batch_size": batch, "mode": mode, "batch_axis": True, "dataset": "synthetic"},
                      mode=mode)


RESULTS = [
    _cell("torch", "fp32", "eager", 128, 7000, 1000, busy=76),
    _cell("torch", "amp_bf16", "eager", 128, 12600, 700, busy=29),
    _cell("torch", "fp32", "compiled", 128, 9000, 900, busy=80),
    _cell("torch", "amp_bf16", "compiled", 128, 27000, 600, busy=70),
    _cell("torch", "fp32", "eager", 512, 8000, 3000, busy=90),
    _cell("torch", "amp_bf16", "eager", 512, 24000, 1800, busy=85),
    _cell("torch", "fp32", "compiled", 512, 10000, 2800, busy=95),
    _cell("torch", "amp_bf16", "compiled", 512, 40000, 1500, busy=92),
    _cell("torch", "fp32", "compiled", 4096, 0, 0, status="oom"),
]


def test_each_speedup_is_over_fp32_in_the_same_mode_and_batch_with_a_ratio_over_eager():
    summary = summary_frame(RESULTS)

    def row(precision, mode, batch):
        match = summary[(summary.precision == precision) & (summary["mode"] == mode)
                        & (summary.batch_size == batch)]
        assert len(match) == 1
        return match.iloc[0]

    assert row("amp_bf16", "eager", 128).speedup == pytest.approx(12600 / 7000)
    assert row("amp_bf16", "compiled", 128).speedup == pytest.approx(27000 / 9000)
    assert row("amp_bf16", "compiled", 512).speedup == pytest.approx(4.0)
    assert row("amp_bf16", "compiled", 512).memory_ratio == pytest.approx(1500 / 2800)
    assert row("amp_bf16", "compiled", 128).speedup_over_base_mode == pytest.approx(27000 / 12600)
    assert row("fp32", "compiled", 512).speedup_over_base_mode == pytest.approx(10000 / 8000)
    assert math.isnan(row("amp_bf16", "eager", 128).speedup_over_base_mode)  # eager is the base
    assert row("fp32", "compiled", 4096).status == "oom"


def test_tables_group_by_mode_and_batch_and_mark_a_launch_bound_gpu():
    summary = summary_frame(RESULTS)
    title, table = next((t, v) for t, v in comparison_tables(summary).items() if t.startswith(THROUGHPUT_TITLE_START))
    assert "in the same mode" in title and "GPU busy" in title
    assert list(table.columns) == ["workload", "framework", "device", "mode", "batch", "fp32", "amp_bf16"]
    assert list(zip(table["mode"], table["batch"], strict=True)) == [
        ("eager", "128"), ("eager", "512"), ("compiled", "128"), ("compiled", "512"), ("compiled", "4096")]
    eager = table[(table["mode"] == "eager") & (table["batch"] == "128")].iloc[0]
    assert eager["amp_bf16"] == "12,600 (1.80x), GPU 29% ↯"
    compiled = table[(table["mode"] == "compiled") & (table["batch"] == "128")].iloc[0]
    assert compiled["amp_bf16"] == "27,000 (3.00x; 2.14x over eager), GPU 70%"
    assert table[table["batch"] == "4096"].iloc[0]["fp32"] == "oom at batch 4096"

    text = render_markdown(RESULTS, {})
    assert "w / torch / eager / batch 128 / amp_bf16 (29%: try compiled, cudagraphs" in text
    assert ("torch on w (gpu): best configuration found is mode compiled, batch 512, amp_bf16: 40,000 images/s, "
            "5.71x the fp32 eager baseline at batch 128.") in text


@pytest.mark.usefixtures("report_charts")
def test_the_batch_chart_plots_the_speedup_and_memory_ratio_per_batch(tmp_path):
    pytest.importorskip("matplotlib")
    from amp_suite_plugins import charts

    data = charts.chart_data(RESULTS, {})
    series = {(s["mode"], s["precision"]): s for s in data["batch"]["series"]}
    compiled = series[("compiled", "amp_bf16")]
    assert compiled["batch_sizes"] == [128, 512]
    assert compiled["speedup"] == pytest.approx([3.0, 4.0])
    assert compiled["memory_ratio"] == pytest.approx([600 / 900, 1500 / 2800])
    paths = charts.write_report(RESULTS, tmp_path, {})
    assert tmp_path / charts.CHARTS["batch"] in paths
    assert "chart-batch.png" in charts.report_sections(RESULTS)[0][1]

    one_batch = [r for r in RESULTS if r.config["batch_size"] == 128]  # a later report without the batch axis
    again = charts.write_report(one_batch, tmp_path, {})
    assert tmp_path / charts.CHARTS["batch"] not in again
    assert not (tmp_path / charts.CHARTS["batch"]).exists()  # not left beside a report that links it nowhere
    assert all(path.exists() for path in again)


def test_keras_and_jax_declare_their_modes_and_keras_follows_the_mode_over_its_option():
    from amp_suite_plugins.jax import plugin as jax_plugin
    from amp_suite_plugins.keras import plugin as keras_plugin

    assert keras_plugin.framework_info().modes == {"cpu": ("graph", "compiled"), "gpu": ("graph", "compiled")}
    assert jax_plugin.framework_info().modes == {"cpu": ("compiled",), "gpu": ("compiled",)}
    off = {"jit_compile": False}
    assert keras_plugin._jit(RunSpec("keras", "w", "fp32", mode="compiled", options=off))
    assert not keras_plugin._jit(RunSpec("keras", "w", "fp32", mode="graph"))
    assert not keras_plugin._jit(RunSpec("keras", "w", "fp32", options=off))  # no mode: the option decides


@pytest.mark.parametrize(("module", "default"), [("on_jax", "compiled"), ("on_torch", "eager")])
def test_keras_on_jax_and_on_torch_declare_eager_and_compiled_and_the_mode_wins_over_jit_compile(module, default):
    """An ML engineer's trial: --modes eager was refused for keras@torch, which runs eager by default, because the
    two Keras-3 backends declared no mode at all."""
    import importlib

    from amp_suite.records import RunSpec

    plugin = importlib.import_module(f"amp_suite_plugins.keras.{module}")
    info = plugin.framework_info()
    assert info.modes == {"cpu": ("eager", "compiled"), "gpu": ("eager", "compiled")}
    assert info.default_mode == default
    run = RunSpec(framework=info.name, workload="mnist_cnn", precision="fp32")
    assert plugin._jit(run) == (default == "compiled")  # no mode: the option's default
    assert plugin._jit(RunSpec(framework=info.name, workload="mnist_cnn", precision="fp32", mode="eager",
                               options={"jit_compile": True})) is False
    assert plugin._jit(RunSpec(framework=info.name, workload="mnist_cnn", precision="fp32", mode="compiled",
                               options={"jit_compile": False})) is True
