"""``amp-suite numerics`` after a user trial: no all-clear when nothing was compared, the same bounds and refusals
as ``amp-suite run``, bisect flags refused without ``--bisect``, nothing created for a refused request, and the
loss scale the docs name.

Every run here is the NumPy-only fake backend ``shadowfw`` (tests/helpers/shadowfw.py), so each test takes
seconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import amp_suite
from amp_suite.plugins.kit import DYNAMIC_LOSS_SCALE_INIT
from suite_cli import REPO, one_line_error, tiny_config_file

ALL_CLEAR = "No layer loses values or adds error above the thresholds"


def _numerics(tmp_path: Path, **keywords):
    config = tiny_config_file(tmp_path)
    options = dict(workloads="tiny", frameworks="shadowfw", precisions="amp_bf16", steps=1,
                   out=tmp_path / "numerics", dataset="synthetic", config=config, plugins="shadowfw")
    return amp_suite.run_numerics(**{**options, **keywords})


def _cli(tmp_path: Path, *flags: str) -> int:
    """``amp-suite numerics`` on the fake backend in this process (--inline), with ``flags`` added."""
    from amp_suite.cli import main

    config = tiny_config_file(tmp_path)
    return main(["numerics", "--workloads", "tiny", "--frameworks", "shadowfw", "--precisions", "amp_bf16",
                 "--steps", "1", "--dataset", "synthetic", "--config", str(config), "-p", "shadowfw", "--inline",
                 "--out", str(tmp_path / "numerics"), *flags])


# --- 1: no all-clear when nothing was compared ---------------------------------------------------------------


@pytest.mark.usefixtures("report_charts")
def test_runs_that_all_time_out_are_reported_as_nothing_compared_and_why(tmp_path: Path) -> None:
    frame = _numerics(tmp_path, timeout=0.01)  # no process traces a step in 10 ms
    assert {run["status"] for run in frame.attrs["runs"]} == {"timeout"} and frame.empty
    out = tmp_path / "numerics"
    text = (out / "numerics.md").read_text()
    assert ALL_CLEAR not in text
    assert "Nothing was compared" in text
    assert ("Nothing compared for shadowfw / tiny / amp_bf16: the amp_bf16 run did not finish (timeout); "
            "the fp32 shadow run did not finish (timeout).") in text
    assert "numerics-heatmap.png" not in text and not (out / "numerics-heatmap.png").exists()


def test_the_printed_sentences_say_what_was_not_compared(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SHADOWFW_FAIL", "fp32")
    assert _cli(tmp_path) == 1
    printed = capsys.readouterr().out
    assert ALL_CLEAR not in printed
    # amp_bf16 is still set beside the float64 shadow: its table is there, the sentences judge only float32
    assert ("Not compared with the fp32 shadow for shadowfw / tiny / amp_bf16 (only with fp64): the fp32 shadow "
            "run did not finish (failed).") in printed
    assert "(only with fp64)" in (tmp_path / "numerics" / "numerics.md").read_text()


@pytest.mark.usefixtures("report_charts")
def test_a_command_stopped_before_the_float32_shadow_does_not_give_the_all_clear(tmp_path: Path,
                                                                                  monkeypatch) -> None:
    from amp_suite.shadow import command

    real = command.run_inline

    def stop_at_the_shadow(plan, out_dir):
        if plan.run.precision == "fp32":
            raise KeyboardInterrupt
        return real(plan, out_dir)

    monkeypatch.setattr(command, "run_inline", stop_at_the_shadow)
    with pytest.raises(KeyboardInterrupt):
        _numerics(tmp_path, inline=True)
    text = (tmp_path / "numerics" / "numerics.md").read_text()
    assert "1 of 3 planned runs ran" in text and ALL_CLEAR not in text
    assert ("Nothing compared for shadowfw / tiny / amp_bf16: the fp32 shadow run did not finish (the command was "
            "stopped before its end).") in text
    assert "numerics-heatmap.png" not in text


@pytest.mark.usefixtures("report_charts")
def test_the_all_clear_is_given_when_layers_were_compared_and_none_is_worth_naming(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    _numerics(tmp_path, inline=True)  # nothing planted: bfloat16 round-off only, no underflow
    text = (tmp_path / "numerics" / "numerics.md").read_text()
    assert "Nothing compared" not in text
    worst = text.split("## Worst layers")[1].split("\n## ")[0]
    assert "numerics-heatmap.png" in worst and (tmp_path / "numerics" / "numerics-heatmap.png").is_file()


@pytest.mark.usefixtures("report_charts")
def test_a_replaced_output_keeps_no_heatmap_of_the_earlier_run(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    _numerics(tmp_path, inline=True)
    assert (tmp_path / "numerics" / "numerics-heatmap.png").is_file()
    _numerics(tmp_path, timeout=0.01, force=True)
    assert not (tmp_path / "numerics" / "numerics-heatmap.png").exists()


# --- 2, 3, 4: the bounds and refusals of amp-suite run ------------------------------------------------------


def test_the_largest_seed_run_takes_is_taken(tmp_path: Path) -> None:
    frame = _numerics(tmp_path, inline=True, seed=2**32 - 1)
    assert {run["status"] for run in frame.attrs["runs"]} == {"ok"}
    assert "seed must be a whole number from 0 to 4294967295, got 4294967296" in one_line_error(
        lambda: _numerics(tmp_path, seed=2**32, out=tmp_path / "other"))


def test_the_batch_size_has_the_bound_of_amp_suite_run(tmp_path: Path) -> None:
    from amp_suite.config.settings import SETTINGS_FIELDS

    assert SETTINGS_FIELDS["batch_size"].maximum == 65_536
    message = one_line_error(lambda: _numerics(tmp_path, batch_size=65_537))
    assert message == "batch size must be a whole number from 1 to 65536, got 65537"
    assert not (tmp_path / "numerics").exists()


@pytest.mark.parametrize(("keywords", "expected"), [
    ({"precisions": "amp_bf16,amp_bf16"}, "precisions lists 'amp_bf16' more than once"),
    ({"workloads": "tiny,tiny"}, "workloads lists 'tiny' more than once"),
    ({"frameworks": "shadowfw,shadowfw"}, "frameworks lists 'shadowfw' more than once"),
])
def test_a_name_given_twice_is_refused_as_run_refuses_it(tmp_path: Path, keywords, expected: str) -> None:
    assert one_line_error(lambda: _numerics(tmp_path, **keywords)) == expected
    assert not (tmp_path / "numerics").exists()


# --- 5: --tolerance and --max-runs need --bisect -------------------------------------------------------------


@pytest.mark.parametrize(("flags", "expected"), [
    (("--tolerance", "0.01"), "--tolerance 0.01 is a setting of the --bisect search: it needs --bisect"),
    (("--max-runs", "3"), "--max-runs 3 is a setting of the --bisect search: it needs --bisect"),
])
def test_a_bisect_flag_without_bisect_is_refused(tmp_path: Path, capsys, flags, expected: str) -> None:
    assert _cli(tmp_path, *flags) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("amp-suite: error: ") and expected in error and "\n" not in error
    assert not (tmp_path / "numerics").exists()


def test_the_bisect_settings_of_the_api_need_bisect_unless_they_are_the_defaults(tmp_path: Path) -> None:
    assert "tolerance=0.05 is a setting of the bisect search: it needs bisect=True" in one_line_error(
        lambda: _numerics(tmp_path, tolerance=0.05))
    assert "max_runs=3 is a setting of the bisect search" in one_line_error(lambda: _numerics(tmp_path, max_runs=3))
    assert not (tmp_path / "numerics").exists()
    assert _cli(tmp_path) == 0  # the defaults alone are no request for a search


# --- 7: nothing created for a refused request ----------------------------------------------------------------


def test_a_dataset_that_does_not_fit_creates_no_output(tmp_path: Path) -> None:
    message = one_line_error(lambda: _numerics(tmp_path, dataset="text"))
    assert "text" in message
    assert not (tmp_path / "numerics").exists()


# --- 6: the loss scale the docs name is the one the code starts at ---------------------------------------------


def test_the_docs_name_the_initial_loss_scale_the_plugins_use() -> None:
    text = (REPO / "docs" / "numerics.md").read_text(encoding="utf-8")
    scale = f"{DYNAMIC_LOSS_SCALE_INIT:.0f}"
    assert scale == "32768"
    assert "65536" not in text
    assert f"scale {scale}" in text and re.search(rf"starts? (it )?at {scale}", text)


def test_a_forced_command_stopped_before_any_run_keeps_the_earlier_results(tmp_path: Path, monkeypatch,
                                                                           capsys) -> None:
    """A hostile user's trial: `numerics --force` stopped before any run finished replaced the earlier
    numerics.jsonl and numerics.md with empty ones (a report of nothing, as `run` never writes)."""
    from amp_suite.shadow import command

    _numerics(tmp_path, inline=True)
    out = tmp_path / "numerics"
    before = {name: (out / name).read_bytes() for name in ("numerics.jsonl", "numerics.md")}

    def stop_at_once(plan, out_dir):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "run_inline", stop_at_once)
    with pytest.raises(KeyboardInterrupt):
        _numerics(tmp_path, inline=True, force=True)
    assert {name: (out / name).read_bytes() for name in before} == before
    assert "no run finished: the earlier numerics.jsonl and numerics.md" in capsys.readouterr().err


@pytest.mark.parametrize("ending", ["stopped", "timed out"])
def test_a_run_stopped_or_timed_out_leaves_no_order_for_its_worker(tmp_path: Path, monkeypatch, ending: str) -> None:
    """A hostile user's trial: numerics stopped by Ctrl-C left traces/KEY.request.json (the worker's order) behind;
    it is removed however the run ends."""
    import subprocess

    from amp_suite.shadow import command
    from amp_suite.shadow.traces import TRACES_DIR

    class Worker:
        returncode = None

        def wait(self, timeout=None):
            if ending == "stopped":
                raise KeyboardInterrupt
            raise subprocess.TimeoutExpired("worker", timeout)

    ended = []
    monkeypatch.setattr(command.process_tree, "start", lambda *args, **kwargs: Worker())
    monkeypatch.setattr(command.process_tree, "end", ended.append)
    if ending == "stopped":
        with pytest.raises(KeyboardInterrupt):
            _numerics(tmp_path, precisions="amp_bf16")
    else:
        _numerics(tmp_path, precisions="amp_bf16")
    traces = tmp_path / "numerics" / TRACES_DIR
    assert ended, "the worker was not ended"
    assert not list(traces.glob("*.request.json")), sorted(p.name for p in traces.iterdir())
