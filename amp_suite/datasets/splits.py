"""Split specifications in TensorFlow Datasets' notation.

``train``, ``test``, ``test[:8000]``, ``test[8000:]``, ``train[:10%]``,
``train[10%:20%]`` and ``test[-1000:]``.  Percent bounds are rounded to the
nearest example, as TFDS does by default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from amp_suite.errors import UsageError

_SPEC = re.compile(r"^(?P<name>[A-Za-z_]\w*)(\[(?P<start>-?\d+%?)?:(?P<stop>-?\d+%?)?\])?$")


@dataclass(frozen=True)
class Split:
    name: str
    start: str | None = None
    stop: str | None = None

    def bounds(self, count: int) -> tuple[int, int]:
        """The ``[start, stop)`` example range of a split of ``count`` examples."""

        def resolve(bound: str | None, default: int) -> int:
            if bound is None:
                return default
            if len(bound) > 12:
                raise UsageError(f"split {self}: bound {bound[:12]}... is out of range")
            if bound.endswith("%"):
                percent = int(bound[:-1])
                if not -100 <= percent <= 100:
                    raise UsageError(f"split {self}: percent {bound} is outside -100%..100%")
                value = int(round(count * percent / 100))
            else:
                value = int(bound)
            if value < 0:
                value += count
            return min(max(value, 0), count)

        start, stop = resolve(self.start, 0), resolve(self.stop, count)
        if stop <= start:
            raise UsageError(f"split {self} selects no example out of {count}")
        return start, stop

    def __str__(self) -> str:
        if self.start is None and self.stop is None:
            return self.name
        return f"{self.name}[{self.start or ''}:{self.stop or ''}]"


def parse_split(text: str, allowed: tuple[str, ...] | None) -> Split:
    """Parse ``text``; a malformed spec or a split name not in ``allowed`` is a one-line :class:`UsageError`.
    ``allowed=None`` takes any name (synthetic data, which has no named splits, still gets well-formed text)."""
    match = _SPEC.match(text.strip())
    if not match:
        raise UsageError(f"malformed split {text!r}; use NAME, NAME[START:STOP] or NAME[A%:B%], e.g. test[:8000]")
    if allowed is not None and match["name"] not in allowed:
        raise UsageError(f"unknown split {match['name']!r} in {text!r}; allowed: {', '.join(allowed)}")
    return Split(match["name"], match["start"], match["stop"])
