"""The plugin host: entry points, broken plugins, firstresult and measure merging."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

from amp_suite import hookimpl
from amp_suite.errors import PluginError
from amp_suite.plugins.host import DISABLE_ENV, PluginHost
from amp_suite.records import DeviceInfo, FrameworkInfo, RunSpec

RUN = RunSpec(framework="fake", workload="tiny", precision="fp32")
CPU = DeviceInfo(kind="cpu", platform="cpu", name="cpu")


def test_builtin_plugins_come_from_the_entry_point_group():
    eps = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="amp_suite")}
    assert eps["torch"] == "amp_suite_plugins.torch.plugin"
    assert {"keras", "jax", "reporters"} <= set(eps)
    host = PluginHost()
    assert set(host.frameworks()) >= {"torch", "keras", "jax"}
    described = {d.name: d for d in host.describe()}
    assert "train_epoch" in described["torch"].hooks
    assert described["torch"].version  # the distribution's version


def test_a_broken_entry_point_is_reported_not_fatal(monkeypatch):
    real = importlib.metadata.entry_points

    def with_broken(**kwargs):
        eps = list(real(**kwargs))
        if kwargs.get("group") == "amp_suite":
            eps.append(importlib.metadata.EntryPoint("broken", "amp_suite_missing_plugin_mod", "amp_suite"))
        return eps

    monkeypatch.setattr(importlib.metadata, "entry_points", with_broken)
    host = PluginHost()
    assert [f.name for f in host.failures] == ["broken"]
    assert "ModuleNotFoundError" in host.failures[0].error
    assert "torch" in host.frameworks()


def test_plugins_can_be_blocked_by_name(monkeypatch):
    # Keras on JAX and on PyTorch are plugins of their own (entry points keras_jax and keras_torch).
    monkeypatch.setenv(DISABLE_ENV, "keras,jax,keras_jax")
    frameworks = set(PluginHost().frameworks())
    assert {"torch", "keras@torch"} <= frameworks and not frameworks & {"keras", "jax", "keras@jax"}


def test_autoload_off_loads_only_named_modules():
    host = PluginHost(autoload=False, extra_modules=("fakefw",))
    assert list(host.frameworks()) == ["fake"]


def test_firstresult_hook_with_no_answer_is_a_plugin_error():
    host = PluginHost(autoload=False)
    with pytest.raises(PluginError, match="no plugin implements select_device for framework 'fake'"):
        host.select_device(RUN)


def test_firstresult_returns_the_owning_plugins_answer():
    host = PluginHost(autoload=False, extra_modules=("fakefw",))
    assert host.select_device(RUN).name == "fake cpu"
    assert host.set_precision(RUN, CPU).compute_dtype == "float32"


class _Dup:
    @hookimpl
    def framework_info(self):
        return FrameworkInfo(name="fake", display_name="again", modules=(), extra="x", precisions={})


def test_two_plugins_claiming_one_framework_is_an_error():
    host = PluginHost(autoload=False, extra_modules=("fakefw",))
    host.register(_Dup())
    with pytest.raises(PluginError, match="two plugins describe framework 'fake'"):
        host.frameworks()


class _ExtraFigures:
    @hookimpl
    def measure(self, run):
        return {"watts": 42.0}


class _Clash:
    @hookimpl
    def measure(self):
        return {"peak_rss_bytes": 1}


def test_measure_merges_every_plugin_and_rejects_a_key_given_twice():
    host = PluginHost(autoload=False)
    extra = _ExtraFigures()
    host.register(extra, name="watts")
    merged = host.measure(RUN, model=None, device=CPU)
    assert merged["watts"] == 42.0 and merged["peak_rss_bytes"] > 0
    host.register(_Clash(), name="clash")
    with pytest.raises(PluginError, match="measure key 'peak_rss_bytes' given by both"):
        host.measure(RUN, model=None, device=CPU)


def test_implementations_may_take_fewer_arguments():
    host = PluginHost(autoload=False, extra_modules=("fakefw",))
    logits_model = host.build_model(
        RUN, workload=_tiny_workload(), initial_weights={}, initial_state={}, applied=host.set_precision(RUN, CPU),
        device=CPU)  # fakefw's build_model takes neither initial_state nor (in predict) training
    logits = host.predict(RUN, logits_model, np.zeros((2, 8, 8, 1), np.float32))
    assert logits.shape == (2, 3)


def _tiny_workload():
    from amp_suite.workloads.workload import workload_from_config

    return workload_from_config("tiny", {"model": "mnist_cnn", "input_size": 8, "num_classes": 3})


class _Wrappers:
    """A plugin wrapping two hooks, as pytest's ``wrapper=True`` hooks do."""

    def __init__(self):
        self.seen: list[tuple[str, object]] = []

    @hookimpl(wrapper=True)
    def select_device(self, run):
        device = yield
        self.seen.append(("select_device", device.name))
        return device

    @hookimpl(wrapper=True)
    def measure(self, run):
        answers = yield
        self.seen.append(("measure", sorted(k for answer in answers for k in answer)))
        return answers


