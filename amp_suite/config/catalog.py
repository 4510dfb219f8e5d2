"""Reads and checks the catalog and ``benchmarks.toml``: defaults, workloads, presets, published figures.

The catalog ships inside the package (``amp_suite/catalog/*.toml``): the sweep
defaults, framework options, workloads, presets and the articles' published
figures, in several files merged into one; a name defined in two of them is an
error.  A ``benchmarks.toml`` in the working directory (or ``--config FILE``)
extends the catalog: each table it defines (``[defaults]``, ``[cost]``,
``[workloads.NAME]``, ``[frameworks.NAME]``, ``[presets.NAME]``,
``[published.NAME]``, ``[environments."NAME"]``) replaces the packaged table of the same name as a whole.

Every value is checked before the first cell runs, against one typed schema
(:data:`~amp_suite.config.settings.SETTINGS_FIELDS` for ``[defaults]``, the ``run`` flags and presets,
:func:`framework_option_fields` for ``[frameworks.NAME]``); unknown keys are
refused with the closest valid name.  Each problem is one line naming its
file, exit 2.  A framework's options are declared by its plugin
(``FrameworkInfo.options``), so ``[frameworks.NAME]`` tables are checked once
the plugins are loaded: :func:`check_framework_tables`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from amp_suite.config.catalog_entries import (  # noqa: F401 - re-exported
    FIGURE_FIELDS,
    PRESET_FIELDS,
    PRESET_SETTINGS,
    PUBLISHED_FIELDS,
    PUBLISHED_METRICS,
    Preset,
    _preset,
    _published,
    _workload,
)
from amp_suite.config.cost import COST_FIELDS
from amp_suite.config.environments import EnvironmentSpec, environment_from_table
from amp_suite.config.executors import ExecutorSettings, PoolSpec, executor_from_table, pool_from_table
from amp_suite.config.framework_tables import (  # noqa: F401 - re-exported
    BUILT_IN_FRAMEWORKS,
    COMMON_FRAMEWORK_OPTIONS,
    framework_option_fields,
    framework_options_table,
)
from amp_suite.config.settings import SETTINGS_FIELDS, SweepSettings, check_names
from amp_suite.config.toml_files import MAX_TOML_DEPTH, _read_toml, check_toml_depth  # noqa: F401 - re-exported
from amp_suite.errors import UsageError
from amp_suite.precision import PRECISIONS
from amp_suite.records import FrameworkInfo, Workload
from amp_suite.schema import check_name, check_table, closest, shown

CONFIG_NAME = "benchmarks.toml"
# The catalog shipped inside the package: every *.toml here, these first, then the others by name.
CATALOG_DIR = Path(__file__).resolve().parent.parent / "catalog"
CATALOG_FIRST = ("defaults.toml", "workloads.toml")
TABLES = ("defaults", "workloads", "frameworks", "cost", "presets", "published", "environments", "pools",
          "executor")
# Tables of named tables ([workloads.NAME]); the others are one table each.
NAMED_TABLES = ("workloads", "frameworks", "presets", "published", "environments", "pools")
# How the sources of tables are shown: "package: workloads.toml".
PACKAGE = "package"


def check_batch_split(workload: str, batch_size: int, devices: int) -> None:
    """The global batch must split evenly over the devices (one-line error)."""
    if batch_size % devices:
        raise UsageError(f"batch size {batch_size} of workload {workload!r} does not split evenly over "
                         f"{devices} devices; choose a --batch-size divisible by {devices}")


# --- presets and published figures --------------------------------------------


@dataclass(frozen=True)
class SuiteConfig:
    """The packaged catalog, extended by a ``benchmarks.toml``.

    ``path`` is that file (``None``: the catalog alone).  ``sources`` maps
    every table (``"defaults"``, ``"workloads.mnist_cnn"``) to the file that
    defines it; ``replaced`` holds the tables the file took over from the
    catalog.  Tables of the file come first in every mapping.
    """

    path: Path | None
    settings: SweepSettings
    workloads: dict[str, Workload]
    framework_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)  # the checked [cost] table
    presets: dict[str, Preset] = field(default_factory=dict)
    published: dict[str, dict[str, Any]] = field(default_factory=dict)  # checked [published.NAME] tables
    sources: dict[str, Path] = field(default_factory=dict)
    replaced: frozenset[str] = frozenset()
    # [defaults.on_gpu] / [defaults.on_cpu]: settings that replace [defaults]' own on that device kind
    device_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    # [environments."NAME"]: the Python environments frameworks may run in (amp_suite.envs)
    environments: dict[str, EnvironmentSpec] = field(default_factory=dict)
    # [pools.NAME] and [executor]: where cells are scheduled (amp_suite.sweep.executors)
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    # The keys the [defaults] table in force sets (a key it leaves out takes the built-in value, not the catalog's)
    defaults_keys: frozenset[str] = frozenset()
    # The dataset of the packaged [defaults], also where a file's [defaults] replaced it
    packaged_dataset: str = ""

    def source(self, key: str) -> str:
        """Where table ``key`` comes from: ``package: workloads.toml``, or the file's path."""
        path = self.sources.get(key)
        if path is None:
            return "built in"
        if is_packaged(path):
            return f"{PACKAGE}: {path.name}"
        return f"{path} (replaces the packaged one)" if key in self.replaced else str(path)


