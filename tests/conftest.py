"""Shared fixtures (a tiny sweep config, a clean fake-framework environment) and the helpers on the path.

Test modules never import this file: what they share lives in ``tests/helpers/`` (``suite_cli``:
the repository root, the tiny config, the CLI runner).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Test modules import the helpers (suite_cli, processes, ...) as top-level modules: pytest puts
# tests/helpers on sys.path (``pythonpath`` in pyproject.toml) before it reads this file.
from suite_cli import TINY_CONFIG

HELPERS = Path(__file__).parent / "helpers"
_PYTHONPATH_BEFORE = pytest.StashKey[str | None]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: a test that starts a real framework (seconds to minutes on 2 "
                                       "cores); -m 'not slow' leaves them out")
    # Worker processes import the test plugins (fakefw, ghostfw) by module name: for this session they
    # find them through PYTHONPATH, which pytest_unconfigure gives back as it was.
    config.stash[_PYTHONPATH_BEFORE] = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HELPERS), os.environ.get("PYTHONPATH", "")) if p)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The tests that start a real framework first, each group in its own order: the xdist lanes then end on
    # short tests, which even them out, instead of one lane starting a minutes-long test as the other runs dry.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_unconfigure(config: pytest.Config) -> None:
    before = config.stash.get(_PYTHONPATH_BEFORE, None)
    if before is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = before


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
