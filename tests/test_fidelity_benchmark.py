"""The fidelity benchmark compares like with like: its idiomatic loops compute what the suite computes.

``benchmarks/overhead.py`` judges each plugin against a hand-written loop.
On a CPU a step's time depends on the values it computes with, so that
comparison only means something if both sides start from the same weights
and see the same batches; the first step's loss of both sides shows whether
they do.  The throughput itself is the benchmark's business, not a test's.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from amp_suite.testing import framework_installed

# Every test here starts a real framework (slow on 2 cores): -m 'not slow' leaves them out.
pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def overhead():
    """``benchmarks/overhead.py`` as a module (``benchmarks/`` is no package)."""
    spec = importlib.util.spec_from_file_location("overhead", BENCHMARKS / "overhead.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def inputs(overhead, tmp_path_factory):
    args = argparse.Namespace(steps=3, warmup=1, steps_128=3, warmup_128=1)
    return args, overhead.write_inputs(28, args, 8, tmp_path_factory.mktemp("fidelity") / "inputs-28.npz")


def test_inputs_are_the_suites_batches_and_initial_weights(overhead, inputs):
    from amp_suite.config.catalog import load_config
    from amp_suite.workloads.workload import init_variables

    args, path = inputs
    workload = load_config(overhead.REPO / "benchmarks.toml").workloads["mnist_cnn"]
    weights, _ = init_variables(workload, 0)
    with np.load(path) as data:
        assert data["images"].shape == (3, 8, 28, 28, 1)
        assert data["labels"].shape == (3, 8)
        assert 0 < float(data["images"].mean()) < 0.5  # MNIST digits (mostly black), not uniform noise
        for name, value in weights.items():
            np.testing.assert_array_equal(data[name], value)


@pytest.mark.parametrize("framework", ["torch", "keras", "jax"])
def test_idiomatic_loop_starts_where_the_suite_starts(overhead, inputs, framework):
    if not framework_installed(framework):
        pytest.skip(f"{framework} is not installed")
    args, path = inputs
    _, suite_loss = overhead.suite(framework, "fp32", 28, args, 8)
    throughput, idiomatic_loss = overhead.idiomatic(framework, "fp32", 28, args, 8, path)
    assert throughput > 0
    assert idiomatic_loss == pytest.approx(suite_loss, rel=1e-5)


def test_a_row_gets_more_rounds_when_its_runs_are_short(overhead):
    args = argparse.Namespace(rounds=5, max_rounds=15, row_seconds=180.0)
    assert overhead.rounds_for(10.0, args) == 15  # 18 fit, capped
    assert overhead.rounds_for(20.0, args) == 9
    assert overhead.rounds_for(100.0, args) == 5  # never fewer than --rounds
