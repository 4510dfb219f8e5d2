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
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from amp_suite.config.cost import COST_FIELDS
from amp_suite.config.environments import EnvironmentSpec, environment_from_table
from amp_suite.config.executors import ExecutorSettings, PoolSpec, executor_from_table, pool_from_table
from amp_suite.config.settings import SETTINGS_FIELDS, SweepSettings, check_names
from amp_suite.errors import UsageError
from amp_suite.precision import LOSS_SCALINGS, PRECISIONS
from amp_suite.records import FrameworkInfo, Workload
from amp_suite.schema import Field, check_name, check_table, closest, shown
from amp_suite.workloads.workload import workload_from_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, published as tomli
    import tomli as tomllib

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


# Options every framework plugin reads (amp_suite.plugins.kit: loss scaling of amp_fp16, layers kept in float32;
# amp_suite.config.precision_options checks them against the sweep's precisions and workloads).
COMMON_FRAMEWORK_OPTIONS: dict[str, Field] = {
    "initial_loss_scale": Field(float, above=0, maximum=2.0**64),
    "loss_scale_growth_interval": Field(int, minimum=1, maximum=1_000_000_000),
    "loss_scaling": Field(str, choices=tuple(LOSS_SCALINGS)),
    "keep_fp32": Field(tuple, names=True),
}
# The frameworks of the packaged plugins: their tables (the catalog has some) are accepted on a
# machine where the plugin is not loaded, so one config serves every machine.
BUILT_IN_FRAMEWORKS = ("torch", "keras", "keras@jax", "keras@torch", "jax")


def framework_option_fields(framework: FrameworkInfo) -> dict[str, Field]:
    """The options ``[frameworks.NAME]`` may set: those the plugin declares, then the common ones."""
    return {**{name: option.schema for name, option in framework.options.items()}, **COMMON_FRAMEWORK_OPTIONS}


def framework_options_table(frameworks: dict[str, FrameworkInfo]) -> str:
    """The markdown table of every framework option (``docs/usage.md`` holds it for the built-in plugins)."""
    from amp_suite.config.settings import describe

    rows = ["| framework | option | values | default | what it sets |", "|---|---|---|---|---|"]
    for name, info in frameworks.items():
        for option, spec in info.options.items():
            rows.append(f"| `{name}` | `{option}` | {describe(spec.schema)} | `{_toml_text(spec.default)}` | "
                        f"{' '.join(spec.help.split())} |")
    return "\n".join(rows)


def _toml_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


# --- presets and published figures --------------------------------------------

# Keys of a [presets.NAME] table besides the sweep settings it fills.
PRESET_FIELDS: dict[str, Field] = {
    "description": Field(str),  # one line, shown by `amp-suite list`
    "published": Field(str, names=True),  # the [published.NAME] table of the article's figures
    "notes": Field(tuple),  # how the preset differs from the article on every machine
    "fit_devices": Field(bool),  # device counts above what the machine offers become the most it offers
}
# Settings a preset may fill: every [defaults] key except those that name one machine among several.
PRESET_SETTINGS = tuple(name for name in SETTINGS_FIELDS if name not in ("nnodes", "node_rank", "coordinator"))

# What a published figure measures, as a report names it.
PUBLISHED_METRICS = {
    "epoch_time": "time per epoch",
    "total_time": "training time",
    "peak_memory": "peak memory",
    "val_accuracy": "validation accuracy",
}
# Keys of a [published.NAME] table (its figures apart).
PUBLISHED_FIELDS: dict[str, Field] = {
    "article": Field(str),
    "framework": Field(str),
    "hardware": Field(str),
    "setup": Field(str),
    "context": Field(str),
    "precision": Field(str, names=True),  # the precision here that stands for the article's AMP
}
# Keys of one [[published.NAME.figures]] entry.
FIGURE_FIELDS: dict[str, Field] = {
    "workload": Field(str, names=True),
    "metric": Field(str, choices=tuple(PUBLISHED_METRICS)),
    "unit": Field(str),
    "baseline": Field(float, minimum=0),
    "compared": Field(float, minimum=0),
    "ratio_min": Field(float, above=0),
    "ratio_max": Field(float, above=0),
    "compare": Field(str, choices=("precision", "devices")),
    "devices": Field(int, minimum=2, maximum=4096),
    "precision": Field(str, names=True),
    "where": Field(str),
    "hardware": Field(str),
    "note": Field(str),
}


@dataclass(frozen=True)
class Preset:
    """A ``[presets.NAME]`` table: the sweep settings it fills and what it reproduces."""

    name: str
    description: str
    settings: dict[str, Any]  # checked SweepSettings fields
    published: str | None = None  # the [published.NAME] table of its article's figures
    notes: tuple[str, ...] = ()
    fit_devices: bool = False


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


# Deepest nesting of arrays and inline tables a config file may have.
MAX_TOML_DEPTH = 32


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


def _skip_string(text: str, start: int) -> int:
    """The index just past the TOML string starting at ``text[start]`` (a quote)."""
    quote = text[start]
    if text.startswith(quote * 3, start):
        end = text.find(quote * 3, start + 3)
        while end != -1 and quote == '"' and _escaped(text, end):
            end = text.find(quote * 3, end + 1)
        return len(text) if end == -1 else end + 3
    index = start + 1
    while index < len(text) and text[index] not in (quote, "\n"):
        index += 2 if quote == '"' and text[index] == "\\" else 1
    return index + 1


