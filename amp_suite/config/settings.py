"""Every sweep setting, declared once: its type, built-in default, bounds, meaning and where it goes.

A setting is one field of :class:`SweepSettings`, declared with :func:`setting`.
From that one declaration come

* its TOML key in ``[defaults]``, ``[defaults.on_cpu]``/``[defaults.on_gpu]`` and
  ``[presets.NAME]`` (the field's name) and the schema checking it
  (:data:`SETTINGS_FIELDS`);
* its ``amp-suite run`` flag (the name with dashes; booleans get ``--x``/``--no-x``)
  with its help text (:func:`add_setting_flags`, :func:`overrides_from_flags`);
* the keyword of :func:`amp_suite.run` (any field name);
* the :class:`~amp_suite.records.RunSpec` field it fills in each cell
  (:data:`CELL_FIELDS`), checked against ``RunSpec`` by a test;
* whether ``amp-suite compare`` lists it when two sweeps differ in it
  (:data:`COMPARED_SETTINGS`);
* its row of the settings table in ``docs/usage.md`` (:func:`settings_table`,
  checked by a test; ``python -m amp_suite.config.settings`` prints it).

Adding a setting is one :func:`setting` line here plus the code that uses it
(and, for a per-cell setting, the ``RunSpec`` field the worker reads).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from amp_suite.errors import UsageError
from amp_suite.modes import LEARNING_RATE_RULES, MODES
from amp_suite.precision import PRECISIONS, REFERENCE_PRECISIONS
from amp_suite.schema import Field, FlagValueError, check_value, closest, comma_separated, counted, number_parser, shown

# How a setting's value is read from its command-line text, when not by its type.
Parse = Callable[[str], Any]


def parse_list(text: str) -> tuple[str, ...]:
    """``torch, keras`` -> ("torch", "keras"); an empty entry is a one-line error (:func:`comma_separated`)."""
    return comma_separated(text)


def parse_device_counts(text: str) -> tuple[int | str, ...]:
    """``1,2`` -> (1, 2); words stay words for the schema to judge (``all`` is allowed)."""
    return tuple(int(p) if p.isascii() and p.isdigit() else p for p in parse_list(text))  # "²".isdigit()


def parse_repeats(text: str) -> int | str:
    """``3`` -> 3; ``auto`` stays a word; any other word is a one-line error that says both are allowed."""
    text = text.strip()
    if text.lstrip("-").isascii() and text.lstrip("-").isdigit():
        return int(text)
    if text != "auto":
        raise FlagValueError(f"{shown(text)} is neither a whole number of repeats nor auto{closest(text, ('auto',))}")
    return text


def parse_seeds(text: str) -> tuple[int | str, ...]:
    """``0,1,2`` -> (0, 1, 2); ``5`` (one number, no comma) -> five seeds, (0, 1, 2, 3, 4); ``7,`` (one
    number and a comma) -> the one seed 7.

    Anything that is not a number stays as written for the schema to refuse,
    naming it; a count below 1 or above :data:`~amp_suite.schema.MAX_COUNT`
    is refused here, in one line.  Any other empty entry is refused as in
    every list (:func:`~amp_suite.schema.comma_separated`).
    """
    listed = text.rstrip()
    if listed.count(",") == 1 and listed.endswith(","):  # "7,": a list of one seed, not seven seeds
        listed = listed[:-1]
    values = tuple(int(p) if p.lstrip("-").isascii() and p.lstrip("-").isdigit() else p for p in parse_list(listed))
    if len(values) == 1 and "," not in text and isinstance(values[0], int):
        return counted("seeds", values[0], SEEDS_FIELD)
    return values


def setting(default: Any, schema: Field, help: str, *, cell: str | None = None, compared: bool = False,
            metavar: str | None = None, parse: Parse | None = None) -> Any:
    """Declare one sweep setting (a field of :class:`SweepSettings`).

    ``schema`` is its type and range; ``help`` one line for ``--help`` and the
    docs; ``cell`` the :class:`~amp_suite.records.RunSpec` field it fills in
    every cell (``None``: it shapes the sweep, not a cell); ``compared``
    whether ``amp-suite compare`` names it when two sweeps differ in it;
    ``metavar`` and ``parse`` how its flag reads (lists by default split on
    commas).
    """
    metadata = {"schema": schema, "help": help, "cell": cell, "compared": compared, "metavar": metavar,
                "parse": parse}
    return field(default=default, metadata=metadata)  # defaults are immutable (tuples, not lists)


DEVICES = ("auto", "cpu", "gpu")
# The seeds a sweep may run: non-negative 32-bit integers (every framework's seed takes them), or a count.
SEEDS_FIELD = Field(tuple, items=int, minimum=0, maximum=2**32 - 1, empty=True, count=True)


@dataclass(frozen=True)
class SweepSettings:
    """What a sweep runs: ``[defaults]`` in the catalog and ``benchmarks.toml``, a preset, then flags."""

    frameworks: tuple[str, ...] = setting(
        ("torch", "keras", "jax"), Field(tuple, names=True),
        "frameworks to run, comma-separated (e.g. torch,keras,jax)")
    pools: tuple[str, ...] = setting(
        (), Field(tuple),
        "device pools of the cluster to run every cell on, comma-separated ([pools.NAME]; with --executor "
        "ray or slurm)", metavar="NAMES")
    workloads: tuple[str, ...] = setting(
        ("mnist_cnn",), Field(tuple, names=True), "workloads from the catalog, comma-separated")
    precisions: tuple[str, ...] = setting(
        ("fp32", "amp_fp16", "amp_bf16"), Field(tuple, names=True),
        f"precisions, comma-separated: {', '.join(p for p in PRECISIONS if p not in REFERENCE_PRECISIONS)} "
        f"(and {', '.join(REFERENCE_PRECISIONS)}: a float64 reference for checking arithmetic, not an AMP mode)")
    modes: tuple[str, ...] = setting(
        (), Field(tuple),
        f"execution modes, comma-separated: {', '.join(MODES)} (unset: each framework's default mode); a mode a "
        "framework lacks makes its cells unsupported", compared=True, metavar="NAMES")
    dataset: str = setting(
        "synthetic", Field(str, names=True),
        "synthetic, mnist, cifar10 or text, for workloads that name none (given: for every workload)",
        cell="dataset", compared=True,
        metavar="NAME")
    train_split: str = setting(
        "train", Field(str), "training split, TFDS notation: train, test[:8000], train[:10%]",
        cell="train_split", compared=True, metavar="SPLIT")
    val_split: str = setting(
        "test", Field(str), "validation split, e.g. test or test[8000:]", cell="val_split", compared=True,
        metavar="SPLIT")
    data_dir: str | None = setting(
        None, Field(str, optional=True), "directory holding the official dataset files (or $AMP_SUITE_DATA)",
        cell="data_dir", metavar="DIR")
    download: bool = setting(True, Field(bool), "download missing dataset files (--no-download: never)",
                             cell="download")
    synthetic_fallback: bool = setting(
        False, Field(bool), "use synthetic data, and say so in the report, when a dataset cannot be had",
        cell="synthetic_fallback")
    steps: int = setting(50, Field(int, minimum=1, maximum=1_000_000),
                         "training steps per epoch (a workload's own steps win unless given here)",
                         cell="steps", compared=True)
    epochs: int = setting(1, Field(int, minimum=1, maximum=10_000), "epochs per cell", cell="epochs",
                          compared=True)
    warmup: int = setting(5, Field(int, minimum=0, maximum=1_000_000),
                          "steps of the first epoch kept out of steady-state figures", cell="warmup", compared=True)
    window_steps: int = setting(32, Field(int, minimum=1, maximum=1_000_000),
                                "steps dispatched back to back between two waits (and staged at once)",
                                cell="window_steps", compared=True)
    latency_steps: int = setting(10, Field(int, minimum=0, maximum=1_000_000),
                                 "last steps of each epoch run one by one, for per-step latency",
                                 cell="latency_steps")
    window_seconds: float = setting(0.0, Field(float, minimum=0, maximum=3600),
                                    "> 0: size each timed window to last this long (window_steps then ignored)",
                                    cell="window_seconds", compared=True)
    settle_warmup: bool = setting(False, Field(bool),
                                  "after warmup steps, keep warming up until the step time settles",
                                  cell="settle_warmup")
    min_timed_steps: int = setting(8, Field(int, minimum=1, maximum=1_000_000),
                                   "a cell with fewer timed steps is flagged in the report", cell="min_timed_steps")
    min_timed_seconds: float = setting(0.02, Field(float, minimum=0, maximum=24 * 3600),
                                       "a cell whose timed windows last less in all is flagged",
                                       cell="min_timed_seconds")
    extend_timing: bool = setting(False, Field(bool),
                                  "short of those bounds: time further training after validation instead",
                                  cell="extend_timing")
    batch_size: int | None = setting(None, Field(int, minimum=1, maximum=65_536, optional=True),
                                     "global batch size of every workload (unset: each workload's own)",
                                     cell="batch_size", compared=True)
    batch_sizes: tuple[int, ...] = setting(
        (), Field(tuple, items=int, minimum=1, maximum=65_536, empty=True),
        "global batch sizes to sweep, comma-separated, e.g. 128,512,2048 (unset: --batch-size, else each "
        "workload's own); a batch that does not fit is an oom row", compared=True, metavar="N,M",
        parse=parse_device_counts)
    learning_rate_rule: str = setting(
        "unchanged", Field(str, choices=tuple(LEARNING_RATE_RULES)),
        "how the learning rate follows the batch size: unchanged, or linear (times batch / the workload's "
        "own batch)", cell="learning_rate_rule", compared=True)
    repeats: int = setting(1, Field(int, minimum=1, maximum=1_000),
                           "runs of each cell, in fresh processes, interleaved; 2 or more give every speed-up a "
                           "95% interval; auto: start with 2 and add repeats (up to 5) until every interval "
                           "is within ±5%", compared=True, metavar="N|auto", parse=parse_repeats)
    timeout: float = setting(900.0, Field(float, above=0, maximum=7 * 24 * 3600),
                             "seconds per cell before its worker is killed", cell="timeout_s",
                             metavar="SECONDS")
    seed: int = setting(0, Field(int, minimum=0, maximum=2**32 - 1),
                        "seed of the initial weights, the data and the batch order (one seed; see seeds)",
                        cell="seed", compared=True)
    seeds: tuple[int, ...] = setting(
        (), SEEDS_FIELD,
        "seeds to sweep, a sweep axis like repeats: a list (0,1,2; 7, is the one seed 7) or a count (5: seeds 0 "
        "to 4); each seed changes the initial weights and the data order, the same in every framework; unset: "
        "the one seed",
        compared=True, metavar="N|A,B", parse=parse_seeds)
    curve_every: int | None = setting(
        None, Field(int, minimum=0, maximum=1_000_000, optional=True),
        "record validation loss and accuracy every N training steps, for learning curves (0: at each epoch's "
        "end; unset: none); evaluated between phases, outside the timed windows", cell="curve_every",
        compared=True, metavar="STEPS")
    equivalence_margin: float = setting(
        0.5, Field(float, above=0, maximum=100),
        "percentage points of validation accuracy within which an AMP precision counts as equivalent to fp32 "
        "(over seeds, a 95% interval)", compared=True, metavar="POINTS")
    device: str = setting("auto", Field(str, choices=DEVICES), "auto, cpu or gpu", cell="device", compared=True)
    out: str = setting("amp-suite-results", Field(str), "output directory", metavar="DIR")
    devices: tuple[int | str, ...] = setting(
        (1,), Field(tuple, items=int, minimum=1, maximum=4096, choices=("all",)),
        "device counts per cell, comma-separated, e.g. 1,2 (data parallel: the global batch is split over "
        "them); all: every device the framework sees", metavar="N,M|all", parse=parse_device_counts)
    sync_batch_norm: bool = setting(False, Field(bool),
                                    "BatchNorm statistics over all replicas, where the framework has it",
                                    cell="sync_batch_norm")
    nnodes: int = setting(1, Field(int, minimum=1, maximum=4096),
                          "machines each cell runs on (start amp-suite once per machine)", cell="nnodes")
    node_rank: int = setting(0, Field(int, minimum=0, maximum=4095),
                             "this machine's rank among nnodes (0 is the coordinator)", cell="node_rank")
    coordinator: str | None = setting(None, Field(str, optional=True),
                                      "HOST:PORT of node 0, where a cell's processes meet", cell="coordinator",
                                      metavar="HOST:PORT")
    target_accuracy: float | None = setting(
        None, Field(float, above=0, maximum=1, optional=True),
        "validation accuracy (e.g. 0.97) to reach: report the time, steps and epochs to reach it; "
        "overrides every workload's target_accuracy", metavar="FRACTION")

    def __post_init__(self) -> None:
        if isinstance(self.seeds, int) and not isinstance(self.seeds, bool):  # amp_suite.run(seeds=5): a count
            object.__setattr__(self, "seeds", check_value("seeds", self.seeds, SEEDS_FIELD))

    @property
    def seed_list(self) -> tuple[int, ...]:
        """The seeds every cell runs with: ``seeds`` where given, else the one ``seed``."""
        return tuple(self.seeds) or (self.seed,)

    def check(self) -> None:
        """Reject values that cannot make a meaningful sweep (exit 2)."""
        if self.device not in DEVICES:
            raise UsageError(f"unknown device {shown(self.device)}; allowed: {', '.join(DEVICES)}")
        for name, schema in SETTINGS_FIELDS.items():
            check_value(name, getattr(self, name), schema)
        if self.warmup >= self.steps:
            raise UsageError(
                f"warmup ({self.warmup}) must be smaller than steps per epoch ({self.steps}): "
                "no step would be timed"
            )
        check_names("precision", self.precisions, PRECISIONS)
        if self.modes:
            check_names("mode", self.modes, MODES)

        if self.node_rank >= self.nnodes:
            raise UsageError(f"node_rank ({self.node_rank}) must be smaller than nnodes ({self.nnodes})")
        if self.nnodes > 1:
            if not self.coordinator:
                raise UsageError(f"nnodes = {self.nnodes} needs a coordinator HOST:PORT (node 0's address)")
            check_coordinator(self.coordinator)
            for count in self.devices:
                if count == "all" or not isinstance(count, int) or count % self.nnodes:
                    raise UsageError(f"devices {count} do not split evenly over {self.nnodes} nodes; on several "
                                     "nodes give device counts that are multiples of nnodes")


def check_names(kind: str, given: tuple[str, ...] | list[str], allowed: Any) -> None:
    """One-line error for the first name not in ``allowed``."""
    allowed = list(allowed)
    for name in given:
        if name not in allowed:
            raise UsageError(f"unknown {kind} {shown(name)}; allowed: {', '.join(allowed)}"
                             + (closest(name, allowed) if isinstance(name, str) else ""))
    if not given:
        raise UsageError(f"no {kind} given; allowed: {', '.join(allowed)}")


def check_coordinator(text: str) -> tuple[str, int]:
    """``HOST:PORT`` split and checked (one-line error)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise UsageError(f"coordinator must be HOST:PORT with a port from 1 to 65535, got {shown(text)}")
    return host, int(port)


