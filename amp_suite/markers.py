"""The package's pluggy markers and the names they are made of: project name, entry-point group, version.

A leaf: it imports nothing of amp-suite, so every module may import it.
Plugins keep writing ``from amp_suite import hookimpl`` (the package root
hands these out unchanged); modules inside the package import them from here,
so none of them imports the root, which also exports the Python API above
them all (:mod:`amp_suite.api`).
"""

from __future__ import annotations

from pathlib import Path

import pluggy

__version__ = "0.1.0"

PROJECT_NAME = "amp_suite"
ENTRY_POINT_GROUP = "amp_suite"
# The installed (or checked-out) ``amp_suite`` package folder.
PACKAGE_DIR = Path(__file__).resolve().parent

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