def is_packaged(path: Path) -> bool:
    """Whether ``path`` is a file of the catalog shipped in the package."""
    return path.parent == CATALOG_DIR


def check_framework_tables(config: SuiteConfig, frameworks: Mapping[str, FrameworkInfo],
                           absent: Iterable[str] = ()) -> SuiteConfig:
    """``config`` with every ``[frameworks.NAME]`` table checked against the options its plugin declares.

    ``frameworks`` are the loaded plugins' descriptions (``PluginHost.frameworks()``).
    A table of a framework no plugin provides is refused, except for the
    built-in frameworks and the names in ``absent`` (plugins disabled or
    failed to load): those are kept as written, so one config serves every
    machine.  Each problem is one line naming the file, the table, the key
    and the closest valid name.
    """
    known = list(dict.fromkeys([*frameworks, *BUILT_IN_FRAMEWORKS, *absent]))
    checked: dict[str, dict[str, Any]] = {}
    for name, table in config.framework_options.items():
        where = config.sources.get(f"frameworks.{name}", config.path)
        if name not in known:
            raise UsageError(f"{where}: [frameworks.{name}] names no known framework"
                             f"{closest(name, known)}; known: {', '.join(known)}")
        info = frameworks.get(name)
        checked[name] = (table if info is None else
                         check_table(table, framework_option_fields(info), f"{where}: [frameworks.{name}]"))
    return replace(config, framework_options=checked)


def find_config(explicit: str | Path | None) -> Path | None:
    """``--config``, else ``./benchmarks.toml``; ``None``: the packaged catalog alone."""
    if explicit is not None:
        if not str(explicit).strip() or "\0" in str(explicit):
            raise UsageError(f"config file name {shown(str(explicit))} is empty or holds a NUL character")
        path = Path(explicit)
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise UsageError(f"config file {str(path)!r} does not exist") from None
        except (OSError, ValueError) as exc:  # an over-long name, a link loop, an unreadable parent
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise UsageError(f"cannot open config file {str(path)!r}: {reason}") from None
        if not stat.S_ISREG(mode):
            raise UsageError(f"config file {str(path)!r} is not a regular file")
        return path
    candidate = Path.cwd() / CONFIG_NAME
    try:
        mode = os.stat(candidate).st_mode
    except FileNotFoundError:
        if os.path.lexists(candidate):  # a link to nothing: the user meant a config, and would get the catalog
            raise UsageError(f"{str(candidate)!r} is a broken symbolic link; fix or remove it, or pass --config "
                             "FILE") from None
        return None
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot open config file {str(candidate)!r}: {reason}") from None
    if not stat.S_ISREG(mode):
        from amp_suite.safe_files import describe_mode

        raise UsageError(f"{str(candidate)!r} is {describe_mode(mode)}, not a regular file; amp-suite reads "
                         "./benchmarks.toml only as a file: remove or rename it, or pass --config FILE")
    return candidate


# Sub-tables of [defaults] whose values replace [defaults]' own when the sweep runs on that device kind.
DEVICE_KIND_TABLES = {"on_gpu": "gpu", "on_cpu": "cpu"}


