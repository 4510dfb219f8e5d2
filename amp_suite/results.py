"""Deprecated: this module moved to ``amp_suite.sweep.store``; import its names from ``amp_suite.plugin_api`` (see :mod:`amp_suite.moved`)."""

from amp_suite.moved import moved_module

__getattr__, __dir__ = moved_module("amp_suite.results", "amp_suite.sweep.store", names={"to_plain": "amp_suite.records"})
