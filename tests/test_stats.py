"""Steady-state figures: warm-up kept apart, throughput as samples over time."""

import pytest

from amp_suite.records import EpochResult
from amp_suite.stats import steady_state


def test_warmup_steps_are_excluded_and_reported_apart():
    epochs = [EpochResult([5.0, 1.0, 1.0, 2.0], [2.0, 1.5, 1.2, 1.0], 40, 9.0),
              EpochResult([1.0, 1.0], [0.9, 0.8], 20, 2.0)]
    s = steady_state(epochs, warmup=1, batch_size=10)
    assert s["timed_steps"] == 5
    assert s["throughput"] == pytest.approx(50 / 6.0)  # not the mean of per-step rates
    assert s["first_step_time_s"] == 5.0 and s["warmup_time_s"] == 5.0
    assert s["step_time_median_s"] == 1.0
    assert s["step_time_p90_s"] == pytest.approx(1.6)
    assert s["first_step_loss"] == 2.0 and s["final_loss"] == 0.8


def test_no_timed_step_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="no timed steps"):
        steady_state([EpochResult([1.0, 1.0], [1.0, 1.0], 2, 2.0)], warmup=2, batch_size=1)
