"""Hooks are declared once, in hookspecs.py: the host's methods and the framework plugin's protocol derive from it."""

from __future__ import annotations

import inspect

import pytest

from amp_suite.markers import hookimpl
from amp_suite.plugins import hookspecs
from amp_suite.plugins.framework_plugin import FrameworkPlugin
from amp_suite.plugins.hook_table import (
    CELL,
    DESCRIBING,
    PROTOCOL_MODULE,
    REPORTING,
    every_answer,
    hook_names,
    hook_table,
    protocol_source,
)
from amp_suite.plugins.host import PluginHost
from amp_suite.records import DeviceInfo, RunSpec

RUN = RunSpec(framework="fake", workload="tiny", precision="fp32")


def test_the_table_holds_every_spec_in_declaration_order_with_its_stage() -> None:
    specs = [name for name, func in inspect.getmembers(hookspecs, inspect.isfunction) if hasattr(func, "amp_suite_spec")]
    table = hook_table()
    assert sorted(table) == sorted(specs)
    source = inspect.getsource(hookspecs)
    assert list(table) == sorted(table, key=lambda name: source.index(f"\ndef {name}("))
    assert list(table)[0] == "framework_info"
    assert table["framework_info"].stage == DESCRIBING
    assert table["train_epoch"].stage == CELL and table["train_epoch"].firstresult
    assert table["measure"].stage == CELL and not table["measure"].firstresult
    assert table["write_report"].stage == REPORTING
    assert table["reset_memory_peak"].optional and not table["train_epoch"].optional
    assert table["select_device"].arguments == (("run", "RunSpec"),)
    assert table["select_device"].returns == "DeviceInfo | None"


def test_the_framework_plugin_protocol_is_written_from_the_specs() -> None:
    text = PROTOCOL_MODULE.read_text(encoding="utf-8")
    assert protocol_source(text) == text, "stale: run python -m amp_suite.plugins.hook_table"
    members = [name for name in vars(FrameworkPlugin) if not name.startswith("_") and callable(vars(FrameworkPlugin)[name])]
    required = [name for name, spec in hook_table().items()
                if spec.stage == DESCRIBING or (spec.stage == CELL and not spec.optional)]
    assert members == required
    for name in required:  # the protocol takes the spec's arguments, by name, in order
        protocol = list(inspect.signature(getattr(FrameworkPlugin, name)).parameters)[1:]
        assert protocol == [argument for argument, _ in hook_table()[name].arguments], name


def test_a_stale_protocol_block_is_rewritten() -> None:
    text = PROTOCOL_MODULE.read_text(encoding="utf-8")
    stale = text.replace("    def select_device(self, run: RunSpec) -> DeviceInfo: ...\n\n", "")
    assert stale != text and protocol_source(stale) == text


def test_every_cell_hook_has_a_host_method_named_after_it() -> None:
    for name in hook_names(CELL):
        assert callable(getattr(PluginHost, name, None)), f"PluginHost has no method for the hook {name}"
    assert hook_names(REPORTING) == ["report_sections", "write_report"]  # both called by PluginHost.write_report


class _Device:
    @hookimpl
    def select_device(self, run):
        return DeviceInfo(kind="cpu", platform="cpu", name=f"cpu of {run.framework}")


def test_a_derived_method_binds_positional_arguments_to_the_specs_names_and_checks_the_answer() -> None:
    host = PluginHost(autoload=False)
    host.register(_Device())
    assert host.select_device(RUN).name == "cpu of fake"
    assert host.select_device(run=RUN).name == "cpu of fake"
    assert PluginHost.select_device.__name__ == "select_device"
    with pytest.raises(TypeError, match="too many positional"):
        host.select_device(RUN, "second")  # type: ignore[call-arg]


class _Figures:
    def __init__(self, figures):
        self.figures = figures

    @hookimpl
    def measure(self, run, model, device):
        return self.figures


class _MeasuringHost(PluginHost):
    every_measure = every_answer(hookspecs.measure)


def test_every_answer_collects_each_plugins_answer_checked_and_names_a_wrong_one() -> None:
    from amp_suite.errors import PluginError

    host = _MeasuringHost(autoload=False, extra_modules=())
    host.pm.unregister(name="host_measure")
    host.register(_Figures({"a": 1}), name="first")
    host.register(_Figures(None), name="silent")
    host.register(_Figures({"b": 2}), name="second")
    device = DeviceInfo(kind="cpu", platform="cpu", name="cpu")
    answers = host._every("measure", run=RUN, model=None, device=device)
    assert sorted(answers, key=str) == [{"a": 1}, {"b": 2}]
    assert sorted(host.every_measure(RUN, None, device), key=str) == [{"a": 1}, {"b": 2}]
    host.register(_Figures(["not", "a", "dict"]), name="wrong")
    with pytest.raises(PluginError, match="wrong"):
        host.every_measure(RUN, None, device)


def test_the_optional_hooks_protocol_takes_the_specs_arguments() -> None:
    from amp_suite.plugins.framework_plugin import ResetsMemoryPeak

    spec = hook_table()["reset_memory_peak"]
    protocol = list(inspect.signature(ResetsMemoryPeak.reset_memory_peak).parameters)[1:]
    assert spec.optional and protocol == [argument for argument, _ in spec.arguments]
