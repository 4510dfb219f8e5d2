"""Deprecated: this module moved to ``amp_suite.plugins.kit``; import its names from ``amp_suite.plugin_api`` (see
:mod:`amp_suite.moved`)."""

from amp_suite.moved import moved_module

# The timed-epoch helpers of the first versions were replaced, not moved: their step contract is gone.
_REPLACED = "timed_window replaced it, with another step contract (docs/writing-a-plugin.md, A framework backend)"

__getattr__, __dir__ = moved_module("amp_suite.plugin_kit", "amp_suite.plugins.kit",
                                    gone={"timed_epoch": _REPLACED, "timed_steps": _REPLACED})
