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
* **Pooled noise** (:func:`pooled_log_intervals`): with two or three repeats a
  cell's own ``s`` rests on one or two degrees of freedom (``t(0.975, 1) =
  12.7``), which makes every interval too wide to say anything.  The
  run-to-run noise of log throughput is a property of the machine, so the
  report pools it over every cell of the sweep that measured the same figure
  (the pooled-variance t-interval: ``s_p^2 = sum(SS_i) / sum(n_i - 1)`` with
  ``sum(n_i - 1)`` degrees of freedom).  A cell whose own spread is
  significantly larger than the rest's (one-sided F-test at 1%) is not pooled:
  it keeps its own interval and is marked as noisier than the sweep.
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
from typing import Any

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
    noisier: bool = False  # its spread is significantly above the pooled one: not pooled (own interval)

    @property
    def known(self) -> bool:
        return not (math.isnan(self.low) or math.isnan(self.high))

    def contains(self, x: float = 1.0) -> bool:
        """Whether ``x`` lies inside the interval (False when there is none)."""
        return self.known and self.low <= x <= self.high


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


def paired_ratios(numerator: dict[Any, float], denominator: dict[Any, float]) -> list[float]:
    """``numerator[r] / denominator[r]`` for every run ``r`` both have with a usable figure (``r``: a repeat, or
    a seed's repeat ``(seed, repeat)``)."""
    out = []
    for repeat in sorted(set(numerator) & set(denominator)):
        a, b = _finite_positive([numerator[repeat]]), _finite_positive([denominator[repeat]])
        if a and b:
            out.append(a[0] / b[0])
    return out


def paired_log_interval(numerator: dict[Any, float], denominator: dict[Any, float]) -> Interval:
    """The interval of ``numerator / denominator`` over the repeats they share (see the module)."""
    return log_interval(paired_ratios(numerator, denominator))


# A cell's own spread above the others' with less than this probability under equal noise is not pooled.
POOLING_SIGNIFICANCE = 0.01


def _log_stats(ratios: Sequence[float]) -> tuple[int, float, float]:
    """``(n, mean, sum of squared deviations)`` of the logs of the usable ratios."""
    logs = [math.log(v) for v in _finite_positive(ratios)]
    if not logs:
        return 0, math.nan, 0.0
    mean = sum(logs) / len(logs)
    return len(logs), mean, sum((x - mean) ** 2 for x in logs)


def pooled_log_intervals(groups: Sequence[Sequence[float]], *,
                         significance: float = POOLING_SIGNIFICANCE) -> list[Interval]:
    """One interval per group of paired ratios, the run-to-run noise pooled over the groups (see the module).

    Groups with fewer than two usable ratios get no interval.  A group whose
    variance is above the pooled variance of the others at ``significance``
    (one-sided F-test) keeps its own t-interval with ``noisier=True``; the
    other groups share one pooled standard deviation and its degrees of
    freedom.  With one group this is :func:`log_interval`.
    """
    stats = [_log_stats(group) for group in groups]
    usable = [i for i, (n, _, _) in enumerate(stats) if n >= 2]
    noisier = set()
    for i in usable:
        n_i, _, ss_i = stats[i]
        ss_rest = sum(stats[j][2] for j in usable if j != i)
        df_rest = sum(stats[j][0] - 1 for j in usable if j != i)
        if df_rest == 0 or ss_i == 0:
            continue
        var_i = ss_i / (n_i - 1)
        var_rest = ss_rest / df_rest
        if var_rest == 0 or f_survival(var_i / var_rest, n_i - 1, df_rest) < significance:
            noisier.add(i)
    pooled = [i for i in usable if i not in noisier]
    df_pooled = sum(stats[i][0] - 1 for i in pooled)
    sd_pooled = math.sqrt(sum(stats[i][2] for i in pooled) / df_pooled) if df_pooled else math.nan
    out = []
    for i, (n, mean, ss) in enumerate(stats):
        if n == 0:
            out.append(Interval(math.nan, n=0))
        elif n < 2:
            out.append(Interval(math.exp(mean), n=n))
        else:
            own = i in noisier or len(pooled) < 2
            sd, df = (math.sqrt(ss / (n - 1)), n - 1) if own else (sd_pooled, df_pooled)
            half = t_quantile(df) * sd / math.sqrt(n)
            basis = "paired repeats" if own else f"paired repeats, noise pooled over {len(pooled)} cells"
            out.append(Interval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n=n, basis=basis,
                                noisier=i in noisier))
    return out


def f_survival(x: float, d1: float, d2: float) -> float:
    """``P(F > x)`` for Snedecor's F with ``(d1, d2)`` degrees of freedom."""
    if x <= 0:
        return 1.0
    if math.isinf(x):
        return 0.0
    return regularized_beta(d2 / (d2 + d1 * x), d2 / 2, d1 / 2)


def regularized_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)`` (continued fraction, modified Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the continued fraction converges fast below this point
        return 1.0 - regularized_beta(1.0 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return front * result


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
    """``1.69x (1.55–1.80)``; without an interval just ``1.69x``.  A figure the pattern would show as
    ``0.00`` shows two significant digits instead (``0.0031``)."""
    if math.isnan(interval.value):
        return "–"

    def shown(value: float) -> str:
        text = pattern.format(value)
        return f"{value:.2g}" if value > 0 and float(text) == 0 else text

    text = shown(interval.value) + "x"
    if interval.known:
        text += f" ({shown(interval.low)}–{shown(interval.high)})"
    return text
