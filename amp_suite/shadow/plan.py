"""What ``amp-suite numerics`` runs: the request checked, then one run per framework, workload and precision.

Every requested precision runs, and beside them the shadows: ``fp32``
always, ``fp64`` where the framework's plugin declares it (its
``FrameworkInfo.precisions``).  A precision is accepted when one of the
requested frameworks declares it, so a precision a plugin adds (``fp8``)
needs no change here.  Names are refused in one line, with the closest
allowed name, before any process starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amp_suite.config.catalog import SuiteConfig, with_overrides
from amp_suite.config.settings import CELL_FIELDS, SETTINGS_FIELDS, check_names
from amp_suite.config.workload_datasets import dataset_choice, splits_for_given_dataset
from amp_suite.datasets import DATASETS
from amp_suite.datasets import check_request as check_dataset
from amp_suite.errors import UsageError
from amp_suite.records import FrameworkInfo, RunSpec, Workload
from amp_suite.schema import Field, shown

# The shadows every AMP step is set beside, most exact last.
SHADOWS = ("fp32", "fp64")
# Traced steps unless --steps says otherwise, and the most a request may ask.
DEFAULT_STEPS = 3
MAX_STEPS = 1000
DEFAULT_OUT = "amp-suite-numerics"
# --bisect: the relative loss gap accepted, and the AMP runs a search makes, unless the request says otherwise.
DEFAULT_TOLERANCE = 0.01
DEFAULT_MAX_RUNS = 6
# The most runs a --bisect search may ask for (--max-runs).
MAX_RUNS = 100


def _run_maximum(setting: str) -> int:
    """The largest value ``amp-suite run`` takes for ``setting``: numerics takes the same range."""
    maximum = SETTINGS_FIELDS[setting].maximum
    assert maximum is not None
    return int(maximum)


# The largest seed (2**32 - 1: numpy's, PyTorch's and JAX's seeds all take it) and batch size, as amp-suite run.
MAX_SEED = _run_maximum("seed")
MAX_BATCH_SIZE = _run_maximum("batch_size")
# What each count of a request may be: checked by check_request, named by the command line's flags.
STEPS_FIELD = Field(int, minimum=1, maximum=MAX_STEPS)
SEED_FIELD = Field(int, minimum=0, maximum=MAX_SEED)
BATCH_SIZE_FIELD = Field(int, minimum=1, maximum=MAX_BATCH_SIZE)


@dataclass(frozen=True)
class NumericsRequest:
    """One ``amp-suite numerics`` (or :func:`amp_suite.numerics`) request, as given.

    ``batch_size`` ``None``: each workload's own; ``dataset`` ``None``: each
    workload's own (else the catalog's default).  ``inline`` traces every run
    in this process (tests and debugging: frameworks then share a process).
    ``bisect`` searches layers to keep in float32 until the AMP losses are
    within ``tolerance`` (relative) of float32's, in at most ``max_runs`` AMP
    runs (:mod:`amp_suite.shadow.bisect`).  ``force`` replaces the results an earlier run left in ``out``
    (without it they are kept and the request refused).
    """

    workloads: tuple[str, ...]
    frameworks: tuple[str, ...]
    precisions: tuple[str, ...] = ("amp_fp16", "amp_bf16")
    steps: int = DEFAULT_STEPS
    out: str | Path = DEFAULT_OUT
    batch_size: int | None = None
    seed: int = 0
    device: str = "auto"
    timeout: float = 600.0
    config: str | Path | None = None
    plugins: tuple[str, ...] = ()
    inline: bool = False
    dataset: str | None = None
    bisect: bool = False
    tolerance: float = DEFAULT_TOLERANCE
    max_runs: int = DEFAULT_MAX_RUNS
    force: bool = False


@dataclass(frozen=True)
class PlannedRun:
    """One process of the command: the run, its workload, and whether it is a shadow of the others."""

    run: RunSpec
    workload: Workload
    shadow: bool

    @property
    def key(self) -> str:
        return f"{self.run.framework}__{self.run.workload}__{self.run.precision}"


def _count(name: str, value: Any, field: Field) -> int:
    low, high = int(field.minimum or 0), int(field.maximum or 0)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise UsageError(f"{name} must be a whole number from {low} to {high}, got {shown(value)}")
    return value


def check_request(request: NumericsRequest, config: SuiteConfig, frameworks: dict[str, FrameworkInfo]) -> None:
    """Every name and number of ``request`` checked; a one-line :class:`UsageError` for the first bad one.

    A name given twice is refused, as amp-suite run refuses it, rather than dropped in silence.
    """
    check_names("framework", request.frameworks, frameworks)
    check_names("workload", request.workloads, config.workloads)
    check_names("device", (request.device,), ("auto", "cpu", "gpu"))
    from amp_suite.machine.devices import sweep_device_kind

    kind = sweep_device_kind(request.device)  # auto: the GPU where the machine has an NVIDIA one
    declared = list(dict.fromkeys(name for framework in request.frameworks
                                  for name in frameworks[framework].precisions.get(kind, ())))
    elsewhere = {name for framework in request.frameworks
                 for names in frameworks[framework].precisions.values() for name in names} - set(declared)
    beside = [name for name in declared if name not in SHADOWS]
    shadow = next((name for name in request.precisions if name in SHADOWS), None)
    if shadow is not None:  # set beside itself a shadow would compare nothing
        raise UsageError(f"precision {shown(shadow)} is one of the shadows ({', '.join(SHADOWS)}) amp-suite numerics "
                         f"runs of itself, not a precision to set beside them (allowed: {', '.join(beside) or 'none'})")
    other = next((name for name in request.precisions if name in elsewhere), None)
    if other is not None:  # tf32 on a CPU: run would record it unsupported, numerics would compare nothing
        raise UsageError(f"precision {shown(other)} does not run on the {kind.upper()} (allowed there: "
                         f"{', '.join(beside) or 'none'})")
    check_names("precision", request.precisions, beside)
    for label, names in (("frameworks", request.frameworks), ("workloads", request.workloads),
                         ("precisions", request.precisions)):
        twice = next((name for index, name in enumerate(names) if name in names[:index]), None)
        if twice is not None:
            raise UsageError(f"{label} lists {shown(twice)} more than once")
    _count("steps", request.steps, STEPS_FIELD)
    _count("seed", request.seed, SEED_FIELD)
    if request.batch_size is not None:
        _count("batch size", request.batch_size, BATCH_SIZE_FIELD)
    if request.dataset is not None:
        check_names("dataset", (request.dataset,), DATASETS)
    if isinstance(request.timeout, bool) or not isinstance(request.timeout, (int, float)) \
            or not math.isfinite(request.timeout) or request.timeout <= 0:
        raise UsageError(f"timeout must be a positive number of seconds, got {shown(request.timeout)}")


def has_fp64(info: FrameworkInfo) -> bool:
    """Whether the framework's plugin declares the float64 reference on any kind of device."""
    return any("fp64" in names for names in info.precisions.values())


