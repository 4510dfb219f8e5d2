"""Reads and checks ``benchmarks.toml``: sweep defaults, workloads, framework options.

Every value is checked before the first cell runs, against one typed schema
(:data:`SETTINGS_FIELDS` for ``[defaults]`` and the ``run`` flags,
:func:`framework_option_fields` for ``[frameworks.NAME]``); unknown keys are
refused with the closest valid name.  Each problem is one line, exit 2.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from amp_suite.cost import COST_FIELDS
from amp_suite.errors import UsageError
from amp_suite.precision import PRECISIONS
from amp_suite.records import Workload
from amp_suite.schema import Field, check_name, check_table, check_value, closest, shown
from amp_suite.workloads import workload_from_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

CONFIG_NAME = "benchmarks.toml"
TABLES = ("defaults", "workloads", "frameworks", "cost")


@dataclass(frozen=True)
class SweepSettings:
    """What a sweep runs; ``[defaults]`` in the config, overridden by CLI flags."""

    frameworks: tuple[str, ...] = ("torch", "keras", "jax")
    workloads: tuple[str, ...] = ("mnist_cnn",)
    precisions: tuple[str, ...] = ("fp32", "amp_fp16", "amp_bf16")
    dataset: str = "synthetic"
    train_split: str = "train"
    val_split: str = "test"
    data_dir: str | None = None
    download: bool = True
    synthetic_fallback: bool = False
    steps: int = 50
    epochs: int = 1
    warmup: int = 5
    window_steps: int = 32    # steps dispatched back to back between two waits (and staged at once)
    latency_steps: int = 10   # last steps of each epoch run one by one, for per-step latency
    batch_size: int | None = None  # None: each workload's own batch size
    repeats: int = 1
    timeout: float = 900.0
    seed: int = 0
    device: str = "auto"
    out: str = "amp-suite-results"
    devices: tuple[int | str, ...] = (1,)  # data-parallel replicas per cell; "all": every device seen
    sync_batch_norm: bool = False  # BatchNorm statistics over all replicas, where the framework has it
    nnodes: int = 1  # machines one cell runs on (one amp-suite run per machine)
    node_rank: int = 0  # this machine's rank among them
    coordinator: str | None = None  # HOST:PORT of node 0, where the cell's processes meet

    def check(self) -> None:
        """Reject values that cannot make a meaningful sweep (exit 2)."""
        for setting in fields(self):
            check_value(setting.name, getattr(self, setting.name), SETTINGS_FIELDS[setting.name])
        if self.warmup >= self.steps:
            raise UsageError(
                f"warmup ({self.warmup}) must be smaller than steps per epoch ({self.steps}): "
                "no step would be timed"
            )
        if self.device not in ("auto", "cpu", "gpu"):
            raise UsageError(f"unknown device {shown(self.device)}; allowed: auto, cpu, gpu")
        check_names("precision", self.precisions, PRECISIONS)
        if self.node_rank >= self.nnodes:
            raise UsageError(f"node_rank ({self.node_rank}) must be smaller than nnodes ({self.nnodes})")
        if self.nnodes > 1:
            if not self.coordinator:
                raise UsageError(f"nnodes = {self.nnodes} needs a coordinator HOST:PORT (node 0's address)")
            check_coordinator(self.coordinator)
            for count in self.devices:
                if count == "all" or count % self.nnodes:
                    raise UsageError(f"devices {count} do not split evenly over {self.nnodes} nodes; on several "
                                     "nodes give device counts that are multiples of nnodes")


def check_coordinator(text: str) -> tuple[str, int]:
    """``HOST:PORT`` split and checked (one-line error)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"coordinator must be HOST:PORT with a port from 1 to 65535, got {shown(text)}")
    return host, int(port)


def check_batch_split(workload: str, batch_size: int, devices: int) -> None:
    """The global batch must split evenly over the devices (one-line error)."""
    if batch_size % devices:
        raise UsageError(f"batch size {batch_size} of workload {workload!r} does not split evenly over "
                         f"{devices} devices; choose a --batch-size divisible by {devices}")


# The type and range of every sweep setting, in [defaults] and on the command line.
SETTINGS_FIELDS: dict[str, Field] = {
    "frameworks": Field(tuple, names=True),
    "workloads": Field(tuple, names=True),
    "precisions": Field(tuple, names=True),
    "dataset": Field(str, names=True),
    "train_split": Field(str),
    "val_split": Field(str),
    "data_dir": Field(str, optional=True),
    "download": Field(bool),
    "synthetic_fallback": Field(bool),
    "steps": Field(int, minimum=1, maximum=1_000_000),
    "epochs": Field(int, minimum=1, maximum=10_000),
    "warmup": Field(int, minimum=0, maximum=1_000_000),
    "window_steps": Field(int, minimum=1, maximum=1_000_000),
    "latency_steps": Field(int, minimum=0, maximum=1_000_000),
    "batch_size": Field(int, minimum=1, maximum=65_536, optional=True),
    "repeats": Field(int, minimum=1, maximum=1_000),
    "timeout": Field(float, above=0, maximum=7 * 24 * 3600),
    "seed": Field(int, minimum=0, maximum=2**32 - 1),
    "device": Field(str),
    "out": Field(str),
    "devices": Field(tuple, items=int, minimum=1, maximum=4096, choices=("all",)),
    "sync_batch_norm": Field(bool),
    "nnodes": Field(int, minimum=1, maximum=4096),
    "node_rank": Field(int, minimum=0, maximum=4095),
    "coordinator": Field(str, optional=True),
}

