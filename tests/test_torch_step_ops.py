"""The suite's PyTorch step dispatches no more than an idiomatic PyTorch loop (issue 43).

On a GPU, eager PyTorch at small batches is bound by launching kernels: the
GPU waits on the host, so every operator or host sync the suite added to a
step would cost throughput.  These tests count, on the CPU, what the steps of
one timed window of the plugin's ``train_epoch`` hook dispatch (aten
operators below autograd, backward included, and host reads such as
``.item()``) against the same steps of ``benchmarks/torch_idiomatic.py``
(a hand-written ``nn.Module``, same weights, batches, precision and
optimizer).  Operator counts, not timings: the same on every CPU.

The CUDA-only part of the window (its timing events) is checked with fakes.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402 - after the importorskip

from amp_suite.testing.sync_counters import count_calls  # noqa: E402
from amp_suite_plugins.torch import plugin  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
STEPS = 2  # counted steps, after one warm-up step on each side (it creates the optimizer's state)
BATCH = 2
# What one suite step may dispatch beyond the idiomatic one: the loss it keeps is detached (a view: no
# kernel, no allocation), so a window's losses do not hold their autograd graphs until the window ends.
STEP_ALLOWANCE = Counter({"detach.default": 1})
# Host reads a step might make (on a GPU each one waits for the device).
SYNC_TARGETS = [(torch.Tensor, name) for name in ("item", "tolist", "numpy", "cpu", "__float__", "__int__",
                                                    "__bool__")]


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class OperatorCount(TorchDispatchMode):
    """Counts every aten operator dispatched while it is entered, by name and overload."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.counts[f"{func.overloadpacket.__name__}.{func._overloadname}"] += 1
        return func(*args, **(kwargs or {}))


class StepCount:
    """Operators and host reads of the steps run through :meth:`step`, and the losses they returned."""

    def __init__(self) -> None:
        self.operators = OperatorCount()
        self.syncs = 0
        self.losses: list[float] = []

    def step(self, run_step: Any, *args: Any) -> Any:
        with count_calls(SYNC_TARGETS) as syncs, self.operators:
            outcome = run_step(*args)
        self.syncs += syncs()
        return outcome


def _inputs(tmp_path: Path, workload: str) -> tuple[ModuleType, argparse.Namespace, Path]:
    speed = _module("torch_gpu_speed")
    args = argparse.Namespace(device="cpu", batch_size=BATCH, steps=STEPS + 1, warmup=1)
    return speed, args, speed.write_inputs(workload, args, tmp_path / f"{workload}.npz")


def _suite(speed: ModuleType, args: argparse.Namespace, workload_name: str, precision: str, **options: Any):
    """The plugin's model (through its hooks) and the run's first ``STEPS + 1`` batches, staged."""
    import dataclasses

    from amp_suite.datasets import run_pipeline
    from amp_suite.workloads.workload import init_variables

    run, workload = speed.suite_run(workload_name, precision, "eager", args)
    run = dataclasses.replace(run, options=options)
    workload = dataclasses.replace(workload, optimizer=dataclasses.replace(workload.optimizer,
                                                                           decay_steps=run.steps))
    device = plugin.select_device(run)
    applied = plugin.set_precision(run, device)
    weights, state = init_variables(workload, run.seed)
    model = plugin.build_model(run, workload, weights, state, applied, device)
    staged = plugin.stage_batches(run, model, run_pipeline(run, workload).batches(0, 0, STEPS + 1))
    return run, model, staged


def _suite_window(monkeypatch, run, model, staged) -> tuple[StepCount, Any]:
    """One warm-up call of ``train_epoch``, then one window of ``STEPS`` steps whose steps are counted."""
    plugin.train_epoch(run, model, staged[:1], 0)
    counted = StepCount()
    real_window = plugin.timed_window

    def counting_window(batches: list[Any], step: Any, **options: Any) -> Any:
        return real_window(batches, lambda batch: counted.step(step, batch), **options)

    monkeypatch.setattr(plugin, "timed_window", counting_window)
    result = plugin.train_epoch(run, model, staged[1:], 0)
    counted.losses = list(result.step_losses)
    return counted, result


def _idiomatic_steps(speed: ModuleType, args: argparse.Namespace, data: Path, workload: str,
                     precision: str) -> StepCount:
    idiomatic = _module("torch_idiomatic")
    spec = speed.idiomatic_spec(workload, precision, "eager", args, data)
    with np.load(data) as arrays:
        step, _, _ = idiomatic.build_loop(spec, arrays)
    step(0)
    counted = StepCount()
    for index in range(1, STEPS + 1):
        counted.losses.append(float(counted.step(step, index).detach()))
    return counted


