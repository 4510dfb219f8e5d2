"""A built-in plugin keeps the kit's own notes of what a precision applied, beside its own.

An ML engineer's trial: fp32 with keep_fp32 set read no note at all, though docs/usage.md says "What ran" notes that
the option changes nothing there; each plugin replaced the kit's notes with its own.
"""

from __future__ import annotations

import importlib

import pytest

from amp_suite.records import DeviceInfo, RunSpec

CPU = DeviceInfo(kind="cpu", platform="cpu", name="cpu")


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_fp32_with_layers_kept_in_float32_notes_that_it_changes_nothing(framework):
    pytest.importorskip(framework)
    plugin = importlib.import_module(f"amp_suite_plugins.{framework}.plugin")
    applied = plugin.set_precision(RunSpec(framework=framework, workload="mnist_cnn", precision="fp32",
                                           options={"keep_fp32": ["dense"]}), CPU)
    assert applied.notes[0] == "keep_fp32=dense: no effect, every layer of fp32 computes in float32"
    assert len(applied.notes) > 1 and applied.keep_fp32 == ()  # the plugin's own notes follow