def _device_kind_defaults(table: dict[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The checked ``[defaults.on_gpu]`` and ``[defaults.on_cpu]`` tables, by device kind."""
    found: dict[str, dict[str, Any]] = {}
    for name, kind in DEVICE_KIND_TABLES.items():
        sub = table.get(name)
        if sub is None:
            continue
        where = f"{path}: [defaults.{name}]"
        if not isinstance(sub, dict):
            raise UsageError(f"{where} must be a table, got {shown(sub)}")
        values = check_table({key.replace("-", "_"): value for key, value in sub.items()}, SETTINGS_FIELDS, where)
        if "device" in values:
            raise UsageError(f"{where}: device cannot depend on the device kind; set it in [defaults]")
        if "precisions" in values:
            check_names("precision", values["precisions"], PRECISIONS)
        found[kind] = values
    return found


def _settings_from_table(table: Any, path: Path) -> SweepSettings:
    where = f"{path}: [defaults]"
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table, got {shown(table)}")
    spelled: dict[str, Any] = {}
    for key, value in table.items():
        if key in DEVICE_KIND_TABLES:
            continue
        name = key.replace("-", "_")
        if name in spelled:
            raise UsageError(f"{where}: {name} is given twice")
        spelled[name] = value
    return SweepSettings(**check_table(spelled, SETTINGS_FIELDS, where))


def _tables_of(path: Path) -> dict[str, Any]:
    """The tables of one file by key (``"defaults"``, ``"workloads.NAME"``), in file order."""
    data = _read_toml(path)
    unknown = [name for name in data if name not in TABLES]
    if unknown:
        raise UsageError(
            f"{path}: unknown table {shown(unknown[0])}{closest(unknown[0], TABLES)}; allowed: {', '.join(TABLES)}"
        )
    tables: dict[str, Any] = {}
    for kind, value in data.items():
        if kind not in NAMED_TABLES:
            tables[kind] = value
            continue
        if not isinstance(value, dict):
            raise UsageError(f"{path}: {kind} must be tables [{kind}.NAME], got {shown(value)}")
        for name, table in value.items():
            tables[f"{kind}.{name}"] = table
    return tables


def catalog_files() -> list[Path]:
    """The catalog's files in the order they are read."""
    found = sorted(CATALOG_DIR.glob("*.toml")) if CATALOG_DIR.is_dir() else []
    first = [CATALOG_DIR / name for name in CATALOG_FIRST if CATALOG_DIR / name in found]
    return first + [path for path in found if path not in first]


def _catalog_tables() -> tuple[dict[str, Any], dict[str, Path]]:
    """Every table of the packaged catalog, and the file of each; a table defined twice is an error."""
    tables: dict[str, Any] = {}
    sources: dict[str, Path] = {}
    for path in catalog_files():
        for key, table in _tables_of(path).items():
            if key in sources:
                raise UsageError(f"{path}: [{key}] is already defined in {sources[key]}; the packaged "
                                 "catalog defines each name once")
            tables[key], sources[key] = table, path
    return tables, sources


def load_config(path: Path | None) -> SuiteConfig:
    """The packaged catalog extended by ``path`` (when given), checked; every problem is one line."""
    tables, sources = _catalog_tables()
    packaged = tables.get("defaults")
    packaged_dataset = str(packaged.get("dataset", SweepSettings().dataset)) if isinstance(packaged, dict) else ""
    replaced: frozenset[str] = frozenset()
    if path is not None:
        local = _tables_of(path)
        replaced = frozenset(key for key in local if key in tables)
        tables = {**local, **{key: table for key, table in tables.items() if key not in local}}
        sources = {**{key: path for key in local}, **{key: sources[key] for key in tables if key not in local}}

    def named(kind: str) -> list[tuple[str, Any, Path]]:
        prefix = f"{kind}."
        return [(key[len(prefix):], table, sources[key]) for key, table in tables.items() if key.startswith(prefix)]

    here = path if path is not None else CATALOG_DIR
    settings = (_settings_from_table(tables["defaults"], sources["defaults"]) if "defaults" in tables
                else SweepSettings())
    by_kind = (_device_kind_defaults(tables["defaults"], sources["defaults"])
               if isinstance(tables.get("defaults"), dict) else {})
    workloads = {name: _workload(name, table, where) for name, table, where in named("workloads")}
    if not workloads:
        raise UsageError(f"{here}: no [workloads.NAME] table declares a workload")
    options = {}
    for name, table, where in named("frameworks"):  # the keys are checked with the plugins: check_framework_tables
        check_name("framework", name)
        if not isinstance(table, dict):
            raise UsageError(f"{where}: [frameworks.{name}] must be a table, got {shown(table)}")
        options[name] = dict(table)
    cost = check_table(tables.get("cost", {}), COST_FIELDS, f"{sources.get('cost', here)}: [cost]")
    published = {name: _published(name, table, where) for name, table, where in named("published")}
    presets = {}
    for name, table, where in named("presets"):
        preset = _preset(name, table, where)
        if preset.published is not None and preset.published not in published:
            raise UsageError(f"{where}: [presets.{name}] names published figures {preset.published!r} that no "
                             f"[published.NAME] table declares{closest(preset.published, list(published))}")
        presets[name] = preset
    environments = {name: environment_from_table(name, table, str(where))
                    for name, table, where in named("environments")}
    pools = {name: pool_from_table(name, table, str(where)) for name, table, where in named("pools")}
    executor = (executor_from_table(tables["executor"], str(sources["executor"])) if "executor" in tables
                else ExecutorSettings())
    defaults_keys = frozenset(tables["defaults"]) if isinstance(tables.get("defaults"), dict) else frozenset()
    return SuiteConfig(path, settings, workloads, options, cost, presets, published, sources, replaced, by_kind,
                       environments, pools, executor, defaults_keys, packaged_dataset)


def for_device_kind(config: SuiteConfig, kind: str) -> SuiteConfig:
    """``config`` with ``[defaults.on_KIND]`` applied over ``[defaults]`` (presets and flags still win)."""
    values = config.device_defaults.get(kind)
    if not values:
        return config
    return replace(config, settings=replace(config.settings, **values))


def with_overrides(settings: SweepSettings, **overrides: Any) -> SweepSettings:
    """Settings with every non-None override applied."""
    return replace(settings, **{k: v for k, v in overrides.items() if v is not None})
