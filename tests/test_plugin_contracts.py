"""Plugins that break a hook's contract get one line that names the fix, and the rest of the suite works.

Wrong argument names, wrong return types, ``EpochResult.extra``, install
hints of third-party frameworks, their versions in the report header, and
``-p`` of a plugin that is already installed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import fakefw
from amp_suite import hookimpl
from amp_suite.cell.worker import epoch_extra_metrics, execute
from amp_suite.cli import main
from amp_suite.config.catalog import load_config
from amp_suite.errors import PluginError, UnsupportedError
from amp_suite.plugins.contracts import check_return, conforms
from amp_suite.plugins.host import PluginHost
from amp_suite.records import CellResult, DeviceInfo, EpochResult, FrameworkInfo, RunSpec

WRONG_ARGUMENT = '''
from amp_suite import hookimpl

@hookimpl
def write_report(results, outdir):
    return []
'''
STRING_REPORT = '''
from amp_suite import hookimpl

@hookimpl
def write_report(results, out_dir):
    return "report.md"
'''
DICT_FRAMEWORK_INFO = '''
from amp_suite import hookimpl

@hookimpl
def framework_info():
    return {"name": "dicty", "modules": ["numpy"]}
'''
THIRD_PARTY = '''
from amp_suite import hookimpl
from amp_suite.records import FrameworkInfo

@hookimpl
def framework_info():
    return FrameworkInfo(name="thirdparty", display_name="Third party", modules=("amp_suite_no_such_module",),
                         extra="", precisions={"cpu": ("fp32",)}, distributions=("thirdparty-core",))
'''
BAD_DECLARATIONS = '''
from amp_suite import hookimpl
from amp_suite.records import FrameworkInfo, FrameworkOption
from amp_suite.schema import Field

@hookimpl
def framework_info():
    return FrameworkInfo(name="baddecl", display_name="Bad", modules=("numpy",), extra="", precisions={},
                         options={"fast": FrameworkOption(Field(bool), "yes", "go fast")})
'''
RUN = RunSpec(framework="fake", workload="tiny", precision="fp32")
CPU = DeviceInfo(kind="cpu", platform="cpu", name="cpu")


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in (("wrong_argument", WRONG_ARGUMENT), ("string_report", STRING_REPORT),
                       ("dict_framework_info", DICT_FRAMEWORK_INFO), ("third_party", THIRD_PARTY),
                       ("bad_declarations", BAD_DECLARATIONS)):
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_wrong_argument_name_keeps_pluggys_whole_message_and_names_the_fix(plugin_dir):
    host = PluginHost(extra_modules=("wrong_argument", "fakefw"), autoload=False)
    [failure] = host.failures
    assert failure.name == "wrong_argument"
    assert failure.error.startswith("PluginValidationError: Plugin 'wrong_argument' for hook 'write_report'; "
                                    "hookimpl definition: write_report(results, outdir); Argument(s) {'outdir'} "
                                    "are declared in the hookimpl but can not be found in the hookspec")
    assert failure.error.endswith("write_report takes (results, out_dir, environment, sections) or fewer; "
                                  "rename 'outdir' to 'out_dir'")
    assert "fake" in host.frameworks()


@pytest.mark.parametrize(("signature", "hint"), [
    ("run, model, batches, epoch", "rename 'batches' to 'staged'"),  # no name alike: the spec's at its place
    ("run, model, staged, epoch, verbose", "remove 'verbose'"),
    ("run, model, stagd", "rename 'stagd' to 'staged'"),
])
def test_an_argument_of_another_name_is_told_the_name_to_use(plugin_dir, signature, hint):
    module = "other_names_" + "_".join(name.strip() for name in signature.split(","))  # one module per case
    (plugin_dir / f"{module}.py").write_text(f"from amp_suite import hookimpl\n\n@hookimpl\ndef train_epoch({signature}):"
                                             "\n    return None\n")
    host = PluginHost(extra_modules=(module,), autoload=False)
    [failure] = host.failures
    assert failure.error.endswith(f"train_epoch takes (run, model, staged, epoch) or fewer; {hint}"), failure.error


def test_a_framework_info_of_the_wrong_type_is_listed_as_failed(plugin_dir):
    host = PluginHost(extra_modules=("dict_framework_info", "fakefw"), autoload=False)
    [failure] = host.failures
    assert failure.name == "dict_framework_info"
    assert failure.error.startswith("framework_info returned dict of str: ")
    assert failure.error.endswith("it must return FrameworkInfo")
    assert list(host.frameworks()) == ["fake"]


def test_an_option_whose_default_fails_its_own_schema_is_listed_as_failed(plugin_dir):
    host = PluginHost(extra_modules=("bad_declarations", "fakefw"), autoload=False)
    [failure] = host.failures
    assert failure.name == "bad_declarations"
    assert failure.error == ("framework_info: the default of option fast must be true or false, got 'yes' "
                             "(its own schema refuses it)")
    assert list(host.frameworks()) == ["fake"]


def test_declarations_the_host_cannot_use_are_named():
    from amp_suite.plugins.host import declaration_problem
    from amp_suite.records import FrameworkInfo, FrameworkOption
    from amp_suite.schema import Field

    base = FrameworkInfo(name="x", display_name="X", modules=(), extra="", precisions={})
    assert declaration_problem(base) is None
    not_an_option = dataclasses.replace(base, options={"fast": Field(bool)})
    assert "options['fast'] is Field" in declaration_problem(not_an_option)
    assert "not a module name" in declaration_problem(dataclasses.replace(base, doctor_probe="my plugin.doctor"))
    good = dataclasses.replace(base, options={"fast": FrameworkOption(Field(bool), True, "go fast")},
                               calibration_probe="my_plugin.calibration")
    assert declaration_problem(good) is None


def test_the_built_in_plugins_declare_usable_options_with_their_defaults():
    from amp_suite.plugins.host import declaration_problem

    frameworks = PluginHost().frameworks()
    for name in ("torch", "keras", "jax"):
        assert declaration_problem(frameworks[name]) is None
    torch_options = frameworks["torch"].options
    assert (torch_options["channels_last"].default, torch_options["cudnn_benchmark"].default,
            torch_options["compile"].default, torch_options["fused"].default) == (True, True, False, False)
    assert frameworks["keras"].options["jit_compile"].default is True
    assert frameworks["jax"].options["attention"].default == "fused"


def test_runtime_versions_come_from_the_framework_plugin():
    class Versions:
        @hookimpl
        def runtime_versions(self, run):
            return {"cuda_runtime_version": "13.0", "cudnn_version": "9.20.0"}

    class Wrong:
        @hookimpl
        def runtime_versions(self):
            return {"cuda_runtime_version": 13}

    host = PluginHost(extra_modules=("fakefw",), autoload=False)
    assert host.runtime_versions(RUN) == {}  # a plugin without the hook: no versions, the cell is fine
    host.register(Versions())
    assert host.runtime_versions(RUN) == {"cuda_runtime_version": "13.0", "cudnn_version": "9.20.0"}
    host = PluginHost(extra_modules=("fakefw",), autoload=False)
    host.register(Wrong())
    with pytest.raises(PluginError, match="runtime_versions returned dict of str: int"):
        host.runtime_versions(RUN)


@pytest.mark.parametrize("module,needle", [
    ("wrong_argument", "rename 'outdir' to 'out_dir'"),
    ("dict_framework_info", "it must return FrameworkInfo"),
])
@pytest.mark.parametrize("command", [["plugins"], ["list"]])
def test_plugins_lists_broken_plugins_and_list_still_works(plugin_dir, capsys, command, module, needle,
                                                          monkeypatch):
    monkeypatch.setenv("AMP_SUITE_PLUGINS", module)  # loaded as an installed plugin would be: a warning
    assert main([*command, "-p", "fakefw"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if command == ["plugins"]:
        assert f"{module}  FAILED TO LOAD" in out and needle in out
    else:
        assert "fake" in out and needle in err
    monkeypatch.delenv("AMP_SUITE_PLUGINS")
    assert main([*command, "-p", module, "-p", "fakefw"]) == 2  # asked for with -p: an error naming it
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and needle in out + err


def test_a_reporter_returning_a_string_is_one_line_and_the_others_write(plugin_dir, tmp_path, capsys):
    from amp_suite.sweep.store import ResultStore

    out = tmp_path / "out"
    ResultStore(out).append(CellResult(key="fake/tiny/fp32/r0", framework="fake", workload="tiny",
                                       precision="fp32", repeat=0, status="ok"))
    assert main(["report", str(out), "-p", "string_report"]) == 2
    stdout, err = capsys.readouterr()
    assert "report.md" in stdout and "\nr\ne\np" not in stdout  # never printed one character per line
    errors = [line for line in err.splitlines() if "error" in line]
    assert errors == ["amp-suite: error: reporter 'string_report' failed: write_report returned str 'report.md'; "
                      "it must return list[Path] | None"]


class _DictDevice:
    @hookimpl
    def select_device(self, run):
        return {"kind": "cpu"}


class _ListOfStrings:
    @hookimpl
    def get_variables(self, run, model):
        return {"conv1/w": [1.0, 2.0]}


class _BadExtra:
    @hookimpl
    def train_epoch(self, run, model, staged, epoch):
        return EpochResult([0.1], [1.0], 8, 0.1, extra={"traces": {"step": 1}})


class _Logits:
    """``predict`` answering ``value`` whatever it is asked."""

    def __init__(self, value):
        self.value = value

    @hookimpl
    def predict(self, run, model, images, training):
        return self.value


IMAGES = np.zeros((4, 8, 8, 1), np.float32)


@pytest.mark.parametrize("plugin,call,message", [
    (_Logits(np.zeros((4, 3), np.float16)), lambda h: h.predict(RUN, None, IMAGES),
     "plugin 'bad': predict returned logits of dtype float16; they must be float32 whatever the compute dtype "
     "(cast them before returning)"),
    (_Logits(np.zeros((2, 3), np.float32)), lambda h: h.predict(RUN, None, IMAGES),
     "plugin 'bad': predict returned logits of shape (2, 3); expected (4, classes) for 4 images"),
    (_Logits([[0.0, 1.0]] * 4), lambda h: h.predict(RUN, None, IMAGES),
     "plugin 'bad': predict returned list; it must return np.ndarray | None"),
    (_DictDevice(), lambda h: h.select_device(RUN),
     "plugin 'bad': select_device returned dict of str: str; it must return DeviceInfo | None"),
    (_ListOfStrings(), lambda h: h.get_variables(RUN, None),
     "plugin 'bad': get_variables returned dict of str: list; it must return dict[str, np.ndarray] | None"),
    (_BadExtra(), lambda h: h.train_epoch(RUN, None, [], 0),
     "plugin 'bad': train_epoch returned EpochResult.extra['traces'] = dict; extra values become figures of "
     "the run and must be numbers, strings, booleans or None"),
])
def test_every_hooks_answer_is_checked_against_its_declared_type(plugin, call, message):
    host = PluginHost(autoload=False)
    host.register(plugin, name="bad")
    with pytest.raises(PluginError) as info:
        call(host)
    assert str(info.value) == message


def test_bfloat16_logits_are_refused_by_name():
    ml_dtypes = pytest.importorskip("ml_dtypes")  # numpy's bfloat16, as jax and tensorflow return it
    host = PluginHost(autoload=False)
    host.register(_Logits(np.zeros((4, 3), ml_dtypes.bfloat16)), name="bad")
    with pytest.raises(PluginError, match="predict returned logits of dtype bfloat16; they must be float32"):
        host.predict(RUN, None, IMAGES)
    host = PluginHost(autoload=False)
    host.register(_Logits(np.zeros((4, 3), np.float32)), name="good")
    assert host.predict(RUN, None, IMAGES).shape == (4, 3)


def test_logits_of_the_fp64_reference_must_be_float64_and_only_there():
    fp64 = dataclasses.replace(RUN, precision="fp64")
    host = PluginHost(autoload=False)
    host.register(_Logits(np.zeros((4, 3), np.float64)), name="good")
    assert host.predict(fp64, None, IMAGES).dtype == np.float64
    with pytest.raises(PluginError) as info:
        host.predict(RUN, None, IMAGES)
    assert str(info.value).startswith("plugin 'good': predict returned logits of dtype float64; they must be float32 "
                                      "whatever the compute dtype")
    host = PluginHost(autoload=False)
    host.register(_Logits(np.zeros((4, 3), np.float32)), name="bad")
    with pytest.raises(PluginError) as info:
        host.predict(fp64, None, IMAGES)
    assert str(info.value) == ("plugin 'bad': predict returned logits of dtype float32; they must be float64 under "
                               "fp64 (cast them before returning)")


def test_the_built_in_plugins_declare_the_fp64_reference_on_both_device_kinds():
    frameworks = PluginHost().frameworks()
    for name in ("torch", "keras", "jax"):
        precisions = frameworks[name].precisions
        assert all("fp64" in precisions[kind] for kind in ("cpu", "gpu")), (name, precisions)


def test_a_plugin_that_does_not_declare_fp64_gets_an_unsupported_cell_before_its_set_precision(
        monkeypatch: pytest.MonkeyPatch, tiny_config) -> None:
    # The Flax example declares the measured precisions only; standard_precision would give it a float64 record,
    # so the host must stop the cell before the plugin could train in float32 under the name fp64.
    from suite_cli import REPO

    monkeypatch.syspath_prepend(str(REPO / "examples" / "amp-suite-flax"))
    host = PluginHost(autoload=False, extra_modules=("amp_suite_flax.plugin",))
    assert "fp64" not in host.frameworks()["flax"].precisions["cpu"]
    with pytest.raises(UnsupportedError) as refused:
        host.set_precision(RunSpec(framework="flax", workload="tiny", precision="fp64"), CPU)
    assert str(refused.value) == ("Flax (NNX) does not run precision 'fp64'; its plugin declares fp32, amp_fp16, "
                                  "amp_bf16, tf32 (FrameworkInfo.precisions)")
    # in a sweep the cell is unsupported, with that one line
    workload = load_config(tiny_config).workloads["tiny"]
    run = RunSpec(framework="fake", workload="tiny", precision="fp64", steps=2, batch_size=8)
    result = execute(run, workload, PluginHost(autoload=False, extra_modules=("fakefw",), framework="fake"))
    assert result.status == "unsupported" and "\n" not in result.error, (result.status, result.error)
    assert "does not run precision 'fp64'" in result.error


def test_the_type_checker_reads_unions_and_containers():
    assert conforms([Path("a")], list[Path] | None) and conforms(None, list[Path] | None)
    assert not conforms("a", list[Path] | None) and not conforms([1], list[Path])
    assert conforms({"a": np.zeros(1)}, dict[str, np.ndarray]) and not conforms({1: np.zeros(1)}, dict[str, np.ndarray])
    assert check_return("p", "measure", {"watts": 1}) == {"watts": 1}
    with pytest.raises(PluginError, match="write_report returned list holding str"):
        check_return("p", "write_report", ["report.md"])


class _Traces:
    """Wraps the fake framework's train_epoch and reports a figure in ``extra``."""

    @hookimpl
    def train_epoch(self, run, model, staged, epoch):
        result = fakefw.train_epoch(run=run, model=model, staged=staged, epoch=epoch)
        result.extra["traces"] = np.int64(epoch + 1)
        return result


