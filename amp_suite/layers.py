"""Deprecated: this module moved to ``amp_suite.workloads.layers``; import its names from ``amp_suite.plugin_api`` (see :mod:`amp_suite.moved`)."""

from amp_suite.moved import moved_module

__getattr__, __dir__ = moved_module("amp_suite.layers", "amp_suite.workloads.layers")
