"""The public surface for plugin authors: import everything a plugin needs from here.

``docs/writing-a-plugin.md`` tells a plugin author to import from this module
(and, for tests, from :mod:`amp_suite.testing`), never from amp-suite's
internal modules, which may move.  Every name in :data:`__all__` is stable:
it keeps its name and meaning within a major version, and a name that has to
go first keeps working for a release with a ``DeprecationWarning`` naming its
replacement (as the import paths of earlier versions do, see
:mod:`amp_suite.moved`).

Importing this module imports no framework and no pandas: ``summary_frame``
and ``results_frame``, which need pandas, are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from amp_suite.calibration import kit as calibration_kit
from amp_suite.doctor import probe_kit
from amp_suite.errors import DivergedError, FrameworkUnavailableError, UnsupportedError
from amp_suite.launchers import this_process
from amp_suite.machine.devices import version_text
from amp_suite.machine.environment import package_version
from amp_suite.markers import hookimpl
from amp_suite.modes import MODES
from amp_suite.numerics.records import StepTrace, TensorTrace
from amp_suite.plugins.framework_plugin import FrameworkPlugin, ResetsMemoryPeak
from amp_suite.plugins.kit import (
    STANDARD_PRECISIONS,
    StepFn,
    chw_rows_to_hwc,
    cpu_device,
    fetch_floats,
    fp8_matmul_path,
    has_fp8_matmul,
    hwc_rows_to_chw,
    layer_name,
    loss_scale_growth_interval,
    no_meet,
    no_wait,
    read_cuda_versions,
    require_device_kind,
    standard_precision,
    take_slowest_window,
    timed_window,
)
from amp_suite.precision import stored_dtype
from amp_suite.records import (
    Batch,
    CellResult,
    DeviceInfo,
    EpochResult,
    FrameworkInfo,
    FrameworkOption,
    LayerSpec,
    OptimizerSpec,
    PrecisionApplied,
    RunSpec,
    VariableSpec,
    Workload,
    to_plain,
)
from amp_suite.safe_files import write_files_atomically
from amp_suite.schema import Field
from amp_suite.workloads.kept import keeps
from amp_suite.workloads.kinds import KINDS, TOKEN_KINDS
from amp_suite.workloads.layers import LAYER_KINDS, LayerShapes, Shape, dense_after_flatten, iter_layers, walk
from amp_suite.workloads.workload import init_variables, learning_rate_at, variable_specs, workload_from_config

if TYPE_CHECKING:
    from amp_suite.report.normalize import results_frame, summary_frame

# Names imported on first use (they import pandas): name -> the module that defines it.
_LAZY = {"summary_frame": "amp_suite.report.normalize", "results_frame": "amp_suite.report.normalize"}

__all__ = [
    # marking hooks, and checking a backend's hooks with mypy
    "hookimpl", "FrameworkPlugin", "ResetsMemoryPeak",
    # records a hook receives or returns (docs/records.md)
    "Batch", "CellResult", "DeviceInfo", "EpochResult", "FrameworkInfo", "FrameworkOption", "LayerSpec",
    "OptimizerSpec", "PrecisionApplied", "RunSpec", "VariableSpec", "Workload", "to_plain",
    # tracing a step for amp-suite numerics
    "StepTrace", "TensorTrace",
    # errors that give a cell its status
    "DivergedError", "FrameworkUnavailableError", "UnsupportedError",
    # a backend's helpers: devices, precision, the timed window, layouts
    "STANDARD_PRECISIONS", "StepFn", "chw_rows_to_hwc", "cpu_device", "fetch_floats", "fp8_matmul_path",
    "has_fp8_matmul", "hwc_rows_to_chw", "layer_name",
    "loss_scale_growth_interval", "no_meet", "no_wait", "read_cuda_versions", "require_device_kind", "standard_precision",
    "take_slowest_window", "timed_window", "stored_dtype", "MODES", "Field", "this_process",
    # the workload: layers, optimizer schedule, canonical variables
    "LAYER_KINDS", "KINDS", "TOKEN_KINDS", "LayerShapes", "Shape", "dense_after_flatten", "iter_layers", "keeps",
    "walk",
    "init_variables", "learning_rate_at", "variable_specs", "workload_from_config",
    # versions, files, reports
    "package_version", "version_text", "write_files_atomically", "summary_frame", "results_frame",
    # the doctor's and calibration's probe kits, as modules
    "probe_kit", "calibration_kit",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'amp_suite.plugin_api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
