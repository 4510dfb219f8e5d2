"""The notebook API: amp_suite.run(...) and amp_suite.load(DIR) return one row per cell."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

import amp_suite
from amp_suite.errors import UsageError
from amp_suite.report.normalize import CELL_COLUMNS
from suite_cli import REPO


def test_run_returns_a_frame_with_one_row_per_cell(tiny_config, tmp_path, clean_fake_env):
    out = tmp_path / "notebook"
    df = amp_suite.run(frameworks=["fake"], workloads="tiny", precisions=["fp32", "amp_bf16"],
                       config=tiny_config, plugins=["fakefw"], steps=4, warmup=1, repeats=2, out=str(out),
                       price_per_hour=1.5)
    assert isinstance(df, pd.DataFrame)
    # the standard columns, then the figure the fake plugin adds through measure
    assert len(df) == 4 and list(df.columns) == [*CELL_COLUMNS, "fake_kernel"]
    assert (df.fake_kernel == "numpy matmul").all()
    assert set(zip(df.precision, df.repeat, strict=True)) == {(p, r) for p in ("fp32", "amp_bf16") for r in (0, 1)}
    assert (df.status == "ok").all() and (df.throughput > 0).all()
    assert (df.currency == "USD").all() and (df.cost_per_million_images > 0).all()
    # an epoch is the sweep's 4 steps of the cell's batch: its cost, the steady-state time of those images
    batch = json.loads((out / "results.jsonl").read_text().splitlines()[0])["config"]["batch_size"]
    assert (df.images_per_epoch == 4 * batch).all()
    assert list(df.cost_per_epoch) == pytest.approx(list(1.5 / 3600 * 4 * batch / df.throughput))
    assert df.attrs["exit_code"] == 0 and df.attrs["out_dir"] == str(out)
    assert (out / "results.csv").exists() and (out / "report.md").exists()
    csv = pd.read_csv(out / "results.csv")
    assert list(csv.columns) == list(df.columns) and len(csv) == len(df)
    loaded = amp_suite.load(out)
    pd.testing.assert_frame_equal(loaded.reset_index(drop=True), df.reset_index(drop=True), check_dtype=False)
    assert "| fake_kernel | fake | numpy matmul | numpy matmul |" in (out / "report.md").read_text()


def test_run_shows_progress_as_plain_lines_off_a_terminal_and_prints_the_verdict(tiny_config, tmp_path,
                                                                                  clean_fake_env, capsys):
    """A notebook's stderr is no terminal: a plain line per cell, no cursor codes; the verdict on stdout."""
    amp_suite.run(frameworks="fake", workloads="tiny", precisions="fp32,amp_bf16", config=tiny_config,
                  plugins=["fakefw"], steps=3, warmup=1, repeats=1, out=str(tmp_path / "out"))
    captured = capsys.readouterr()
    cells = [line for line in captured.err.splitlines() if line.startswith("[")]
    assert [line.split(" ")[0] for line in cells] == ["[1/2]", "[1/2]", "[2/2]", "[2/2]"], captured.err
    assert cells[1].startswith("[1/2] tiny fake fp32 r0") and " ok: " in cells[1] and "ETA" in cells[1]
    assert "\r" not in captured.err and "\x1b" not in captured.err
    verdict = captured.out.splitlines()
    assert verdict[0].startswith("Verdict") and any("amp_bf16" in line and "x" in line for line in verdict)
    quiet = amp_suite.run(frameworks="fake", workloads="tiny", precisions="fp32", config=tiny_config,
                          plugins=["fakefw"], steps=3, warmup=1, repeats=1, out=str(tmp_path / "quiet"), quiet=True)
    assert quiet.attrs["exit_code"] == 0 and "[1/1]" not in capsys.readouterr().err


def test_run_refuses_unknown_settings_and_bad_values(tiny_config):
    with pytest.raises(UsageError, match="unknown setting 'stpes' \\(did you mean 'steps'\\?\\)"):
        amp_suite.run(frameworks="fake", config=tiny_config, plugins=["fakefw"], stpes=3)
    with pytest.raises(UsageError, match="steps must be an integer"):
        amp_suite.run(frameworks="fake", config=tiny_config, plugins=["fakefw"], steps=2.5)
    with pytest.raises(UsageError, match="precisions='fp32,,amp_bf16' has an empty entry between commas"):
        amp_suite.run(frameworks="fake", config=tiny_config, plugins=["fakefw"], precisions="fp32,,amp_bf16")
    with pytest.raises(UsageError, match="plugins='fakefw,' has an empty entry"):
        amp_suite.run(frameworks="fake", config=tiny_config, plugins="fakefw,")


def test_load_of_a_directory_without_results_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        amp_suite.load(tmp_path)


def test_importing_amp_suite_imports_neither_pandas_nor_a_framework():
    probe = ("import sys, json, amp_suite\n"
             "print(json.dumps([m for m in ('pandas', 'torch', 'tensorflow', 'jax', 'matplotlib') "
             "if m in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
