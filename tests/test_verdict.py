"""The verdict block, what ran, plugin figures and the split "Every run" tables, from fabricated records."""

from __future__ import annotations

import pandas as pd
import pytest

from amp_suite.records import CellResult
from amp_suite.report.marks import FLAG_MARK, NO_DIFFERENCE_MARK, SINGLE_RUN_MARK
from amp_suite.report.normalize import render_markdown, results_frame, summary_frame, sweep_verdict
from amp_suite.report.verdict import build_verdict
from amp_suite.report.verdict_text import markdown_lines, terminal_lines

MIB = 1024 * 1024
BUSY = ("machine busy: other processes kept 1.20 of 2 cores busy while the cell trained (more than 25% of them); "
        "its throughput is likely low")
SHORT = "timed region too short: 2 steps in 0.5 s, under the 5 s a trusted figure needs here; use --steps 18 or more"


def cell(framework, precision, repeat=0, *, throughput=100.0, memory_mib=400.0, accuracy=0.9, status="ok",
         flags=(), extra=None, applied=None, dataset="mnist") -> CellResult:
    metrics = {}
    if status == "ok":
        metrics = {"throughput": throughput, "peak_rss_bytes": memory_mib * MIB, "val_accuracy": accuracy,
                   "final_loss": 0.5, "measurement_flags": list(flags), **(extra or {})}
    return CellResult(key=f"{framework}/w/{precision}/r{repeat}", framework=framework, workload="w",
                      precision=precision, repeat=repeat, status=status, error="" if status == "ok" else "boom",
                      metrics=metrics, config={"dataset": dataset, "batch_size": 8},
                      device={"kind": "cpu", "name": "Test CPU"},
                      applied=applied if applied is not None else {
                          "precision": precision, "compute_dtype": "bfloat16" if "bf16" in precision else "float32",
                          "param_dtype": "float32", "output_dtype": "float32",
                          "loss_scaling": "dynamic" if "fp16" in precision else "none",
                          "initial_loss_scale": 32768.0 if "fp16" in precision else None,
                          "notes": ["matmul_precision=highest"]})


def repeated(framework, precision, throughputs, **kwargs) -> list[CellResult]:
    return [cell(framework, precision, r, throughput=t, **kwargs) for r, t in enumerate(throughputs)]


# torch: bf16 clearly about 2x faster over three paired repeats; fp16 out of memory.
# jax: one repeat each, its bf16 flagged (busy machine, short timing) and 1.5 points less accurate.
RESULTS = [
    *repeated("torch", "fp32", [100.0, 104.0, 98.0]),
    *repeated("torch", "amp_bf16", [200.0, 206.0, 199.0], memory_mib=300.0, accuracy=0.905),
    cell("torch", "amp_fp16", status="oom"),
    cell("jax", "fp32", throughput=50.0, accuracy=0.90),
    cell("jax", "amp_bf16", throughput=80.0, memory_mib=380.0, accuracy=0.885, flags=[SHORT, BUSY]),
]


def _lines(verdict, framework):
    return {line.precision: line for line in verdict.lines if line.framework == framework}


def test_each_amp_precision_has_its_speedup_interval_memory_ratio_and_accuracy_change():
    verdict = sweep_verdict(RESULTS, {})
    torch = _lines(verdict, "torch")
    bf16 = torch["amp_bf16"]
    assert bf16.speedup == pytest.approx(2.0, rel=0.03)
    assert bf16.speedup_low is not None and 1.0 < bf16.speedup_low < bf16.speedup < bf16.speedup_high
    assert bf16.memory_ratio == pytest.approx(0.75)
    assert bf16.accuracy_delta_pt == pytest.approx(0.5)
    assert bf16.marks == () and bf16.trusted and bf16.faster
    assert bf16.accuracy_verdict is None  # no seed data: no equivalence verdict yet
    assert torch["amp_fp16"].status == "oom" and torch["amp_fp16"].speedup is None
    assert "fp32" not in torch  # fp32 is the reference, not a line


