"""The code base stays ruff- and mypy-clean: both run as part of the test command CI runs.

Both read their settings from ``pyproject.toml`` (``[tool.ruff]``, ``[tool.mypy]``), so what
these tests check is exactly what a developer gets from ``ruff check`` and ``mypy`` at the
repository root. They run the tools in a subprocess so a failure shows the tools' own report.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    """The tool next to this interpreter (the `test` extra installs both), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: install the test extra (pip install -e '.[all,test]')")
    return found


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    done = _run(_tool("ruff"), "check", "--no-cache", "--output-format", "concise")
    assert done.returncode == 0, f"ruff check reports problems:\n{done.stdout}{done.stderr}"


@pytest.mark.slow
def test_mypy_finds_nothing() -> None:
    done = _run(_tool("mypy"), "--no-incremental")
    assert done.returncode == 0, f"mypy reports problems:\n{done.stdout}{done.stderr}"
    assert "Success" in done.stdout, done.stdout
