"""Counting host synchronizations, for ``BackendConformance.sync_counter``.

A counter is a ``module:function`` called in the probe process as
``function(model)`` with the plugin's model handle; it returns a context
manager yielding ``count() -> int``: the number of times, while it was open,
the host waited for the device or read a value back from it.

:func:`count_calls` builds such a counter from a list of ``(owner,
attribute)`` pairs.  A call made inside another counted call is not counted
again.  The counters of PyTorch, Keras and any JAX backend patch framework
classes, so they live with the plugins, in
:mod:`amp_suite_plugins.sync_counters`: this package imports no framework.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

Target = tuple[Any, str]


class _Tally:
    """Counts outermost calls only: a counted call made while another runs (same thread) is not counted."""

    def __init__(self, exempt: set[int]) -> None:
        self.count = 0
        self.exempt = exempt
        self.depth = threading.local()

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self.depth, "n", 0)
            if depth == 0 and not (args and id(args[0]) in self.exempt):
                self.count += 1
            self.depth.n = depth + 1
            try:
                return original(*args, **kwargs)
            finally:
                self.depth.n = depth

        return counted


@contextmanager
def count_calls(targets: Iterable[Target], exempt: Iterable[Any] = ()) -> Iterator[Callable[[], int]]:
    """Patch every ``(owner, attribute)`` to count its calls (a property: its getter) while open.

    ``exempt`` objects are not counted when they are the call's first argument
    (``self`` of a method).  Yields ``count() -> int``.
    """
    tally = _Tally({id(obj) for obj in exempt})
    patches = []
    for owner, name in targets:
        current = owner.__dict__[name] if isinstance(owner, type) and name in owner.__dict__ else getattr(owner, name)
        if isinstance(current, property):
            assert current.fget is not None, f"{name} is a property without a getter"
            replacement: Any = property(tally.wrap(current.fget), current.fset, current.fdel)
        else:
            replacement = tally.wrap(getattr(owner, name))
        patches.append(mock.patch.object(owner, name, replacement))
    for patch in patches:
        patch.start()
    try:
        yield lambda: tally.count
    finally:
        for patch in reversed(patches):
            patch.stop()
