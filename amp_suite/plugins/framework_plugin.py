"""The hooks of a framework plugin as one typed protocol, so mypy checks a plugin against the specs.

pluggy matches a hook implementation to its spec by name and argument names
only, and the specs in :mod:`amp_suite.plugins.hookspecs` must type the model handle
as ``Any``: each framework has its own.  :class:`FrameworkPlugin` says the
rest: a plugin module implements the worker's hooks with the specs' argument
names and types, its model handle (``ModelT``) is what :func:`build_model`
returns and every later hook takes, and its staged batches (``StagedT``) are
what :func:`stage_batches` returns and :func:`train_epoch` takes.

A plugin opts in with three lines at the end of its module, which cost
nothing at run time::

    if TYPE_CHECKING:  # mypy checks this module's hooks against FrameworkPlugin
        import my_package.my_plugin as _this_module
        _checked: FrameworkPlugin[MyModel, list[MyBatch]] = _this_module

mypy then reports a hook whose argument names, argument types or return type
differ from the protocol's (a ``train_epoch`` returning a dict instead of an
:class:`~amp_suite.records.EpochResult`, a ``predict`` that lost its
``training`` argument), where pluggy would only fail at run time, or not at
all.  A plugin that resets its allocator's peak adds
:class:`ResetsMemoryPeak` the same way.  The built-in plugins do both.

The protocol's methods are not written by hand: they are the specs of
:mod:`amp_suite.plugins.hookspecs` (``framework_info`` and every cell hook
not marked ``optional``), with the model handle and the staged batches typed,
written between the ``generated`` lines by ``python -m
amp_suite.plugins.hook_table``; a test fails when they are stale.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import numpy as np

from amp_suite.records import (
    Batch,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    PrecisionApplied,
    RunSpec,
    Workload,
)

ModelT = TypeVar("ModelT")  # the plugin's model handle (never leaves the worker)
StagedT = TypeVar("StagedT")  # the plugin's staged batches
HandleT_contra = TypeVar("HandleT_contra", contravariant=True)  # a model handle a hook only takes


class FrameworkPlugin(Protocol[ModelT, StagedT]):
    """A framework plugin module: the hooks of :mod:`amp_suite.plugins.hookspecs` that run a cell, typed by its handle."""

    # --- generated from hookspecs.py by python -m amp_suite.plugins.hook_table ---

    def framework_info(self) -> FrameworkInfo: ...

    def select_device(self, run: RunSpec) -> DeviceInfo: ...

    def set_precision(self, run: RunSpec, device: DeviceInfo) -> PrecisionApplied: ...

    def build_model(self, run: RunSpec, workload: Workload, initial_weights: dict[str, np.ndarray],
                    initial_state: dict[str, np.ndarray], applied: PrecisionApplied, device: DeviceInfo) -> ModelT: ...

    def stage_batches(self, run: RunSpec, model: ModelT, batches: list[Batch]) -> StagedT: ...

    def train_epoch(self, run: RunSpec, model: ModelT, staged: StagedT, epoch: int) -> EpochResult: ...

    def predict(self, run: RunSpec, model: ModelT, images: np.ndarray, training: bool) -> np.ndarray: ...

    def get_variables(self, run: RunSpec, model: ModelT) -> dict[str, np.ndarray]: ...

    def measure(self, run: RunSpec, model: ModelT, device: DeviceInfo) -> dict[str, Any] | None: ...

    def runtime_versions(self, run: RunSpec) -> dict[str, str]: ...

    # --- end of the generated block ---


class ResetsMemoryPeak(Protocol[HandleT_contra]):
    """A plugin module that restarts its allocator's peak once warm-up is over (optional hook)."""

    def reset_memory_peak(self, run: RunSpec, model: HandleT_contra, device: DeviceInfo) -> None: ...
