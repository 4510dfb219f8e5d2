"""A worker loads what its framework runs on, not every library the framework finds installed.

``import keras`` (and ``import tensorflow``) import JAX, matplotlib and pandas,
and ``import haiku`` imports Flax, when they are installed, for features a
worker never uses; the plugins hide them while the framework is first imported
(``amp_suite_plugins.hidden_imports``).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from amp_suite.testing import ProbeRequest, framework_installed, run_probe
from amp_suite_plugins.hidden_imports import hidden_modules
from amp_suite_plugins.jax.haiku_import import UNUSED_AT_IMPORT as HAIKU_UNUSED_AT_IMPORT
from amp_suite_plugins.keras.backends import UNUSED_AT_IMPORT


def test_a_hidden_module_fails_to_import_inside_the_block_and_imports_after_it() -> None:
    name = "wave"  # a standard module nothing here imports
    sys.modules.pop(name, None)
    with hidden_modules((name, "json")):
        with pytest.raises(ImportError):
            importlib.import_module(name)
        assert importlib.import_module("json") is json  # imported before the block: left alone
    assert importlib.import_module(name).__name__ == name


def test_an_import_that_fails_inside_the_block_still_unhides() -> None:
    name = "wave"
    sys.modules.pop(name, None)
    with pytest.raises(RuntimeError), hidden_modules((name,)):
        raise RuntimeError("the import of keras failed")
    assert name not in sys.modules and importlib.import_module(name).__name__ == name


# The Keras backends whose first import would load all three (Keras on JAX needs JAX).
BACKENDS = ("tensorflow", "torch")
# What each backend's Keras process must not have loaded once it trained, of what is installed here.
NOT_LOADED = ("jax", "matplotlib", "pandas")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_keras_on_its_backend_trains_without_the_unused_libraries_which_stay_importable(backend: str) -> None:
    if any(importlib.util.find_spec(m) is None for m in ("keras", backend)):
        pytest.skip(f"keras or {backend} is not installed")
    unused = tuple(m for m in NOT_LOADED if importlib.util.find_spec(m) is not None)
    assert set(unused) <= set(UNUSED_AT_IMPORT[backend])
    code = (
        "import json, sys\n"
        "import numpy as np\n"
        "from amp_suite_plugins.keras.backends import import_keras\n"
        f"keras = import_keras({backend!r})\n"
        "model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "loss = model.train_on_batch(np.ones((4, 3), 'float32'), np.zeros((4, 2), 'float32'))\n"
        f"loaded = [m for m in {unused!r} if m in sys.modules]\n"
        f"import importlib; after = [importlib.import_module(m).__name__ for m in {unused!r}]\n"
        "print(json.dumps({'backend': keras.backend.backend(), 'loaded': loaded, 'after': after,\n"
        "                  'loss': float(np.asarray(loss).ravel()[0])}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["backend"] == backend
    assert seen["loaded"] == [], f"Keras on {backend} loaded {seen['loaded']}"
    assert seen["after"] == list(unused) and seen["loss"] >= 0.0


@pytest.mark.slow
def test_a_jax_cell_builds_and_trains_without_flax_which_stays_importable(tmp_path) -> None:
    """dm-haiku imports Flax whenever it is installed (the test extra installs it for the Flax example): the JAX
    plugin's model, built and trained in a fresh probe process, runs without it, and Flax imports afterwards."""
    if importlib.util.find_spec("flax") is None or not framework_installed("jax"):
        pytest.skip("needs flax and the JAX plugin's frameworks (jax, dm-haiku, jmp, optax) installed")
    assert HAIKU_UNUSED_AT_IMPORT == ("flax",)
    seen = run_probe(ProbeRequest(framework="jax", batch_size=8, inspect="loaded_modules:loaded"), tmp_path)
    assert seen.losses and np.isfinite(seen.losses).all()
    assert "jax" in seen.dtypes["loaded"]  # the inspector saw the process that trained
    assert "flax" not in seen.dtypes["loaded"], f"the JAX probe loaded {seen.dtypes['loaded']}"
    assert "flax" in seen.dtypes["importable_after"]
