"""Plugins that misbehave are contained: listed, never raised from run, list or plugins."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from amp_suite.cell.worker import classify_exception
from amp_suite.cli import main
from amp_suite.errors import PluginError
from amp_suite.plugins.host import DISABLE_ENV, PluginHost
from amp_suite.records import CellResult, RunSpec

MISSPELT_HOOK = '''
from amp_suite import hookimpl

@hookimpl
def trian_epoch(run, model, staged, epoch):
    return None
'''
RAISING_REPORTER = '''
from amp_suite import hookimpl

@hookimpl
def write_report(results, out_dir, environment):
    raise RuntimeError("reporter exploded")
'''
GREEDY_MEASURE = '''
from amp_suite import hookimpl

@hookimpl
def measure():
    return {"throughput": 1.0, "peak_rss_bytes": 1}
'''
BROKEN_MEASURE = '''
from amp_suite import hookimpl

@hookimpl
def measure():
    raise MemoryError("measuring took it all")
'''


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in (("misspelt_hook", MISSPELT_HOOK), ("raising_reporter", RAISING_REPORTER),
                       ("greedy_measure", GREEDY_MEASURE), ("broken_measure", BROKEN_MEASURE)):
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_misspelt_hook_is_listed_with_the_closest_name(plugin_dir):
    host = PluginHost(extra_modules=("misspelt_hook", "fakefw"))
    [failure] = host.failures
    assert failure.name == "misspelt_hook"
    assert failure.error == "implements unknown hook 'trian_epoch' (did you mean 'train_epoch'?)"
    assert "misspelt_hook" not in {d.name for d in host.describe()}
    assert "fake" in host.frameworks()


@pytest.mark.parametrize("command", [["plugins"], ["list"]])
def test_plugins_and_list_survive_a_misspelt_hook(plugin_dir, capsys, command, monkeypatch):
    monkeypatch.setenv("AMP_SUITE_PLUGINS", "misspelt_hook")  # loaded as an installed plugin would be: a warning
    assert main(command) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if command == ["plugins"]:
        assert "misspelt_hook  FAILED TO LOAD" in out and "did you mean 'train_epoch'" in out
    monkeypatch.delenv("AMP_SUITE_PLUGINS")
    assert main([*command, "-p", "misspelt_hook"]) == 2  # asked for by name: an error, still no traceback
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "did you mean 'train_epoch'" in out + err


def test_a_raising_reporter_is_reported_and_the_built_in_report_still_written(plugin_dir, tmp_path, capsys):
    from amp_suite.sweep.store import ResultStore

    out = tmp_path / "out"
    ResultStore(out).append(CellResult(key="fake/tiny/fp32/r0", framework="fake", workload="tiny",
                                       precision="fp32", repeat=0, status="ok"))
    assert main(["report", str(out), "-p", "raising_reporter"]) == 2
    stdout, err = capsys.readouterr()
    assert (out / "report.md").exists() and (out / "results.csv").exists()
    errors = [line for line in err.splitlines() if "error" in line]
    assert errors == ["amp-suite: error: reporter 'raising_reporter' failed: RuntimeError: reporter exploded"]


@pytest.mark.usefixtures("report_charts")
def test_report_into_an_unwritable_place_is_one_line(tmp_path, capsys, monkeypatch):
    from amp_suite import safe_files
    from amp_suite.sweep.store import ResultStore

    ResultStore(tmp_path).append(CellResult(key="fake/tiny/fp32/r0", framework="fake", workload="tiny",
                                            precision="fp32", repeat=0, status="ok"))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safe_files, "_write_temporary", full)
    assert main(["report", str(tmp_path)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert "amp-suite: error: reporter 'reporters' failed: OSError: [Errno 28] No space left on device" in errors
    # every reporter that writes files (the charts reporter too) fails the same way, one line each
    assert all(line.startswith("amp-suite: error: reporter '") and line.endswith(
        "failed: OSError: [Errno 28] No space left on device") for line in errors), errors


def test_a_measure_clash_names_the_plugin(plugin_dir):
    host = PluginHost(extra_modules=("greedy_measure",), autoload=False)
    run = RunSpec(framework="fake", workload="tiny", precision="fp32")
    with pytest.raises(PluginError, match="measure key 'peak_rss_bytes' given by both 'greedy_measure' and 'host_measure'"):
        host.measure(run, None, None)
    host = PluginHost(extra_modules=("greedy_measure",), autoload=False)
    host.unregister(host.pm.get_plugin("host_measure"))
    with pytest.raises(PluginError, match="measure key 'throughput' of plugin 'greedy_measure' is a figure the host"):
        host.measure(run, None, None, reserved={"throughput"})


def test_a_raising_measure_names_the_plugin_and_keeps_its_status(plugin_dir):
    host = PluginHost(extra_modules=("broken_measure",), autoload=False)
    with pytest.raises(PluginError, match="plugin 'broken_measure': measure failed: MemoryError") as info:
        host.measure(RunSpec(framework="fake", workload="tiny", precision="fp32"), None, None)
    assert classify_exception(info.value) == "oom"


SENSOR = '''
from amp_suite import hookimpl

@hookimpl
def measure():
    raise RuntimeError("sensor unavailable")
'''

LISTING = '''
from amp_suite import hookimpl

@hookimpl
def measure():
    return [("cpu_temperature_c", 40.0)]
'''


@pytest.mark.parametrize(("module", "text", "line"), [
    ("failing_sensor", SENSOR, "plugin 'failing_sensor': measure failed: RuntimeError: sensor unavailable; its "
                               "figures are left out"),
    ("listing_sensor", LISTING, "plugin 'listing_sensor': measure returned list"),
])
def test_a_measure_add_on_that_fails_costs_the_cell_only_its_own_figures(plugin_dir, module, text, line):
    """A plugin author's trial: one sensor add-on that raised failed every cell, its throughput and accuracy lost."""
    (plugin_dir / f"{module}.py").write_text(text)
    host = PluginHost(extra_modules=(module,), autoload=False)
    dropped: list[str] = []
    figures = host.measure(RunSpec(framework="fake", workload="tiny", precision="fp32"), None, None, dropped=dropped)
    assert figures["peak_rss_bytes"] > 0  # host_measure's figure stays
    assert len(dropped) == 1 and dropped[0].startswith(line), dropped
    with pytest.raises(PluginError, match=line.split(";")[0]):  # without a list to note it in: the error
        host.measure(RunSpec(framework="fake", workload="tiny", precision="fp32"), None, None)


def test_host_measure_can_be_disabled(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "host_measure")
    assert "host_measure" not in {d.name for d in PluginHost(autoload=False).describe()}


@pytest.mark.parametrize("exc,status", [
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                  "you tried to allocate 34359738368 bytes. Error code 12 (Cannot allocate memory)"), "oom"),
    (RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 1.00GiB."), "oom"),
    (type("ResourceExhaustedError", (Exception,), {})("OOM when allocating tensor with shape[1,2]"), "oom"),
    (MemoryError(), "oom"),
    (OSError(errno.ENOMEM, "Cannot allocate memory"), "oom"),
    (RuntimeError("std::bad_alloc"), "oom"),
    (RuntimeError("shapes do not match"), "failed"),
    (ValueError("a value"), "failed"),
])
def test_out_of_memory_is_classified_as_oom(exc, status):
    assert classify_exception(exc) == status


def test_a_worker_loading_every_plugin_imports_no_pandas():
    # pandas is half of a worker's start: only the reporters need it, and they import it when they write
    import subprocess
    import sys

    code = ("import sys; from amp_suite.plugins.host import PluginHost\n"
            "host = PluginHost(framework='torch'); host.frameworks()\n"
            "print('pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
