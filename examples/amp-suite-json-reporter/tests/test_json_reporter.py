"""summary.json holds one strict-JSON record per cell group, normalized to fp32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amp_suite.testing import run_reporter, sample_results

PLUGIN = "amp_suite_json_reporter.plugin"


def test_writes_summary_json_with_speedups(tmp_path):
    [path] = run_reporter(PLUGIN, tmp_path)
    assert path == tmp_path / "summary.json"
    document = json.loads(path.read_text())  # strict JSON: no NaN
    rows = {row["precision"]: row for row in document["summary"]}
    assert rows["fp32"]["speedup"] == 1.0 and rows["amp_bf16"]["speedup"] == 1.5
    assert rows["amp_fp16"]["status"] == "failed" and rows["amp_fp16"]["throughput"] is None
    assert rows["amp_fp16"]["error"] == "RuntimeError: example failure"
    assert document["environment"]["python"]


def test_no_results_is_an_empty_summary(tmp_path):
    [path] = run_reporter(PLUGIN, tmp_path, results=[])
    assert json.loads(path.read_text())["summary"] == []


def test_the_entry_point_names_the_plugin_module():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["amp_suite"] == {"json_summary": PLUGIN}
    assert len(sample_results()) == 3
