"""An AMP row is compared with its fp32 row only when both ran the same cell but for the precision (and seed).

A trial ran fp32,amp_bf16 for 3 steps, then fp32 alone for 6 into the same folder: `report DIR` called the
accuracy gap of 6 steps against 3 an AMP effect of -21.85 points.
"""

from __future__ import annotations

import copy
import math

import pytest

from amp_suite.records import CellResult
from amp_suite.report.normalize import render_markdown, summary_frame, sweep_verdict
from amp_suite.report.settings_match import differences, settings_key
from amp_suite.report.superseded import current_results, without_superseded

DEFINITION = {"workload": {"input_size": 28}, "data": {"dataset": "mnist"},
              "options": {"steps": 6, "warmup": 1, "seed": 0}, "environment": {"jax": "0.10.2"}}


def cell(precision, *, throughput, accuracy, repeat=0, seed=0, seed_axis=True, **options) -> CellResult:
    definition = copy.deepcopy(DEFINITION)
    definition["options"].update(seed=seed, **options)
    return CellResult(key=f"jax/w/{precision}/s{seed}/r{repeat}", framework="jax", workload="w",
                      precision=precision, repeat=repeat, status="ok",
                      metrics={"throughput": throughput, "val_accuracy": accuracy, "peak_rss_bytes": 1 << 28},
                      config={"dataset": "mnist", "batch_size": 8, "seed": seed, "seed_axis": seed_axis},
                      device={"kind": "cpu"},
                      definition=definition)


def _row(results, precision="amp_bf16"):
    summary = summary_frame(results, {})
    return summary[summary["precision"] == precision].iloc[0]


def test_cells_of_other_steps_are_not_compared_and_the_verdict_says_why():
    results = [cell("fp32", throughput=100.0, accuracy=0.67), cell("amp_bf16", throughput=97.0, accuracy=0.45,
                                                                    steps=3)]
    row = _row(results)
    assert row["settings_differ"] == "ran with other settings than fp32 (steps 6 -> 3)"
    assert row["speedup"] != row["speedup"] and row["accuracy_delta"] != row["accuracy_delta"]  # NaN: none
    assert row["throughput"] == 97.0  # its own figures stay
    [line] = sweep_verdict(results, {}).lines
    assert line.speedup is None and line.accuracy_delta_pt is None
    assert line.status == "not compared: ran with other settings than fp32 (steps 6 -> 3)"
    report = render_markdown(results, {})
    assert "> **Not compared:** jax / w / amp_bf16 ran with other settings than fp32 (steps 6 -> 3)" in report
    assert "-22" not in report.split("## Environment")[0]
    assert "45.00% (not compared: other settings than fp32)" in report  # its accuracy cell: why it has no delta
    assert "97 (not compared: other settings than fp32)" in report


def test_cells_that_ran_alike_are_compared_seeds_included():
    results = [cell("fp32", throughput=100.0, accuracy=0.9, seed=s) for s in (0, 1)] + \
              [cell("amp_bf16", throughput=150.0, accuracy=0.9, seed=s) for s in (0, 1)]
    row = _row(results)
    assert row["settings_differ"] == "" and row["speedup"] == pytest.approx(1.5)
    report = render_markdown(results, {"settings": {"steps": 6}})
    assert "Not compared" not in report and "- sweep: 6 steps per epoch" in report


def test_without_a_seed_axis_an_amp_cell_of_another_seed_is_not_compared_with_fp32():
    """A hostile user's trial: amp_bf16 run with --seed 7 into a folder of fp32 at seed 0 read -17.95 pt of
    accuracy against it as if paired (with the same seed: -0.10 pt); seeds pair only as the sweep's axis."""
    results = [cell("fp32", throughput=100.0, accuracy=0.7555, seed_axis=False),
               cell("amp_bf16", throughput=150.0, accuracy=0.576, seed=7, seed_axis=False)]
    row = _row(results)
    assert row["settings_differ"] == "ran with other settings than fp32 (seed 0 -> 7)", row["settings_differ"]
    assert math.isnan(row["speedup"])
    report = render_markdown(results, {})
    assert "-17.95 pt" not in report and "Accuracy over seeds" not in report


