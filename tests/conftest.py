"""Shared fixtures: a tiny sweep config, the fake framework plugin, a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HELPERS = Path(__file__).parent / "helpers"
REPO = Path(__file__).parent.parent
# Worker processes import the test plugins (fakefw, ghostfw) by module name.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HELPERS), os.environ.get("PYTHONPATH", "")) if p
)
sys.path.insert(0, str(HELPERS))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a test of several seconds (the largest Keras graphs); "
                                       "-m 'not slow' leaves them out")


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


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "benchmarks.toml"
    path.write_text(TINY_CONFIG.format(out=(tmp_path / "out").as_posix()))
    return path


@pytest.fixture
def clean_fake_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("FAKEFW_MODE", "FAKEFW_TARGET", "FAKEFW_PIDFILE", "FAKEFW_GATE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m amp_suite`` as a user would, in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "amp_suite", *args], capture_output=True, text=True,
        env={**os.environ, **(env or {})}, timeout=timeout, cwd=cwd or REPO,
    )
