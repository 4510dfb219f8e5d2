"""Confidence intervals for ratios of throughputs, memory peaks and speed-ups.

Every figure amp-suite compares is a ratio (AMP over fp32, NEW over BASE), and
run-to-run noise on a ratio is multiplicative, so intervals are computed on
the logarithm of the ratio and mapped back with ``exp``:

* **Paired repeats** (:func:`paired_log_interval`): repeat ``r`` of a precision
  is paired with repeat ``r`` of fp32 in the same framework and workload (the
  two ran one after the other, interleaved, so a drift of the machine hits
  both).  The interval is Student's t on the log ratios of the pairs: centre
  the mean log ratio (so the point estimate is the geometric mean of the
  paired ratios), half-width ``t(0.975, n - 1) * s / sqrt(n)``.  One pair has
  no interval.
* **Independent estimates** (:class:`LogEstimate`): a log mean with the
  variance of that mean and its degrees of freedom, from repeats or from the
  timed windows of one process.  Differences of estimates (``a - b``) add
  variances and take Welch-Satterthwaite degrees of freedom; ``compare`` uses
  these for two sweeps that ran apart.

No scipy: the t quantile comes from :func:`t_quantile` (a table, exact to the
third decimal, interpolated in ``1/df``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Two-sided 95% quantiles of Student's t, t(0.975, df), for the degrees of freedom listed.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
         18: 2.101, 19: 2.093, 20: 2.086, 22: 2.074, 24: 2.064, 26: 2.056, 28: 2.048, 30: 2.042,
         40: 2.021, 60: 2.000, 120: 1.980}
Z975 = 1.959964
CONFIDENCE = 0.95


def t_quantile(df: float) -> float:
    """t(0.975, df): the multiplier of a two-sided 95% interval with ``df`` degrees of freedom.

    Fractional ``df`` (Welch) and ``df`` between table entries interpolate
    linearly in ``1 / df``; beyond 120 the normal quantile is approached.
    """
    if not df > 0 or math.isnan(df):
        return math.nan
    df = max(df, 1.0)  # Welch's df never falls below the smaller sample's; clamp for safety
    keys = sorted(_T975)
    if df in _T975:
        return _T975[int(df)]
    lower = max((k for k in keys if k <= df), default=keys[0])
    upper = min((k for k in keys if k >= df), default=None)
    if upper is None:  # beyond the table: between t(120) and the normal quantile
        lo_x, hi_x, lo_y, hi_y = 1 / 120, 0.0, _T975[120], Z975
    else:
        lo_x, hi_x, lo_y, hi_y = 1 / lower, 1 / upper, _T975[lower], _T975[upper]
    x = 1 / df
    if lo_x == hi_x:
        return lo_y
    return lo_y + (hi_y - lo_y) * (x - lo_x) / (hi_x - lo_x)


@dataclass(frozen=True)
class Interval:
    """A ratio with its 95% interval: ``low <= value <= high`` (``low``/``high`` NaN: no interval)."""

    value: float
    low: float = math.nan
    high: float = math.nan
    n: int = 1  # pairs, repeats or windows behind it
    basis: str = ""  # "paired repeats", "repeats", "timed windows", "" (none)

    @property
    def known(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    def contains(self, x: float = 1.0) -> bool:
        """Whether ``x`` lies inside the interval (False when there is none)."""
        return self.known and self.low <= x <= self.high

    @property
    def relative_half_width(self) -> float:
        """Half the interval's width over its value (NaN without an interval)."""
        if not self.known or not self.value:
            return math.nan
        return (self.high - self.low) / 2 / self.value


def _finite_positive(values: Iterable[float | None]) -> list[float]:
    out = []
    for v in values:
        try:
            x = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if math.isfinite(x) and x > 0:
            out.append(x)
    return out


def log_interval(ratios: Sequence[float], *, basis: str = "paired repeats") -> Interval:
    """Geometric mean of ``ratios`` with the 95% t-interval of their log mean.

    Non-finite and non-positive ratios are left out; with fewer than two left
    there is no interval (the value is the one ratio, or NaN).
    """
    values = _finite_positive(ratios)
    if not values:
        return Interval(math.nan, n=0)
    logs = [math.log(v) for v in values]
    n = len(logs)
    mean = sum(logs) / n
    if n < 2:
        return Interval(math.exp(mean), n=n)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n=n, basis=basis)


def paired_ratios(numerator: dict[int, float], denominator: dict[int, float]) -> list[float]:
    """``numerator[r] / denominator[r]`` for every repeat ``r`` both have with a usable figure."""
    out = []
    for repeat in sorted(set(numerator) & set(denominator)):
        a, b = _finite_positive([numerator[repeat]]), _finite_positive([denominator[repeat]])
        if a and b:
            out.append(a[0] / b[0])
    return out


def paired_log_interval(numerator: dict[int, float], denominator: dict[int, float]) -> Interval:
    """The interval of ``numerator / denominator`` over the repeats they share (see the module)."""
    return log_interval(paired_ratios(numerator, denominator))


@dataclass(frozen=True)
class LogEstimate:
    """The mean of log values, the variance of that mean, and its degrees of freedom."""

    mean: float
    var: float
    df: float
    n: int
    basis: str

    @classmethod
    def of(cls, values: Iterable[float | None], basis: str) -> LogEstimate | None:
        """From at least two positive values (repeats, or a process's windows); None otherwise."""
        logs = [math.log(v) for v in _finite_positive(values)]
        if len(logs) < 2:
            return None
        n = len(logs)
        mean = sum(logs) / n
        var = sum((x - mean) ** 2 for x in logs) / (n - 1)
        return cls(mean, var / n, n - 1, n, basis)

    def __sub__(self, other: LogEstimate) -> LogEstimate:
        var = self.var + other.var
        parts = [(self.var, self.df), (other.var, other.df)]
        denominator = sum(v * v / d for v, d in parts if d > 0)
        df = var * var / denominator if denominator > 0 else min(self.df, other.df)
        basis = self.basis if self.basis == other.basis else f"{self.basis} and {other.basis}"
        return LogEstimate(self.mean - other.mean, var, df, min(self.n, other.n), basis)

    def interval(self) -> Interval:
        """exp of the 95% t-interval of the mean."""
        half = t_quantile(self.df) * math.sqrt(max(self.var, 0.0))
        return Interval(math.exp(self.mean), math.exp(self.mean - half), math.exp(self.mean + half),
                        n=self.n, basis=self.basis)


def format_ratio(interval: Interval, pattern: str = "{:.2f}") -> str:
    """``1.69x (1.55–1.80)``; without an interval just ``1.69x``."""
    if math.isnan(interval.value):
        return "–"
    text = pattern.format(interval.value) + "x"
    if interval.known:
        text += f" ({pattern.format(interval.low)}–{pattern.format(interval.high)})"
    return text
