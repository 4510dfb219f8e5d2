"""``import_without``: a library imported the first time without the modules it would load unused.

Some libraries import others at start-up only because they are installed (Keras imports JAX, matplotlib and
pandas; dm-haiku imports Flax), for features a worker never uses.  A plugin imports its framework inside this
block (``hidden_modules``), so the worker does not pay for them; after it they import as usual.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def hidden_modules(names: tuple[str, ...]) -> Iterator[None]:
    """``import NAME`` (and its submodules) fails with ImportError inside the block, for each of ``names`` not
    imported yet; after it the modules import as usual."""
    hidden = [name for name in names if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # the import system's "not importable" mark
    try:
        yield
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]


def import_without(name: str, unused: tuple[str, ...]) -> Any:
    """The module ``name``, imported with ``unused`` hidden; already imported, it is returned as it is."""
    with hidden_modules(unused):
        return importlib.import_module(name)
