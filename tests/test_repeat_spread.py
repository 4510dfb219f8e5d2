"""Repeats of one seed that end with other losses get a note in both reports; repeats that train alike get none."""

from __future__ import annotations

from amp_suite.records import CellResult
from amp_suite.report.html import render_html
from amp_suite.report.markdown import render_markdown
from amp_suite.report.repeat_spread import repeat_spread_lines, repeat_spreads

NOTE = "Repeats of one seed trained differently"


def cell(precision: str, repeat: int, loss: float, accuracy: float = 0.9, *, seed: int = 0,
         fingerprint: str = "abc") -> CellResult:
    return CellResult(key=f"torch/w/{precision}/r{repeat}", framework="torch", workload="w", precision=precision,
                      repeat=repeat, status="ok", error="", fingerprint=fingerprint, mode="eager",
                      metrics={"throughput": 100.0, "final_loss": loss, "val_accuracy": accuracy,
                               "peak_rss_bytes": 2**20},
                      config={"dataset": "mnist", "batch_size": 8, "seed": seed}, device={"kind": "cpu", "name": "c"})


def test_repeats_that_trained_alike_add_no_note():
    results = [cell("fp32", 0, 0.25), cell("fp32", 1, 0.25), cell("amp_bf16", 0, 0.26), cell("amp_bf16", 1, 0.26)]
    assert repeat_spreads(results) == []
    assert NOTE not in render_markdown(results, {}) and NOTE not in render_html(results, {})


def test_repeats_of_one_seed_that_ended_apart_are_named_with_their_spread_in_both_reports():
    results = [cell("fp32", 0, 0.25), cell("fp32", 1, 0.25),
               cell("amp_bf16", 0, 0.2600, 0.912), cell("amp_bf16", 1, 0.2613, 0.915)]
    (spread,) = repeat_spreads(results)
    assert (spread.precision, spread.repeats, spread.final_losses) == ("amp_bf16", 2, (0.26, 0.2613))
    line = repeat_spread_lines(results)[0]
    assert "torch amp_bf16 eager on w, seed 0: final loss 0.26 to 0.2613 (0.5% apart)" in line
    assert "validation accuracy 91.20% to 91.50% over 2 repeats" in line and "fp32" not in line.split(":**")[1][:20]
    assert NOTE in render_markdown(results, {}) and NOTE in render_html(results, {})


def test_other_seeds_and_other_definitions_are_not_repeats_of_each_other():
    results = [cell("fp32", 0, 0.25, seed=0), cell("fp32", 0, 0.27, seed=1),
               cell("amp_bf16", 0, 0.25, fingerprint="one"), cell("amp_bf16", 1, 0.29, fingerprint="two")]
    assert repeat_spreads(results) == []
