"""The marks a report puts beside a figure to say how far it can be trusted.

Every place that shows a speed-up (the markdown tables, the verdict block,
the terminal, the HTML report, the charts) uses these, so one mark means one
thing wherever it appears.
"""

from __future__ import annotations

from amp_suite.report.intervals import Interval, format_ratio

# A cell whose timing is not to be trusted as it stands (too short, a busy machine, noisy windows).
FLAG_MARK = "⚑"
# A ratio from fewer than two paired repeats: it has no interval.
SINGLE_RUN_MARK = "1 run"
# Marks a ratio whose 95% interval contains 1.0: no measurable difference.
NO_DIFFERENCE_MARK = "≈"
# A speed-up whose repeats disagree far more than the rest of the sweep's: its own interval, not pooled.
NOISIER_MARK = "≁"
# Marks a ratio whose 95% interval contains 1.0 and spans more than TOO_WIDE times: too noisy to tell anything,
# where "no measurable difference" would read as "AMP changes nothing" (0.02x (0.00030–1.5) from two repeats).
TOO_WIDE_MARK = "?"
TOO_WIDE = 10.0
# Beside every figure of a precision the device can only emulate (fp8 on a CPU or a GPU below compute capability
# 8.9): real numerics, but the speed is the emulation's, so it is never shown as a speed-up.
EMULATED_MARK = "emulated"


def too_wide(interval: Interval) -> bool:
    """Whether ``interval`` contains 1.0 and spans more than :data:`TOO_WIDE` times."""
    return interval.known and interval.contains(1.0) and interval.low > 0 and interval.high / interval.low > TOO_WIDE


def interval_mark(interval: Interval) -> str:
    """:data:`TOO_WIDE_MARK`, :data:`NO_DIFFERENCE_MARK` or ``""`` for a ratio's interval."""
    if not interval.contains(1.0):
        return ""
    return TOO_WIDE_MARK if too_wide(interval) else NO_DIFFERENCE_MARK


def ratio_text(interval: Interval) -> str:
    """``1.69x (1.55–1.80)``, with :data:`NO_DIFFERENCE_MARK` first when the interval contains 1.0, or
    :data:`TOO_WIDE_MARK` when it also spans more than :data:`TOO_WIDE` times."""
    mark = interval_mark(interval)
    return (f"{mark} " if mark else "") + format_ratio(interval)
