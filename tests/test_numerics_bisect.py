"""``amp-suite numerics --bisect``: the greedy search for layers to keep in float32, on the fake backend
``shadowfw`` (NumPy, seconds): a planted layer whose AMP output is 5% off is found, two planted layers are found
in the order of their harm, a search that runs out of runs says so, and bad input is refused in one line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import amp_suite
from amp_suite.numerics.records import LayerNumerics
from amp_suite.shadow.bisect import loss_gap, worst_layer
from suite_cli import one_line_error, run_cli, tiny_config_file

# bfloat16's own round-off moves the fake's losses by about 0.02%; a planted 5% error in one layer by 0.2%
TOLERANCE = 0.001


def _bisect(tmp_path: Path, **keywords):
    config = tiny_config_file(tmp_path)
    options = dict(workloads="tiny", frameworks="shadowfw", precisions="amp_bf16", steps=3, out=tmp_path / "numerics",
                   dataset="synthetic", config=config, plugins="shadowfw", inline=True, bisect=True,
                   tolerance=TOLERANCE)
    return amp_suite.run_numerics(**{**options, **keywords})


def test_the_gap_is_the_largest_relative_one_over_the_steps_and_nan_for_a_nonfinite_loss() -> None:
    assert loss_gap((1.1, 2.0), (1.0, 2.1)) == pytest.approx(0.1)
    assert math.isnan(loss_gap((float("nan"), 2.0), (1.0, 2.0))) and math.isnan(loss_gap((), ()))


def test_the_worst_layer_is_the_one_adding_most_error_among_those_not_kept() -> None:
    def row(layer: str, tensor: str, error: float, added: float | None) -> LayerNumerics:
        return LayerNumerics("f", "w", "amp_bf16", "fp32", 0, layer, tensor, "bfloat16", "bfloat16", 4, error, 0.0,
                             0.0, 0.0, 0.0, 1.0, 0.0, error_added=added)

    rows = [row("a", "activation", 0.01, 0.01), row("b", "activation", 0.06, 0.05), row("b", "gradient", 0.2, None),
            row("c", "activation", 0.06, 0.0), row("c", "gradient", 0.9, None)]
    assert worst_layer(rows, ["a", "b", "c"]) == "b"
    assert worst_layer(rows, ["a", "c"]) == "a"  # what a layer adds ranks before its gradients' error
    assert worst_layer(rows, ["d"]) == ""


@pytest.mark.parametrize(("planted", "found"), [("dense1", ("dense1",)), ("conv2,dense1", ("conv2", "dense1"))])
def test_bisect_finds_the_planted_layers_and_reports_every_trial(tmp_path: Path, monkeypatch, planted: str,
                                                                 found: tuple[str, ...]) -> None:
    monkeypatch.setenv("SHADOWFW_PLANT", planted)
    search = _bisect(tmp_path).attrs["bisect"]
    assert tuple(search["found"]) == found
    trials = search["trials"]
    assert [tuple(t["kept"]) for t in trials] == [found[:n] for n in range(len(found) + 1)]
    assert all(t["loss_gap"] > TOLERANCE for t in trials[:-1]) and trials[-1]["loss_gap"] <= TOLERANCE
    assert [t["worst"] for t in trials[:-1]] == list(found)
    text = (tmp_path / "numerics" / "numerics.md").read_text()
    assert f"Keeping {', '.join(found)} in float32" in text and "| trial | keep_fp32 |" in text
    lines = [json.loads(line) for line in (tmp_path / "numerics" / "numerics.jsonl").read_text().splitlines()]
    assert [line["found"] for line in lines if line["record"] == "bisect"] == [list(found)]
    # numerics_report reads the search back
    assert amp_suite.numerics_report(tmp_path / "numerics").attrs["bisect"]["found"] == found


def test_a_search_that_runs_out_of_runs_says_none_was_found(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("SHADOWFW_PLANT", "conv2,dense1")
    search = _bisect(tmp_path, max_runs=2).attrs["bisect"]
    assert search["found"] is None and len(search["trials"]) == 2
    assert "No set of layers kept in float32 brought the losses within 0.1%" in \
        (tmp_path / "numerics" / "numerics.md").read_text()


def test_within_tolerance_as_it_is_keeps_nothing(tmp_path: Path) -> None:
    search = _bisect(tmp_path).attrs["bisect"]
    assert search["found"] == () and len(search["trials"]) == 1


def test_the_command_line_searches_in_processes_and_prints_the_set(tmp_path: Path) -> None:
    config = tiny_config_file(tmp_path)
    out = run_cli("numerics", "--workloads", "tiny", "--frameworks", "shadowfw", "--precisions", "amp_bf16",
                  "--steps", "3", "--dataset", "synthetic", "--config", str(config), "-p", "shadowfw",
                  "--out", str(tmp_path / "numerics"), "--bisect", "--tolerance", str(TOLERANCE), "--max-runs", "3",
                  env={"SHADOWFW_PLANT": "dense1"}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "bisect: keep_fp32 = ['dense1'] brings the losses within 0.1% of float32's" in out.stdout
    assert (tmp_path / "numerics" / "traces" / "shadowfw__tiny__amp_bf16__trial1.npz").is_file()


@pytest.mark.parametrize(("keywords", "expected"), [
    ({"precisions": "amp_bf16,amp_fp16"}, "--bisect searches one precision at a time, got 2"),
    ({"workloads": "tiny,mnist_cnn"}, "--bisect searches one workload at a time, got 2"),
    ({"precisions": "fp32"}, "precision 'fp32' is one of the shadows"),
    ({"tolerance": 0.0}, "tolerance must be a positive relative loss gap (0.01 is 1%), got 0.0"),
    ({"max_runs": 0}, "max runs must be a whole number from 1 to 100, got 0"),
])
def test_bad_bisect_input_is_refused_in_one_line_before_anything_runs(tmp_path: Path, keywords, expected) -> None:
    assert expected in one_line_error(lambda: _bisect(tmp_path, **keywords))
    assert not (tmp_path / "numerics").exists()


def test_a_failing_amp_run_ends_the_search_with_its_error_and_the_report_is_still_written(tmp_path: Path,
                                                                                         monkeypatch) -> None:
    monkeypatch.setenv("SHADOWFW_FAIL", "amp_bf16")
    frame = _bisect(tmp_path)
    search = frame.attrs["bisect"]
    assert search["found"] is None and len(search["trials"]) == 1
    trial = search["trials"][0]
    assert trial["status"] == "failed" and "told to fail amp_bf16" in trial["error"] and math.isnan(trial["loss_gap"])
    assert "| 1 | – | failed: " in (tmp_path / "numerics" / "numerics.md").read_text()


def test_a_diverged_runs_losses_are_read_back_as_floats_nan_included(tmp_path: Path) -> None:
    # numerics.jsonl holds a non-finite float as the text "nan" (to_plain): inside a list of losses too
    from amp_suite.numerics.records import BisectOutcome, BisectTrial, NumericsRun
    from amp_suite.shadow.report import write_report
    from amp_suite.shadow.stored import read_numerics_and_search

    run = NumericsRun("torch", "tiny", "amp_fp16", "ok", steps=2, losses=(2.5, math.nan), loss_scales=(65536.0, None),
                      layers=("dense",))
    trial = BisectTrial(("dense",), "ok", math.inf, (2.5, math.inf))
    search = BisectOutcome("torch", "tiny", "amp_fp16", 0.01, 4, (2.5, math.nan), (trial,), None)
    write_report(tmp_path, [run], [], search)
    assert '"nan"' in (tmp_path / "numerics.jsonl").read_text()  # what the file holds, and what must not come back
    (back,), _, found = read_numerics_and_search(tmp_path)
    assert back.losses[0] == 2.5 and math.isnan(back.losses[1]) and back.loss_scales == (65536.0, None)
    assert back.layers == ("dense",)
    assert found is not None and found.reference_losses[0] == 2.5 and math.isnan(found.reference_losses[1])
    assert found.trials[0].losses == (2.5, math.inf) and found.trials[0].loss_gap == math.inf


def test_a_search_that_found_nothing_names_its_closest_set_beside_the_last():
    """An ML engineer's trial: keeping conv2 made the gap worse (0.129% after 0.0473%), and the sentence named only
    the last trial's gap."""
    from amp_suite.numerics.records import BisectOutcome, BisectTrial
    from amp_suite.shadow.bisect import bisect_sentence

    trials = (BisectTrial((), "ok", 0.00103), BisectTrial(("dense1",), "ok", 0.000473),
              BisectTrial(("dense1", "conv2"), "ok", 0.00129))
    outcome = BisectOutcome("torch", "mnist_cnn", "amp_bf16", 0.00005, 3, (2.3,), trials, None)
    assert bisect_sentence(outcome) == (
        "bisect: no set of layers kept in float32 brought the losses within 0.005% of float32's in 3 run(s); the "
        "last loss gap 0.129%; the closest was keep_fp32 = ['dense1'] at 0.0473% (torch, mnist_cnn, amp_bf16).")
    last_best = BisectOutcome("torch", "mnist_cnn", "amp_bf16", 0.00005, 2, (2.3,), trials[:2], None)
    assert "closest" not in bisect_sentence(last_best)
