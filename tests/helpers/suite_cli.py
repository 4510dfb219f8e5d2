"""What test modules share: the repository's paths, a tiny sweep config and the CLI as a user runs it."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

HELPERS = Path(__file__).resolve().parent
REPO = HELPERS.parent.parent

# Folders under the repository that hold no source of the product: tests, bytecode, and the build/ copies a local
# pip install leaves beside an example's source tree (its .egg-info: any part ending so).
NOT_SOURCE_PARTS = frozenset({"tests", "__pycache__", "build"})


def source_modules(*folders: str, repo: Path = REPO) -> list[Path]:
    """The Python modules under ``repo/FOLDER`` for each of ``folders``, sorted; tests, bytecode and what a local
    pip install leaves are left out (``NOT_SOURCE_PARTS``)."""
    return sorted(path for folder in folders for path in (repo / folder).rglob("*.py")
                  if not any(part in NOT_SOURCE_PARTS or part.endswith(".egg-info")
                             for part in path.relative_to(repo).parts))

TINY_CONFIG = """
[defaults]
frameworks = ["fake"]
workloads = ["tiny"]
precisions = ["fp32", "amp_fp16", "amp_bf16"]
steps = 4
warmup = 1
epochs = 1
repeats = 1
timeout = 120
out = "{out}"

[workloads.tiny]
model = "mnist_cnn"
input_size = 8
channels = 1
num_classes = 3
batch_size = 8

[workloads.mnist_cnn]
model = "mnist_cnn"
input_size = 28
channels = 1
num_classes = 10
batch_size = 16
"""


# The chart-drawing reporters, which the session's sweeps leave out unless a test asks for them (tests/conftest.py).
CHART_REPORTERS = ("charts", "html")


def disabled_besides_charts(disabled: str) -> str:
    """A value of AMP_SUITE_DISABLE_PLUGINS with the chart reporters taken out; any other plugin it names stays."""
    return ",".join(name.strip() for name in disabled.split(",")
                    if name.strip() and name.strip() not in CHART_REPORTERS)


# XLA's optimization level of LLVM, read from XLA_FLAGS by JAX and TensorFlow: the test session sets 0
# (tests/conftest.py); XLA's default is 3.
XLA_LLVM_LEVEL_FLAG = "--xla_backend_optimization_level"


def nvidia_gpu_present() -> bool:
    """Whether this machine shows an NVIDIA GPU device (``/dev/nvidia0``, ...): the session then leaves XLA's level
    alone."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def xla_flags_at(level: int) -> str:
    """This process's ``XLA_FLAGS`` with XLA's LLVM stage at ``level`` instead of the session's."""
    flags = [flag for flag in os.environ.get("XLA_FLAGS", "").split() if not flag.startswith(XLA_LLVM_LEVEL_FLAG)]
    return " ".join([*flags, f"{XLA_LLVM_LEVEL_FLAG}={level}"])


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m amp_suite`` as a user would, in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "amp_suite", *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=timeout, cwd=cwd or REPO,
    )


def tiny_config_file(folder: Path, extra: str = "") -> Path:
    """``folder/benchmarks.toml``: the tiny config (its output in ``folder/out``), then ``extra``."""
    path = folder / "benchmarks.toml"
    path.write_text(TINY_CONFIG.format(out=(folder / "out").as_posix()) + extra)
    return path


def one_line_error(call) -> str:
    """The message of the UsageError ``call()`` raises, checked to be one line."""
    import pytest

    from amp_suite.errors import UsageError

    with pytest.raises(UsageError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message
