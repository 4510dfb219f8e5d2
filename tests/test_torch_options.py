"""PyTorch plugin options: ``fused`` optimizers and the compilation label (CPU, tiny model)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from amp_suite.config.catalog import framework_option_fields  # noqa: E402
from amp_suite.errors import UnsupportedError  # noqa: E402
from amp_suite.records import RunSpec  # noqa: E402
from amp_suite.workloads.workload import init_variables, workload_from_config  # noqa: E402
from amp_suite_plugins.torch import plugin as torch_plugin  # noqa: E402

# Every test here starts a real framework (slow on 2 cores): -m 'not slow' leaves them out.
pytestmark = pytest.mark.slow


def _build(options: dict, optimizer: str = "sgd"):
    workload = workload_from_config("tiny", {"model": "mnist_cnn", "input_size": 8, "batch_size": 4,
                                             "optimizer": optimizer})
    run = RunSpec(framework="torch", workload="tiny", precision="fp32", steps=2, warmup=1, batch_size=4,
                  device="cpu", options=options)
    device = torch_plugin.select_device(run)
    applied = torch_plugin.set_precision(run, device)
    weights, state = init_variables(workload, run.seed)
    model = torch_plugin.build_model(run, workload, weights, state, applied, device)
    return run, model, device, applied


def test_fused_is_a_validated_torch_option():
    assert "fused" in framework_option_fields(torch_plugin.framework_info())
    assert torch_plugin.OPTIONS["fused"].default is False


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fused_builds_the_fused_optimizer_and_the_figure_says_so(optimizer):
    run, model, device, applied = _build({"fused": True}, optimizer)
    assert model.optimizer.defaults["fused"] is True
    figures = torch_plugin.measure(run, model, device)
    assert figures["optimizer_implementation"] == "fused"
    assert any(note.startswith("optimizer=fused") for note in applied.notes)

    run, model, device, applied = _build({}, optimizer)
    assert not model.optimizer.defaults.get("fused")
    assert torch_plugin.measure(run, model, device)["optimizer_implementation"] == "for-loop"  # CPU default
    assert not any(note.startswith("optimizer=fused") for note in applied.notes)


def test_fused_without_a_fused_kernel_is_unsupported():
    with pytest.raises(UnsupportedError, match="no fused RMSprop"):
        _build({"fused": True}, "rmsprop")


def test_the_compilation_label_follows_the_option_not_the_wrapper():
    run, model, device, _ = _build({})
    model.train_forward = object()  # as a DistributedDataParallel wrapper would be
    assert torch_plugin.measure(run, model, device)["compilation"] == "eager"
