"""The charts reporter: PNGs that decode, at the size the sidecar states, plotting results.csv's values."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math

import pandas as pd
import pytest

from amp_suite.records import CellResult

pytest.importorskip("matplotlib")
from amp_suite_plugins import charts, reporters  # noqa: E402

# The session leaves the chart-drawing reporters out of its sweeps (tests/conftest.py); these tests are about them.
pytestmark = pytest.mark.usefixtures("report_charts")

MIB = 2**20
CALIBRATION = {"frameworks": {fw: {"cpu": {"version": "1", "device": "cpu", "matmul": {"fp32": 1.0, "bf16": 4.0, "fp16": 2.0}}}
                              for fw in ("torch", "jax")}}


def cell(framework, precision, throughput, memory_mib, accuracy, losses) -> CellResult:
    metrics = {"throughput": throughput, "peak_rss_bytes": memory_mib * MIB, "val_accuracy": accuracy,
               "final_loss": losses[-1][-1], "step_losses": losses,
               "achieved_tflops": throughput / 1e4}
    return CellResult(key=f"{framework}/mnist_cnn/{precision}/r0", framework=framework, workload="mnist_cnn",
                      precision=precision, repeat=0, status="ok", metrics=metrics,
                      device={"kind": "cpu", "name": "cpu"}, config={"dataset": "mnist", "batch_size": 8})


RESULTS = [
    cell("torch", "fp32", 300.0, 400, 0.95, [[2.3, 1.0, 0.5], [0.4, 0.3]]),
    cell("torch", "amp_fp16", 60.0, 420, 0.94, [[2.3, 1.1, 0.6], [0.45, 0.35]]),
    cell("torch", "amp_bf16", 50.0, 410, 0.955, [[2.3, 1.0, 0.55], [0.4, 0.31]]),
    cell("jax", "fp32", 350.0, 700, 0.95, [[2.3, 0.9, 0.5], [0.4, 0.3]]),
    cell("jax", "amp_bf16", 290.0, 650, 0.953, [[2.3, 0.95, 0.52], [0.41, 0.29]]),
    CellResult(key="jax/mnist_cnn/amp_fp16/r0", framework="jax", workload="mnist_cnn", precision="amp_fp16",
               repeat=0, status="oom", error="MemoryError"),
]


@pytest.fixture
def written(tmp_path):
    env = {"calibration": CALIBRATION}
    sections = charts.report_sections(RESULTS)
    reporters.write_report(RESULTS, tmp_path, env, sections)
    paths = charts.write_report(RESULTS, tmp_path, env)
    return tmp_path, paths


def test_every_png_exists_decodes_and_has_the_stated_size(written):
    from PIL import Image

    out, paths = written
    sidecar = json.loads((out / charts.SIDECAR).read_text())
    # No tf32 cell ran (a CPU sweep): no speed-up-over-tf32 chart; one batch size: no chart by batch size.
    drawn = {name: file for name, file in charts.CHARTS.items() if name not in ("speedup_tf32", "batch")}
    assert {p.name for p in paths} == {*drawn.values(), charts.SIDECAR}
    for name, file in drawn.items():
        with Image.open(out / file) as image:
            image.load()  # decodes every pixel
            assert image.format == "PNG"
            assert image.size == (sidecar[name]["width_px"], sidecar[name]["height_px"])
            assert image.size[0] >= 600 and image.size[1] >= 400


def test_plotted_values_match_results_csv(written):
    out, _ = written
    sidecar = json.loads((out / charts.SIDECAR).read_text())
    csv = pd.read_csv(out / "results.csv")
    ok = csv[csv.status == "ok"].set_index(["framework", "precision"])
    groups = [g["framework"] for g in sidecar["speedup"]["groups"]]
    assert groups == ["torch", "jax"]
    for series in sidecar["speedup"]["series"]:
        for framework, value, ceiling in zip(groups, series["values"], series["ceiling_ratio"], strict=True):
            key = (framework, series["precision"])
            if key not in ok.index:
                assert value is None  # jax amp_fp16 ran out of memory: no bar
                continue
            assert value == pytest.approx(ok.loc[key, "throughput"] / ok.loc[(framework, "fp32"), "throughput"])
            assert ceiling == pytest.approx(ok.loc[key, "ceiling_ratio"])
    for series in sidecar["memory"]["series"]:
        for framework, value in zip(groups, series["values"], strict=True):
            key = (framework, series["precision"])
            if key in ok.index:
                assert value == pytest.approx(
                    ok.loc[key, "peak_memory_mib"] / ok.loc[(framework, "fp32"), "peak_memory_mib"])
    for series in sidecar["accuracy"]["series"]:
        for framework, value in zip(groups, series["values"], strict=True):
            key = (framework, series["precision"])
            if key in ok.index:
                assert value == pytest.approx(ok.loc[key, "val_accuracy"])
    torch_panel = next(p for p in sidecar["loss"]["panels"] if p["framework"] == "torch")
    curves = {c["precision"]: c["losses"] for c in torch_panel["curves"]}
    assert curves["fp32"] == [2.3, 1.0, 0.5, 0.4, 0.3]
    assert curves["amp_bf16"][-1] == pytest.approx(ok.loc[("torch", "amp_bf16"), "final_loss"])


def test_report_links_the_charts(written):
    out, _ = written
    text = (out / "report.md").read_text()
    for name, file in charts.CHARTS.items():
        if name in ("speedup_tf32", "batch"):  # no tf32 cell, one batch size here: neither link nor file
            assert f"]({file})" not in text and not (out / file).exists()
            continue
        assert f"]({file})" in text and (out / file).exists()


def test_the_same_results_give_the_same_files(written, tmp_path_factory):
    out, _ = written
    again = tmp_path_factory.mktemp("again")
    paths = charts.write_report(RESULTS, again, {"calibration": CALIBRATION})
    assert len(paths) >= 5
    for path in paths:
        assert path.read_bytes() == (out / path.name).read_bytes()


def test_without_matplotlib_nothing_is_written_and_the_report_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(charts, "_have_matplotlib", lambda: False)
    assert charts.write_report(RESULTS, tmp_path, {}) == []
    assert not list(tmp_path.iterdir())
    (title, body), = charts.report_sections(RESULTS)
    assert "matplotlib is not installed" in body and "amp-suite[charts]" in body


def test_no_ok_cell_draws_nothing(tmp_path):
    assert charts.write_report(RESULTS[-1:], tmp_path, {}) == []


def test_the_charts_plugin_can_be_turned_off(monkeypatch):
    from amp_suite.plugins.host import DISABLE_ENV, PluginHost

    if "charts" not in {ep.name for ep in importlib.metadata.entry_points(group="amp_suite")}:
        pytest.skip("the installed amp-suite predates the charts entry point (pip install -e . again)")
    assert "charts" in {p.name for p in PluginHost().describe()}
    monkeypatch.setenv(DISABLE_ENV, "charts")
    assert "charts" not in {p.name for p in PluginHost().describe()}


def test_nan_losses_become_null_in_the_sidecar(tmp_path):
    bad = cell("torch", "fp32", 1.0, 1, 0.5, [[2.0, math.nan, 1.0]])
    charts.write_report([bad], tmp_path, {})
    sidecar = json.loads((tmp_path / charts.SIDECAR).read_text())
    assert sidecar["loss"]["panels"][0]["curves"][0]["losses"] == [2.0, None, 1.0]


def test_a_tf32_cell_adds_the_speedup_over_tf32_chart(tmp_path):
    with_tf32 = [*RESULTS, cell("torch", "tf32", 200.0, 400, 0.95, [[2.3, 1.0, 0.5], [0.4, 0.3]])]
    paths = charts.write_report(with_tf32, tmp_path, {})
    assert charts.CHARTS["speedup_tf32"] in {p.name for p in paths}
    sidecar = json.loads((tmp_path / charts.SIDECAR).read_text())["speedup_tf32"]
    assert [s["precision"] for s in sidecar["series"]] == ["amp_fp16", "amp_bf16"]
    torch_index = [g["framework"] for g in sidecar["groups"]].index("torch")
    fp16 = next(s for s in sidecar["series"] if s["precision"] == "amp_fp16")
    assert fp16["values"][torch_index] == pytest.approx(60.0 / 200.0)
    jax_index = [g["framework"] for g in sidecar["groups"]].index("jax")
    assert fp16["values"][jax_index] is None  # jax ran no tf32 cell
    section = charts.report_sections(with_tf32)[0][1]
    assert charts.CHARTS["speedup_tf32"] in section
    assert charts.CHARTS["speedup_tf32"] not in charts.report_sections(RESULTS)[0][1]


def _texts(fig) -> list[str]:
    return [text.get_text() for ax in fig.axes for text in ax.texts]


def _legend(fig) -> list[str]:
    return [text.get_text() for text in fig.axes[0].get_legend().get_texts()]


def test_a_precision_that_failed_everywhere_keeps_its_legend_entry_and_reads_n_a():
    failed_everywhere = [r for r in RESULTS if r.precision != "amp_fp16"] + [
        CellResult(key=f"{fw}/mnist_cnn/amp_fp16/r0", framework=fw, workload="mnist_cnn", precision="amp_fp16",
                   repeat=0, status="failed", error="boom") for fw in ("torch", "jax")]
    data = charts.chart_data(failed_everywhere, {})
    fp16 = next(s for s in data["speedup"]["series"] if s["precision"] == "amp_fp16")
    assert fp16["values"] == [None, None] and fp16["status"] == ["failed", "failed"]
    figures = charts.chart_figures(data)
    for name in ("speedup", "memory", "accuracy"):
        assert "amp_fp16" in _legend(figures[name]), name
        assert _texts(figures[name]).count(f"{charts.NOT_AVAILABLE}\nfailed") == 2, (name, _texts(figures[name]))


def test_a_failed_group_keeps_its_place_with_n_a_bars():
    with_failed = [*RESULTS, CellResult(key="keras/mnist_cnn/fp32/r0", framework="keras", workload="mnist_cnn",
                                        precision="fp32", repeat=0, status="timeout", error="slow")]
    data = charts.chart_data(with_failed, {})
    assert [g["framework"] for g in data["speedup"]["groups"]] == ["torch", "jax", "keras"]
    accuracy = charts.chart_figures(data)["accuracy"]
    assert f"{charts.NOT_AVAILABLE}\ntimeout" in _texts(accuracy)


def test_speedup_bars_carry_the_flag_the_single_run_mark_and_the_interval(recwarn):
    def repeat(result: CellResult, index: int) -> CellResult:
        return dataclasses.replace(result, repeat=index, key=result.key.replace("/r0", f"/r{index}"))

    flagged = [repeat(cell("torch", precision, base + r, 400, 0.9, [[1.0]]), r)
               for precision, base in (("fp32", 100.0), ("amp_bf16", 200.0)) for r in range(2)]
    flagged += [cell("jax", "fp32", 100.0, 400, 0.9, [[1.0]]), cell("jax", "amp_bf16", 150.0, 300, 0.9, [[1.0]])]
    flagged[-1].metrics["measurement_flags"] = ["machine busy: other processes kept 2 cores busy"]
    data = charts.chart_data(flagged, {})
    bf16 = data["speedup"]["series"][0]
    assert bf16["flagged"] == [False, True] and bf16["single_run"] == [False, True]
    assert bf16["low"][0] is not None and bf16["low"][1] is None
    speedup = charts.chart_figures(data)["speedup"]
    texts = _texts(speedup)
    assert any(t.startswith("1.50x") and charts.FLAG_MARK in t and charts.SINGLE_RUN_MARK in t for t in texts), texts
    assert any(t.startswith("2.0") and charts.FLAG_MARK not in t and charts.SINGLE_RUN_MARK not in t
               for t in texts), texts
    legend = _legend(speedup)
    assert "95% interval" in legend and any(charts.FLAG_MARK in t for t in legend)
    assert any(charts.SINGLE_RUN_MARK in t for t in legend)
    # one error bar: torch's paired repeats; jax's single run has none
    assert len([c for c in speedup.axes[0].containers if type(c).__name__ == "ErrorbarContainer"]) == 1
    charts.draw_charts(data)  # every mark has a glyph in the chart's font
    assert not [w for w in recwarn if "Glyph" in str(w.message)]
