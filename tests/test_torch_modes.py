"""PyTorch's execution modes: eager, the whole step through torch.compile, and CUDA graphs (faked on a CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from amp_suite_plugins.torch import plugin as torch_plugin  # noqa: E402
from tiny_torch_step import tiny_torch_step  # noqa: E402

pytestmark = pytest.mark.slow  # a real framework on 2 cores


def _build(mode: str, precision: str = "fp32"):
    return tiny_torch_step(mode, precision, optimizer={"momentum": 0.9, "schedule": "cosine"})


def _losses(model, batches) -> list[float]:
    step = torch_plugin.make_step(torch, model)
    return [float(step(batch)[0]) for batch in batches]


def test_the_plugin_declares_its_modes():
    info = torch_plugin.framework_info()
    assert info.modes == {"cpu": ("eager", "compiled"), "gpu": ("eager", "compiled", "cudagraphs")}
    assert info.default_mode == "eager"


def test_cudagraphs_compiles_the_whole_step_with_reduce_overhead_and_copies_each_steps_outputs(monkeypatch):
    """CUDA graphs need a GPU: torch.compile and the step marker are faked, the step itself runs eagerly."""
    compiled: list[dict] = []
    marks: list[int] = []
    outputs: list = []

    def fake_compile(function, **kwargs):
        compiled.append(kwargs)

        def replay(*args):
            outputs.append(function(*args))
            return outputs[-1]
        return replay

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    _, eager, _, _, batches = _build("")
    expected = _losses(eager, batches)
    run, model, device, applied, _ = _build("cudagraphs")
    assert compiled == [{"mode": "reduce-overhead"}]
    # SGD's momentum buffers exist before the first replay, so no CUDA graph owns them (an H100 failed without)
    state = model.optimizer.state
    assert all(float(state[p]["momentum_buffer"].abs().sum()) == 0 for p in model.module.parameters())
    assert any("replayed as CUDA graphs" in note for note in applied.notes)
    step = torch_plugin.make_step(torch, model)
    results = [step(batch) for batch in batches]
    assert len(marks) == len(batches)  # one replay opened per step
    for (loss, _), (inner, _) in zip(results, outputs, strict=True):
        assert loss is not inner and float(loss) == float(inner)  # copied out before the next replay
    assert [float(loss) for loss, _ in results] == pytest.approx(expected, rel=1e-6)
    # Under the cosine schedule the learning rate is a tensor the scheduler fills in place (no recompile).
    lr = model.optimizer.param_groups[0]["lr"]
    assert isinstance(lr, torch.Tensor)
    assert float(lr) < workload_lr(model) and model.optimizer.param_groups[0]["lr"] is lr
    figures = torch_plugin.measure(run, model, device)
    assert "CUDA graphs" in figures["compilation"]


def test_momentum_buffers_made_before_the_first_step_leave_sgd_bit_for_bit_as_torch_makes_them():
    from amp_suite_plugins.torch.optimizer import create_momentum_buffers

    def trained(create: bool, **sgd) -> list:
        torch.manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(3))]
        optimizer = torch.optim.SGD(params, lr=0.1, **sgd)
        made = create_momentum_buffers(torch, optimizer) if create else 0
        for step in range(3):
            optimizer.zero_grad()
            (params[0].sin().sum() * (step + 1) + params[1].square().sum()).backward()
            optimizer.step()
        return [made, *(p.detach().clone() for p in params)]

    for sgd in ({"momentum": 0.9}, {"momentum": 0.9, "nesterov": True}, {"momentum": 0.9, "weight_decay": 0.01}):
        made, *with_buffers = trained(True, **sgd)
        _, *torchs_own = trained(False, **sgd)
        assert made == 2
        assert all(torch.equal(a, b) for a, b in zip(with_buffers, torchs_own, strict=True)), sgd
    # nothing to make: no momentum, a dampened momentum (its first step differs), or another optimizer
    assert trained(True, momentum=0.0)[0] == 0 and trained(True, momentum=0.9, dampening=0.5)[0] == 0
    adam = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))])
    assert create_momentum_buffers(torch, adam) == 0 and not adam.state


def workload_lr(model) -> float:
    return float(model.scheduler.base_lrs[0])


def test_the_compiled_mode_trains_like_eager_through_torch_compile():
    """The one test that really compiles (tens of seconds on 2 cores): the same first losses as eager."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    _, eager, _, _, batches = _build("")
    run, model, device, _, _ = _build("compiled")
    compiled = _losses(model, batches)
    assert compiled == pytest.approx(_losses(eager, batches), rel=1e-4)
    figures = torch_plugin.measure(run, model, device)
    assert figures["compilation"] == "torch.compile (inductor): the whole step"
    assert figures["compiled_graphs"] >= 1
    assert figures["recompiles"] == 0  # the tensor learning rate kept the schedule from recompiling
    # every graph inductor compiled was either loaded from its cache or compiled, and the record says which
    assert figures["inductor_cache_hits"] + figures["inductor_cache_misses"] >= 1, figures