def test_a_flagged_single_run_carries_its_marks_and_the_flags_reasons():
    jax = _lines(sweep_verdict(RESULTS, {}), "jax")["amp_bf16"]
    assert jax.speedup == pytest.approx(1.6)
    assert jax.marks == (FLAG_MARK, SINGLE_RUN_MARK)
    assert not jax.trusted and jax.speedup_low is None
    assert any("timed region too short" in c and "machine busy" in c for c in jax.cautions), jax.cautions
    assert jax.accuracy_delta_pt == pytest.approx(-1.5)


def test_one_sentence_per_framework_names_the_best_precision_and_what_not_to_trust():
    sentences = {item.place: item for item in sweep_verdict(RESULTS, {}).frameworks}
    assert set(sentences) == {"torch", "jax"}
    torch = sentences["torch"]
    assert torch.best == "amp_bf16"
    assert "amp_bf16 is the best precision on this machine" in torch.sentence
    assert "No figure: amp_fp16 oom" in torch.sentence
    jax = sentences["jax"]
    # faster on its one run, but flagged and without an interval: neither "measurably faster" nor trusted
    assert jax.best == "fp32" and "no AMP precision is measurably faster" in jax.sentence
    assert "Not to be trusted: amp_bf16" in jax.sentence and "a single run" in jax.sentence


def test_an_amp_precision_within_the_noise_is_no_measurable_difference():
    results = [*repeated("torch", "fp32", [100.0, 90.0, 110.0]), *repeated("torch", "amp_bf16", [104.0, 88.0, 113.0])]
    verdict = sweep_verdict(results, {})
    line = verdict.lines[0]
    assert NO_DIFFERENCE_MARK in line.marks and not line.faster
    assert verdict.frameworks[0].best == "fp32" and "stays the choice" in verdict.frameworks[0].sentence


def test_a_failed_baseline_judges_nothing_and_a_large_accuracy_drop_is_named():
    failed = sweep_verdict([cell("torch", "fp32", status="failed"), cell("torch", "amp_bf16")], {})
    assert "fp32 baseline did not finish (failed)" in failed.frameworks[0].sentence and failed.frameworks[0].best == ""
    drop = sweep_verdict([*repeated("torch", "fp32", [100.0, 101.0]),
                          *repeated("torch", "amp_fp16", [300.0, 303.0], accuracy=0.85)], {})
    assert "-5.00 pt below fp32's" in drop.frameworks[0].sentence


def test_an_interrupted_sweep_names_the_amp_precisions_it_did_not_reach():
    """A trial stopped a fp32,amp_bf16 sweep after fp32: its verdict read "no AMP precision gave a speed-up", as
    if amp_bf16 had run and lost.  The stopped sweep's record of what did not run reaches the verdict."""
    results = [cell("jax", "fp32")]
    environment = {"incomplete": {"reason": "interrupted by SIGINT", "planned": 2, "not_run": ["jax/w/amp_bf16/r0"],
                                  "not_run_cells": [["jax", "w", "amp_bf16"], ["torch", "w", "amp_bf16"]]}}
    verdict, unreached = sweep_verdict(results, environment).frameworks
    assert verdict.sentence == ("jax: no AMP precision has a speed-up to judge against fp32 (amp_bf16 not run "
                                "(the sweep stopped first)).")
    # a framework none of whose cells ran is named as well (a trial's stopped sweep left jax's GPT out in silence)
    assert unreached.sentence == ("torch: no cell ran (the sweep stopped first: amp_bf16 not run), so nothing is "
                                  "judged here.")
    report = render_markdown(results, environment)
    assert "amp_bf16 not run (the sweep stopped first)" in report.split("## Environment")[0]
    assert "torch: no cell ran (the sweep stopped first" in report.split("## Environment")[0]
    other = {"incomplete": {"not_run_cells": [["jax", "gpt", "fp32"], ["jax", "gpt", "amp_bf16"]]}}
    assert sweep_verdict(results, other).frameworks[1].sentence == (
        "jax / gpt: no cell ran (the sweep stopped first: fp32, amp_bf16 not run), so nothing is judged here.")


