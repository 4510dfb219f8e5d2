"""Each sweep setting is declared once (amp_suite/config/settings.py); the schema, the `run` flags, the
cells' RunSpec, `compare` and the docs table all follow from that declaration."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from amp_suite.cli import build_parser, main
from amp_suite.config.settings import (
    CELL_FIELDS,
    SETTINGS_FIELDS,
    SweepSettings,
    flag_of,
    overrides_from_flags,
    settings_table,
)
from amp_suite.records import RunSpec

REPO = Path(__file__).resolve().parents[1]
# RunSpec fields that name the cell rather than carry a setting: set by the sweep's plan.
CELL_IDENTITY = {"framework", "workload", "precision", "repeat", "options", "plugin_modules", "devices", "launcher",
                 "launcher_program",
                 "variant", "environment", "python",  # placed per framework name (amp_suite.envs)
                 "pool",  # one cell per pool of --pools (amp_suite.sweep.executors)
                 "mode", "batch_axis",  # one cell per mode of --modes and batch size of --batch-sizes
                 "seed_axis"}  # one cell per seed of --seeds


def run_args(*argv: str):
    return build_parser().parse_args(["run", *argv])


def test_the_docs_table_is_the_one_the_declarations_give():
    text = (REPO / "docs" / "usage.md").read_text()
    found = re.search(r"<!-- settings table[^>]*-->\n(.*?)\n<!-- end of settings table -->", text, flags=re.S)
    assert found, "docs/usage.md has no generated settings table"
    assert found.group(1) == settings_table(), "docs/usage.md's settings table is stale: " \
                                               "regenerate it with `python -m amp_suite.config.settings`"
    assert all(f"| `{name}` |" in found.group(1) for name in SETTINGS_FIELDS)


def test_every_setting_has_a_run_flag_that_reaches_the_sweep_unchanged():
    parser_flags = {opt for action in build_parser()._subparsers._group_actions[0].choices["run"]._actions
                    for opt in action.option_strings}
    assert {flag_of(name) for name in SETTINGS_FIELDS} <= parser_flags
    overrides = overrides_from_flags(run_args(
        "--frameworks", "torch, jax", "--min-timed-steps", "3", "--no-download", "--extend-timing",
        "--devices", "1,2", "--repeats", "auto", "--timeout", "30", "--window-seconds", "0.5"))
    assert set(overrides) == set(SETTINGS_FIELDS)
    assert overrides["frameworks"] == ("torch", "jax")
    assert overrides["min_timed_steps"] == 3 and overrides["timeout"] == 30.0 and overrides["window_seconds"] == 0.5
    assert overrides["download"] is False and overrides["extend_timing"] is True
    assert overrides["devices"] == (1, 2) and overrides["repeats"] == "auto"
    assert overrides["steps"] is None and overrides["sync_batch_norm"] is None  # not given: the config decides


@pytest.mark.parametrize(("argv", "message"), [
    (["--steps", "many"], "'many' is not a whole number (allowed: 1 to 1000000)"),
    (["--window-seconds", "soon"], "argument --window-seconds: 'soon' is not a number (allowed: 0 to 3600)"),
])
def test_a_malformed_flag_is_one_line_exit_2(argv, message, capsys):
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_every_cell_setting_fills_a_runspec_field_of_the_same_type_and_default():
    spec_fields = {f.name: f for f in dataclasses.fields(RunSpec)}
    settings = {f.name: f for f in dataclasses.fields(SweepSettings)}
    # What RunSpec stores differently from the sweep setting, and why (amp_suite.sweep.cells.plan_cells).
    stored_otherwise = {"batch_size": "each workload's own batch when unset",
                        "coordinator": "an empty string on one node"}
    for name, cell in CELL_FIELDS.items():
        assert cell in spec_fields, f"setting {name} fills RunSpec.{cell}, which does not exist"
        if name in stored_otherwise:
            continue
        assert spec_fields[cell].type == settings[name].type, (name, spec_fields[cell].type, settings[name].type)
        assert spec_fields[cell].default == settings[name].default, (name, spec_fields[cell].default)
    carried = set(CELL_FIELDS.values()) | CELL_IDENTITY
    assert set(spec_fields) == carried, f"RunSpec fields no setting fills: {set(spec_fields) - carried}"


def test_plan_cells_carries_every_cell_setting_into_every_cell(tmp_path):
    from amp_suite.config.catalog import load_config, with_overrides
    from amp_suite.sweep.cells import plan_cells

    config = load_config(None)
    values = {"min_timed_steps": 3, "min_timed_seconds": 0.5, "extend_timing": True, "settle_warmup": True,
              "latency_steps": 2, "window_steps": 4, "window_seconds": 0.25, "timeout": 42.0, "seed": 7,
              "sync_batch_norm": True, "data_dir": str(tmp_path), "download": False, "steps": 12, "warmup": 2,
              "frameworks": ("torch",), "precisions": ("fp32",), "repeats": 1, "batch_size": 8}
    cells = plan_cells(config, with_overrides(config.settings, **values), explicit_steps=12)
    assert len(cells) == 1
    run = cells[0].run
    for name, value in values.items():
        if name in CELL_FIELDS:
            assert getattr(run, CELL_FIELDS[name]) == value, name
    assert run.coordinator == ""


def test_the_docs_list_every_option_the_built_in_plugins_declare():
    from amp_suite.config.catalog import BUILT_IN_FRAMEWORKS, framework_options_table
    from amp_suite.plugins.host import PluginHost

    known = PluginHost().frameworks()
    table = framework_options_table({name: known[name] for name in BUILT_IN_FRAMEWORKS})
    text = (REPO / "docs" / "usage.md").read_text()
    found = re.search(r"<!-- framework options table[^>]*-->\n(.*?)\n<!-- end of framework options table -->", text,
                      flags=re.S)
    assert found and found.group(1) == table, "docs/usage.md's framework options table is stale"
    assert "`fused`" in table and "`jit_compile`" in table
