"""Count host synchronizations inside one ``train_epoch`` call, per framework (for the conformance kit).

Each function takes the plugin's model handle and returns a context manager
yielding ``count()``: the device-to-host reads and explicit waits made while
it was open.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock


def _counting(calls: list[int], original: Callable, exempt: set[int]) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not (args and id(args[0]) in exempt):
            calls[0] += 1
        return original(*args, **kwargs)

    return wrapper


@contextmanager
def _patched(targets: list[tuple[Any, str]], exempt: set[int] = frozenset()) -> Iterator[Callable[[], int]]:
    calls = [0]
    patches = [mock.patch.object(owner, name, _counting(calls, getattr(owner, name), set(exempt)))
               for owner, name in targets]
    for patch in patches:
        patch.start()
    try:
        yield lambda: calls[0]
    finally:
        for patch in patches:
            patch.stop()


def of_torch(model: Any):
    import torch

    # torch.optim keeps its step counters as CPU tensors and reads them with .item() even on a GPU
    # (no device sync): only values the step computes count.
    exempt = {id(v) for state in model.optimizer.state.values() for v in state.values()}
    names = ("item", "tolist", "numpy", "__float__", "__bool__", "cpu")
    return _patched([(torch.Tensor, n) for n in names] + [(torch.cuda, "synchronize")], exempt)


def of_keras(model: Any):
    from tensorflow.python.framework import tensor as tensor_module

    eager = next(c for c in tensor_module.Tensor.__subclasses__() if hasattr(c, "numpy"))
    return _patched([(eager, "numpy")])


def of_jax(model: Any):
    import jax

    return _patched([(jax, "device_get"), (jax, "block_until_ready")])
