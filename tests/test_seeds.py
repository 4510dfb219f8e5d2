"""Seeds as a sweep axis (keys, plan, resume, compare, bad input) and the equivalence verdict over seeds, through
the report, from fabricated records."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest

import amp_suite
from amp_suite.comparison import compare_results
from amp_suite.config.catalog import load_config, with_overrides
from amp_suite.config.settings import SETTINGS_FIELDS, SweepSettings, parse_seeds
from amp_suite.errors import UsageError
from amp_suite.records import CellResult, RunSpec
from amp_suite.report.normalize import render_markdown, results_frame, summary_frame, sweep_verdict
from amp_suite.report.seeds import equivalence_frame
from amp_suite.schema import check_table
from amp_suite.sweep.cells import plan_cells
from amp_suite.sweep.fingerprint import cell_definition
from suite_cli import one_line_error, run_cli

# The 95% two-sided t quantiles the hand computations use (df = 1 and df = 4), from a t table to 3 decimals.
T_1, T_4 = 12.706, 2.776


# --- the axis ------------------------------------------------------------------------------------

def test_the_key_names_the_seed_only_when_the_sweep_has_a_seed_axis():
    assert RunSpec("torch", "w", "fp32", seed=3).key == "torch/w/fp32/r0"  # --seed alone: the key it always had
    assert RunSpec("torch", "w", "fp32", seed=3, seed_axis=True, repeat=1).key == "torch/w/fp32/s3/r1"
    assert RunSpec("torch", "w", "fp32", seed=2, seed_axis=True, batch_size=64, batch_axis=True).key \
        == "torch/w/fp32/b64/s2/r0"


def test_plan_cells_crosses_seeds_and_without_seeds_keeps_the_one_seed():
    config = load_config(None)
    settings = with_overrides(config.settings, frameworks=("torch", "jax"), workloads=("mnist_cnn",),
                              precisions=("fp32", "amp_bf16"), seeds=(0, 4, 7), repeats=2, steps=4, warmup=1)
    cells = plan_cells(config, settings, explicit_steps=4)
    assert len(cells) == 2 * 2 * 3 * 2
    assert len({cell.run.key for cell in cells}) == len(cells)
    assert {cell.run.seed for cell in cells} == {0, 4, 7}
    assert "jax/mnist_cnn/amp_bf16/s7/r1" in {cell.run.key for cell in cells}
    # every repeat 0 runs before any repeat 1, and fp32 and AMP of one seed run side by side
    assert [cell.run.repeat for cell in cells] == sorted(cell.run.repeat for cell in cells)
    assert (cells[0].run.seed, cells[1].run.seed) == (0, 0)
    alone = with_overrides(config.settings, frameworks=("torch",), workloads=("mnist_cnn",), precisions=("fp32",),
                           seed=9, repeats=1, steps=4, warmup=1)
    (cell,) = plan_cells(config, alone, explicit_steps=4)
    assert cell.run.seed == 9 and not cell.run.seed_axis and cell.run.key == "torch/mnist_cnn/fp32/r0"


def test_the_seed_defines_a_cell_and_the_axis_only_names_it():
    workload = load_config(None).workloads["mnist_cnn"]
    one = cell_definition(RunSpec("torch", "w", "fp32", seed=1), workload)
    assert cell_definition(RunSpec("torch", "w", "fp32", seed=1, seed_axis=True), workload) == one
    assert cell_definition(RunSpec("torch", "w", "fp32", seed=2, seed_axis=True), workload) != one


@pytest.mark.parametrize(("text", "seeds"), [("5", (0, 1, 2, 3, 4)), ("1", (0,)), ("0,3", (0, 3)), ("7,", (7,)),
                                             ("7 , ", (7,)),
                                             (" 2 , 9 ", (2, 9))])
def test_the_flag_reads_a_count_or_a_list(text, seeds):
    assert parse_seeds(text) == seeds


def test_a_count_in_benchmarks_toml_or_the_api_is_seeds_0_to_n_minus_1():
    assert check_table({"seeds": 3}, SETTINGS_FIELDS, "[defaults]")["seeds"] == (0, 1, 2)
    assert check_table({"seeds": [3]}, SETTINGS_FIELDS, "[defaults]")["seeds"] == (3,)
    assert SweepSettings(seeds=2).seeds == (0, 1) and SweepSettings(seeds=2).seed_list == (0, 1)
    assert SweepSettings(seed=4).seed_list == (4,)


@pytest.mark.parametrize(("values", "needle"), [
    ({"seeds": (0, -1)}, "seeds must be >= 0, got -1 (allowed: 0 to 4294967295)"),
    ({"seeds": (0, 1.5)}, "seeds must be integers, got 1.5"),
    ({"seeds": ("a",)}, "seeds must be integers, got 'a'"),
    ({"seeds": (True,)}, "seeds must be integers, got True"),
    ({"seeds": (2, 2)}, "seeds lists 2 more than once"),
    ({"seeds": (2**32,)}, "seeds must be <= 4294967295, got 4294967296"),
    ({"equivalence_margin": 0.0}, "equivalence_margin must be > 0, got 0.0"),
    ({"equivalence_margin": -0.5}, "equivalence_margin must be > 0, got -0.5"),
    ({"equivalence_margin": math.nan}, "equivalence_margin must be a finite number, got nan"),
    ({"equivalence_margin": "1"}, "equivalence_margin must be a number, got '1'"),
])
def test_bad_seeds_and_margins_are_one_line_errors(values, needle):
    assert needle in one_line_error(lambda: with_overrides(SweepSettings(), **values).check())


@pytest.mark.parametrize(("given", "needle"), [
    (0, "seeds must be a count from 1 to 10000 or a list of integers from 0 to 4294967295, got 0"),
    (-3, "got -3"), (10_001, "got 10001")])
def test_a_count_below_one_or_too_large_is_refused_in_one_line(given, needle):
    assert needle in one_line_error(lambda: SweepSettings(seeds=given))
    assert needle in one_line_error(lambda: parse_seeds(str(given)))
    assert needle in one_line_error(lambda: check_table({"seeds": given}, SETTINGS_FIELDS, "[defaults]"))


def test_the_command_line_refuses_bad_seeds_and_margins_before_any_cell(tiny_config):
    for args, needle in ((["--seeds", "x"], "seeds must be integers, got 'x'"),
                         (["--equivalence-margin", "0"], "equivalence_margin must be > 0")):
        out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", *args)
        assert out.returncode == 2 and needle in out.stderr.strip().splitlines()[-1], out.stderr
        assert not (tiny_config.parent / "out" / "results.jsonl").exists()


def test_resume_runs_only_the_seeds_not_run_yet(tiny_config, tmp_path, clean_fake_env):
    args = ("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32", "--steps", "2", "-q")
    first = run_cli(*args, "--seeds", "2")
    assert first.returncode == 0, first.stderr
    lines = (tmp_path / "out" / "results.jsonl").read_text().splitlines()
    assert [json.loads(line)["key"] for line in lines] == ["fake/tiny/fp32/s0/r0", "fake/tiny/fp32/s1/r0"]
    again = run_cli(*args, "--seeds", "0,1,2", "--resume")
    assert again.returncode == 0, again.stderr
    stored = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["key"] for r in stored] == ["fake/tiny/fp32/s0/r0", "fake/tiny/fp32/s1/r0", "fake/tiny/fp32/s2/r0"]
    assert [r["config"]["seed"] for r in stored] == [0, 1, 2]
    frame = amp_suite.load(tmp_path / "out")
    assert list(frame["seed"]) == [0, 1, 2] and frame["seed_axis"].all()


# --- the verdict over seeds, through the report --------------------------------------------------

def seeded(framework, precision, seed, accuracy, loss=0.3, *, repeat=0, workload="w", status="ok",
           extra=None, throughput=100.0) -> CellResult:
    metrics = {"throughput": throughput, "peak_rss_bytes": 2**28, "val_accuracy": accuracy, "val_loss": loss,
               "final_loss": loss, "measurement_flags": [], **(extra or {})} if status == "ok" else {}
    return CellResult(key=f"{framework}/{workload}/{precision}/s{seed}/r{repeat}", framework=framework,
                      workload=workload, precision=precision, repeat=repeat, status=status,
                      error="" if status == "ok" else "boom", metrics=metrics,
                      config={"dataset": "mnist", "batch_size": 8, "seed": seed, "seed_axis": True},
                      device={"kind": "cpu", "name": "Test CPU"})


def sweep_of(fp32: list[float], amp: list[float], framework="torch", precision="amp_bf16") -> list[CellResult]:
    return [cell for seed, (a, b) in enumerate(zip(fp32, amp, strict=True))
            for cell in (seeded(framework, "fp32", seed, a), seeded(framework, precision, seed, b))]


TWO_SEEDS = sweep_of([0.900, 0.910], [0.901, 0.905])  # differences +0.1 and -0.5 points
FIVE_SEEDS = sweep_of([0.900, 0.910, 0.920, 0.930, 0.940],
                      [0.901, 0.909, 0.920, 0.9305, 0.9395])  # +0.1, -0.1, 0, +0.05, -0.05 points
ENVIRONMENT = {"settings": {"equivalence_margin": 0.5, "seeds": [0, 1, 2, 3, 4]}}


def _accuracy_row(results, environment=ENVIRONMENT):
    frame = equivalence_frame(results_frame(results, environment), 0.5)
    return frame[(frame["figure"] == "val_accuracy") & (frame["comparison"] == "precision")].iloc[0]


def test_two_seeds_are_inconclusive_with_the_hand_computed_interval():
    row = _accuracy_row(TWO_SEEDS)
    sd = math.sqrt(((0.1 + 0.2) ** 2 + (-0.5 + 0.2) ** 2) / 1)
    half = T_1 * sd / math.sqrt(2)
    assert row["seeds"] == 2 and row["mean"] == pytest.approx(-0.2)
    assert (row["low"], row["high"]) == (pytest.approx(-0.2 - half, rel=1e-5), pytest.approx(-0.2 + half, rel=1e-5))
    assert row["verdict"] == "inconclusive" and row["seeds_to_settle"] > 2
    line = next(line for line in sweep_verdict(TWO_SEEDS, ENVIRONMENT).lines if line.precision == "amp_bf16")
    assert line.accuracy_verdict.startswith("inconclusive within ±0.5 pt")
    assert line.accuracy_delta_pt == pytest.approx(-0.2)


def test_five_seeds_are_equivalent_with_the_hand_computed_interval():
    row = _accuracy_row(FIVE_SEEDS)
    differences = [0.1, -0.1, 0.0, 0.05, -0.05]
    sd = math.sqrt(sum(d * d for d in differences) / 4)
    half = T_4 * sd / math.sqrt(5)
    assert row["mean"] == pytest.approx(0.0, abs=1e-9) and row["high"] == pytest.approx(half, rel=1e-5)
    assert row["verdict"] == "equivalent" and row["seeds"] == 5
    report = render_markdown(FIVE_SEEDS, ENVIRONMENT)
    verdict_block = report.split("## Environment")[0]
    assert f"equivalent within ±0.5 pt: [{-half:+.2f}, {half:+.2f}] over 5 seeds" in verdict_block
    section = report.split("## Accuracy over seeds")[1].split("\n## ")[0]
    assert "| w | torch amp_bf16 | fp32 |" in section and "**equivalent** (±0.5)" in section
    assert "| framework | precision | seed | repeat | status |" in report.split("## Every run")[1]
    assert "5 seeds, 0 to 4" in report.split("## Environment")[1].split("\n## ")[0]


def test_a_margin_narrower_than_the_interval_makes_the_same_seeds_inconclusive():
    frame = equivalence_frame(results_frame(FIVE_SEEDS, {}), 0.05)
    assert frame[frame["figure"] == "val_accuracy"].iloc[0]["verdict"] == "inconclusive"
    strict = summary_frame(FIVE_SEEDS, {"settings": {"equivalence_margin": 0.05}})
    assert strict[strict["precision"] == "amp_bf16"].iloc[0]["accuracy_equivalence"] == "inconclusive"


def test_a_clear_drop_is_worse_and_the_loss_interval_says_higher():
    fp32, amp = [0.90, 0.91, 0.92, 0.93], [0.88, 0.891, 0.899, 0.911]  # about -2 points each
    results = [cell for seed, (a, b) in enumerate(zip(fp32, amp, strict=True))
               for cell in (seeded("torch", "fp32", seed, a, 0.30 + seed / 100),
                            seeded("torch", "amp_fp16", seed, b, 0.35 + seed / 100 + (seed % 2) / 1000))]
    frame = equivalence_frame(results_frame(results, {}), 0.5)
    accuracy = frame[frame["figure"] == "val_accuracy"].iloc[0]
    loss = frame[frame["figure"] == "val_loss"].iloc[0]
    assert accuracy["verdict"] == "worse" and accuracy["high"] < -0.5
    assert loss["verdict"] == "higher" and loss["low"] > 0 and math.isnan(loss["margin"])


def test_a_faster_precision_that_is_worse_beyond_the_margin_says_so_in_its_sentence():
    results = [cell for seed, (a, b) in enumerate([(0.90, 0.88), (0.91, 0.889), (0.92, 0.899), (0.93, 0.911)])
               for cell in (seeded("torch", "fp32", seed, a, throughput=100.0 + seed),
                            seeded("torch", "amp_bf16", seed, b, throughput=200.0 + seed))]
    verdict = sweep_verdict(results, {})
    (line,) = verdict.lines
    assert line.faster and line.accuracy_verdict.startswith("worse within ±0.5 pt")
    assert "-2.03 pt below fp32's (worse than fp32's beyond the equivalence margin" in verdict.frameworks[0].sentence


def test_repeats_of_one_seed_are_averaged_before_pairing():
    results = [seeded("torch", "fp32", 0, 0.90), seeded("torch", "fp32", 0, 0.92, repeat=1),
               seeded("torch", "amp_bf16", 0, 0.91), seeded("torch", "fp32", 1, 0.90),
               seeded("torch", "amp_bf16", 1, 0.90), seeded("torch", "amp_bf16", 1, 0.94, repeat=1)]
    row = _accuracy_row(results, {})
    # seed 0: 0.91 - mean(0.90, 0.92) = 0; seed 1: mean(0.90, 0.94) - 0.90 = +2 points
    assert row["seeds"] == 2 and row["mean"] == pytest.approx(1.0)


def test_frameworks_are_compared_with_each_other_at_fp32_by_seed():
    results = sweep_of([0.90, 0.91, 0.92], [0.90, 0.91, 0.92], "torch") \
        + sweep_of([0.93, 0.94, 0.95], [0.93, 0.94, 0.95], "jax")
    frame = equivalence_frame(results_frame(results, {}), 0.5)
    across = frame[(frame["comparison"] == "framework") & (frame["figure"] == "val_accuracy")]
    assert len(across) == 1
    row = across.iloc[0]
    assert (row["framework"], row["precision"], row["control"]) == ("jax", "fp32", "torch")
    assert row["mean"] == pytest.approx(3.0) and row["verdict"] == "better"
    assert "Frameworks against each other at fp32" in render_markdown(results, {})


def test_frameworks_in_their_own_default_modes_are_still_compared_and_judged():
    results = sweep_of([0.90, 0.91, 0.92], [0.90, 0.91, 0.92], "torch") \
        + sweep_of([0.90, 0.91, 0.92], [0.90, 0.91, 0.92], "jax")
    for result in results:  # what each framework reports as its default mode, without --modes
        result.mode = "eager" if result.framework == "torch" else "compiled"
    frame = equivalence_frame(results_frame(results, {}), 0.5)
    assert len(frame[frame["comparison"] == "framework"]) == 2  # accuracy and loss, jax against torch
    lines = sweep_verdict(results, {}).lines
    assert all(line.accuracy_verdict.startswith("equivalent") for line in lines)


def test_a_batch_axis_gives_a_verdict_per_batch_named_in_the_section():
    small = sweep_of([0.90, 0.91, 0.92], [0.90, 0.91, 0.92])
    large = sweep_of([0.90, 0.91, 0.92], [0.85, 0.86, 0.87])
    for result in large:
        result.config = {**result.config, "batch_size": 64}
    section = render_markdown(small + large, {}).split("## Accuracy over seeds")[1].split("\n## ")[0]
    assert "| w / batch 8 | torch amp_bf16 | fp32 | +0.00 [+0.00, +0.00] | **equivalent** (±0.5)" in section
    assert "| w / batch 64 | torch amp_bf16 | fp32 | -5.00 [-5.00, -5.00] | **worse** (±0.5)" in section


def test_one_seed_gives_no_verdict_and_no_section():
    results = [seeded("torch", "fp32", 0, 0.9), seeded("torch", "amp_bf16", 0, 0.88)]
    line = next(line for line in sweep_verdict(results, {}).lines if line.precision == "amp_bf16")
    assert line.accuracy_verdict is None and line.accuracy_delta_pt == pytest.approx(-2.0)
    assert "## Accuracy over seeds" not in render_markdown(results, {})


def test_a_failed_seed_drops_out_of_the_pairs_and_the_sweep_still_reports():
    results = FIVE_SEEDS[:-1] + [seeded("torch", "amp_bf16", 4, 0.0, status="failed")]
    row = _accuracy_row(results)
    assert row["seeds"] == 4
    assert "## Accuracy over seeds" in render_markdown(results, ENVIRONMENT)


def test_time_to_target_over_seeds_is_the_median_with_its_range():
    def reached(seed, seconds, precision="fp32"):
        return seeded("torch", precision, seed, 0.95, extra={"target_accuracy": 0.9, "target_reached": True,
                                                             "time_to_target_s": seconds})

    results = [reached(0, 10.0), reached(1, 14.0), reached(2, 11.0),
               seeded("torch", "fp32", 3, 0.85, extra={"target_accuracy": 0.9, "target_reached": False})]
    section = render_markdown(results, {}).split("## Accuracy over seeds")[1]
    assert "| w | torch | fp32 | 11 s | 10–14 s | 3 of 4 |" in section


def test_compare_keeps_every_seed_as_a_run_of_the_cell(tmp_path):
    def sweep(accuracies):
        return [seeded("torch", "fp32", seed, a) for seed, a in enumerate(accuracies)]

    frame = compare_results(sweep([0.90, 0.92, 0.94]), sweep([0.91, 0.93, 0.95]))
    accuracy = frame[frame["metric"] == "val_accuracy"].iloc[0]
    geometric_mean = (0.90 * 0.92 * 0.94) ** (1 / 3), (0.91 * 0.93 * 0.95) ** (1 / 3)  # over the seeds
    assert (accuracy["base"], accuracy["new"]) == pytest.approx(geometric_mean)
    assert accuracy["ratio"] == pytest.approx(accuracy["new"] / accuracy["base"])
    assert accuracy["basis"] == "repeats" and not math.isnan(accuracy["low"])


def test_the_api_reads_a_sweeps_verdicts_and_refuses_a_bad_margin(tmp_path: Path):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "results.jsonl").write_text("".join(json.dumps(asdict(r)) + "\n" for r in FIVE_SEEDS))
    (out / "environment.json").write_text(json.dumps(ENVIRONMENT))
    frame = amp_suite.equivalence(out)
    assert set(frame["figure"]) == {"val_accuracy", "val_loss"}
    assert frame[frame["figure"] == "val_accuracy"].iloc[0]["verdict"] == "equivalent"
    narrow = amp_suite.equivalence(out, margin=0.05)
    assert narrow[narrow["figure"] == "val_accuracy"].iloc[0]["verdict"] == "inconclusive"
    assert "equivalence_margin must be > 0, got -1" in one_line_error(lambda: amp_suite.equivalence(out, margin=-1))


# --- learning curves ---------------------------------------------------------------------------

def test_the_curve_tracker_records_at_each_epochs_end_or_every_n_steps():
    from amp_suite.cell.curve import CurveTracker
    from amp_suite.cell.windows import Phase

    phases = [Phase("warmup", e, 0, 2) for e in range(2)] + [Phase("window", e, 2, 6) for e in range(2)]
    phases.sort(key=lambda p: (p.epoch, p.start))
    figures = {"val_loss": 1.5, "val_accuracy": 0.5}
    for every, expected in ((0, [6, 12]), (3, [6, 12]), (2, [2, 6, 8, 12]), (None, [])):
        tracker = CurveTracker(every, 6)
        for phase in phases:
            if tracker.due(phase):
                tracker.record(phase, figures)
        assert [point[0] for point in tracker.points] == expected, every
        assert tracker.figures() == ({} if every is None else
                                     {"learning_curve": {"every_steps": every or 6, "points": tracker.points}})


def curved(framework, precision, seed, points, repeat=0) -> CellResult:
    result = seeded(framework, precision, seed, points[-1][2], points[-1][1], repeat=repeat)
    result.metrics["learning_curve"] = {"every_steps": 10, "points": [list(p) for p in points]}
    return result


def test_curve_bands_are_the_median_and_range_over_seeds_with_repeats_averaged_first():
    from amp_suite.report.curves import curve_bands, curve_lines, curve_points

    results = [curved("torch", "fp32", 0, [(10, 1.0, 0.50), (20, 0.6, 0.80)]),
               curved("torch", "fp32", 1, [(10, 1.2, 0.40), (20, 0.8, 0.70)]),
               curved("torch", "fp32", 1, [(10, 1.4, 0.30), (20, 0.8, 0.70)], repeat=1),
               curved("torch", "fp32", 2, [(10, 0.9, 0.60), (20, 0.5, 0.90)]),
               curved("torch", "amp_bf16", 0, [(10, 1.0, 0.55)])]
    points = curve_points(results)
    assert len(points) == 9 and set(points["seed"]) == {0, 1, 2}
    bands = curve_bands(points)
    first = bands[(bands["precision"] == "fp32") & (bands["steps"] == 10)].iloc[0]
    assert first["seeds"] == 3  # seed 1's two repeats are one seed: loss 1.3, accuracy 0.35
    assert (first["val_loss_median"], first["val_loss_min"], first["val_loss_max"]) == pytest.approx((1.0, 0.9, 1.3))
    assert (first["val_accuracy_min"], first["val_accuracy_max"]) == pytest.approx((0.35, 0.6))
    assert list(bands["precision"]) == ["fp32", "fp32", "amp_bf16"]  # fp32 first, as in every table
    lines = curve_lines(results)
    assert "| torch | fp32 | 10 | 50.00% (35.00%–60.00%) | 1.0000 (0.9000–1.3000) | 3 |" in lines
    assert curve_lines([seeded("torch", "fp32", 0, 0.9)]) == []


def test_a_sweep_with_curve_every_stores_a_curve_per_cell_and_reports_it(tiny_config, tmp_path, clean_fake_env):
    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32", "--steps", "3",
                  "--epochs", "2", "--seeds", "2", "--curve-every", "0", "-q")
    assert out.returncode == 0, out.stderr
    stored = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    for record in stored:
        curve = record["metrics"]["learning_curve"]
        assert curve["every_steps"] == 3 and [p[0] for p in curve["points"]] == [3, 6]
        assert curve["points"][-1][1] == pytest.approx(record["metrics"]["val_loss"])  # the last point is the end
    frame = amp_suite.learning_curves(tmp_path / "out")
    assert len(frame) == 4 and list(frame["seed"]) == [0, 0, 1, 1]
    assert "## Learning curves" in (tmp_path / "out" / "report.md").read_text()
    bad = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--curve-every", "-1")
    assert bad.returncode == 2 and "curve_every must be >= 0, got -1" in bad.stderr


@pytest.mark.usefixtures("report_charts")
def test_the_html_report_has_the_verdicts_over_seeds():
    from amp_suite.report.html import render_html

    page = render_html(FIVE_SEEDS, ENVIRONMENT)
    assert 'id="seeds-section"' in page and "equivalent (±0.5)" in page
    assert 'id="seeds-section"' not in render_html([seeded("torch", "fp32", 0, 0.9)], {})


def test_the_curve_chart_draws_a_band_per_precision_as_a_stable_png():
    pytest.importorskip("matplotlib")
    from amp_suite.report.curve_chart import curve_chart_png, curve_figure
    from amp_suite.report.curves import curve_bands, curve_points

    results = [curved("torch", precision, seed, [(10, 1.0 + seed / 10, 0.5 + seed / 20), (20, 0.6, 0.8)])
               for precision in ("fp32", "amp_bf16") for seed in range(3)]
    bands = curve_bands(curve_points(results))
    figure = curve_figure(bands, "w")
    accuracy_axes, loss_axes = figure.axes
    assert [line.get_label() for line in accuracy_axes.lines] == ["torch fp32", "torch amp_bf16"]
    assert list(accuracy_axes.lines[0].get_ydata()) == pytest.approx([55.0, 80.0])  # median over seeds, in %
    assert len(accuracy_axes.collections) == 2 and len(loss_axes.collections) == 2  # one band per precision
    png = curve_chart_png(bands, "w")
    assert png is not None and png.startswith(b"\x89PNG") and png == curve_chart_png(bands, "w")
    assert curve_chart_png(bands, "other") is None


@pytest.mark.parametrize("text", ["7,,", ",7", "0,,3", "0,3,"])
def test_any_other_empty_entry_is_refused_like_every_list(text):
    with pytest.raises(UsageError, match="has an empty entry between commas"):
        parse_seeds(text)
