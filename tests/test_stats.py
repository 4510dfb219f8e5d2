"""Measurement phases and steady-state figures: one wait per window, warm-up and latency kept apart."""

from contextlib import contextmanager

import pytest

from amp_suite.plugin_kit import timed_window
from amp_suite.records import EpochResult
from amp_suite.stats import Phase, plan_epoch, steady_state


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


def test_device_event_step_times_replace_the_latency_phase():
    parts = [(Phase("window", 0, 0, 3), _window([1.0, 1.0, 1.0], 3.0, 30, step_times=[0.9, 1.0, 1.1]))]
    s = steady_state(parts)
    assert s["latency_source"] == "device events" and s["step_time_median_s"] == 1.0


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
