"""Reads and checks ``benchmarks.toml``: sweep defaults, workloads, framework options."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from amp_suite.errors import UsageError
from amp_suite.precision import PRECISIONS
from amp_suite.records import Workload
from amp_suite.workloads import workload_from_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

CONFIG_NAME = "benchmarks.toml"


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
    batch_size: int | None = None  # None: each workload's own batch size
    repeats: int = 1
    timeout: float = 900.0
    seed: int = 0
    device: str = "auto"
    out: str = "amp-suite-results"

    def check(self) -> None:
        """Reject values that cannot make a meaningful sweep (exit 2)."""
        for name in ("steps", "epochs", "repeats"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise UsageError(f"warmup must be >= 0, got {self.warmup}")
        if self.warmup >= self.steps:
            raise UsageError(
                f"warmup ({self.warmup}) must be smaller than steps per epoch ({self.steps}): "
                "no step would be timed"
            )
        if self.batch_size is not None and self.batch_size < 1:
            raise UsageError(f"batch-size must be >= 1, got {self.batch_size}")
        if self.timeout <= 0:
            raise UsageError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.device not in ("auto", "cpu", "gpu"):
            raise UsageError(f"unknown device {self.device!r}; allowed: auto, cpu, gpu")
        check_names("precision", self.precisions, PRECISIONS)


@dataclass(frozen=True)
class SuiteConfig:
    """A loaded ``benchmarks.toml``."""

    path: Path | None
    settings: SweepSettings
    workloads: dict[str, Workload]
    framework_options: dict[str, dict[str, Any]] = field(default_factory=dict)


def check_names(kind: str, given: tuple[str, ...] | list[str], allowed: Any) -> None:
    """One-line error for the first name not in ``allowed``."""
    allowed = list(allowed)
    for name in given:
        if name not in allowed:
            raise UsageError(f"unknown {kind} {name!r}; allowed: {', '.join(allowed)}")
    if not given:
        raise UsageError(f"no {kind} given; allowed: {', '.join(allowed)}")


def find_config(explicit: str | Path | None) -> Path:
    """``--config``, else ``./benchmarks.toml``, else the one beside the source tree."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise UsageError(f"config file {str(path)!r} does not exist")
        return path
    for candidate in (Path.cwd() / CONFIG_NAME, Path(__file__).resolve().parent.parent / CONFIG_NAME):
        if candidate.is_file():
            return candidate
    raise UsageError(f"no {CONFIG_NAME} in the current directory; pass --config PATH")


_SETTING_TYPES = {f.name: f.type for f in fields(SweepSettings)}


def _settings_from_table(table: dict[str, Any], path: Path) -> SweepSettings:
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in _SETTING_TYPES:
            raise UsageError(
                f"{path}: unknown key {key!r} in [defaults]; allowed: {', '.join(_SETTING_TYPES)}"
            )
        if name in ("frameworks", "workloads", "precisions"):
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise UsageError(f"{path}: [defaults] {key} must be a list of strings")
            value = tuple(value)
        elif name in ("steps", "epochs", "warmup", "repeats", "seed", "batch_size"):
            if not isinstance(value, int) or isinstance(value, bool):
                raise UsageError(f"{path}: [defaults] {key} must be an integer, got {value!r}")
        elif name in ("download", "synthetic_fallback"):
            if not isinstance(value, bool):
                raise UsageError(f"{path}: [defaults] {key} must be true or false, got {value!r}")
        elif name == "timeout":
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise UsageError(f"{path}: [defaults] {key} must be a number, got {value!r}")
            value = float(value)
        elif not isinstance(value, str):
            raise UsageError(f"{path}: [defaults] {key} must be a string, got {value!r}")
        values[name] = value
    return SweepSettings(**values)


def load_config(path: Path) -> SuiteConfig:
    """Parse and check a config file; every problem is a one-line :class:`UsageError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        if "(at end of document)" in message:  # tomllib gives no line number here
            message = message.replace("(at end of document)", f"(at end of document, line {len(text.splitlines())})")
        raise UsageError(f"{path}: malformed TOML: {message}") from None
    unknown = set(data) - {"defaults", "workloads", "frameworks"}
    if unknown:
        raise UsageError(
            f"{path}: unknown table {sorted(unknown)[0]!r}; allowed: defaults, workloads, frameworks"
        )
    settings = _settings_from_table(data.get("defaults", {}), path)
    workload_tables = data.get("workloads", {})
    if not workload_tables:
        raise UsageError(f"{path}: no [workloads.NAME] table declares a workload")
    workloads = {name: workload_from_config(name, table) for name, table in workload_tables.items()}
    options = data.get("frameworks", {})
    for name, table in options.items():
        if not isinstance(table, dict):
            raise UsageError(f"{path}: [frameworks.{name}] must be a table")
    return SuiteConfig(path, settings, workloads, dict(options))


def with_overrides(settings: SweepSettings, **overrides: Any) -> SweepSettings:
    """Settings with every non-None override applied."""
    return replace(settings, **{k: v for k, v in overrides.items() if v is not None})