def test_epoch_extra_becomes_a_figure_of_the_run(tiny_config):
    workload = load_config(tiny_config).workloads["tiny"]
    run = RunSpec(framework="fake", workload="tiny", precision="fp32", steps=3, epochs=2, warmup=1, batch_size=8)
    host = PluginHost(autoload=False, extra_modules=("fakefw",), framework="fake")
    host.register(_Traces(), name="traces")
    result = execute(run, workload, host)
    assert result.status == "ok", result.error
    assert result.metrics["traces"] == 2 and type(result.metrics["traces"]) is int  # the last epoch's value


def test_an_epoch_extra_key_the_host_computes_is_refused():
    epochs = [EpochResult([0.1], [1.0], 8, 0.1, extra={"throughput": 3.0})]
    with pytest.raises(PluginError, match="plugin 'fake': EpochResult.extra key 'throughput' is a figure the "
                                          "host computes itself"):
        epoch_extra_metrics("fake", epochs, reserved={"throughput"})


def test_a_third_party_framework_gets_an_install_hint_without_an_extra(plugin_dir, capsys):
    info = PluginHost(autoload=False, extra_modules=("third_party",)).frameworks()["thirdparty"]
    assert info.install_hint() == "pip install thirdparty-core"
    assert FrameworkInfo("x", "X", ("x",), "", {}, install_command="pip install amp-suite-x").install_hint() == \
        "pip install amp-suite-x"
    assert FrameworkInfo("x", "X", ("x",), "x", {}).install_hint() == "pip install 'amp-suite[x]'"
    assert main(["list", "-p", "third_party"]) == 0
    assert "not installed (pip install thirdparty-core)" in capsys.readouterr().out


def test_framework_distributions_reach_the_report_header():
    from amp_suite.machine.environment import host_environment

    host = PluginHost(autoload=False, extra_modules=("fakefw",))
    assert host.distributions() == {"numpy": np.__version__}
    environment = host_environment({"amp-suite-flax": "0.1.0"})
    assert environment["packages"]["amp-suite-flax"] == "0.1.0" and environment["packages"]["numpy"]


def test_p_of_an_installed_plugin_loads_it_once_without_a_warning(capsys):
    host = PluginHost(extra_modules=("amp_suite_plugins.reporters",))
    assert host.failures == []
    assert [d.name for d in host.describe()].count("reporters") == 1
    assert "amp_suite_plugins.reporters" not in {d.name for d in host.describe()}
    assert main(["plugins", "-p", "amp_suite_plugins.reporters"]) == 0
    assert "warning" not in capsys.readouterr().err
