"""A cell's fingerprint: a redefined workload, other data or options, another environment rerun under --resume."""

from __future__ import annotations

import json
from dataclasses import replace

from amp_suite.config.catalog import load_config
from amp_suite.records import CellResult, RunSpec
from amp_suite.records.definition import definition_changes, describe_changes, fingerprint
from amp_suite.sweep.fingerprint import cell_definition, environment_record, resume_reason
from suite_cli import run_cli, tiny_config_file


def _tiny(tmp_path, extra: str = ""):
    config = load_config(tiny_config_file(tmp_path, extra))
    run = RunSpec(framework="fake", workload="tiny", precision="fp32", steps=4, warmup=1, batch_size=8)
    return run, config.workloads["tiny"]


def test_the_fingerprint_is_stable_and_changes_with_every_part(tmp_path):
    run, workload = _tiny(tmp_path)
    base = cell_definition(run, workload)
    assert fingerprint(base) == fingerprint(cell_definition(run, workload)) and len(fingerprint(base)) == 12
    assert fingerprint(base) == fingerprint(json.loads(json.dumps(base)))  # as read back from results.jsonl
    others = {
        "workload": cell_definition(run, replace(workload, input_size=16)),
        "optimizer": cell_definition(run, replace(workload, optimizer=replace(workload.optimizer, momentum=0.5))),
        "layers": cell_definition(run, replace(workload, layers=workload.layers[:-1])),
        "data": cell_definition(replace(run, val_split="test[:100]"), workload),
        "options": cell_definition(replace(run, steps=5), workload),
        "environment": cell_definition(run, workload, environment_record("fake", versions={"fakefw": "2"})),
    }
    prints = {name: fingerprint(definition) for name, definition in others.items()}
    assert fingerprint(base) not in prints.values() and len(set(prints.values())) == len(prints)
    # what names the cell, or where it runs, is not part of what it computes
    for same in (replace(run, repeat=3), replace(run, timeout_s=5.0), replace(run, precision="amp_bf16"),
                 replace(run, data_dir="/elsewhere")):
        assert fingerprint(cell_definition(same, workload)) == fingerprint(base)
    assert fingerprint(cell_definition(run, replace(workload, description="words"))) == fingerprint(base)


def test_a_field_added_to_the_workload_joins_the_definition(tmp_path):
    run, workload = _tiny(tmp_path)
    definition = cell_definition(run, workload)
    # every field of the record but its name and description, without listing them here
    assert set(definition["workload"]) == set(workload.__dataclass_fields__) - {"name", "description"}


def test_changes_name_the_section_the_value_and_both_sides(tmp_path):
    run, workload = _tiny(tmp_path)
    before = cell_definition(run, workload)
    after = cell_definition(replace(run, steps=6), replace(workload, input_size=16))
    text = describe_changes(definition_changes(before, after))
    assert text == "its workload changed (input_size 8 -> 16) and its options changed (steps 4 -> 6)"


def test_resume_reason_keeps_the_same_and_explains_the_rest(tmp_path):
    run, workload = _tiny(tmp_path)
    definition = cell_definition(run, workload)
    stored = CellResult(key=run.key, framework="fake", workload="tiny", precision="fp32", repeat=0, status="ok",
                        definition=definition, fingerprint=fingerprint(definition))
    assert resume_reason(stored, definition) == ""
    wider = cell_definition(run, replace(workload, input_size=16))
    assert resume_reason(stored, wider) == "rerun, its workload changed (input_size 8 -> 16)"
    older = replace(stored, fingerprint="", definition={})
    assert "no fingerprint" in resume_reason(older, definition)


def test_a_workload_redefined_in_benchmarks_toml_is_rerun_on_resume_and_compare_names_it(tmp_path, clean_fake_env):
    config = tiny_config_file(tmp_path)
    args = ("run", "--config", str(config), "-p", "fakefw", "--precisions", "fp32,amp_bf16", "--quiet")
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    stored = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert all(len(row["fingerprint"]) == 12 and row["definition"]["workload"]["input_size"] == 8 for row in stored)

    same = run_cli(*args, "--resume")
    assert same.returncode == 0 and "rerun" not in same.stderr, same.stderr
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 2  # both kept

    (tmp_path / "first").mkdir()
    for name in ("results.jsonl", "environment.json"):
        (tmp_path / "first" / name).write_bytes((tmp_path / "out" / name).read_bytes())
    config.write_text(config.read_text().replace("input_size = 8", "input_size = 12", 1))
    again = run_cli(*args, "--resume")
    assert again.returncode == 0, again.stderr
    reruns = [line for line in again.stderr.splitlines() if ": rerun, " in line]
    assert reruns == [f"amp-suite: fake/tiny/{p}/r0: rerun, its workload changed (input_size 8 -> 12)"
                      for p in ("fp32", "amp_bf16")], again.stderr
    latest = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()][-2:]
    assert [row["definition"]["workload"]["input_size"] for row in latest] == [12, 12]

    compared = run_cli("compare", str(tmp_path / "first"), str(tmp_path / "out"))
    assert compared.returncode == 0, compared.stderr
    assert "definition workload.input_size: 8 → 12 (2 cells: fake/tiny/amp_bf16, fake/tiny/fp32)" in compared.stdout
    assert "none recorded" not in compared.stdout


def test_definitions_nested_beyond_reason_are_named_not_a_crash():
    """Two stored sweeps (compare reads both) whose definitions nest deeper than Python recurses."""
    def deep(leaf: int) -> dict:
        top: dict = {}
        inner = top
        for _ in range(5000):
            inner["x"] = {}
            inner = inner["x"]
        inner["x"] = leaf
        return top

    [change] = definition_changes({"workload": deep(1)}, {"workload": deep(2)})
    assert change.describe() == "workload (nested too deeply to compare) -> (another definition)"


def test_the_environment_part_holds_the_frameworks_installed_versions_or_its_environment():
    from amp_suite.config.environments import EnvironmentSpec
    from amp_suite.envs.placement import Placement
    from amp_suite.records import FrameworkInfo
    from amp_suite.sweep.cells import environment_records

    info = FrameworkInfo(name="fake", display_name="Fake", modules=(), extra="", precisions={},
                         distributions=("pluggy", "no-such-distribution"))
    spec = EnvironmentSpec(name="fake@old", framework="fake", requirements=("pluggy==1.0",))
    records = environment_records({"fake": Placement("fake", "fake"), "fake@old": Placement("fake@old", "fake",
                                                                                             "fake@old", "/py")},
                                  {"fake": info}, {"fake@old": spec})
    import pluggy

    assert records["fake"] == {"framework": "fake", "name": "this interpreter",
                               "versions": {"pluggy": pluggy.__version__}}
    assert records["fake@old"] == {"framework": "fake", "name": "fake@old", "requirements": ["pluggy==1.0"]}