# Options every framework plugin reads (amp_suite.plugin_kit: loss scaling of amp_fp16).
COMMON_FRAMEWORK_OPTIONS: dict[str, Field] = {
    "initial_loss_scale": Field(float, above=0, maximum=2.0**64),
    "loss_scale_growth_interval": Field(int, minimum=1, maximum=1_000_000_000),
}
# Options of the built-in framework plugins, beyond the common ones.
FRAMEWORK_OPTIONS: dict[str, dict[str, Field]] = {
    "torch": {"channels_last": Field(bool), "cudnn_benchmark": Field(bool), "compile": Field(bool)},
    "keras": {"jit_compile": Field(bool)},
    "jax": {},
}


def framework_option_fields(framework: str) -> dict[str, Field]:
    """The options ``[frameworks.FRAMEWORK]`` may set."""
    return {**FRAMEWORK_OPTIONS.get(framework, {}), **COMMON_FRAMEWORK_OPTIONS}


@dataclass(frozen=True)
class SuiteConfig:
    """A loaded ``benchmarks.toml``."""

    path: Path | None
    settings: SweepSettings
    workloads: dict[str, Workload]
    framework_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)  # the checked [cost] table


def check_names(kind: str, given: tuple[str, ...] | list[str], allowed: Any) -> None:
    """One-line error for the first name not in ``allowed``."""
    allowed = list(allowed)
    for name in given:
        if name not in allowed:
            raise UsageError(f"unknown {kind} {shown(name)}; allowed: {', '.join(allowed)}"
                             + (closest(name, allowed) if isinstance(name, str) else ""))
    if not given:
        raise UsageError(f"no {kind} given; allowed: {', '.join(allowed)}")


def check_framework_tables(config: SuiteConfig, frameworks: Any, absent: Any = ()) -> None:
    """Every ``[frameworks.NAME]`` table names a framework a plugin provides.

    Built-in frameworks and the names in ``absent`` (plugins disabled or
    failed to load) are accepted too, so one config serves every machine.
    """
    known = list(dict.fromkeys([*frameworks, *FRAMEWORK_OPTIONS, *absent]))
    for name in config.framework_options:
        if name not in known:
            raise UsageError(f"{config.path}: [frameworks.{name}] names no known framework"
                             f"{closest(name, known)}; known: {', '.join(known)}")


def find_config(explicit: str | Path | None) -> Path:
    """``--config``, else ``./benchmarks.toml``, else the one beside the source tree."""
    if explicit is not None:
        if not str(explicit).strip() or "\0" in str(explicit):
            raise UsageError(f"config file name {shown(str(explicit))} is empty or holds a NUL character")
        path = Path(explicit)
        if path.exists() and not path.is_file():
            raise UsageError(f"config file {str(path)!r} is not a regular file")
        if not path.is_file():
            raise UsageError(f"config file {str(path)!r} does not exist")
        return path
    for candidate in (Path.cwd() / CONFIG_NAME, Path(__file__).resolve().parent.parent / CONFIG_NAME):
        if candidate.is_file():
            return candidate
    raise UsageError(f"no {CONFIG_NAME} in the current directory; pass --config PATH")


def _settings_from_table(table: Any, path: Path) -> SweepSettings:
    where = f"{path}: [defaults]"
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table, got {shown(table)}")
    spelled: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name in spelled:
            raise UsageError(f"{where}: {name} is given twice")
        spelled[name] = value
    return SweepSettings(**check_table(spelled, SETTINGS_FIELDS, where))


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a UTF-8 text file (byte {exc.start}); is it really a TOML file?") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = " ".join(str(exc).split())
        if "(at end of document)" in message:  # tomllib gives no line number here
            message = message.replace("(at end of document)", f"(at end of document, line {len(text.splitlines())})")
        raise UsageError(f"{path}: malformed TOML: {message}") from None


def _workload(name: Any, table: Any, path: Path) -> Workload:
    check_name("workload", name)
    if not isinstance(table, dict):
        raise UsageError(f"{path}: workloads.{name} must be a table ([workloads.{name}]), got {shown(table)}")
    return workload_from_config(name, table)


def load_config(path: Path) -> SuiteConfig:
    """Parse and check a config file; every problem is a one-line :class:`UsageError`."""
    data = _read_toml(path)
    unknown = [name for name in data if name not in TABLES]
    if unknown:
        raise UsageError(
            f"{path}: unknown table {shown(unknown[0])}{closest(unknown[0], TABLES)}; allowed: {', '.join(TABLES)}"
        )
    settings = _settings_from_table(data.get("defaults", {}), path)
    workload_tables = data.get("workloads", {})
    if not isinstance(workload_tables, dict):
        raise UsageError(f"{path}: workloads must be tables [workloads.NAME], got {shown(workload_tables)}")
    if not workload_tables:
        raise UsageError(f"{path}: no [workloads.NAME] table declares a workload")
    workloads = {name: _workload(name, table, path) for name, table in workload_tables.items()}
    option_tables = data.get("frameworks", {})
    if not isinstance(option_tables, dict):
        raise UsageError(f"{path}: frameworks must be tables [frameworks.NAME], got {shown(option_tables)}")
    options = {}
    for name, table in option_tables.items():
        check_name("framework", name)
        options[name] = check_table(table, framework_option_fields(name), f"{path}: [frameworks.{name}]")
    cost = check_table(data.get("cost", {}), COST_FIELDS, f"{path}: [cost]")
    return SuiteConfig(path, settings, workloads, options, cost)


def with_overrides(settings: SweepSettings, **overrides: Any) -> SweepSettings:
    """Settings with every non-None override applied."""
    return replace(settings, **{k: v for k, v in overrides.items() if v is not None})
