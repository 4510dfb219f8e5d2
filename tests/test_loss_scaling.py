"""loss_scaling and keep_fp32 as framework options, and the loss-scale trajectory: host side, no framework.

The plugins' side (each framework really scales, skips and keeps layers in
float32) is in ``tests/test_loss_scaling_frameworks.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from amp_suite.cell.loss_scale import MOST_POINTS, loss_scale_figures
from amp_suite.cell.windows import Phase
from amp_suite.cli import main
from amp_suite.config.precision_options import check_precision_options
from amp_suite.errors import UsageError
from amp_suite.plugins.kit import standard_precision
from amp_suite.records import CellResult, DeviceInfo, EpochResult, PrecisionApplied, RunSpec
from amp_suite.report.applied import applied_lines
from amp_suite.report.html import render_html
from amp_suite.report.loss_scale import loss_scale_lines
from amp_suite.report.normalize import results_frame
from amp_suite.stored_values import metric_problem
from amp_suite.workloads.kept import check_keep_fp32, keeps
from amp_suite.workloads.workload import workload_from_config
from suite_cli import TINY_CONFIG

CPU = DeviceInfo(kind="cpu", platform="cpu", name="test cpu", count=1)
MNIST_CNN = workload_from_config("mnist_cnn", {"model": "mnist_cnn", "input_size": 28, "channels": 1,
                                               "num_classes": 10, "batch_size": 8})
RESNET8 = workload_from_config("resnet8", {"model": "resnet8", "input_size": 16, "channels": 3, "num_classes": 10,
                                           "batch_size": 8})


def _run(precision: str, **options) -> RunSpec:
    return RunSpec(framework="fake", workload="mnist_cnn", precision=precision, options=options)


# --- what standard_precision records ------------------------------------------------------------------------


@pytest.mark.parametrize("scaling", ["dynamic", "static", "none"])
def test_amp_fp16_records_the_loss_scaling_asked_for(scaling):
    applied = standard_precision(_run("amp_fp16", loss_scaling=scaling, initial_loss_scale=64.0), CPU)
    assert applied.loss_scaling == scaling
    assert applied.initial_loss_scale == (None if scaling == "none" else 64.0)


def test_dynamic_is_the_default_and_other_precisions_scale_nothing():
    assert standard_precision(_run("amp_fp16"), CPU).loss_scaling == "dynamic"
    for precision in ("fp32", "amp_bf16"):
        applied = standard_precision(_run(precision, loss_scaling="static"), CPU)
        assert (applied.loss_scaling, applied.initial_loss_scale) == ("none", None)


def test_keep_fp32_is_recorded_under_amp_and_a_note_elsewhere():
    for precision in ("amp_fp16", "amp_bf16"):
        applied = standard_precision(_run(precision, keep_fp32=("logits", "conv2d")), CPU)
        assert applied.keep_fp32 == ("logits", "conv2d") and not applied.notes
    fp32 = standard_precision(_run("fp32", keep_fp32=("logits",)), CPU)
    assert fp32.keep_fp32 == ()
    assert fp32.notes == ("keep_fp32=logits: no effect, every layer of fp32 computes in float32",)


def test_keeps_picks_layers_by_name_or_kind_never_a_block():
    layers = {spec.name or spec.kind: spec for spec in MNIST_CNN.layers}
    assert keeps(layers["logits"], ("logits",)) and not keeps(layers["dense1"], ("logits",))
    assert keeps(layers["dense1"], ("dense",)) and keeps(layers["logits"], ("dense",))
    assert keeps(layers["relu"], ("relu",)) and not keeps(layers["conv1"], ("relu",))
    block = next(spec for spec in RESNET8.layers if spec.kind == "residual")
    assert not keeps(block, ("residual",))


# --- refused before any cell runs ----------------------------------------------------------------------------


@pytest.mark.parametrize("options,precisions,needle", [
    ({"loss_scaling": "static"}, ("fp32", "amp_bf16"),
     "[frameworks.fake] loss_scaling = 'static': only amp_fp16 has a loss scale, and this sweep runs fp32, "
     "amp_bf16; add amp_fp16 to the precisions or remove loss_scaling"),
    ({"keep_fp32": ("logits",)}, ("fp32", "tf32"),
     "[frameworks.fake] keep_fp32: only amp_fp16, amp_bf16 compute layers below float32, and this sweep runs "
     "fp32, tf32"),
    ({"keep_fp32": ("logit",)}, ("amp_bf16",),
     "[frameworks.fake] keep_fp32: 'logit' is neither a layer of workload 'mnist_cnn' nor a layer kind (did you "
     "mean 'logits'?); allowed: its layers conv1, conv2, dense1, logits, or the kinds conv2d,"),
    ({"keep_fp32": ("layer_nrom",)}, ("amp_bf16",), "(did you mean 'layer_norm'?)"),
    ({"keep_fp32": ("residual",)}, ("amp_fp16",),
     "'residual' is a kind made of other layers and cannot be kept whole; name the layers inside it"),
])
def test_precision_options_no_cell_would_apply_are_refused(options, precisions, needle):
    with pytest.raises(UsageError) as caught:
        check_precision_options({"fake": options}, ["fake"], precisions, {"mnist_cnn": MNIST_CNN})
    message = str(caught.value)
    assert needle in message and "\n" not in message, message


def test_precision_options_that_apply_pass():
    check_precision_options({"fake": {"loss_scaling": "none", "keep_fp32": ("logits", "layer_norm")}}, ["fake"],
                            ("fp32", "amp_fp16"), {"mnist_cnn": MNIST_CNN})
    check_precision_options({"other": {"loss_scaling": "none"}}, ["fake"], ("fp32",), {"mnist_cnn": MNIST_CNN})
    check_keep_fp32(("bn1", "batch_norm"), "resnet8", RESNET8.layers)


def _config(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "benchmarks.toml"
    path.write_text(TINY_CONFIG.format(out=(tmp_path / "out").as_posix()) + "\n" + extra)
    return path


@pytest.mark.parametrize("args,extra,needle", [
    (["--precisions", "fp32,amp_bf16"], '[frameworks.fake]\nloss_scaling = "none"\n',
     "loss_scaling = 'none': only amp_fp16 has a loss scale"),
    ([], '[frameworks.fake]\nloss_scaling = "dynamc"\n', "loss_scaling must be one of"),
    ([], '[frameworks.fake]\nkeep_fp32 = ["logitz"]\n',
     "keep_fp32: 'logitz' is neither a layer of workload 'tiny' nor a layer kind (did you mean 'logits'?)"),
    ([], '[frameworks.fake]\nkeep_fp32 = "logits"\n', "keep_fp32 must be a list of strings"),
])
def test_the_command_line_refuses_them_in_one_line(tmp_path, capsys, args, extra, needle):
    code = main(["run", "--config", str(_config(tmp_path, extra)), "-p", "fakefw", *args])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("amp-suite: error: "), err
    assert needle in lines[0], err
    assert not (tmp_path / "out" / "results.jsonl").exists()  # no cell ran


# --- the trajectory ------------------------------------------------------------------------------------------


def _parts(*windows: tuple[int, float | None]) -> list[tuple[Phase, EpochResult]]:
    """One phase per ``(steps, scale read after it)``."""
    out, start = [], 0
    for steps, scale in windows:
        out.append((Phase("window", 0, start, start + steps),
                    EpochResult(step_losses=[1.0] * steps, samples=steps, window_time_s=1.0,
                                loss_scale_final=scale)))
        start += steps
    return out


def _applied(scaling: str, initial: float | None = 1024.0) -> PrecisionApplied:
    return PrecisionApplied("amp_fp16", "float16", "float32", loss_scaling=scaling, initial_loss_scale=initial)


def test_the_trajectory_keeps_each_change_with_its_step():
    figures = loss_scale_figures(_parts((1, 512.0), (1, 512.0), (4, 128.0), (4, 256.0)), _applied("dynamic"))
    assert figures["loss_scale_trajectory"] == [[0, 1024.0], [1, 512.0], [6, 128.0], [10, 256.0]]
    assert figures["loss_scale_initial"] == 1024.0 and figures["loss_scale_min"] == 128.0
    assert figures["loss_scale_backoffs"] == 3  # 1024 -> 512 once, 512 -> 128 twice; the growth is none
    assert figures["loss_scale_points_dropped"] == 0


def test_a_static_scale_has_no_change_and_no_scale_has_no_trajectory():
    figures = loss_scale_figures(_parts((2, 1024.0), (2, 1024.0)), _applied("static"))
    assert figures["loss_scale_trajectory"] == [[0, 1024.0]] and figures["loss_scale_backoffs"] == 0
    assert loss_scale_figures(_parts((2, None)), _applied("none", None)) == {}


def test_a_long_trajectory_is_cut_to_its_first_and_last_points():
    scales = [2.0 ** (20 - (i % 2)) for i in range(MOST_POINTS + 50)]  # down, up, down, ...: a point per window
    figures = loss_scale_figures(_parts(*((1, s) for s in scales)), _applied("dynamic", 2.0 ** 20))
    points = figures["loss_scale_trajectory"]
    # the first window keeps the initial scale: 1 + (MOST_POINTS + 49) points, 50 of them dropped
    assert len(points) == MOST_POINTS and figures["loss_scale_points_dropped"] == 50
    assert points[0] == [0, 2.0 ** 20] and points[-1][0] == MOST_POINTS + 50


@pytest.mark.usefixtures("report_charts")
def test_the_figures_are_stored_read_back_and_reported():
    figures = loss_scale_figures(_parts((2, 512.0), (2, 512.0)), _applied("dynamic"))
    for name, value in figures.items():
        assert metric_problem(name, value) is None, name
    assert metric_problem("loss_scale_trajectory", [[0, "big"]]) is not None
    cells = [
        CellResult(key="fake/w/amp_fp16/r0", framework="fake", workload="w", precision="amp_fp16", repeat=0,
                   status="ok", applied={**vars(_applied("dynamic")), "keep_fp32": ["logits"]},
                   metrics={**figures, "loss_scale_final": 512.0, "skipped_steps": 1}),
        CellResult(key="fake/w/amp_fp16/r1", framework="fake", workload="w", precision="amp_fp16", repeat=1,
                   status="ok", applied=vars(_applied("none", None)), metrics={"skipped_steps": 0}),
    ]
    lines = loss_scale_lines(cells)
    assert lines[0] == "## Loss scaling"
    assert "| w | fake | amp_fp16 | 0 | dynamic | 1024 → 512 | 512 | 1 | 1 |" in lines
    assert "| w | fake | amp_fp16 | 1 | none | – | – | – | 0 |" in lines
    assert loss_scale_lines([CellResult(key="k", framework="f", workload="w", precision="amp_bf16", repeat=0,
                                        status="ok")]) == []
    frame = results_frame(cells)
    row = frame.iloc[0]
    assert (row["loss_scale_min"], row["loss_scale_backoffs"], row["keep_fp32"]) == (512.0, 1, "logits")
    assert math.isnan(frame.iloc[1]["loss_scale_min"]) and frame.iloc[1]["keep_fp32"] == ""
    assert any("keep_fp32=logits (these layers compute in float32)" in line for line in applied_lines(cells))
    page = render_html(cells, {})
    assert '<h2 id="loss-scale-section">Loss scaling</h2>' in page and "<td>1024 → 512</td>" in page