@pytest.mark.parametrize(("workload", "precision"), [
    ("mnist_cnn", "fp32"), ("mnist_cnn", "amp_bf16"), ("mnist_cnn", "amp_fp16"),
    pytest.param("cifar10_resnet18", "fp32", marks=pytest.mark.slow),  # about 15 s on 2 cores
])
def test_a_suite_step_dispatches_what_the_idiomatic_step_does(tmp_path, monkeypatch, workload, precision):
    speed, args, data = _inputs(tmp_path, workload)
    run, model, staged = _suite(speed, args, workload, precision)
    suite, result = _suite_window(monkeypatch, run, model, staged)
    theirs = _idiomatic_steps(speed, args, data, workload, precision)

    assert suite.losses == pytest.approx(theirs.losses, rel=1e-4)  # the same training, step for step
    extra = suite.operators.counts - theirs.operators.counts
    allowed = Counter({name: count * STEPS for name, count in STEP_ALLOWANCE.items()})
    assert extra <= allowed, f"the suite's steps dispatch more than the idiomatic loop's: {dict(extra - allowed)}"
    # Fewer would mean the two do not train the same way (the losses above would differ too).
    assert theirs.operators.counts - suite.operators.counts == Counter()
    assert suite.syncs == theirs.syncs  # e.g. GradScaler's own .item() in each fp16 step, on both sides
    assert len(result.step_losses) == STEPS
    if precision == "amp_fp16":  # every skip the window reports halved the scale (the warm-up step may skip too)
        assert result.loss_scale_final * 2.0 ** result.skipped_steps <= 2.0 ** 15


def test_a_skipped_fp16_step_is_reported_from_gradscalers_own_count(tmp_path):
    """The eager step's applied flag is GradScaler's inf count, read after the window: an overflow is a skip."""
    speed, args, _ = _inputs(tmp_path, "mnist_cnn")
    # float16 gradients overflow at this scale: every step is skipped and halves it
    run, model, staged = _suite(speed, args, "mnist_cnn", "amp_fp16", initial_loss_scale=2.0 ** 100)
    result = plugin.train_epoch(run, model, staged, 0)
    assert result.skipped_steps == len(staged) == STEPS + 1
    assert result.loss_scale_final == 2.0 ** (100 - len(staged))
    losses, flags = plugin._fetch(torch, [(torch.tensor(1.0), plugin.FoundInf(torch.tensor(0.0))),
                                          (torch.tensor(2.0), plugin.FoundInf(torch.tensor(1.0)))])
    assert (losses, flags) == ([1.0, 2.0], [True, False])


class FakeEvent:
    """A CUDA timing event: ``record`` stamps the next tick of a shared clock; ``elapsed_time`` in ms."""

    made = 0
    records: list[tuple[FakeEvent, bool]] = []  # (event, recorded inside a step of the window)
    inside_step = False
    tick = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        FakeEvent.made += 1
        self.at: int | None = None

    def record(self, stream: Any = None) -> None:
        FakeEvent.tick += 1
        self.at = FakeEvent.tick
        FakeEvent.records.append((self, FakeEvent.inside_step))

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.at is not None and end.at is not None
        return float(end.at - self.at)


def test_a_cuda_window_records_one_event_per_step_and_creates_none_on_the_clock(tmp_path, monkeypatch):
    """CUDA needs a GPU: the events, the stream and the waits are faked, the step runs on the CPU."""
    speed, args, _ = _inputs(tmp_path, "mnist_cnn")
    run, model, staged = _suite(speed, args, "mnist_cnn", "fp32")
    plugin.train_epoch(run, model, staged[:1], 0)  # warm-up, on the CPU path
    waits: list[bool] = []
    monkeypatch.setattr(FakeEvent, "records", [])
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: "stream")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: waits.append(FakeEvent.inside_step))
    model.device_type = "cuda"
    real_window = plugin.timed_window

    def marking_window(batches: list[Any], step: Any, **options: Any) -> Any:
        def marked(batch: Any) -> Any:
            FakeEvent.inside_step = True
            try:
                return step(batch)
            finally:
                FakeEvent.inside_step = False
        return real_window(batches, marked, **options)

    monkeypatch.setattr(plugin, "timed_window", marking_window)
    made_before = FakeEvent.made
    result = plugin.train_epoch(run, model, staged[1:], 0)
    assert FakeEvent.made - made_before == STEPS + 1  # one per step boundary
    outside = [event for event, inside in FakeEvent.records if not inside]
    inside = [event for event, inside in FakeEvent.records if inside]
    assert len(outside) == STEPS + 1  # each created (first record) before the clock
    assert len(inside) == STEPS + 1  # the first boundary, then one record per step
    assert not any(waits)  # no wait inside a step; the window's one wait comes after them
    assert result.step_times_s == [0.001] * STEPS  # consecutive boundaries: one tick (1 ms) apart