def test_a_sweep_of_fp32_alone_says_there_was_nothing_to_compare():
    [verdict] = sweep_verdict([cell("jax", "fp32")], {}).frameworks
    assert verdict.sentence == "jax: fp32 is the only precision that ran: no AMP precision to compare with."


def test_synthetic_data_has_no_accuracy_change():
    verdict = sweep_verdict([cell("torch", "fp32", dataset="synthetic"),
                             cell("torch", "amp_bf16", dataset="synthetic")], {})
    assert verdict.lines[0].accuracy_delta_pt is None
    assert "| n/a |" in "\n".join(markdown_lines(verdict))


def test_terminal_and_markdown_render_the_same_figures():
    verdict = build_verdict(summary_frame(RESULTS, {}), results_frame(RESULTS, {}))
    terminal = "\n".join(terminal_lines(verdict))
    markdown = "\n".join(markdown_lines(verdict))
    for line in verdict.lines:
        for text in (line.precision, f"{line.speedup:.2f}x" if line.speedup else "n/a (oom)"):
            assert text in terminal and text in markdown
    for item in verdict.frameworks:
        assert item.sentence in terminal and item.sentence in markdown
    assert terminal.splitlines()[0].startswith("Verdict")


def test_report_md_opens_with_the_verdict_and_puts_the_methodology_below_the_tables():
    text = render_markdown(RESULTS, {})
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Verdict" and headings[1] == "## Environment"
    method = headings.index("## How the figures were measured")
    assert method > headings.index("## Peak memory, MiB (ratio to fp32)")
    assert method < headings.index("## Every run")
    assert text.index("Throughput is steady-state") > text.index("## Validation accuracy")


def test_what_ran_shows_the_applied_precision_and_a_repeat_that_applied_something_else():
    odd = cell("torch", "amp_bf16", 3, applied={"precision": "amp_bf16", "compute_dtype": "float16",
                                                "loss_scaling": "static", "initial_loss_scale": 128.0,
                                                "notes": ["<b>odd</b> | note"]})
    text = render_markdown([*RESULTS, odd], {})
    section = text.split("## What ran")[1].split("\n## ")[0]
    assert "| torch | amp_bf16 | 0, 1, 2 | bfloat16 | float32 | float32 | n/a | matmul_precision=highest |" in section
    assert "| torch | amp_bf16 | 3 | float16 |" in section and "static (from 128)" in section
    assert "| jax | fp32 | 0 | float32 |" in section
    assert "<b>" not in section and "odd\\</b> \\| note" not in section and "\\| note" in section
    # the oom cell recorded what it applied too (it reached set_precision)
    assert "| torch | amp_fp16 | 0 | float32 | float32 | float32 | dynamic (from 32768) |" in section


def test_plugin_figures_reach_the_frame_and_a_report_section():
    results = [cell("torch", "fp32", extra={"kernel": "onednn", "fusions": 3, "precision": "x",
                                            "step_time_cv": 0.1, "window_throughputs": [1.0, 2.0]}),
               cell("torch", "amp_bf16", extra={"kernel": "onednn", "fusions": 5})]
    frame = results_frame(results, {})
    # the host's own figures (step_time_cv) and series (lists) are not plugin figures; a name a standard
    # column already has is prefixed
    assert list(frame.columns[-3:]) == ["fusions", "kernel", "figure_precision"]
    assert list(frame["fusions"]) == [3, 5] and frame["figure_precision"][0] == "x"
    assert pd.isna(frame["figure_precision"][1])
    assert list(frame["precision"]) == ["fp32", "amp_bf16"]
    text = render_markdown(results, {})
    section = text.split("## Figures added by plugins")[1].split("\n## ")[0]
    assert "| fusions | torch | 3 | 5 |" in section and "| kernel | torch | onednn | onednn |" in section
    assert "step_time_cv" not in section
    assert "## Figures added by plugins" not in render_markdown(RESULTS, {})


