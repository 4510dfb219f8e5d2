"""Measurement phases and steady-state figures: one wait per window, warm-up and latency kept apart."""

from contextlib import contextmanager

import pytest

from amp_suite.cell.windows import MAX_STAGED_BYTES, MeasurementPlan, Phase, plan_epoch, steady_state, timing_flags
from amp_suite.plugins.kit import PROCESS_WINDOW_TIME, take_slowest_window, timed_window
from amp_suite.records import EpochResult


def test_an_epoch_is_warm_up_then_windows_then_latency_steps():
    phases = plan_epoch(0, 20, warmup=2, window_steps=8, latency_steps=4)
    assert [(p.kind, p.start, p.stop) for p in phases] == [
        ("warmup", 0, 1), ("warmup", 1, 2), ("window", 2, 10), ("window", 10, 16),
        ("latency", 16, 17), ("latency", 17, 18), ("latency", 18, 19), ("latency", 19, 20)]
    later = plan_epoch(1, 20, warmup=2, window_steps=8, latency_steps=4)
    assert later[0] == Phase("window", 1, 0, 8)  # warm-up happens once, in epoch 0
    # every step runs exactly once, in order
    assert [i for p in phases for i in range(p.start, p.stop)] == list(range(20))
    # at least half of the steps after warm-up stay in windows
    short = plan_epoch(0, 6, warmup=2, window_steps=32, latency_steps=10)
    assert [p.kind for p in short] == ["warmup", "warmup", "window", "latency", "latency"]


def _window(losses, seconds, samples=10, step_times=()):
    return EpochResult(list(losses), samples, seconds, list(step_times))


def test_throughput_comes_from_windows_and_latency_from_synchronized_steps():
    parts = [(Phase("warmup", 0, 0, 1), _window([2.0], 5.0)),
             (Phase("window", 0, 1, 3), _window([1.5, 1.2], 1.0, samples=20)),
             (Phase("window", 0, 3, 5), _window([1.1, 1.0], 2.0, samples=20)),
             (Phase("latency", 0, 5, 6), _window([0.9], 0.5)),
             (Phase("latency", 0, 6, 7), _window([0.8], 0.7))]
    s = steady_state(parts)
    assert s["throughput"] == pytest.approx(40 / 3.0)  # samples over window time, not a mean of rates
    assert s["timed_steps"] == 4 and s["timed_windows"] == 2
    assert s["first_step_time_s"] == 5.0 and s["warmup_time_s"] == 5.0 and s["warmup_steps"] == 1
    assert s["latency_source"] == "synchronized steps"
    assert s["step_time_median_s"] == pytest.approx(0.6)
    assert s["first_step_loss"] == 2.0 and s["final_loss"] == 0.8
    assert s["step_losses"] == [[2.0, 1.5, 1.2, 1.1, 1.0, 0.9, 0.8]]


def test_device_event_step_times_stand_in_for_latency_only_without_a_latency_phase():
    parts = [(Phase("window", 0, 0, 3), _window([1.0, 1.0, 1.0], 3.0, 30, step_times=[0.9, 1.0, 1.1]))]
    s = steady_state(parts)
    assert s["latency_source"] == "device events" and s["step_time_median_s"] == 1.0
    # With a latency phase, every framework's latency is host-synchronized single steps;
    # PyTorch's CUDA events inside windows stay a figure of their own.
    parts.append((Phase("latency", 0, 3, 4), _window([1.0], 2.5)))
    s = steady_state(parts)
    assert s["latency_source"] == "synchronized steps" and s["step_time_median_s"] == 2.5
    assert s["window_event_step_time_median_s"] == 1.0


def _run_plan(plan, step_times, epochs=1):
    """Drive ``plan`` as the worker does; ``step_times(phase)`` gives each phase's seconds."""
    seen = []
    for epoch in range(epochs):
        for phase in plan.phases(epoch):
            steps = phase.stop - phase.start
            seen.append(phase)
            plan.observe(phase, _window([1.0] * steps, step_times(phase) * steps, samples=steps))
    return seen


def test_the_plan_without_seconds_or_settling_is_plan_epoch():
    plan = MeasurementPlan(20, 2, 8, 4)
    assert _run_plan(plan, lambda phase: 0.01, epochs=2) == (
        plan_epoch(0, 20, warmup=2, window_steps=8, latency_steps=4)
        + plan_epoch(1, 20, warmup=2, window_steps=8, latency_steps=4))


def test_warm_up_goes_on_until_the_step_time_settles():
    # compilation, then autotuning: the step time falls, then holds at 10 ms from step 6 on
    times = [5.0, 0.5, 0.2, 0.05, 0.03, 0.02, 0.010, 0.010, 0.0101, 0.0099, 0.010]
    plan = MeasurementPlan(400, 2, 8, 4, settle_warmup=True)
    phases = _run_plan(plan, lambda phase: times[phase.start] if phase.kind == "warmup" else 0.01)
    warm = [p for p in phases if p.kind == "warmup"]
    assert len(warm) == 11  # the first five steps agreeing within 10 % are steps 6-10
    assert plan.settled()
    # never settling: warm-up stops at a quarter of the epoch and says so
    jitter = MeasurementPlan(40, 2, 8, 4, settle_warmup=True)
    phases = _run_plan(jitter, lambda phase: 0.01 * (1 + (phase.start % 2)))
    assert sum(p.kind == "warmup" for p in phases) == 10 and not jitter.settled()
    assert [i for p in phases for i in range(p.start, p.stop)] == list(range(40))