def test_wrappers_and_hook_call_monitors_see_every_call():
    wrappers = _Wrappers()
    monitored: list[str] = []
    hosts = [PluginHost(autoload=False, extra_modules=("fakefw",)), PluginHost(autoload=False)]
    for host in hosts:
        host.register(wrappers, name="wrappers")
        host.pm.add_hookcall_monitoring(lambda name, impls, kwargs: monitored.append(name),
                                        lambda outcome, name, impls, kwargs: None)
    assert hosts[0].select_device(RUN).name == "fake cpu"
    hosts[1].register(_ExtraFigures(), name="watts")
    merged = hosts[1].measure(RUN, model=None, device=CPU)
    assert merged["watts"] == 42.0
    # the wrapper saw the firstresult answer, and each measuring plugin's answer (one call per plugin)
    assert wrappers.seen[0] == ("select_device", "fake cpu")
    assert sorted(keys for hook, keys in wrappers.seen[1:] if hook == "measure") == [["peak_rss_bytes"], ["watts"]]
    assert monitored.count("select_device") == 1 and monitored.count("measure") == 2


def test_a_wrapper_can_change_a_firstresult_answer_and_the_contract_still_checks_it():
    class _Breaks:
        @hookimpl(wrapper=True)
        def set_precision(self, run, device):
            yield
            return "not a PrecisionApplied"

    host = PluginHost(autoload=False, extra_modules=("fakefw",))
    host.register(_Breaks(), name="breaks")
    with pytest.raises(PluginError, match="plugin 'fakefw': set_precision returned str"):
        host.set_precision(RUN, CPU)


# A plugin module that opts in to FrameworkPlugin and breaks it twice: a train_epoch that returns a dict and a
# predict that lost its ``training`` argument.  The rest is right, so mypy must name exactly those two hooks.
TYPED_PLUGIN = '''
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from amp_suite.records import Batch, DeviceInfo, EpochResult, FrameworkInfo, PrecisionApplied, RunSpec, Workload


class Handle:
    pass


def framework_info() -> FrameworkInfo: raise NotImplementedError
def select_device(run: RunSpec) -> DeviceInfo: raise NotImplementedError
def set_precision(run: RunSpec, device: DeviceInfo) -> PrecisionApplied: raise NotImplementedError
def build_model(run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
                initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo) -> Handle: raise NotImplementedError
def stage_batches(run: RunSpec, model: Handle, batches: list[Batch]) -> list[Batch]: raise NotImplementedError
def train_epoch(run: RunSpec, model: Handle, staged: list[Batch], epoch: int) -> TRAIN_RETURNS: raise NotImplementedError
def predict(run: RunSpec, model: Handle, images: np.ndarray PREDICT_TAKES) -> np.ndarray: raise NotImplementedError
def get_variables(run: RunSpec, model: Handle) -> dict[str, np.ndarray]: raise NotImplementedError
def measure(run: RunSpec, model: Handle, device: DeviceInfo) -> dict[str, Any]: raise NotImplementedError
def runtime_versions(run: RunSpec) -> dict[str, str]: raise NotImplementedError


if TYPE_CHECKING:
    import typed_plugin as _this_module
    from amp_suite.plugins.framework_plugin import FrameworkPlugin

    _checked: FrameworkPlugin[Handle, list[Batch]] = _this_module
'''