def test_every_run_is_two_tables_without_constant_or_empty_columns():
    text = render_markdown(RESULTS, {})
    section = text.split("## Every run")[1].split("\n## ")[0]
    assert "Every run shares workload w, device cpu, devices 1, batch 8." in section
    timing = section.split("### Timing")[1].split("###")[0]
    training = section.split("### Memory and training")[1]
    header = next(line for line in timing.splitlines() if line.startswith("| framework"))
    assert header == "| framework | precision | repeat | status | throughput |"
    assert next(line for line in training.splitlines() if line.startswith("| framework")) == (
        "| framework | precision | repeat | status | peak_memory_mib | final_loss | val_accuracy |")
    assert "| torch | amp_fp16 | 0 | oom |" in timing


def test_amp_suite_run_prints_the_verdict_on_stdout(tiny_config, clean_fake_env):
    """The answer in the terminal: stdout holds the verdict (the file paths and progress go to stderr)."""
    from suite_cli import run_cli

    out = run_cli("run", "--config", str(tiny_config), "-p", "fakefw", "--precisions", "fp32,amp_bf16",
                  "--steps", "3", "--warmup", "1", "--repeats", "1", "-q")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("Verdict (AMP against fp32")
    assert any(line.split()[:2] == ["fake", "amp_bf16"] and "x" in line for line in lines[2:]), out.stdout
    assert any(line.strip().startswith("fake: ") for line in lines), out.stdout
    assert "wrote" in out.stderr and "wrote" not in out.stdout


@pytest.mark.usefixtures("report_charts")
def test_report_md_writes_a_long_verdict_sentence_whole():
    """An ML engineer's trial: report.md cut sentences at 300 characters, so an fp8 sentence lost the clause that
    says its speed is the emulation's (the terminal and report.html had it whole)."""
    from amp_suite.report.text import table_text
    from amp_suite.report.verdict import FrameworkVerdict, Verdict
    from amp_suite.report.verdict_text import markdown_lines

    sentence = "torch: fp32 stays the choice; " + "x" * 400 + ", its speed is the emulation's, not FP8's."
    lines = markdown_lines(Verdict((), (FrameworkVerdict("torch", "fp32", sentence),)), table_text)
    assert f"- {sentence}" in lines and not any("characters cut" in line for line in lines)


def test_a_precision_run_with_declared_choices_is_named_with_them():
    """An ML engineer's trial: amp_fp16 without loss scaling and with the dense layers in float32 read as plain
    amp_fp16 in the verdict, under the same label as the default recipe."""
    declared = {"precision": "amp_fp16", "compute_dtype": "float16", "param_dtype": "float32",
                "output_dtype": "float32", "loss_scaling": "none", "initial_loss_scale": None,
                "keep_fp32": ["dense"], "notes": []}
    results = [*repeated("torch", "fp32", [100.0, 101.0]),
               *repeated("torch", "amp_fp16", [300.0, 303.0], applied=declared),
               *repeated("torch", "amp_bf16", [150.0, 151.0])]
    verdict = sweep_verdict(results, {})
    labels = {line.precision: line.label for line in verdict.lines}
    assert labels == {"amp_fp16": "amp_fp16 (loss scaling none, keep_fp32 dense)", "amp_bf16": "amp_bf16"}
    assert verdict.frameworks[0].sentence.startswith("torch: amp_fp16 (loss scaling none, keep_fp32 dense) is the "
                                                     "best precision on this machine")
    assert verdict.frameworks[0].best == "amp_fp16"
    assert "| torch | amp_fp16 (loss scaling none, keep_fp32 dense) |" in "\n".join(markdown_lines(verdict))


def test_what_ran_tells_loss_scaling_turned_off_from_a_precision_without_one():
    """An ML engineer's trial: "none" read the same for fp32 (nothing to scale) and an amp_fp16 run with loss scaling
    turned off."""
    from amp_suite.report.applied import AppliedPrecision

    def applied(precision, scaling, initial=None):
        return AppliedPrecision("torch", precision, "float16", "float32", "float32", scaling, initial, (), (0,))

    assert applied("fp32", "none").loss_scaling_text == "n/a"
    assert applied("amp_bf16", "none").loss_scaling_text == "n/a"
    assert applied("amp_fp16", "none").loss_scaling_text == "none (declared: loss_scaling)"
    assert applied("amp_fp16", "dynamic", 32768.0).loss_scaling_text == "dynamic (from 32768)"
