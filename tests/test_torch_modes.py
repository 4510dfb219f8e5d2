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


def _tiny_gpt(mode: str):
    """A one-block character GPT under AdamW with a warm-up (its first learning rate is 0), and three batches of
    16 tokens: most of the 70 embedding rows get no gradient in a step."""
    from amp_suite.records import RunSpec
    from amp_suite.workloads.workload import init_variables, workload_from_config

    workload = workload_from_config("g", {
        "model": "gpt", "vocab_size": 70, "context": 16, "width": 32, "depth": 1, "heads": 2, "mlp": 64,
        "batch_size": 4, "optimizer": "adamw", "learning_rate": 3e-3, "weight_decay": 0.1,
        "schedule": "warmup_cosine", "warmup_steps": 20, "clip_norm": 1.0, "dataset": "text"})
    run = RunSpec(framework="torch", workload="g", precision="fp32", steps=3, warmup=1, batch_size=4, device="cpu",
                  mode=mode)
    device = torch_plugin.select_device(run)
    applied = torch_plugin.set_precision(run, device)
    weights, state = init_variables(workload, 0)
    model = torch_plugin.build_model(run, workload, weights, state, applied, device)
    generator = torch.Generator().manual_seed(0)
    batches = [(torch.randint(0, 70, (4, 16), generator=generator), torch.randint(0, 70, (4, 16), generator=generator),
                {}) for _ in range(3)]
    return model, applied, batches


def test_a_compiled_adamw_warm_up_from_a_learning_rate_of_0_trains_like_eager():
    """torch.compile's Adam divides by the learning rate: at 0 (the warm-up's first step) every embedding row
    without a gradient turned NaN and the character GPT diverged at its second step (torch 2.13)."""
    torch._dynamo.reset()
    eager, _, batches = _tiny_gpt("")
    model, applied, _ = _tiny_gpt("compiled")
    assert any("learning rate of 0 at 1e-30" in note for note in applied.notes)
    compiled = _losses(model, batches)
    assert all(torch.isfinite(p).all() for p in model.module.parameters())
    assert compiled == pytest.approx(_losses(eager, batches), rel=1e-5)


def test_only_the_compiled_modes_adam_holds_a_scheduled_learning_rate_of_0_at_the_floor():
    from amp_suite.workloads.workload import workload_from_config
    from amp_suite_plugins.torch.optimizer import COMPILED_ADAM_LR_FLOOR, _make_optimizer

    def first_lr(name: str, tensor_lr: bool) -> float:
        spec = workload_from_config("w", {"model": "mnist_cnn", "input_size": 8, "optimizer": name,
                                          "schedule": "warmup_cosine", "warmup_steps": 5}).optimizer
        optimizer, _ = _make_optimizer(torch, spec, [torch.nn.Parameter(torch.zeros(2))], tensor_lr=tensor_lr)
        return float(optimizer.param_groups[0]["lr"])

    # float32's nearest to the floor (approx's default absolute tolerance would let 0 pass)
    assert first_lr("adamw", True) == pytest.approx(COMPILED_ADAM_LR_FLOOR, rel=1e-6, abs=0)
    assert first_lr("adam", True) == pytest.approx(COMPILED_ADAM_LR_FLOOR, rel=1e-6, abs=0)
    assert first_lr("adamw", False) == 0.0  # eager: torch's Adam takes 0 as no update
    assert first_lr("sgd", True) == 0.0  # SGD does not divide by it


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


def test_the_memory_peak_of_a_cudagraphs_cell_adds_the_graph_pools_free_blocks(monkeypatch):
    """CUDA graphs allocate when recorded, in warm-up, and a replay allocates nothing: on an H200 the allocator's
    peak since warm-up read 94 MiB for ResNet-18's cudagraphs cell against eager's 484.  The peak still restarts
    after warm-up in every mode (staged batches and autotuning stay out as in eager), and a cudagraphs cell adds
    its private pools' unallocated blocks, which each replay writes into.  The GPU's allocator is faked."""
    import dataclasses

    mib = 1 << 20
    snapshot = [{"segment_pool_id": (0, 0), "total_size": 64 * mib, "allocated_size": 8 * mib},  # default pool
                {"segment_pool_id": (1, 2), "total_size": 300 * mib, "allocated_size": 20 * mib},  # a graph's
                {"segment_pool_id": (1, 2), "total_size": 2 * mib, "allocated_size": 2 * mib}]
    assert torch_plugin.graph_pool_free_bytes(snapshot) == 280 * mib
    resets: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: resets.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 94 * mib)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 786 * mib)
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: snapshot)
    run, graphs, device, _, _ = _build("cudagraphs")
    for mode in ("eager", "cudagraphs"):  # one build: an eager cell is the same model with no compiled step
        model = dataclasses.replace(graphs, device_type="cuda", mode=mode,
                                    compiled_step=graphs.compiled_step if mode == "cudagraphs" else None)
        resets.clear()
        torch_plugin.reset_memory_peak(run, model, device)
        assert resets == ["reset"], mode
        figures = torch_plugin.measure(run, model, device)
        if mode == "cudagraphs":
            assert figures["device_peak_memory_bytes"] == (94 + 280) * mib
            assert figures["cudagraph_pool_free_bytes"] == 280 * mib
            assert figures["device_peak_memory_method"] == torch_plugin.CUDAGRAPHS_PEAK_METHOD
        else:
            assert figures["device_peak_memory_bytes"] == 94 * mib and "cudagraph_pool_free_bytes" not in figures
