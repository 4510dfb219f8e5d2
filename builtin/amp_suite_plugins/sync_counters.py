"""Counters of host synchronizations of the built-in frameworks, for ``BackendConformance.sync_counter``.

A counter is a ``module:function`` called in the probe process as
``function(model)`` with the plugin's model handle; it returns a context
manager yielding ``count() -> int``: the number of times, while it was open,
the host waited for the device or read a value back from it.

The counters here patch each framework at the lowest level this kit can
reach from Python, so a backend that waits through a method of the array
(``loss.block_until_ready()``, ``float(loss)``, ``loss.item()``) is counted
as surely as one that calls the module function.  A call made inside another
counted call is not counted again: ``jax.block_until_ready(tree)`` waits once
however many leaves it blocks on, and ``float(x)`` reading ``x._value`` is
one read.

* :func:`of_jax` — any JAX backend (haiku, Flax, Equinox...): ``jax.Array``'s
  ``block_until_ready``, ``__array__``, ``item``, ``tolist``, ``__float__``,
  ``__int__``, ``__bool__``, ``__index__``, ``copy_to_host_async`` and its
  ``_value`` property, and the functions ``jax.block_until_ready`` and
  ``jax.device_get``;
* :func:`of_torch` — ``Tensor.item``, ``tolist``, ``numpy``, ``cpu``,
  ``__float__``, ``__int__``, ``__bool__``, and ``torch.cuda.synchronize``,
  ``torch.cuda.Event.synchronize``, ``torch.cuda.Stream.synchronize``; the
  tensors of ``model.optimizer.state`` (if the handle has an ``optimizer``)
  are exempt, since ``torch.optim`` keeps its step counters on the CPU and
  reads them with ``.item()`` without waiting for the device;
* :func:`of_keras` — TensorFlow's eager tensor ``_numpy`` (behind ``numpy()``,
  ``__array__``, ``__float__``, ``__bool__``) and ``tf.experimental.sync_devices``.

:func:`amp_suite.testing.sync_counters.count_calls` builds a counter for
another framework from a list of ``(owner, attribute)`` pairs.
"""

from __future__ import annotations

from typing import Any

from amp_suite.testing.sync_counters import Target, count_calls


def of_jax(model: Any) -> Any:
    """Host synchronizations of any JAX-based backend (the model handle is not used)."""
    import jax
    import jax.numpy as jnp

    array_type = type(jnp.zeros(()))
    methods = ("block_until_ready", "__array__", "item", "tolist", "__float__", "__int__", "__bool__",
               "__index__", "copy_to_host_async", "_value")
    targets = [(array_type, m) for m in methods if m in array_type.__dict__]
    return count_calls([*targets, (jax, "block_until_ready"), (jax, "device_get")])


def of_torch(model: Any) -> Any:
    """Host synchronizations of a PyTorch backend; ``model.optimizer``'s state tensors are exempt."""
    import torch

    optimizer = getattr(model, "optimizer", None)
    exempt = [v for state in getattr(optimizer, "state", {}).values() for v in state.values()] if optimizer else []
    methods = ("item", "tolist", "numpy", "cpu", "__float__", "__int__", "__bool__")
    targets: list[Target] = [(torch.Tensor, m) for m in methods]
    targets += [(torch.cuda, "synchronize"), (torch.cuda.Event, "synchronize"), (torch.cuda.Stream, "synchronize")]
    return count_calls(targets, exempt)


def of_keras(model: Any) -> Any:
    """Host synchronizations of a TensorFlow/Keras backend: every eager read-back goes through ``_numpy``."""
    import tensorflow as tf
    from tensorflow.python.framework import tensor as tensor_module

    eager = next(c for c in tensor_module.Tensor.__subclasses__() if hasattr(c, "_numpy"))
    targets: list[Target] = [(eager, "_numpy")]
    if hasattr(tf.experimental, "sync_devices"):
        targets.append((tf.experimental, "sync_devices"))
    return count_calls(targets)
