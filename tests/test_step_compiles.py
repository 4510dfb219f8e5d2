"""A JAX-based backend's train step is compiled once, not only traced once, and its build compiles little.

The kit's ``assert_compiles_once`` counts traces (the backend's
``EpochResult.extra["traces"]``), and a step traced once can still be
compiled by XLA twice: ``jax.jit`` keys its compiles by the arguments'
shardings and whether they are committed to a device.  keras@jax once handed
its first step uncommitted copies of the Keras variables and got committed
arrays back, so its second step compiled the whole step again (a tiny ViT: 2.4 s,
then 2.9 s); the JAX plugin commits its state from the start.  This counts
XLA's compiles of the step in one process (``tests/helpers/step_compiles.py``).

Building keras@jax's model compiled 40 programs for resnet8 (a probe with no
compile cache: 19.4 s of CPU), most of them thrown away: Keras's random
initializers (9 programs, 5 s; every variable is then set to its canonical
value), ``jax.numpy.copy`` of each variable and an op-by-op predict.  The kit's
``jax_compiles_to_build`` counts them (the JAX plugin's test is in
``test_frameworks.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from amp_suite.testing import framework_installed, jax_compiles_to_build

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


def test_keras_on_jax_builds_resnet8_without_compiling_random_initializers_or_copies() -> None:
    if not framework_installed("keras@jax"):
        pytest.skip("keras@jax is not installed")
    # What is left: Keras's "zeros" and "ones" of each new shape (13 for resnet8's 34 variables), and two casts.
    compiles = jax_compiles_to_build("keras@jax", "resnet8", {"model": "resnet8"})
    assert compiles <= 16, f"{compiles} XLA programs compiled to build the model (40 with random initializers)"
