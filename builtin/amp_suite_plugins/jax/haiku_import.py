"""``import_haiku``: dm-haiku, imported the first time without Flax.

dm-haiku 0.0.17 imports Flax at start-up whenever Flax is installed, for
``haiku.experimental.flax`` (modules that wrap Flax's), which the plugin never
uses; installed Flax is common (the GPU image has it; this project's ``test``
extra installs it for the Flax example).  Flax and what it loads cost a JAX
worker about 0.2 s of CPU.  Hidden while haiku is first imported, Flax stays
unloaded (haiku puts its shim in place of ``haiku.experimental.flax``), and a
later ``import flax`` works as usual.
"""

from __future__ import annotations

from typing import Any

from amp_suite_plugins.hidden_imports import import_without

# What dm-haiku's first import would load only because it is installed.
UNUSED_AT_IMPORT = ("flax",)


def import_haiku() -> Any:
    """The ``haiku`` module; its first import leaves out :data:`UNUSED_AT_IMPORT`."""
    return import_without("haiku", UNUSED_AT_IMPORT)
