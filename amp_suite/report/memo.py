"""``by_content``: a report's frames computed once per content, however many reporters ask for them.

Writing one report asks for the same summary of the same results several times
(the verdict, the markdown, the HTML page, the charts and the charts embedded
in the page: five summaries of one sweep), each a pandas fold of every cell.
The key is the pickled arguments, so a hit means the very same content, never
the same object changed since; arguments that cannot be pickled are computed
every time.  The caller gets a copy, free to change it.
"""

from __future__ import annotations

import functools
import pickle
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import pandas as pd

Frame = TypeVar("Frame", bound=pd.DataFrame)

# Contents kept per function: a report and, at most, the one written before it.
KEPT = 2


def by_content(function: Callable[..., Frame]) -> Callable[..., Frame]:
    """``function`` (pure: its frame depends on its arguments only) remembered for its last :data:`KEPT` contents."""
    kept: OrderedDict[bytes, Frame] = OrderedDict()

    @functools.wraps(function)
    def remembered(*args: Any, **kwargs: Any) -> Frame:
        try:
            key = pickle.dumps((args, sorted(kwargs.items())), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # an unpicklable figure: no key, so no memory
            return function(*args, **kwargs)
        if key not in kept:
            kept[key] = function(*args, **kwargs)
            while len(kept) > KEPT:
                kept.popitem(last=False)
        kept.move_to_end(key)
        return kept[key].copy()

    remembered.forget = kept.clear  # type: ignore[attr-defined]
    return remembered
