"""The tests' narrow backbones are the full networks but for their width, and the full-size run before a release
really runs the full ones.

``tests/test_new_layer_kinds.py`` compares the frameworks on
``tests/helpers/narrow_backbones.py``'s networks so that its probes compile in
seconds; ``benchmarks/full_size_comparisons.py`` runs the same module on the
full networks.  Neither check here imports a framework.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from amp_suite.records import LayerSpec
from amp_suite.workloads.architectures import ARCHITECTURES
from amp_suite.workloads.workload import init_variables, workload_from_config
from narrow_backbones import NARROW
from suite_cli import REPO


def _shape_of(layers: tuple[LayerSpec, ...]) -> list:
    """Each layer with its width (``features``, the only field a narrow network may change) blanked and its nested
    sequences walked: kinds, names, kernels, strides, paddings, rates and nesting."""
    shape = []
    for spec in layers:
        blank = dataclasses.replace(spec, features=0, body=(), shortcut=())
        shape.append((blank, _shape_of(spec.body), _shape_of(spec.shortcut)))
    return shape


@pytest.mark.parametrize("full", list(NARROW))
def test_a_narrow_backbone_is_the_full_one_but_narrower(full: str) -> None:
    narrow = NARROW[full]
    assert _shape_of(ARCHITECTURES[narrow](10, 32)) == _shape_of(ARCHITECTURES[full](10, 32))
    table = {"input_size": 32, "channels": 3, "num_classes": 10, "batch_size": 8}
    narrow_weights, narrow_state = init_variables(workload_from_config("n", {**table, "model": narrow}), 0)
    full_weights, full_state = init_variables(workload_from_config("f", {**table, "model": full}), 0)
    assert set(narrow_weights) == set(full_weights) and set(narrow_state) == set(full_state)
    narrow_size = sum(value.size for value in narrow_weights.values())
    full_size = sum(value.size for value in full_weights.values())
    assert narrow_size * 8 < full_size, (narrow, narrow_size, full, full_size)  # at most an eighth of the values


def _comparison_architectures(environment: dict[str, str]) -> dict[str, str]:
    """The architecture of each table ``tests/test_new_layer_kinds.py`` builds, imported under ``environment``."""
    code = ("import json, test_new_layer_kinds as m; "
            "print(json.dumps({name: table['model'] for name, table in m.TABLES.items()}))")
    path = os.pathsep.join((str(REPO / "tests"), str(REPO / "tests" / "helpers")))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**environment, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_the_comparisons_train_the_narrow_networks_unless_asked_for_the_full_ones() -> None:
    environment = {name: value for name, value in os.environ.items() if name != "AMP_SUITE_FULL_SIZE"}
    assert _comparison_architectures(environment) == NARROW
    full = _comparison_architectures({**environment, "AMP_SUITE_FULL_SIZE": "1"})
    assert full == {name: name for name in NARROW}


def test_the_full_size_benchmark_runs_the_comparisons_with_the_full_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("full_size_comparisons",
                                                  REPO / "benchmarks" / "full_size_comparisons.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    calls = []

    def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        calls.append((command, kwargs))
        return subprocess.CompletedProcess(command, 3)

    monkeypatch.setattr(script.subprocess, "run", run)
    assert script.main(["-k", "efficientnet"]) == 3  # pytest's exit status
    ((command, kwargs),) = calls
    assert command[1:3] == ["-m", "pytest"] and "tests/test_new_layer_kinds.py" in command
    assert command[-2:] == ["-k", "efficientnet"]
    environment = kwargs["env"]
    assert isinstance(environment, dict) and environment["AMP_SUITE_FULL_SIZE"] == "1"
    assert kwargs["cwd"] == REPO and all((REPO / module).is_file() for module in script.MODULES)