def _escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - backslashes - 1 >= 0 and text[index - backslashes - 1] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def check_toml_depth(text: str, path: Path) -> None:
    """A one-line :class:`UsageError` naming the line where arrays and inline tables nest past :data:`MAX_TOML_DEPTH`.

    A linear scan (strings and comments skipped), so a file nested thousands
    of levels deep is refused before the parser recurses into it.
    """
    depth = 0
    index = 0
    while index < len(text):
        char = text[index]
        if char in "\"'":
            index = _skip_string(text, index)
            continue
        if char == "#":
            newline = text.find("\n", index)
            index = len(text) if newline == -1 else newline
            continue
        if char in "[{":
            depth += 1
            if depth > MAX_TOML_DEPTH:
                line = text.count("\n", 0, index) + 1
                raise UsageError(f"{path}: line {line}: arrays and tables nest more than {MAX_TOML_DEPTH} "
                                 "levels deep")
        elif char in "]}":
            depth = max(0, depth - 1)
        index += 1


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not a UTF-8 text file (byte {exc.start}); is it really a TOML file?") from None
    check_toml_depth(text, path)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise UsageError(f"{path}: nested too deeply to read") from None
    except tomllib.TOMLDecodeError as exc:
        message = " ".join(str(exc).split())
        if "(at end of document)" in message:  # tomllib gives no line number here
            message = message.replace("(at end of document)", f"(at end of document, line {len(text.splitlines())})")
        hint = ("; the file starts with a UTF-8 byte-order mark (BOM), which TOML does not allow: save it as "
                "UTF-8 without BOM" if text.startswith("\ufeff") else "")
        raise UsageError(f"{path}: malformed TOML: {message}{hint}") from None


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


def _workload(name: Any, table: Any, path: Path) -> Workload:
    check_name("workload", name)
    if not isinstance(table, dict):
        raise UsageError(f"{path}: workloads.{name} must be a table ([workloads.{name}]), got {shown(table)}")
    try:
        return workload_from_config(name, table)
    except UsageError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _preset(name: str, table: Any, path: Path) -> Preset:
    """A checked ``[presets.NAME]`` table."""
    check_name("preset", name)
    where = f"{path}: [presets.{name}]"
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table, got {shown(table)}")
    spelled: dict[str, Any] = {}
    for key, value in table.items():
        if key.replace("-", "_") in spelled:
            raise UsageError(f"{where}: {key.replace('-', '_')} is given twice")
        spelled[key.replace("-", "_")] = value
    values = check_table(spelled, {**PRESET_FIELDS, **{k: SETTINGS_FIELDS[k] for k in PRESET_SETTINGS}}, where)
    if "description" not in values:
        raise UsageError(f"{where}: description is missing (the one line `amp-suite list` shows)")
    try:
        check_names("precision", values.get("precisions", ("fp32",)), PRECISIONS)
        if values.get("device", "auto") not in ("auto", "cpu", "gpu"):
            raise UsageError(f"unknown device {shown(values['device'])}; allowed: auto, cpu, gpu")
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    settings = {key: value for key, value in values.items() if key in PRESET_SETTINGS}
    return Preset(name, " ".join(values["description"].split()), settings, values.get("published"),
                  tuple(values.get("notes", ())), values.get("fit_devices", False))


def _published(name: str, table: Any, path: Path) -> dict[str, Any]:
    """A checked ``[published.NAME]`` table: the article, its hardware and its figures."""
    check_name("published figures", name)
    where = f"{path}: [published.{name}]"
    if not isinstance(table, dict):
        raise UsageError(f"{where} must be a table, got {shown(table)}")
    figures = table.get("figures")
    values = check_table({k: v for k, v in table.items() if k != "figures"}, PUBLISHED_FIELDS, where)
    for required in ("article", "hardware"):
        if required not in values:
            raise UsageError(f"{where}: {required} is missing")
    if not isinstance(figures, list) or not figures:
        raise UsageError(f"{where}: figures must be a list of tables ([[published.{name}.figures]]), "
                         f"got {shown(figures)}")
    values["figures"] = [_figure(figure, f"{where} figure {index + 1}") for index, figure in enumerate(figures)]
    return values


def _figure(table: Any, where: str) -> dict[str, Any]:
    figure = check_table(table, FIGURE_FIELDS, where)
    for required in ("workload", "metric", "where"):
        if required not in figure:
            raise UsageError(f"{where}: {required} is missing")
    ranged = "ratio_min" in figure or "ratio_max" in figure
    if ranged and not ("ratio_min" in figure and "ratio_max" in figure):
        raise UsageError(f"{where}: ratio_min and ratio_max come together")
    if ranged and figure["ratio_min"] > figure["ratio_max"]:
        raise UsageError(f"{where}: ratio_min ({figure['ratio_min']}) is above ratio_max ({figure['ratio_max']})")
    if not ranged and "compared" not in figure:
        raise UsageError(f"{where}: give compared (and baseline), or ratio_min and ratio_max")
    if figure.get("compare") == "devices" and not ("devices" in figure and "baseline" in figure):
        raise UsageError(f"{where}: compare = \"devices\" needs devices (the count published) and baseline")
    return figure


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
