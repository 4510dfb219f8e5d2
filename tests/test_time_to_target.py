"""Time to target accuracy: evaluation points, training time to the target, and the report's table."""

from __future__ import annotations

import pytest

import amp_suite
from amp_suite.cell.windows import Phase
from amp_suite.cell.worker import TargetTracker
from amp_suite.config.catalog import load_config
from amp_suite.records import EpochResult


def test_the_tracker_records_the_first_evaluation_point_at_the_target():
    curve = iter([0.5, 0.8, 0.96, 0.99])  # a known accuracy curve
    tracker = TargetTracker(0.95, 0, steps_per_epoch=10)
    parts = []
    evaluations = 0
    for epoch in range(4):
        for phase in (Phase("window", epoch, 0, 5), Phase("window", epoch, 5, 10)):
            parts.append((phase, EpochResult([1.0] * 5, 40, 0.5)))
            if tracker.due(phase):
                evaluations += 1
                tracker.evaluate(phase, parts, lambda: {"val_accuracy": next(curve)})
    figures = tracker.figures()
    assert evaluations == 3  # at each epoch's end, and no more once the target is reached
    assert figures["target_reached"] and figures["steps_to_target"] == 30 and figures["epochs_to_target"] == 3.0
    assert figures["time_to_target_s"] == pytest.approx(3.0)  # 6 windows of 0.5 s, validation excluded
    assert figures["best_val_accuracy"] == 0.96 and [p[0] for p in figures["target_curve"]] == [10, 20, 30]


def test_eval_every_evaluates_at_the_first_phase_reaching_each_multiple():
    tracker = TargetTracker(0.99, 7, steps_per_epoch=10)
    seen = []
    parts = []
    for epoch in range(2):
        for phase in (Phase("window", epoch, 0, 5), Phase("window", epoch, 5, 10)):
            parts.append((phase, EpochResult([1.0] * 5, 40, 0.1)))
            if tracker.due(phase):
                tracker.evaluate(phase, parts, lambda: {"val_accuracy": 0.5})
                seen.append(epoch * 10 + phase.stop)
    assert seen == [10, 15]  # step 7 is first reached by the phase ending at 10, step 14 by the one ending at 15
    figures = tracker.figures()
    assert not figures["target_reached"] and figures["time_to_target_s"] is None
    assert figures["best_val_accuracy"] == 0.5


def test_no_target_means_no_figures():
    assert TargetTracker(None, 0, 10).figures() == {}


def test_the_fake_framework_reaches_a_target_and_the_report_has_the_table(tiny_config, tmp_path, clean_fake_env):
    out = tmp_path / "target"
    frame = amp_suite.run(frameworks="fake", precisions="fp32,amp_bf16", config=tiny_config, plugins=["fakefw"],
                          steps=12, epochs=3, target_accuracy=0.9, out=str(out))
    assert frame["target_reached"].all() and (frame["target_accuracy"] == 0.9).all()
    assert (frame["steps_to_target"] >= 12).all() and (frame["eval_time_s"] > 0).all()
    assert (frame["time_to_target_s"] > 0).all()
    report = (out / "report.md").read_text()
    table = report[report.index("## Time to target accuracy"):]
    row = next(line for line in table.splitlines() if "| amp_bf16" in line)
    assert "90.00%" in row and "1 of 1 repeats" in row and row.count("x") >= 1
    # an unreachable target: "not reached" with the best accuracy seen
    frame = amp_suite.run(frameworks="fake", precisions="fp32", config=tiny_config, plugins=["fakefw"],
                          steps=12, epochs=2, target_accuracy=1.0, out=str(tmp_path / "never"), dataset="mnist",
                          workloads="mnist_cnn", train_split="test[:64]", val_split="test[9900:]")
    assert not frame["target_reached"].any() and frame["best_val_accuracy"].iloc[0] < 1.0
    assert "not reached: best" in (tmp_path / "never" / "report.md").read_text()


def test_mnist_resnet8_declares_a_target_and_the_flag_overrides_it(tmp_path):
    from amp_suite.config.catalog import with_overrides
    from amp_suite.sweep.cells import plan_cells

    config = load_config(None)
    assert config.workloads["mnist_resnet8"].target_accuracy == 0.97
    settings = with_overrides(config.settings, workloads=("mnist_resnet8",), frameworks=("torch",),
                              precisions=("fp32",), target_accuracy=0.5)
    assert plan_cells(config, settings)[0].workload.target_accuracy == 0.5


@pytest.mark.slow
def test_torch_reaches_the_mnist_resnet8_target_for_real(tmp_path):
    pytest.importorskip("torch")
    frame = amp_suite.run(frameworks="torch", workloads="mnist_resnet8", precisions="fp32", epochs=4, repeats=1,
                          out=str(tmp_path / "real"), timeout=1200)
    assert frame["status"].tolist() == ["ok"]
    assert frame["target_accuracy"].iloc[0] == 0.97 and frame["target_reached"].iloc[0]
    assert frame["epochs_to_target"].iloc[0] <= 4
