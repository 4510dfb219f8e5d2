"""Intervals on speed-ups, interleaved repeats, and the noise flags of a busy machine."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import amp_suite
from amp_suite.cell.windows import Phase, steady_state
from amp_suite.machine import noise
from amp_suite.records import CellResult, EpochResult
from amp_suite.report.intervals import (
    LogEstimate,
    f_survival,
    log_interval,
    paired_log_interval,
    pooled_log_intervals,
    t_quantile,
)
from amp_suite.report.normalize import render_markdown, summary_frame
from suite_cli import run_cli


def test_t_quantile_matches_the_textbook_values():
    assert t_quantile(1) == pytest.approx(12.706, abs=1e-3)
    assert t_quantile(4) == pytest.approx(2.776, abs=1e-3)
    assert t_quantile(25) == pytest.approx(2.060, abs=2e-3)
    assert t_quantile(10_000) == pytest.approx(1.960, abs=3e-3)


@pytest.mark.parametrize("n, sigma", [(2, 0.05), (3, 0.12), (5, 0.2), (10, 0.08)])
def test_paired_log_interval_covers_the_true_ratio_95_percent_of_the_time(n, sigma):
    # Throughputs with multiplicative noise: each repeat's ratio is true_ratio * lognormal noise.
    rng = np.random.default_rng(1234 + n)
    true = 1.7
    draws, covered = 4000, 0
    for _ in range(draws):
        fp32 = 1000 * np.exp(rng.normal(0, sigma, n))
        amp = fp32 * true * np.exp(rng.normal(0, sigma, n))
        interval = paired_log_interval(dict(enumerate(amp)), dict(enumerate(fp32)))
        covered += interval.low <= true <= interval.high
    assert 0.935 <= covered / draws <= 0.965


def test_welch_difference_of_log_estimates_covers_the_true_ratio():
    rng = np.random.default_rng(7)
    draws, covered = 3000, 0
    for _ in range(draws):
        base = 500 * np.exp(rng.normal(0, 0.05, 4))
        new = 450 * np.exp(rng.normal(0, 0.15, 6))  # unequal spreads and sizes
        interval = (LogEstimate.of(new, "repeats") - LogEstimate.of(base, "repeats")).interval()
        covered += interval.low <= 0.9 <= interval.high
    assert 0.93 <= covered / draws <= 0.97


def test_f_survival_matches_the_textbook_quantiles():
    assert f_survival(5.987, 1, 6) == pytest.approx(0.05, abs=2e-4)
    assert f_survival(7.559, 2, 10) == pytest.approx(0.01, abs=1e-4)
    assert f_survival(161.45, 1, 1) == pytest.approx(0.05, abs=2e-4)
    assert f_survival(0.0, 3, 3) == 1.0 and f_survival(math.inf, 3, 3) == 0.0


def test_pooled_intervals_cover_95_percent_and_are_far_narrower_with_two_repeats():
    # A default sweep: 6 AMP cells (3 frameworks x 2 precisions), 2 paired repeats each, one machine's noise.
    rng = np.random.default_rng(99)
    truths = [0.1, 0.8, 1.0, 1.2, 1.7, 2.5]
    draws, covered, pooled_widths, own_widths = 2000, 0, [], []
    for _ in range(draws):
        groups = [list(true * np.exp(rng.normal(0, 0.15, 2))) for true in truths]
        for true, group, interval in zip(truths, groups, pooled_log_intervals(groups), strict=True):
            covered += interval.low <= true <= interval.high
            pooled_widths.append(math.log(interval.high / interval.low))
            own = log_interval(group)
            own_widths.append(math.log(own.high / own.low))
    assert 0.935 <= covered / (draws * len(truths)) <= 0.965
    # t(1) = 12.7 against t(6) = 2.45: the pooled interval is several times narrower on average
    assert np.mean(pooled_widths) < 0.4 * np.mean(own_widths)


def test_a_cell_far_noisier_than_the_rest_keeps_its_own_interval():
    rng = np.random.default_rng(5)
    quiet = [list(1.5 * np.exp(rng.normal(0, 0.02, 3))) for _ in range(5)]
    wild = [0.4, 1.6, 3.0]
    intervals = pooled_log_intervals([*quiet, wild])
    assert intervals[-1].noisier and not any(i.noisier for i in intervals[:-1])
    assert intervals[-1].basis == "paired repeats"
    assert (intervals[-1].low, intervals[-1].high) == pytest.approx((log_interval(wild).low, log_interval(wild).high))
    assert all("pooled over 5 cells" in i.basis for i in intervals[:-1])
    # the quiet cells' interval does not widen because of the wild one
    assert all(i.high / i.low < 1.1 for i in intervals[:-1])
    # fewer than two usable ratios: no interval, as before
    assert not pooled_log_intervals([[2.0], [1.0, 1.1]])[0].known


def test_a_tenfold_slowdown_with_two_repeats_is_measured_not_called_noise():
    # the figures of a real default sweep on a busy 2-core Zen 4 (torch has no fast fp16 matmul there)
    fp32 = {"torch": [1771.0, 2672.0], "keras": [3874.0, 2375.0], "jax": [1625.0, 1524.0]}
    amp = {"torch": [225.0, 206.0], "keras": [3117.0, 2732.0], "jax": [1448.0, 1432.0]}
    results = []
    for framework in fp32:
        for precision, figures in (("fp32", fp32), ("amp_fp16", amp)):
            for repeat, value in enumerate(figures[framework]):
                cell = _cell(precision, repeat, value)
                results.append(CellResult(**{**cell.__dict__, "framework": framework,
                                             "key": f"{framework}/w/{precision}/r{repeat}"}))
    summary = summary_frame(results).set_index(["framework", "precision"])
    assert summary.loc[("torch", "amp_fp16"), "speedup_high"] < 0.2  # alone, t(1) would reach past 1.0
    assert log_interval([225 / 1771, 206 / 2672]).high > 1.0
    assert summary.loc[("keras", "amp_fp16"), "speedup_low"] < 1.0 < summary.loc[("keras", "amp_fp16"), "speedup_high"]


def test_one_pair_has_no_interval_and_bad_figures_are_left_out():
    one = paired_log_interval({0: 200.0}, {0: 100.0})
    assert one.value == pytest.approx(2.0) and not one.known and one.n == 1
    assert not log_interval([2.0, float("nan"), -1.0]).known
    assert log_interval([]).n == 0 and math.isnan(log_interval([]).value)


def _cell(precision, repeat, throughput, *, flags=()):
    metrics = {"throughput": throughput, "peak_rss_bytes": 100 * 2**20, "val_accuracy": 0.9, "final_loss": 1.0,
               "measurement_flags": list(flags)}
    return CellResult(key=f"torch/w/{precision}/r{repeat}", framework="torch", workload="w", precision=precision,
                      repeat=repeat, status="ok", metrics=metrics, config={"dataset": "mnist", "batch_size": 8},
                      device={"kind": "cpu", "name": "cpu"})


def test_a_difference_inside_the_noise_is_reported_as_none():
    fp32 = [1000.0, 1100.0, 950.0]
    noisy = [1030.0, 1060.0, 960.0]  # ratios 1.03, 0.96, 1.01: inside the noise
    faster = [1690.0, 1870.0, 1600.0]  # about 1.69x every time
    results = ([_cell("fp32", r, t) for r, t in enumerate(fp32)]
               + [_cell("amp_fp16", r, t) for r, t in enumerate(noisy)]
               + [_cell("amp_bf16", r, t) for r, t in enumerate(faster)])
    summary = summary_frame(results).set_index("precision")
    assert summary.loc["amp_fp16", "speedup_low"] < 1.0 < summary.loc["amp_fp16", "speedup_high"]
    assert summary.loc["amp_bf16", "speedup_low"] > 1.6 and summary.loc["amp_bf16", "speedup_pairs"] == 3
    # the point estimate is the geometric mean of the paired ratios, inside its interval
    assert summary.loc["amp_bf16", "speedup"] == pytest.approx(
        math.exp(np.mean(np.log(np.array(faster) / np.array(fp32)))))
    text = render_markdown(results, {})
    row = next(line for line in text.splitlines() if line.startswith("| w "))
    fp16_cell, bf16_cell = row.split("|")[5], row.split("|")[6]
    assert "≈ 1.00x (" in fp16_cell and "≈" not in bf16_cell and "1.69x (" in bf16_cell
    assert "no measurable difference" in text


def test_an_interval_too_wide_to_tell_anything_is_not_called_no_difference():
    # the helper's sweep on a busy machine: fp32 597 and 5,595 images/s, amp_bf16 438 and 442 (0.73x and 0.079x)
    results = ([_cell("fp32", 0, 597.4), _cell("fp32", 1, 5595.0)]
               + [_cell("amp_bf16", 0, 437.6), _cell("amp_bf16", 1, 442.3)])
    text = render_markdown(results, {})
    row = next(line for line in text.splitlines() if line.startswith("| w "))
    bf16_cell = row.split("|")[5]
    assert "? 0.24x (" in bf16_cell and "≈" not in bf16_cell, bf16_cell
    assert "(0.00" not in bf16_cell  # a lower bound too small for two decimals shows two significant digits
    assert "? marks a speed-up whose interval contains 1.0 but spans more than 10 times (w / torch / amp_bf16)" \
        in text


def test_a_single_repeat_says_it_has_no_interval():
    text = render_markdown([_cell("fp32", 0, 100.0), _cell("amp_bf16", 0, 180.0)], {})
    assert "1.80x)" in text and "–" not in next(l for l in text.splitlines() if l.startswith("| w "))
    assert "single repeat: they have no interval" in text
    assert "≈" not in next(l for l in text.splitlines() if l.startswith("| w "))


def test_repeats_are_interleaved_and_precisions_alternate_within_a_framework(tiny_config):
    from amp_suite.config.catalog import load_config, with_overrides
    from amp_suite.sweep.cells import plan_cells

    config = load_config(tiny_config)
    settings = with_overrides(config.settings, repeats=3, precisions=("fp32", "amp_bf16"),
                              frameworks=("fake", "torch"))
    keys = [c.run.key for c in plan_cells(config, settings)]
    assert keys == [
        "fake/tiny/fp32/r0", "fake/tiny/amp_bf16/r0", "torch/tiny/fp32/r0", "torch/tiny/amp_bf16/r0",
        "fake/tiny/amp_bf16/r1", "fake/tiny/fp32/r1", "torch/tiny/amp_bf16/r1", "torch/tiny/fp32/r1",
        "fake/tiny/fp32/r2", "fake/tiny/amp_bf16/r2", "torch/tiny/fp32/r2", "torch/tiny/amp_bf16/r2"]


def test_steady_state_records_the_spread_over_windows():
    def part(seconds):
        return EpochResult(step_losses=[1.0] * 4, samples=400, window_time_s=seconds)

    parts = [(Phase("warmup", 0, 0, 1), part(9.0)), (Phase("window", 0, 1, 5), part(1.0)),
             (Phase("window", 0, 5, 9), part(2.0)), (Phase("window", 0, 9, 13), part(1.0))]
    figures = steady_state(parts)
    assert figures["window_throughputs"] == [400.0, 200.0, 400.0]
    assert figures["window_throughput_median"] == 400.0
    assert (figures["window_throughput_min"], figures["window_throughput_max"]) == (200.0, 400.0)
    assert figures["window_throughput_cv"] == pytest.approx(np.std([400, 200, 400], ddof=1) / np.mean([400, 200, 400]))
    assert figures["throughput"] == pytest.approx(1200 / 4.0)  # samples over summed time, as before
    assert noise.noise_flags({**figures, "cpu_cores": 2})[0].startswith("noisy timing")


def test_load_figures_judge_other_processes_not_the_cell_itself():
    before = {"time": 0.0, "load_avg_1m": 1.9, "cpu_freq_mhz": 2400.0, "machine_busy_s": 100.0, "own_cpu_s": 5.0}
    alone = {"time": 10.0, "load_avg_1m": 2.0, "cpu_freq_mhz": 2300.0, "machine_busy_s": 119.5, "own_cpu_s": 24.0}
    figures = noise.load_figures(before, alone, cpu_count=2)
    assert figures["other_cpu_cores"] == pytest.approx(0.05) and figures["cpu_freq_mhz_after"] == 2300.0
    assert noise.noise_flags(figures) == []  # a cell using both cores is not a busy machine
    burner = {**alone, "machine_busy_s": 135.0, "own_cpu_s": 25.0}  # others used 1.5 cores on average
    flags = noise.noise_flags(noise.load_figures(before, burner, cpu_count=2))
    assert len(flags) == 1 and flags[0].startswith("machine busy: other processes kept 1.50 of 2 cores")


def test_a_busy_machine_flags_the_cells_and_the_report_says_so(tiny_config, tmp_path, clean_fake_env, monkeypatch):
    # A burner that keeps 1.8 cores busy beside the cell, simulated by the readings the worker takes.
    clock = {"t": 0.0}

    def busy_snapshot():
        clock["t"] += 5.0
        return {"time": clock["t"], "load_avg_1m": 3.5, "cpu_freq_mhz": None,
                "machine_busy_s": clock["t"] * 1.8, "own_cpu_s": 0.0}

    monkeypatch.setattr(noise, "snapshot", busy_snapshot)
    out = tmp_path / "busy"
    frame = amp_suite.run(frameworks="fake", precisions="fp32,amp_bf16", config=tiny_config, plugins=["fakefw"],
                          inline=True, out=str(out))
    assert frame["machine_busy"].all()
    assert frame["other_cpu_cores"].tolist() == pytest.approx([1.8, 1.8])
    assert all("machine busy" in flags for flags in frame["measurement_flags"])
    report = (out / "report.md").read_text()
    assert "**Busy machine:** 2 of 2 cells ran while other processes competed" in report
    assert report.index("Busy machine") < report.index("## Throughput")


def test_an_idle_reading_leaves_the_cells_unflagged_for_load(tiny_config, tmp_path, clean_fake_env, monkeypatch):
    clock = {"t": 0.0}

    def idle_snapshot():
        clock["t"] += 5.0
        return {"time": clock["t"], "load_avg_1m": 0.1, "cpu_freq_mhz": 2000.0, "machine_busy_s": clock["t"] * 0.01,
                "own_cpu_s": 0.0}

    monkeypatch.setattr(noise, "snapshot", idle_snapshot)
    out = tmp_path / "idle"
    frame = amp_suite.run(frameworks="fake", precisions="fp32", config=tiny_config, plugins=["fakefw"],
                          inline=True, out=str(out))
    assert not frame["machine_busy"].any() and frame["cpu_freq_mhz_before"].tolist() == [2000.0]
    assert "Busy machine" not in (out / "report.md").read_text()


def test_repeats_auto_adds_repeats_up_to_the_cap_and_the_report_says_why(tiny_config, tmp_path, clean_fake_env):
    out = tmp_path / "auto"
    done = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32,amp_bf16",
                   "--repeats", "auto", "--steps", "12", "--window-steps", "4", "--out", str(out))
    assert done.returncode == 0, done.stderr
    auto = json.loads((out / "environment.json").read_text())["auto_repeats"]
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # the first line says what runs first and the most it may run: 2 repeats of 2 cells now, up to 5 of each
    assert "amp-suite: 4 cells now, up to 10 (--repeats auto adds repeats" in done.stderr, done.stderr
    assert len(rows) <= 10
    repeats = sorted({row["repeat"] for row in rows})
    assert repeats == list(range(auto["repeats"])) and 2 <= auto["repeats"] <= 5
    report = (out / "report.md").read_text()
    assert "`--repeats auto`:" in report
    if auto["wide"]:  # the fake framework's tiny steps are noisy: the cap is usually hit, and said
        assert auto["repeats"] == 5 and "the cap of 5 repeats was hit" in report
    else:
        assert "within ±5%" in report
    bad = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--repeats", "many", "--out", str(out))
    assert bad.returncode == 2 and "repeats" in bad.stderr