def test_windows_are_sized_to_last_the_asked_seconds_at_the_measured_step_time():
    plan = MeasurementPlan(2000, 5, 32, 10, window_seconds=1.0)
    phases = _run_plan(plan, lambda phase: 0.004)  # 4 ms a step: 250 steps a second
    windows = [p for p in phases if p.kind == "window"]
    assert [p.stop - p.start for p in windows][:3] == [250, 250, 250]
    assert [i for p in phases for i in range(p.start, p.stop)] == list(range(2000))
    # a window never stages more than MAX_STAGED_BYTES of batches
    big = MeasurementPlan(2000, 5, 32, 10, window_seconds=1.0, batch_bytes=MAX_STAGED_BYTES // 100)
    windows = [p for p in _run_plan(big, lambda phase: 0.004) if p.kind == "window"]
    assert max(p.stop - p.start for p in windows) == 100


def test_a_short_timed_region_is_flagged_with_the_steps_it_needs():
    figures = {"timed_steps": 96, "window_time_s": 0.027, "warmup_steps": 50}
    flags = timing_flags(figures, min_timed_steps=300, min_timed_seconds=1.0, settle_asked=True, settled=True,
                         steps_per_epoch=200, epochs=2, latency_steps=10)
    assert len(flags) == 1 and "96 steps in 0.027 s, under the 300 steps and 1 s a trusted" in flags[0]
    # only the bound that was missed: 3 steps over 0.07 s are too few steps, not too short a time
    few = timing_flags({"timed_steps": 3, "window_time_s": 0.0697}, min_timed_steps=8, min_timed_seconds=0.02,
                       settle_asked=False, settled=False, steps_per_epoch=10, epochs=1, latency_steps=5)
    assert "3 steps in 0.0697 s, under the 8 steps a trusted figure needs here (at least 8 steps and 0.02 s)" \
        in few[0], few
    # 0.28 ms a step: a second is 3,556 steps, 1,778 per epoch, + 10 latency + 50 warm-up
    assert flags[0].endswith("use --steps 1838 or more")
    assert timing_flags({"timed_steps": 400, "window_time_s": 2.0}, min_timed_steps=300, min_timed_seconds=1.0,
                        settle_asked=False, settled=False, steps_per_epoch=500, epochs=1, latency_steps=10) == []
    unsettled = timing_flags({"timed_steps": 400, "window_time_s": 2.0, "warmup_steps": 100}, min_timed_steps=300,
                             min_timed_seconds=1.0, settle_asked=True, settled=False, steps_per_epoch=500,
                             epochs=1, latency_steps=10)
    assert len(unsettled) == 1 and "had not settled after 100 warm-up steps" in unsettled[0]


def test_no_timed_window_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="no timed window"):
        steady_state([(Phase("warmup", 0, 0, 1), _window([1.0], 1.0))])


def test_a_window_dispatches_every_step_then_waits_once_then_fetches_once():
    events = []
    guarded = []

    @contextmanager
    def guard():
        guarded.append("in")
        yield
        guarded.append("out")

    def step(batch):
        events.append(("step", batch[0], tuple(guarded)))
        return ("loss", batch[0]), ("applied", batch[0])

    def wait(outcome):
        events.append(("wait", outcome[0][1]))

    def fetch(outcomes):
        events.append(("fetch", len(outcomes)))
        return [float(i) for (_, i), _ in outcomes], [True, False, True]

    class Labels:
        shape = (4,)

    result = timed_window([(0, Labels()), (1, Labels()), (2, Labels())], step, wait=wait, fetch=fetch, guard=guard)
    assert [e[0] for e in events] == ["step", "step", "step", "wait", "fetch"]
    assert all(e[2] == ("in",) for e in events if e[0] == "step")  # every step inside the guard
    assert events[3] == ("wait", 2)  # waited for the last step only
    assert result.step_losses == [0.0, 1.0, 2.0] and result.skipped_steps == 1 and result.samples == 12


def test_a_window_of_several_processes_takes_the_slowest_time_and_keeps_its_own():
    others = [0.8, 1.7, 1.2]  # what the other processes timed, as a collective would see them
    asked: list[float] = []

    def slowest(seconds: float) -> float:
        asked.append(seconds)
        return max([seconds, *others])

    result = EpochResult(step_losses=[0.5] * 4, samples=64, window_time_s=1.1)
    take_slowest_window(result, slowest)
    assert asked == [1.1] and result.window_time_s == 1.7
    assert PROCESS_WINDOW_TIME == "process_window_time_s" and result.extra == {PROCESS_WINDOW_TIME: 1.1}


def test_the_processes_of_a_cell_meet_before_the_clock_starts():
    """A GPU review: each rank started its clock after its own staging, so the slowest window held the ranks' start
    skew.  ``meet`` (a barrier) runs before the clock: its wait is not in the window."""
    import time

    events: list[str] = []

    def meet():
        events.append("meet")
        time.sleep(0.3)  # the other processes still staging

    def step(batch):
        events.append("step")
        return batch, True

    class Labels:
        shape = (2,)

    result = timed_window([(0.5, Labels())], step, fetch=lambda outcomes: ([0.5], [True]), meet=meet)
    assert events == ["meet", "step"] and result.window_time_s < 0.3
