"""The worked plugin packages in examples/ install with pip and pass their own tests.

Each example is installed the way a user installs it, by pip from its own
pyproject.toml, but into a temporary directory (``pip install --target``):
that directory then holds the package and its ``.dist-info`` with the
``amp_suite`` entry point, and putting it on ``PYTHONPATH`` makes amp-suite
load the plugin exactly as from site-packages, without changing the
environment the suite runs in.  The example's tests then run in their own
pytest process, from the example's folder, as its author runs them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amp_suite.testing.shared_probes import PROBE_CACHE_ENV, session_probe_folder
from suite_cli import REPO

# Every test here starts a real framework (slow on 2 cores): -m 'not slow' leaves them out.
pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples"


def _install(example: Path, target: Path) -> None:
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
               "--disable-pip-version-check", "--target", str(target)]
    if importlib.util.find_spec("setuptools") is not None:
        command.append("--no-build-isolation")  # build with the installed setuptools: nothing to download
    done = subprocess.run([*command, str(example)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def _run_tests(example: Path, site: Path, probes: Path | None = None) -> subprocess.CompletedProcess:
    """The example's own tests in a pytest process of their own; ``probes``: this session's shared probe folder,
    so the example's reference probes (the built-in backends' own, the same requests) are run once for both."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", ""))
                                                       if p)}
    if probes is not None:
        env[PROBE_CACHE_ENV] = str(probes)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=example, env=env,
                          capture_output=True, text=True, timeout=3000)


def test_the_json_reporter_installs_and_passes_its_tests(tmp_path):
    example = EXAMPLES / "amp-suite-json-reporter"
    _install(example, tmp_path / "site")
    entry_points = (next((tmp_path / "site").glob("amp_suite_json_reporter-*.dist-info")) / "entry_points.txt")
    assert "json_summary = amp_suite_json_reporter.plugin" in entry_points.read_text()
    done = _run_tests(example, tmp_path / "site")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("flax", "jax", "jmp", "optax")),
                    reason="flax is not installed (pip install -e '.[flax-example]')")
def test_the_flax_backend_installs_and_passes_its_tests(tmp_path, tmp_path_factory):
    example = EXAMPLES / "amp-suite-flax"
    _install(example, tmp_path / "site")
    done = _run_tests(example, tmp_path / "site", session_probe_folder(tmp_path_factory))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
