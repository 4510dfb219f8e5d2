"""Deprecated: this module moved to ``amp_suite_plugins.jax.optax_optimizer`` (see :mod:`amp_suite.moved`)."""

from amp_suite.moved import moved_module

__getattr__, __dir__ = moved_module("amp_suite_plugins.optax_optimizer", "amp_suite_plugins.jax.optax_optimizer")
