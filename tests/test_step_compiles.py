"""A JAX-based backend's train step is compiled once, not only traced once.

The kit's ``assert_compiles_once`` counts traces (the backend's
``EpochResult.extra["traces"]``), and a step traced once can still be
compiled by XLA twice: ``jax.jit`` keys its compiles by the arguments'
shardings and whether they are committed to a device.  keras@jax once handed
its first step uncommitted copies of the Keras variables and got committed
arrays back, so its second step compiled the whole step again (a tiny ViT: 2.4 s,
then 2.9 s); the JAX plugin commits its state from the start.  This counts
XLA's compiles of the step in one process (``tests/helpers/step_compiles.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amp_suite.testing import framework_installed

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("framework", ["jax", "keras@jax"])
def test_the_train_step_compiles_once_over_two_epochs_of_loss_scaled_steps(framework: str, tmp_path: Path) -> None:
    if not framework_installed(framework):
        pytest.skip(f"{framework} is not installed")
    out = tmp_path / "compiles.json"
    done = subprocess.run([sys.executable, "-m", "step_compiles", framework, str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    assert found["step"] == 1, f"{framework} compiled its step {found['step']} times: {found['compiles']}"
