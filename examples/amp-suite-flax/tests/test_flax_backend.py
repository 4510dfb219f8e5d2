"""The Flax backend holds amp-suite's contract, and matches the built-in haiku backend.

The whole contract is one class from the installed conformance kit; the rest
are this backend's own promises.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amp_suite.testing import WORKLOADS, ProbeRequest, framework_installed, run_probe
from amp_suite.testing.conformance import BackendConformance

pytest.importorskip("flax", reason="flax is not installed (pip install -e examples/amp-suite-flax)")

# Loaded like `-p`: the tests also run before the package is installed.  Once it is,
# the entry point loads it and `-p` of the same module is silently ignored.
PLUGIN = ("amp_suite_flax.plugin",)
INSPECT = "amp_suite_flax.inspect_dtypes:layer_dtypes"


class TestFlaxConformance(BackendConformance):
    framework = "flax"
    reference = "jax"  # the built-in backend on the same XLA: agreement to float32 round-off
    plugin_modules = PLUGIN
    inspect = INSPECT
    param_count = 824_458  # the mnist_cnn of docs/workloads.md


needs_jax = pytest.mark.skipif(not framework_installed("jax"), reason="the built-in jax plugin is not installed")


@needs_jax
def test_flax_equals_the_haiku_backend_to_one_in_a_million(tmp_path):
    """Same XLA operations as the haiku plugin: fp32 logits and losses agree to 1e-6."""
    request = {"steps": 2, "batch_size": 16}
    flax = run_probe(ProbeRequest("flax", plugin_modules=PLUGIN, **request), tmp_path / "flax")
    jax = run_probe(ProbeRequest("jax", **request), tmp_path / "jax")
    assert flax.param_count == jax.param_count == 824_458
    assert np.abs(flax.logits_before - jax.logits_before).max() <= 1e-6
    np.testing.assert_allclose(flax.losses, jax.losses, rtol=1e-6)


CONFIG = """
[defaults]
dataset = "synthetic"

[workloads.mnist_cnn]
{table}
"""


@needs_jax
def test_a_sweep_beside_the_jax_backend(tmp_path):
    """`amp-suite run --frameworks jax,flax`: every cell ok, equal parameter counts, equal fp32 first losses."""
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in WORKLOADS["mnist_cnn"].items())
    config = tmp_path / "benchmarks.toml"
    config.write_text(CONFIG.format(table=table))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "amp_suite", "run", "--config", str(config), "-p", PLUGIN[0],
         "--frameworks", "jax,flax", "--workloads", "mnist_cnn", "--precisions", "fp32,amp_bf16",
         "--steps", "3", "--warmup", "1", "--batch-size", "16", "--out", str(out), "-q"],
        capture_output=True, text=True, timeout=900, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [line for line in done.stderr.splitlines() if "warning" in line and "flax" in line]  # -p is harmless
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted((r["framework"], r["precision"], r["status"]) for r in rows) == [
        ("flax", "amp_bf16", "ok"), ("flax", "fp32", "ok"), ("jax", "amp_bf16", "ok"), ("jax", "fp32", "ok")]
    assert len({r["metrics"]["param_count"] for r in rows}) == 1
    fp32 = {r["framework"]: r["metrics"]["first_step_loss"] for r in rows if r["precision"] == "fp32"}
    assert abs(fp32["flax"] - fp32["jax"]) <= 1e-6 * abs(fp32["jax"])
    assert all(r["metrics"]["traces"] == 1 for r in rows if r["framework"] == "flax")  # EpochResult.extra
    report = (out / "report.md").read_text()
    assert "flax 0.12.8" in report
    try:
        importlib.metadata.version("amp-suite-flax")
    except importlib.metadata.PackageNotFoundError:
        return  # not installed: the distribution has no version to show
    assert "amp-suite-flax 0.1.0" in report


def test_the_entry_point_names_the_plugin_module():
    """What pip installs: pyproject's entry point in the amp_suite group names a module that exists."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["amp_suite"] == {"flax": PLUGIN[0]}