@pytest.mark.parametrize("broken", [False, True], ids=["conforming", "two-hooks-broken"])
def test_mypy_checks_a_plugin_module_against_the_framework_plugin_protocol(tmp_path, broken):
    """The typed handle protocol is what makes a plugin's hooks type-checked; pluggy checks names only."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    source = TYPED_PLUGIN.replace("TRAIN_RETURNS", "dict[str, float]" if broken else "EpochResult")
    source = source.replace(" PREDICT_TAKES", "" if broken else ", training: bool")
    (tmp_path / "typed_plugin.py").write_text(source)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "MYPYPATH": str(root)}
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "", "--cache-dir", str(tmp_path / "cache"),
                           "--follow-imports", "silent", "--ignore-missing-imports", "typed_plugin.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    if not broken:
        assert done.returncode == 0, done.stdout + done.stderr
        return
    assert done.returncode == 1, done.stdout + done.stderr
    conflicts = done.stdout.split("have conflicts:", 1)[-1]
    assert "staged: list[Batch], epoch: int) -> dict[str, float]" in conflicts  # what it got for train_epoch
    assert "staged: list[Batch], epoch: int) -> EpochResult" in conflicts  # what the protocol expects
    predicts = [line for line in conflicts.splitlines() if "def predict(" in line]
    assert len(predicts) == 2 and "training: bool" in predicts[0] and "training" not in predicts[1], predicts
    assert "build_model" not in conflicts and "get_variables" not in conflicts and "measure" not in conflicts


class _Misnamed:
    """A copy-paste mistake: every precision answered as fp32, or a dtype that does not exist."""

    def __init__(self, answer):
        self.answer = answer

    @hookimpl
    def framework_info(self):
        return FrameworkInfo(name="wrong", display_name="Wrong", modules=(), extra="",
                             precisions={"cpu": ("fp32", "amp_fp16", "amp_bf16")})

    @hookimpl
    def set_precision(self, run, device):
        from amp_suite.records import PrecisionApplied

        return PrecisionApplied(*self.answer)


@pytest.mark.parametrize(("precision", "answer", "problem"), [
    ("amp_bf16", ("fp32", "float32", "float32"),
     "set_precision returned precision 'fp32' for a cell of amp_bf16; it must name the precision it was asked to apply"),
    ("amp_bf16", ("amp_bf16", "float32", "float32"),
     "set_precision returned compute_dtype 'float32' for a cell of amp_bf16; amp_bf16 computes in bfloat16"),
    ("amp_fp16", ("amp_fp16", "half16", "float32"),
     "set_precision returned compute_dtype 'half16'; allowed: float32, float16, bfloat16, float64"),
])
def test_a_precision_applied_that_is_not_the_cells_is_refused(precision, answer, problem):
    host = PluginHost(autoload=False)
    host.register(_Misnamed(answer), name="wrong_plugin")
    run = RunSpec(framework="wrong", workload="tiny", precision=precision)
    with pytest.raises(PluginError, match="^plugin 'wrong_plugin': " + problem.replace("(", r"\(").replace(")", r"\)")):
        host.set_precision(run, CPU)
    right = _Misnamed((precision, {"amp_bf16": "bfloat16", "amp_fp16": "float16"}[precision], "float32"))
    host.pm.unregister(name="wrong_plugin")
    host.register(right, name="right_plugin")
    assert host.set_precision(run, CPU).precision == precision