# --- what is derived from the declarations -------------------------------------------------------

# The type and range of every sweep setting, in [defaults], presets, flags and the API.
SETTINGS_FIELDS: dict[str, Field] = {f.name: f.metadata["schema"] for f in fields(SweepSettings)}
# Setting -> the RunSpec field it fills in every cell.
CELL_FIELDS: dict[str, str] = {f.name: f.metadata["cell"] for f in fields(SweepSettings) if f.metadata["cell"]}
# Settings `amp-suite compare` names when two sweeps ran with different values.
COMPARED_SETTINGS: tuple[str, ...] = tuple(f.name for f in fields(SweepSettings) if f.metadata["compared"])


def flag_of(name: str) -> str:
    """``window_steps`` -> ``--window-steps``."""
    return "--" + name.replace("_", "-")


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting on ``parser``; a flag not given leaves its setting to the config (None)."""
    for declared in fields(SweepSettings):
        meta, schema = declared.metadata, declared.metadata["schema"]
        kwargs: dict[str, Any] = {"dest": declared.name, "default": None,
                                  "help": meta["help"].replace("%", "%%")}
        if schema.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = meta["parse"] or (parse_list if schema.kind is tuple else
                                               number_parser(schema) if schema.kind in (int, float) else schema.kind)
            kwargs["metavar"] = meta["metavar"] or _metavar(declared.name, schema)
        parser.add_argument(flag_of(declared.name), **kwargs)


def _metavar(name: str, schema: Field) -> str:
    if schema.kind is tuple:
        return "A,B"
    if schema.choices:
        return "|".join(schema.choices)
    return {int: "N", float: "X"}.get(schema.kind, name.upper())


def overrides_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """Every setting's flag value (None where not given), keyed by setting name."""
    return {declared.name: getattr(args, declared.name) for declared in fields(SweepSettings)}


