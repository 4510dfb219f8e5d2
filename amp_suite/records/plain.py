"""Records written as plain data: :func:`to_plain` makes any value JSON-safe."""

from __future__ import annotations

import math
from typing import Any


def to_plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars become numbers, non-finite floats stay readable."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item):
        return to_plain(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)
