"""Does a change of precision change what a model learns? Paired differences over seeds, and a verdict.

For one workload and framework, each seed trains once in the control
precision (fp32) and once in the treated one (an AMP precision) from the same
initial weights and data order; the paired difference ``treated - control``
of a figure (validation accuracy in percentage points, or validation loss)
per seed has a mean and a two-sided 95% t interval.  Against a declared
``margin``:

* **equivalent**: the whole interval lies inside ``(-margin, +margin)``. This
  is the two one-sided tests procedure (TOST) at 2.5% per side, the interval
  being the 95% one;
* **worse** / **better**: the whole interval lies beyond ``-margin`` /
  ``+margin`` (for a figure where higher is better; :attr:`Equivalence.higher_is_better`
  turns it round for a loss);
* **inconclusive** otherwise, with the number of seeds that would likely
  settle it: the smallest ``n`` whose interval half-width, at the observed
  spread, fits between the observed mean and the nearest verdict's boundary.

One seed gives no interval: inconclusive, seeds to settle unknown.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from amp_suite.report.intervals import t_quantile

VERDICTS = ("equivalent", "better", "worse", "inconclusive")
# The largest seed count :func:`seeds_to_settle` looks at.
MAX_SEEDS = 10_000


@dataclass(frozen=True)
class Equivalence:
    """The verdict on one paired figure.

    ``mean``, ``low`` and ``high`` are the paired difference and its 95%
    interval (NaN bounds with fewer than two seeds), ``margin`` the declared
    equivalence margin in the figure's unit, ``seeds`` the pairs used;
    ``seeds_to_settle`` is set for an inconclusive verdict whose spread is
    known (None otherwise, or where no count up to :data:`MAX_SEEDS` would).
    """

    figure: str
    seeds: int
    mean: float
    low: float
    high: float
    margin: float
    verdict: str
    seeds_to_settle: int | None = None
    higher_is_better: bool = True


def paired_differences(treated: Mapping[int, float], control: Mapping[int, float]) -> list[float]:
    """``treated[s] - control[s]`` for every seed ``s`` both have (finite values only), in seed order."""
    return [treated[s] - control[s] for s in sorted(set(treated) & set(control))
            if math.isfinite(treated[s]) and math.isfinite(control[s])]


def half_width(sd: float, n: int) -> float:
    """Half the width of a 95% t interval of a mean of ``n`` values with standard deviation ``sd``."""
    return t_quantile(n - 1) * sd / math.sqrt(n) if n >= 2 else math.inf


def equivalence(differences: Sequence[float], margin: float, *, figure: str = "val_accuracy",
                higher_is_better: bool = True) -> Equivalence:
    """The verdict on paired ``differences`` (treated − control) against ``±margin``."""
    if not margin > 0:
        raise ValueError(f"the equivalence margin must be a positive number, got {margin!r}")
    n = len(differences)
    if n == 0:
        return Equivalence(figure, 0, math.nan, math.nan, math.nan, margin, "inconclusive", None, higher_is_better)
    mean = statistics.fmean(differences)
    if n == 1:
        return Equivalence(figure, 1, mean, math.nan, math.nan, margin, "inconclusive", None, higher_is_better)
    sd = statistics.stdev(differences)
    half = half_width(sd, n)
    low, high = mean - half, mean + half
    verdict = _verdict(low, high, margin, higher_is_better)
    settle = seeds_to_settle(mean, sd, margin) if verdict == "inconclusive" else None
    return Equivalence(figure, n, mean, low, high, margin, verdict, settle, higher_is_better)


def _verdict(low: float, high: float, margin: float, higher_is_better: bool) -> str:
    if -margin < low and high < margin:
        return "equivalent"
    if high < -margin:
        return "worse" if higher_is_better else "better"
    if low > margin:
        return "better" if higher_is_better else "worse"
    return "inconclusive"


def seeds_to_settle(mean: float, sd: float, margin: float) -> int | None:
    """The smallest seed count whose interval would fit, at this mean and spread, on one side of a boundary.

    Inside the margin the interval must fit between the mean and the nearer
    of ``±margin`` (equivalent); outside it, between the mean and that
    boundary (worse or better).  None where the mean sits on a boundary or
    no count up to :data:`MAX_SEEDS` is enough.
    """
    room = abs(abs(mean) - margin)
    if room == 0 or not math.isfinite(room) or not math.isfinite(sd):
        return None
    if sd == 0:
        return 2
    for n in range(2, MAX_SEEDS + 1):
        if half_width(sd, n) < room:
            return n
    return None


def describe(result: Equivalence, unit: str = " points") -> str:
    """One line: the difference, its interval, the margin and the verdict (with the seeds to settle it)."""
    if result.seeds < 2:
        return (f"{result.figure}: {result.mean:+.2f}{unit} from {result.seeds} seed(s): inconclusive "
                "(an interval needs at least 2 seeds)")
    text = (f"{result.figure}: {result.mean:+.2f}{unit} [{result.low:+.2f}, {result.high:+.2f}] over "
            f"{result.seeds} seeds, margin ±{result.margin:g}: {result.verdict}")
    if result.verdict == "inconclusive" and result.seeds_to_settle is not None:
        text += f" (about {result.seeds_to_settle} seeds would likely settle it)"
    return text