def describe(schema: Field) -> str:
    """A setting's values in words, for the docs table."""
    if schema.kind is tuple:
        text = ("list of names" if schema.names else
                f"list of integers {_range(schema)}" + "".join(f" or {c!r}" for c in schema.choices)
                + (", or a count N (0 to N-1)" if schema.count else "")
                if schema.items is int else "list of strings")
    elif schema.kind is bool:
        text = "true / false"
    elif schema.kind is str:
        text = " / ".join(schema.choices) if schema.choices else ("name" if schema.names else "string")
    else:
        text = f"{'integer' if schema.kind is int else 'number'} {_range(schema)}"
    return text + (" or unset" if schema.optional else "")


def _range(schema: Field) -> str:
    def bound(value: float) -> str:
        return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"

    low = f"> {bound(schema.above)}" if schema.above is not None else (
        f"{bound(schema.minimum)}" if schema.minimum is not None else "")
    high = bound(schema.maximum) if schema.maximum is not None else ""
    if schema.above is not None:
        return f"{low}, ≤ {high}" if high else low
    return f"{low}–{high}" if low and high else low or (f"≤ {high}" if high else "")


def _default_text(value: Any) -> str:
    if value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def settings_table() -> str:
    """The markdown table of every setting (``docs/usage.md`` holds it verbatim)."""
    rows = ["| setting (TOML key) | flag | values | built-in default | what it sets |",
            "|---|---|---|---|---|"]
    for declared in fields(SweepSettings):
        meta = declared.metadata
        flag = flag_of(declared.name)
        if meta["schema"].kind is bool:
            flag = f"{flag} / --no-{flag[2:]}"
        default = declared.default if declared.default is not MISSING else None
        meaning = " ".join(meta["help"].split()).replace("|", "\\|")
        rows.append(f"| `{declared.name}` | `{flag}` | {describe(meta['schema'])} | `{_default_text(default)}` "
                    f"| {meaning} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.stdout.write(settings_table() + "\n")