def test_repeats_of_one_precision_with_other_settings_are_named():
    results = [cell("fp32", throughput=100.0, accuracy=0.9, repeat=0),
               cell("fp32", throughput=100.0, accuracy=0.9, repeat=1, warmup=2),
               cell("amp_bf16", throughput=150.0, accuracy=0.9)]
    assert _row(results)["settings_differ"] == "fp32's own repeats ran with different settings (warmup 1 -> 2)"


def test_results_stored_before_definitions_are_not_judged():
    old = [cell("fp32", throughput=100.0, accuracy=0.9), cell("amp_bf16", throughput=150.0, accuracy=0.9, steps=3)]
    for result in old:
        result.definition = {}
    assert settings_key(old[0]) == "" and _row(old)["speedup"] == pytest.approx(1.5)


def test_a_difference_names_at_most_three_values():
    base = cell("fp32", throughput=1.0, accuracy=0.9)
    other = cell("fp32", throughput=1.0, accuracy=0.9, steps=1, warmup=0, epochs=2, lr=0.5)
    assert differences(base, other) == "epochs absent -> 2, lr absent -> 0.5, steps 6 -> 1 and 1 more"
    other.definition["workload"]["layers"] = [{"kind": "conv", "filters": 32}] * 50  # thousands of characters
    assert len(differences(base, other)) < 250


def test_accuracy_over_seeds_and_the_best_configuration_pair_only_cells_that_ran_alike():
    """The reviewer's case: with seeds, the report's own seeds table and best-configuration line still compared
    6-step fp32 with 3-step amp_bf16 ("-29.00 pt, worse", "1.50x the fp32 baseline")."""
    results = [cell("fp32", throughput=100.0, accuracy=0.67, seed=s) for s in (0, 1, 2)] + \
              [cell("amp_bf16", throughput=150.0, accuracy=0.38 + s / 100, seed=s, steps=3) for s in (0, 1, 2)]
    report = render_markdown(results, {})
    assert "Not compared" in report
    assert "| **worse** (" not in report and "1.50x the fp32" not in report
    alike = [cell("fp32", throughput=100.0, accuracy=0.67, seed=s) for s in (0, 1, 2)] + \
            [cell("amp_bf16", throughput=150.0, accuracy=0.38 + s / 100, seed=s) for s in (0, 1, 2)]
    compared = render_markdown(alike, {})
    assert "| **worse** (" in compared and "1.50x the fp32" in compared  # the same figures, compared when alike


def test_a_ratio_to_tf32_is_taken_only_from_a_tf32_row_of_the_same_settings():
    results = [cell("fp32", throughput=100.0, accuracy=0.9), cell("amp_bf16", throughput=150.0, accuracy=0.9),
               cell("tf32", throughput=300.0, accuracy=0.9, steps=3)]
    summary = summary_frame(results, {})
    amp = summary[summary["precision"] == "amp_bf16"].iloc[0]
    assert amp["speedup"] == pytest.approx(1.5) and amp["speedup_over_tf32"] != amp["speedup_over_tf32"]
    assert amp["tf32_settings_differ"] == "ran with other settings than tf32 (steps 3 -> 6)"
    report = render_markdown(results, {})
    assert "jax / w / amp_bf16 ran with other settings than tf32 (steps 3 -> 6): no ratio to tf32" in report
    assert "over tf32" not in report.split("## Environment")[0]
    alike = [*results[:2], cell("tf32", throughput=300.0, accuracy=0.9)]
    amp = summary_frame(alike, {}).set_index("precision").loc["amp_bf16"]
    assert amp["speedup_over_tf32"] == pytest.approx(0.5) and amp["tf32_settings_differ"] == ""


def _on(result: CellResult, *, devices=1, mode=""):
    result.config = {**result.config, "devices": devices}
    result.definition["options"]["devices"] = devices
    result.mode = mode
    result.key += f"/{devices}/{mode}"
    return result