def plan_runs(request: NumericsRequest, config: SuiteConfig, frameworks: dict[str, FrameworkInfo],
              plugin_modules: tuple[str, ...] = ()) -> list[PlannedRun]:
    """Every run, per workload and framework: the requested precisions, then the shadows it lacks.

    A dataset that does not fit a workload (its classes, its channels, its
    splits) is a one-line :class:`UsageError`, before any process starts.
    """
    settings = with_overrides(config.settings, device=request.device, dataset=request.dataset)
    if request.dataset is not None:
        settings, _ = splits_for_given_dataset(settings, {"dataset": request.dataset})
    per_cell = {cell: getattr(settings, name) for name, cell in CELL_FIELDS.items()}
    per_cell["data_dir"] = str(Path(settings.data_dir).resolve()) if settings.data_dir else None
    per_cell["coordinator"] = ""
    planned = []
    for workload_name in request.workloads:
        workload = config.workloads[workload_name]
        data = dataset_choice(settings, workload, dataset_given=request.dataset is not None)
        batch_size = request.batch_size or workload.batch_size
        check_dataset(data.dataset, workload, data.train_split, data.val_split, batch_size=batch_size)
        for framework in request.frameworks:
            shadows = [name for name in SHADOWS if name != "fp64" or has_fp64(frameworks[framework])]
            wanted = list(dict.fromkeys([*request.precisions, *shadows]))
            for precision in wanted:
                run = RunSpec(**{**per_cell, "framework": framework, "workload": workload_name,
                                 "precision": precision, "steps": request.steps, "epochs": 1, "warmup": 0,
                                 "batch_size": batch_size, "seed": request.seed, "dataset": data.dataset,
                                 "train_split": data.train_split, "val_split": data.val_split,
                                 "timeout_s": float(request.timeout), "devices": 1, "launcher": "process",
                                 "options": dict(config.framework_options.get(framework, {})),
                                 "plugin_modules": plugin_modules, "mode": ""})
                planned.append(PlannedRun(run, workload, precision in SHADOWS))
    return planned
