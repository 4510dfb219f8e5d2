"""The paired-difference interval and the equivalence verdict, against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from amp_suite.report.equivalence import describe, equivalence, paired_differences, seeds_to_settle


def test_paired_differences_pair_by_seed_and_skip_unpaired_or_nonfinite() -> None:
    treated = {0: 0.98, 1: 0.97, 2: 0.99, 3: math.nan}
    control = {1: 0.96, 0: 0.97, 3: 0.95, 4: 0.9}
    assert paired_differences(treated, control) == pytest.approx([0.01, 0.01])


def test_two_seeds_interval_by_hand() -> None:
    # differences 0.1 and 0.3: mean 0.2, sd 0.1414, t(0.975, 1) = 12.706 -> half width 12.706 * 0.1414 / sqrt(2) = 1.2706
    result = equivalence([0.1, 0.3], margin=0.5)
    assert result.mean == pytest.approx(0.2)
    assert result.low == pytest.approx(0.2 - 1.2706, abs=1e-4) and result.high == pytest.approx(0.2 + 1.2706, abs=1e-4)
    assert result.verdict == "inconclusive"
    # at sd 0.1414 the half width must drop below 0.5 - 0.2 = 0.3: t(n-1) * 0.1414 / sqrt(n) < 0.3 first at n = 4
    # (n = 3: 4.303 * 0.1414 / 1.732 = 0.351; n = 4: 3.182 * 0.1414 / 2 = 0.225)
    assert result.seeds_to_settle == 4


def test_inconclusive_with_two_seeds_equivalent_with_more() -> None:
    two = equivalence([0.1, 0.3], margin=0.5)
    six = equivalence([0.1, 0.3, 0.2, 0.25, 0.15, 0.2], margin=0.5)
    assert two.verdict == "inconclusive"
    # mean 0.2, sd 0.0707, t(5) = 2.571: half width 0.0742 -> [0.126, 0.274], inside (-0.5, 0.5)
    assert six.verdict == "equivalent" and six.high == pytest.approx(0.2742, abs=1e-3)
    assert six.seeds_to_settle is None


def test_worse_and_better_need_the_whole_interval_beyond_the_margin() -> None:
    assert equivalence([-2.0, -2.2, -1.8], margin=0.5).verdict == "worse"
    assert equivalence([2.0, 2.2, 1.8], margin=0.5).verdict == "better"
    # a loss: lower is better, so a lower loss under AMP is "better"
    assert equivalence([-2.0, -2.2, -1.8], margin=0.5, figure="val_loss", higher_is_better=False).verdict == "better"
    # significantly below zero but inside the margin is still equivalent (TOST)
    assert equivalence([-0.2, -0.21, -0.19, -0.2], margin=0.5).verdict == "equivalent"


def test_one_seed_gives_no_interval_and_a_bad_margin_is_refused() -> None:
    one = equivalence([0.4], margin=0.5)
    assert one.verdict == "inconclusive" and math.isnan(one.low) and one.seeds_to_settle is None
    assert "at least 2 seeds" in describe(one)
    with pytest.raises(ValueError, match="positive number, got -1"):
        equivalence([0.1, 0.2], margin=-1)


def test_seeds_to_settle_edge_cases() -> None:
    assert seeds_to_settle(0.5, 0.1, 0.5) is None  # on the boundary: no count settles it
    assert seeds_to_settle(0.0, 0.0, 0.5) == 2
    assert seeds_to_settle(0.49, 10.0, 0.5) is None  # needs more than MAX_SEEDS
    line = describe(equivalence([0.1, 0.3], margin=0.5))
    assert "margin ±0.5: inconclusive (about 4 seeds would likely settle it)" in line
