"""The test session compiles XLA with LLVM unoptimized, and that leaves the program XLA builds as it is.

``tests/conftest.py`` adds ``--xla_backend_optimization_level=0`` to
``XLA_FLAGS`` for the session on a machine without an NVIDIA GPU (XLA's
default is 3).  The level is read by XLA's LLVM stage alone, after its HLO
passes: one small training step (``tests/helpers/xla_level_program.py``),
compiled by JAX and by TensorFlow at both levels, gives the same optimized HLO
and the same values to float32 round-off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from amp_suite.testing import framework_installed, relative_error
from suite_cli import XLA_LLVM_LEVEL_FLAG as LEVEL_FLAG
from suite_cli import nvidia_gpu_present, xla_flags_at

HELPERS = Path(__file__).parent / "helpers"
# Float32 round-off of the step (measured 6.3e-7 on an AVX2 CPU: fused multiply-adds and vectorized sums at 3, neither
# at 0), with room for a bfloat16 rounding that one float32 ulp tips over.
ROUND_OFF = 1e-3


def test_the_session_compiles_xla_with_llvm_unoptimized() -> None:
    if nvidia_gpu_present():
        pytest.skip("a machine with an NVIDIA GPU: the session leaves XLA's level alone")
    levels = [flag.split("=", 1)[1] for flag in os.environ.get("XLA_FLAGS", "").split() if flag.startswith(LEVEL_FLAG)]
    assert len(levels) == 1, f"XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}: one {LEVEL_FLAG} expected"
    if levels[0] != "0":
        pytest.skip(f"the caller chose {LEVEL_FLAG}={levels[0]}")


def _compiled(framework: str, level: int, out: Path) -> dict:
    # TF_XLA_FLAGS without the session's persistent cache (JAX's is off in the program): each process compiles
    env = {**os.environ, "XLA_FLAGS": xla_flags_at(level), "TF_XLA_FLAGS": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-m", "xla_level_program", framework, str(out)], cwd=HELPERS, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_the_level_leaves_the_optimized_hlo_and_changes_round_off_only(framework: str, tmp_path: Path) -> None:
    if not framework_installed("jax" if framework == "jax" else "keras"):
        pytest.skip(f"{framework} is not installed")
    unoptimized = _compiled(framework, 0, tmp_path / "level0.json")
    default = _compiled(framework, 3, tmp_path / "level3.json")
    assert unoptimized["hlo"] == default["hlo"], f"{framework}: the optimized HLO depends on {LEVEL_FLAG}"
    assert "convolution" in default["hlo"] and "dot" in default["hlo"], default["hlo"][:2000]
    for name, low, high in zip(("loss", "kernel gradient", "dense gradient"), unoptimized["outputs"],
                               default["outputs"], strict=True):
        low, high = np.asarray(low), np.asarray(high)
        assert np.isfinite(high).all() and np.abs(high).max() > 0, (name, high)
        error = relative_error(low, high)
        assert error <= ROUND_OFF, f"{framework} {name}: {error:.2e} apart at levels 0 and 3"