def test_scaling_is_taken_only_over_a_one_device_row_of_the_same_settings_but_the_devices():
    alike = [_on(cell("fp32", throughput=100.0, accuracy=0.9)),
             _on(cell("fp32", throughput=180.0, accuracy=0.9), devices=2)]
    two = summary_frame(alike, {}).set_index("devices").loc[2]
    assert two["scaling_speedup"] == pytest.approx(1.8) and two["scaling_settings_differ"] == ""
    apart = [alike[0], _on(cell("fp32", throughput=180.0, accuracy=0.9, steps=3), devices=2)]
    two = summary_frame(apart, {}).set_index("devices").loc[2]
    assert two["scaling_speedup"] != two["scaling_speedup"]
    assert two["scaling_settings_differ"] == "ran with other settings than its one-device row (steps 6 -> 3)"


def test_a_ratio_to_the_base_mode_is_taken_only_from_a_base_mode_row_of_the_same_settings():
    eager = _on(cell("fp32", throughput=100.0, accuracy=0.9), mode="eager")
    alike = [eager, _on(cell("fp32", throughput=150.0, accuracy=0.9), mode="jit")]
    jit = summary_frame(alike, {}).set_index("mode").loc["jit"]
    assert jit["speedup_over_base_mode"] == pytest.approx(1.5) and jit["base_mode_settings_differ"] == ""
    apart = [eager, _on(cell("fp32", throughput=150.0, accuracy=0.9, warmup=4), mode="jit")]
    jit = summary_frame(apart, {}).set_index("mode").loc["jit"]
    assert jit["speedup_over_base_mode"] != jit["speedup_over_base_mode"]
    assert jit["base_mode_settings_differ"] == "ran with other settings than eager, its base mode (warmup 1 -> 4)"


def test_options_that_only_amp_applies_do_not_keep_fp32_from_being_compared():
    """keep_fp32 and loss scaling change nothing in fp32 or tf32: an amp_bf16 run again with layers kept in float32
    beside the fp32 of an earlier run is still compared with it; other options still are not."""
    kept = cell("amp_bf16", throughput=150.0, accuracy=0.9, options={"keep_fp32": ["head"], "loss_scaling": "none"})
    results = [cell("fp32", throughput=100.0, accuracy=0.9, options={}), kept]
    row = _row(results)
    assert row["settings_differ"] == "" and row["speedup"] == pytest.approx(1.5)
    other = cell("amp_bf16", throughput=150.0, accuracy=0.9, options={"jit_compile": False})
    row = _row([results[0], other])
    assert row["settings_differ"] == "ran with other settings than fp32 (options.jit_compile absent -> False)"


def test_a_cell_a_later_run_of_its_row_superseded_with_other_settings_is_left_out_and_named():
    """A hostile user's trial: fp32 run again for 6 steps into a folder of 3-step cells replaced its repeat 0 and
    kept its repeat 1, and the report's fp32 figures were the mean of the two configurations (76.83%), unmarked."""
    first = [cell("fp32", throughput=100.0, accuracy=0.7555, repeat=r, steps=3) for r in (0, 1)] + \
            [cell("amp_bf16", throughput=150.0, accuracy=0.75, repeat=r, steps=3) for r in (0, 1)]
    for result in first:
        result.started_at = "2026-11-28T10:00:00+00:00"
    again = cell("fp32", throughput=300.0, accuracy=0.7810, repeat=0, steps=6)
    again.started_at = "2026-11-28T11:00:00+00:00"
    results = [again, *first[1:]]  # the store keeps the latest line of each key: r0 is the 6-step run
    kept, superseded = current_results(results)
    assert [r.key for r in kept] == [again.key, *(r.key for r in first[2:])]
    assert superseded == [f"{first[1].key} (steps 6 -> 3)"]
    summary = summary_frame(kept, {})
    fp32 = summary[summary["precision"] == "fp32"].iloc[0]
    assert fp32["val_accuracy"] == pytest.approx(0.7810) and fp32["repeats"] == 1
    report = render_markdown(*without_superseded(results, {}))
    assert "**Superseded:** 1 cell" in report and "76.83%" not in report and "78.10%" in report
    assert "not compared" in report  # amp_bf16 ran 3 steps, fp32 now 6


def test_cells_of_one_settings_are_all_kept_whatever_their_start():
    results = [cell("fp32", throughput=100.0, accuracy=0.9, repeat=r) for r in (0, 1)]
    results[1].started_at = "2026-11-28T11:00:00+00:00"
    assert current_results(results) == (results, [])
