"""Import paths of earlier versions that still work, each with a ``DeprecationWarning`` naming the new one.

Plugins written against earlier versions of ``docs/writing-a-plugin.md``
imported from modules that later moved (``amp_suite.plugin_kit``,
``amp_suite.layers``, ...).  Each such module is now a few lines that call
:func:`moved_module`: a name read from it is looked up where it lives now,
and the warning says where to import it from (``amp_suite.plugin_api`` for
every name that module exports).  A name that no longer exists anywhere
raises ``ImportError`` saying what replaced it (an ``AttributeError`` would
reach ``from OLD import NAME`` as Python's bare "cannot import name").
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

PUBLIC_MODULE = "amp_suite.plugin_api"


def new_path(name: str, module: str) -> str:
    """Where to import ``name`` from now: the public module when it exports it, else ``module``."""
    public = importlib.import_module(PUBLIC_MODULE)
    return PUBLIC_MODULE if name in getattr(public, "__all__", ()) else module


def moved_module(old: str, new: str, *, names: Mapping[str, str] | None = None,
                 gone: Mapping[str, str] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module-level ``__getattr__`` and ``__dir__`` for the old module ``old``, whose names now live in ``new``.

    ``names`` maps a name that went elsewhere to its module; ``gone`` maps a
    name that no longer exists to what replaced it (the ``AttributeError``'s
    ``ImportError``'s text).
    """
    elsewhere, removed = dict(names or {}), dict(gone or {})

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in removed:
            raise ImportError(f"{old}.{name} no longer exists: {removed[name]}", name=old)
        module = elsewhere.get(name, new)
        try:
            value = getattr(importlib.import_module(module), name)
        except AttributeError:
            raise AttributeError(f"module {old!r} has no attribute {name!r}") from None
        warnings.warn(f"{old}.{name} moved: import {name} from {new_path(name, module)} "
                      f"({old} goes away in a later version)", DeprecationWarning, stacklevel=2)
        return value

    def __dir__() -> list[str]:
        return sorted({*dir(importlib.import_module(new)), *elsewhere})

    return __getattr__, __dir__


def moved_names(package: str, namespace: dict[str, Any], names: Mapping[str, str]) -> Callable[[str], Any]:
    """A ``__getattr__`` for a package that still exists but whose names ``names`` (name -> module) moved out.

    ``namespace`` is the package's ``globals()``: a name found is kept there, so ``from PACKAGE import NAME``
    (which asks the package twice) warns once.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name]), name)
        warnings.warn(f"{package}.{name} moved: import {name} from {new_path(name, names[name])} "
                      f"({package}.{name} goes away in a later version)", DeprecationWarning, stacklevel=2)
        namespace[name] = value
        return value

    return __getattr__
